"""REST contract of evolution runs, records, reverts and memory history."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.models import EvolutionRun
from history.models import EvolutionRecord
from memories.bulk import bulk_insert
from memories.models import Memory, Role, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def url(ws: str, *parts: str) -> str:
    return "/api/v1/workspaces/" + ws + "/" + "".join(p + "/" for p in parts)


def old_episode(kit: Any, days: float = 30) -> Memory:
    """An episodic memory last used `days` ago by the wall clock (the API runs at the real now)."""
    return kit.mem(
        "an old episode", memory_type="episodic", age_days=400, last_accessed=timezone.now() - timedelta(days=days)
    )


def evolve(kit: Any, *names: str, later_days: float = 0, **kwargs: Any) -> EvolutionRun:
    result: EvolutionRun = kit.run(*names, now=timezone.now() + timedelta(days=later_days), **kwargs)
    return result


def test_post_run_defaults_to_a_dry_run_with_records(api: APIClient, kit: Any) -> None:
    m = old_episode(kit)
    response = api.post(url("acme", "evolution", "runs"), {"evolvers": ["ExponentialDecay"]}, format="json")
    assert response.status_code == 202, response.content
    body = response.json()
    assert body["dry_run"] is True
    assert body["status"] == "completed"
    assert body["summary"]["evolvers"][0]["name"] == "ExponentialDecay"
    assert body["records_count"] == 1
    (record,) = body["records"]
    assert set(record) >= {
        "id",
        "evolver",
        "action",
        "input_ids",
        "output_ids",
        "reason",
        "timestamp",
        "before",
        "after",
    }
    assert record["input_ids"] == [str(m.id)]
    assert record["before"][str(m.id)] == {"retention_score": 1.0}
    assert Memory.objects.get(id=m.id).score.retention_score == 1.0


def test_apply_needs_explicit_false_and_changes_memories(api: APIClient, kit: Any) -> None:
    m = old_episode(kit)
    response = api.post(url("acme", "evolution", "runs"), {"dry_run": False}, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["dry_run"] is False
    assert [e["name"] for e in response.json()["summary"]["evolvers"]][:2] == [
        "EnhancedWorkingToEpisodic",
        "ExponentialDecay",
    ]
    assert Memory.objects.get(id=m.id).score.retention_score < 1.0


def test_apply_alias_is_accepted_and_contradictions_refused(api: APIClient, kit: Any) -> None:
    old_episode(kit)
    ok = api.post(url("acme", "evolution", "runs"), {"apply": True, "evolvers": ["ExponentialDecay"]}, format="json")
    assert ok.status_code == 202
    assert ok.json()["dry_run"] is False
    bad = api.post(url("acme", "evolution", "runs"), {"apply": True, "dry_run": True}, format="json")
    assert bad.status_code == 400
    assert bad.json()["field"] == "apply"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"dry_run": "false"}, "dry_run"),
        ({"evolvers": "ExponentialDecay"}, "evolvers"),
        ({"evolvers": ["ExponentialDecay", 3]}, "evolvers"),
        ({"evolver": ["ExponentialDecay"]}, "evolver"),
        ({"dry_run": None}, "dry_run"),
        ({"apply": 1}, "apply"),
        ({"apply": False, "dry_run": False}, "apply"),
    ],
)
def test_bad_run_input_is_400_naming_the_field(
    api: APIClient, workspace: Workspace, body: dict[str, Any], field: str
) -> None:
    response = api.post(url("acme", "evolution", "runs"), body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not EvolutionRun.objects.exists()


def test_apply_alone_or_agreeing_with_dry_run_decides_and_an_unknown_field_lists_the_known_ones(
    api: APIClient, kit: Any
) -> None:
    old_episode(kit)
    runs = url("acme", "evolution", "runs")
    preview = api.post(runs, {"apply": False, "evolvers": ["ExponentialDecay"]}, format="json")
    assert (preview.status_code, preview.json()["dry_run"]) == (202, True)
    applied = api.post(runs, {"apply": True, "dry_run": False, "evolvers": None}, format="json")
    assert (applied.status_code, applied.json()["dry_run"]) == (202, False), applied.content
    unknown = api.post(runs, {"evolver": ["ExponentialDecay"]}, format="json")
    assert unknown.json()["detail"] == "evolver: unknown field; expected apply, dry_run, evolvers"


def test_unknown_evolver_is_400_naming_it(api: APIClient, workspace: Workspace) -> None:
    response = api.post(url("acme", "evolution", "runs"), {"evolvers": ["TimeTravel"]}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "unknown_evolver"
    assert "TimeTravel" in body["detail"]
    assert "ExponentialDecay" in body["detail"]


def test_a_viewer_starts_no_run_not_even_a_preview_and_reverts_nothing(
    kit: Any, viewer: Any, client_for: Callable[[Any], APIClient]
) -> None:
    """A run costs the server a cycle over the workspace: only editors and owners start one."""
    old_episode(kit)
    client = client_for(viewer)
    for body in ({}, {"dry_run": False}):
        refused = client.post(url("acme", "evolution", "runs"), body, format="json")
        assert refused.status_code == 403
        assert refused.json()["error"] == "forbidden"
    assert not EvolutionRun.objects.exists()
    run = evolve(kit, "ExponentialDecay")
    record = EvolutionRecord.objects.get(run=run)
    assert client.post(url("acme", "evolution", "records", str(record.pk), "revert")).status_code == 403
    assert client.post(url("acme", "evolution", "runs", str(run.id), "revert")).status_code == 403
    assert client.get(url("acme", "evolution", "runs", str(run.id))).status_code == 200


def test_editor_may_apply(kit: Any, member: Callable[[str], Any], client_for: Callable[[Any], APIClient]) -> None:
    old_episode(kit)
    client = client_for(member(Role.EDITOR))
    assert client.post(url("acme", "evolution", "runs"), {"dry_run": False}, format="json").status_code == 202


def test_get_run_pages_its_records(api: APIClient, kit: Any) -> None:
    from evolution.evolvers.base import RECORD_CHUNK

    bulk_insert(
        Memory,
        [
            Memory(
                workspace=kit.workspace, content=f"e{k}", memory_type="episodic", created_at=kit.NOW - timedelta(days=3)
            )
            for k in range(2 * RECORD_CHUNK + 1)
        ],
    )
    run = evolve(kit, "ExponentialDecay")
    first = api.get(url("acme", "evolution", "runs", str(run.id)), {"limit": 2}).json()
    assert first["records_count"] == 3
    assert len(first["records"]) == 2
    rest = api.get(url("acme", "evolution", "runs", str(run.id)), {"after": first["records_next"]}).json()
    assert len(rest["records"]) == 1
    assert rest["records_next"] is None
    assert api.get(url("acme", "evolution", "runs", str(run.id)), {"limit": 0}).status_code == 400


def test_run_list_is_newest_first(api: APIClient, kit: Any) -> None:
    first = evolve(kit, "ExponentialDecay", dry_run=True)
    second = evolve(kit, "ExponentialDecay", dry_run=True, later_days=1 / 24)
    body = api.get(url("acme", "evolution", "runs")).json()
    assert [r["run_id"] for r in body["results"]] == [str(second.id), str(first.id)]
    assert "records" not in body["results"][0]


def test_record_revert_endpoint(api: APIClient, kit: Any) -> None:
    m = old_episode(kit)
    record = EvolutionRecord.objects.get(run=evolve(kit, "ExponentialDecay"))
    response = api.post(url("acme", "evolution", "records", str(record.pk), "revert"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["reverted"]["reverted_at"] is not None
    assert body["reverted"]["reverted_by"] == body["revert_record"]["id"]
    assert body["revert_record"]["action"] == "revert"
    assert Memory.objects.get(id=m.id).score.retention_score == 1.0
    again = api.post(url("acme", "evolution", "records", str(record.pk), "revert"))
    assert again.status_code == 409
    assert again.json()["error"] == "already_reverted"


def test_record_revert_conflict_is_409_with_reason(api: APIClient, kit: Any) -> None:
    old_episode(kit)
    first = EvolutionRecord.objects.get(run=evolve(kit, "ExponentialDecay"))
    evolve(kit, "ExponentialDecay", later_days=2)
    response = api.post(url("acme", "evolution", "records", str(first.pk), "revert"))
    assert response.status_code == 409
    assert response.json()["error"] == "revert_conflict"
    assert "revert the later change first" in response.json()["detail"]


def test_run_revert_endpoint(api: APIClient, kit: Any) -> None:
    m = old_episode(kit)
    run = evolve(kit)
    records = sorted(EvolutionRecord.objects.filter(run=run).values_list("id", flat=True))
    response = api.post(url("acme", "evolution", "runs", str(run.id), "revert"))
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "reverted"
    assert sorted(body["reverted_records"]) == records
    assert Memory.objects.get(id=m.id).score.retention_score == 1.0
    assert api.post(url("acme", "evolution", "runs", str(run.id), "revert")).status_code == 409


def test_dry_run_revert_is_409(api: APIClient, kit: Any) -> None:
    old_episode(kit)
    run = evolve(kit, dry_run=True)
    response = api.post(url("acme", "evolution", "runs", str(run.id), "revert"))
    assert response.status_code == 409
    assert response.json()["error"] == "dry_run"


def test_memory_history_newest_first_and_projected(api: APIClient, kit: Any) -> None:
    m = old_episode(kit)
    other = old_episode(kit, days=40)
    first = EvolutionRecord.objects.get(run=evolve(kit, "ExponentialDecay"))
    second = EvolutionRecord.objects.get(run=evolve(kit, "ExponentialDecay", later_days=1))
    response = api.get(url("acme", "memories", str(m.id), "history"))
    assert response.status_code == 200
    results = response.json()["results"]
    assert [r["id"] for r in results] == [second.pk, first.pk]
    assert set(results[0]["before"]) == {str(m.id)}
    assert str(other.id) not in results[0]["after"]
    assert results[0]["reason"].startswith("retention exp(-31.00d/30.00d)")
    assert response.json()["next"] is None


def test_not_members_get_404_everywhere(
    kit: Any, other_workspace: Workspace, make_user: Callable[[str], Any], client_for: Callable[[Any], APIClient]
) -> None:
    m = old_episode(kit)
    run = evolve(kit, "ExponentialDecay")
    record = EvolutionRecord.objects.get(run=run)
    stranger = client_for(make_user("eve"))
    for path in (
        url("acme", "evolution", "runs"),
        url("acme", "evolution", "runs", str(run.id)),
        url("acme", "evolution", "records", str(record.pk)),
        url("acme", "memories", str(m.id), "history"),
    ):
        assert stranger.get(path).status_code == 404, path
    assert stranger.post(url("acme", "evolution", "runs"), {}, format="json").status_code == 404
    assert stranger.post(url("acme", "evolution", "records", str(record.pk), "revert")).status_code == 404
    assert stranger.post(url("acme", "evolution", "runs", str(run.id), "revert")).status_code == 404


def test_objects_of_another_workspace_are_404(
    api: APIClient, kit: Any, other_workspace: Workspace, workspace: Workspace
) -> None:
    foreign = kit.mem("theirs", memory_type="episodic", age_days=30, ws=other_workspace)
    run = evolve(kit, "ExponentialDecay", ws=other_workspace)
    record = EvolutionRecord.objects.get(run=run)
    theirs = kit.memory_rows(other_workspace)
    assert api.get(url("acme", "evolution", "runs", str(run.id))).status_code == 404
    assert api.post(url("acme", "evolution", "runs", str(run.id), "revert")).status_code == 404
    assert api.post(url("acme", "evolution", "records", str(record.pk), "revert")).status_code == 404
    assert api.get(url("acme", "memories", str(foreign.id), "history")).status_code == 404
    assert api.get(url("acme", "evolution", "runs", "not-a-uuid")).status_code == 404
    assert api.get(url("acme", "memories", str(uuid.uuid4()), "history")).status_code == 404
    assert api.get(url("acme", "memories", "nope", "history")).status_code == 400
    assert kit.memory_rows(other_workspace) == theirs
    assert EvolutionRecord.objects.get(pk=record.pk).reverted_at is None
