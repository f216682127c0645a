"""REST for contradictions, drift flags, goal resolution revert and proposals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from evolution.models import Proposal, ProposalStatus
from evolution.proposals import proposal_create
from memories.models import Memory, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def url(ws: str, *parts: str) -> str:
    return "/api/v1/workspaces/" + ws + "/" + "".join(p + "/" for p in parts)


def post_memory(api: APIClient, **body: Any) -> dict[str, Any]:
    response = api.post(url("acme", "memories"), body, format="json")
    assert response.status_code == 201, response.content
    data: dict[str, Any] = response.json()
    return data


def make_summary_proposal(kit: Any) -> Proposal:
    sources = [kit.mem(f"event {k}", memory_type="event", subject="deploy", age_days=60) for k in range(3)]
    ids = [str(m.id) for m in sources]
    proposal, _ = proposal_create(
        workspace=kit.workspace,
        kind="summary",
        title="Summarize 3 stale event[deploy] memories",
        rationale="decayed below 0.3",
        payload={"memory_type": "fact", "subject": "deploy", "content": "deploys failed", "summarizes": ids},
        source_ids=ids,
    )
    return proposal


# -- write policies through the API ---------------------------------------------------------------


def test_posting_a_second_preference_answers_with_the_retired_row(api: APIClient, workspace: Workspace) -> None:
    first = post_memory(api, content="uses vim", memory_type="preference", subject="editor")
    second = post_memory(api, content="uses emacs", memory_type="preference", subject="editor")
    assert second["status"] == "superseded"
    assert second["superseded_by"] == first["id"]
    assert second["metadata"]["replaced_into"] == first["id"]
    holder = api.get(url("acme", "memories", first["id"])).json()
    assert holder["content"] == "uses emacs"
    assert holder["replace_count"] == 1
    assert len(holder["replace_log"]) == 1
    history = api.get(url("acme", "memories", first["id"], "history")).json()["results"]
    assert history[0]["evolver"] == "WritePolicy"
    assert history[0]["action"] == "replace"


def test_a_bulk_import_applies_the_policies_too(api: APIClient, workspace: Workspace) -> None:
    items = [{"content": f"state {k}", "memory_type": "state", "subject": "prod"} for k in range(3)]
    response = api.post(url("acme", "memories", "bulk"), {"items": items}, format="json")
    assert response.status_code == 201
    clusters = api.get(url("acme", "contradictions")).json()["clusters"]
    assert len(clusters) == 1
    assert sorted(clusters[0]["ids"]) == sorted(response.json()["ids"])


# -- contradictions and drift ---------------------------------------------------------------------


def test_contradictions_list_clusters_with_their_memories(api: APIClient, workspace: Workspace) -> None:
    a = post_memory(api, content="prod is up", memory_type="state", subject="prod")
    b = post_memory(api, content="prod is down", memory_type="state", subject="prod")
    post_memory(api, content="prod db is fine", memory_type="fact", subject="prod")
    response = api.get(url("acme", "contradictions"))
    assert response.status_code == 200
    (cluster,) = response.json()["clusters"]
    assert sorted(cluster["ids"]) == sorted([a["id"], b["id"]])
    contents = {m["id"]: m["content"] for m in cluster["memories"]}
    assert contents == {a["id"]: "prod is up", b["id"]: "prod is down"}
    assert all(m["conflicts_with"] for m in cluster["memories"])


def test_contradictions_are_empty_without_conflicts(api: APIClient, workspace: Workspace) -> None:
    assert api.get(url("acme", "contradictions")).json() == {"clusters": [], "total": 0}


def test_contradictions_page_the_largest_clusters_first(api: APIClient, workspace: Workspace) -> None:
    for subject, n in (("a", 2), ("b", 3), ("c", 2)):
        for k in range(n):
            post_memory(api, content=f"{subject} is {k}", memory_type="state", subject=subject)
    body = api.get(url("acme", "contradictions") + "?limit=1").json()
    assert body["total"] == 3
    (cluster,) = body["clusters"]
    assert {m["subject"] for m in cluster["memories"]} == {"b"}
    assert len(cluster["ids"]) == 3
    assert api.get(url("acme", "contradictions") + "?limit=x").json()["field"] == "limit"


def test_drift_flags_list_after_the_detector_runs(api: APIClient, workspace: Workspace) -> None:
    first = post_memory(api, content="v0", memory_type="preference", subject="editor")
    for k in range(1, 4):
        post_memory(api, content=f"v{k}", memory_type="preference", subject="editor")
    run = api.post(
        url("acme", "evolution", "runs"), {"evolvers": ["PreferenceDriftDetector"], "dry_run": False}, format="json"
    )
    assert run.status_code == 202, run.content
    response = api.get(url("acme", "drift-flags"))
    assert response.status_code == 200
    (flag,) = response.json()["results"]
    assert flag["memory_id"] == first["id"]
    assert flag["reason"] == "preference[editor] changed 3x in last 30d"
    assert flag["content"] == "v3"
    assert flag["replaces_in_window"] == 3
    assert api.get(url("acme", "drift-flags") + "?limit=0").status_code == 400


# -- goals ----------------------------------------------------------------------------------------


def test_goal_resolution_revert_over_rest(api: APIClient, kit: Any) -> None:
    goal = kit.mem("Rotate the API tokens", memory_type="goal", age_days=0.1)
    kit.mem("Rotate the API tokens", memory_type="outcome", age_days=0.05)
    kit.run("GoalResolver", now=kit.NOW)
    assert Memory.objects.get(id=goal.id).status == Status.RESOLVED
    response = api.post(url("acme", "goals", str(goal.id), "resolution", "revert"))
    assert response.status_code == 200, response.content
    assert Memory.objects.get(id=goal.id).status == Status.ACTIVE
    assert api.post(url("acme", "goals", str(goal.id), "resolution", "revert")).status_code == 404


# -- proposals ------------------------------------------------------------------------------------


def test_pending_proposals_are_listed_in_the_contract_shape(api: APIClient, kit: Any) -> None:
    proposal = make_summary_proposal(kit)
    response = api.get(url("acme", "proposals") + "?status=pending")
    assert response.status_code == 200
    (item,) = response.json()["results"]
    assert {"id", "kind", "status", "title", "rationale", "payload", "source_ids"} <= set(item)
    assert item["id"] == proposal.pk
    assert item["kind"] == "summary"
    assert item["status"] == "pending"
    assert item["payload"]["content"] == "deploys failed"
    assert len(item["source_ids"]) == 3
    assert api.get(url("acme", "proposals") + "?status=approved").json()["results"] == []
    assert api.get(url("acme", "proposals") + "?status=bogus").json()["field"] == "status"


def test_proposal_list_pages_with_a_cursor(api: APIClient, workspace: Workspace) -> None:
    for k in range(5):
        proposal_create(workspace=workspace, kind="merge", title=f"merge {k}", payload={})
    first = api.get(url("acme", "proposals") + "?limit=2").json()
    assert [p["title"] for p in first["results"]] == ["merge 0", "merge 1"]
    second = api.get(url("acme", "proposals") + f"?limit=2&after={first['next']}").json()
    assert [p["title"] for p in second["results"]] == ["merge 2", "merge 3"]


def test_approve_applies_and_a_second_decision_is_409(api: APIClient, kit: Any) -> None:
    proposal = make_summary_proposal(kit)
    response = api.post(url("acme", "proposals", str(proposal.pk), "approve"), {}, format="json")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "approved"
    assert body["decided_by"] == "alice"
    assert body["applied_record"] is not None
    assert Memory.objects.filter(memory_type="fact", content="deploys failed").count() == 1
    again = api.post(url("acme", "proposals", str(proposal.pk), "approve"), {}, format="json")
    assert again.status_code == 409
    assert again.json()["error"] == "already_decided"
    assert api.post(url("acme", "proposals", str(proposal.pk), "reject"), {}, format="json").status_code == 409


def test_modify_then_approve_over_rest(api: APIClient, kit: Any) -> None:
    proposal = make_summary_proposal(kit)
    response = api.post(
        url("acme", "proposals", str(proposal.pk), "approve"),
        {"payload": {"content": "Three deploys failed in March."}, "reason": "clearer"},
        format="json",
    )
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "modified"
    assert Memory.objects.filter(memory_type="fact", content="Three deploys failed in March.").exists()
    bad = make_summary_proposal(kit)
    refused = api.post(url("acme", "proposals", str(bad.pk), "approve"), {"payload": "text"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["field"] == "payload"


@pytest.mark.parametrize(
    ("decision", "body", "field", "detail"),
    [
        ("approve", {"payload": ["content"]}, "payload", "payload: expected a JSON object"),
        ("approve", {"payload": {"content": "a\x00b"}}, "payload", None),
        ("approve", {"reason": 5}, "reason", "reason: expected a string"),
        ("approve", {"note": "clearer"}, "note", "note: unknown field; expected payload, reason"),
        ("reject", {"reason": "x" * 2001}, "reason", "reason: longer than 2000 characters"),
        ("reject", {"why": "too lossy"}, "why", "why: unknown field; expected reason"),
    ],
)
def test_a_bad_decision_body_is_a_400_naming_the_field_and_decides_nothing(
    api: APIClient, kit: Any, decision: str, body: dict[str, Any], field: str, detail: str | None
) -> None:
    """The body is the documented one: a field it does not have is refused, not ignored."""
    proposal = make_summary_proposal(kit)
    response = api.post(url("acme", "proposals", str(proposal.pk), decision), body, format="json")
    assert (response.status_code, response.json()["field"]) == (400, field), response.content
    if detail is not None:
        assert response.json()["detail"] == detail
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_a_decision_needs_no_body_and_a_null_reason_is_none(api: APIClient, kit: Any) -> None:
    approved, rejected = make_summary_proposal(kit), make_summary_proposal(kit)
    assert api.post(url("acme", "proposals", str(approved.pk), "approve")).status_code == 200
    response = api.post(url("acme", "proposals", str(rejected.pk), "reject"), {"reason": None}, format="json")
    assert (response.status_code, response.json()["decision_reason"]) == (200, "")


def test_reject_keeps_the_reason(api: APIClient, kit: Any) -> None:
    proposal = make_summary_proposal(kit)
    response = api.post(url("acme", "proposals", str(proposal.pk), "reject"), {"reason": "too lossy"}, format="json")
    assert response.status_code == 200
    assert response.json()["status"] == "rejected"
    assert response.json()["decision_reason"] == "too lossy"
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.REJECTED
    assert not Memory.objects.filter(memory_type="fact").exists()


def test_viewers_read_but_cannot_decide(kit: Any, viewer: Any, client_for: Callable[[Any], APIClient]) -> None:
    proposal = make_summary_proposal(kit)
    client = client_for(viewer)
    assert client.get(url("acme", "proposals")).status_code == 200
    assert client.get(url("acme", "contradictions")).status_code == 200
    assert client.post(url("acme", "proposals", str(proposal.pk), "approve"), {}, format="json").status_code == 403
    assert client.post(url("acme", "proposals", str(proposal.pk), "reject"), {}, format="json").status_code == 403
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_another_workspace_sees_404_and_nothing_leaks(
    api: APIClient, kit: Any, other_workspace: Workspace, client_for: Callable[[Any], APIClient]
) -> None:
    from django.contrib.auth import get_user_model

    proposal = make_summary_proposal(kit)
    stranger = client_for(get_user_model().objects.get(username="mallory"))
    for path in ("proposals", "contradictions", "drift-flags"):
        assert stranger.get(url("acme", path)).status_code == 404
    response = stranger.post(url("other", "proposals", str(proposal.pk), "approve"), {}, format="json")
    assert response.status_code == 404
    assert "deploy" not in response.content.decode()
    assert stranger.get(url("other", "proposals", str(proposal.pk))).status_code == 404
    assert api.get(url("acme", "proposals", str(proposal.pk))).status_code == 200


def test_unauthenticated_requests_are_refused(kit: Any) -> None:
    response = APIClient().get(url("acme", "proposals"))
    assert response.status_code in (401, 403, 404)


def test_summary_evolver_run_feeds_the_review_queue(api: APIClient, kit: Any) -> None:
    for k in range(3):
        kit.mem(f"observation {k} about the cache", memory_type="observation", subject="cache", age_days=30)
    run = api.post(url("acme", "evolution", "runs"), {"evolvers": ["SummaryEvolver"], "dry_run": False}, format="json")
    assert run.status_code == 202, run.content
    (item,) = api.get(url("acme", "proposals") + "?status=pending&kind=summary").json()["results"]
    assert item["payload"]["source_type"] == "observation"
    assert item["created_by"] == "SummaryEvolver"
