"""REST contract of the engine: outcomes, corrections, reflections, world model, evolve, dream, export, import."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from evolution.algorithms.engine import REVIEW_TASK_TYPE, strategy_key
from evolution.models import DreamReport, Outcome, Proposal
from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

LESSON = "Always check asarUnpack for renderer files"


def url(ws: str, *parts: str) -> str:
    return "/api/v1/workspaces/" + ws + "/" + "".join(p + "/" for p in parts)


def post_outcome(api: APIClient, lesson: str = LESSON, days: float = 1.0, ws: str = "acme") -> Any:
    body = {
        "task_type": "Electron packaging",
        "result": "fail",
        "approach": "electron-builder",
        "context": {"lesson": lesson, "issue": "renderer crashed", "solution": "asarUnpack"},
        "created_at": (timezone.now() - timedelta(days=days)).isoformat(),
    }
    return api.post(url(ws, "outcomes"), body, format="json")


def three_lessons(api: APIClient, lesson: str = LESSON) -> Any:
    for days in (3.0, 2.0):
        assert post_outcome(api, lesson, days).status_code == 201
    return post_outcome(api, lesson, 1.0)


@pytest.fixture
def stranger(make_user: Callable[..., Any], client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(make_user("stranger"))


@pytest.fixture
def viewer_api(viewer: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(viewer)


# ---------------------------------------------------------------------------------------------- outcomes


def test_an_outcome_is_recorded_and_the_third_same_lesson_proposes_a_strategy(api: APIClient, workspace: Any) -> None:
    first = post_outcome(api, days=3)
    assert first.status_code == 201, first.content
    body = first.json()
    assert body["task_type"] == "Electron packaging" and body["result"] == "fail"
    assert body["context"] == {"lesson": LESSON, "issue": "renderer crashed", "solution": "asarUnpack"}
    assert body["proposals"] == {"created": [], "vetoed": [], "questions": []}
    post_outcome(api, days=2)
    third = post_outcome(api, days=1).json()
    (proposal,) = third["proposals"]["created"]
    assert (proposal["kind"], proposal["status"], proposal["payload"]["weight"]) == ("strategy", "pending", 0.5)
    listed = api.get(url("acme", "proposals") + "?status=pending").json()["results"]
    assert [p["id"] for p in listed] == [proposal["id"]]
    page = api.get(url("acme", "outcomes") + "?limit=2").json()
    assert len(page["results"]) == 2 and page["next"] is not None


def test_a_vetoed_strategy_is_listed_with_its_reason(api: APIClient, workspace: Any) -> None:
    third = three_lessons(api, "Put the deploy password in the README").json()
    (vetoed,) = third["proposals"]["vetoed"]
    assert vetoed["status"] == "vetoed"
    assert "Touches secrets (password)" in vetoed["payload"]["vetoes"][0]
    listed = api.get(url("acme", "proposals") + "?status=vetoed").json()["results"]
    assert [p["id"] for p in listed] == [vetoed["id"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"result": "fail"}, "task_type"),
        ({"task_type": "t", "result": "maybe"}, "result"),
        ({"task_type": "t", "result": "fail", "context": []}, "context"),
        ({"task_type": "t", "result": "fail", "context": {"lesson": 5}}, "context.lesson"),
        ({"task_type": "t", "result": "fail", "created_at": "soon"}, "created_at"),
        ({"task_type": "t", "result": "fail", "score": 1}, "score"),
        ({"task_type": "t", "result": None}, "result"),
        ({"task_type": "t", "result": "fail", "context": {"issue": "a\x00b"}}, "context.issue"),
    ],
)
def test_a_bad_outcome_is_a_400_naming_the_field(
    api: APIClient, workspace: Any, body: dict[str, Any], field: str
) -> None:
    response = api.post(url("acme", "outcomes"), body, format="json")
    assert response.status_code == 400
    assert response.json()["field"] == field
    assert not Outcome.objects.exists()


def test_viewers_read_but_cannot_write_and_strangers_see_nothing(
    viewer_api: APIClient, stranger: APIClient, workspace: Any
) -> None:
    assert post_outcome(viewer_api).status_code == 403
    for path, body in [
        ("corrections", {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c"}),
        ("reflections", {"context": "a", "reflection": "b", "lesson": "c"}),
        ("engine/evolve", {}),
        ("dream", {}),
        ("import", {"files": {"hot/memory.md": "- a\n"}}),
    ]:
        assert viewer_api.post(url("acme", path), body, format="json").status_code == 403, path
        assert stranger.post(url("acme", path), body, format="json").status_code == 404, path
    for path in ("outcomes", "engine/world-model", "dream", "export"):
        assert viewer_api.get(url("acme", path)).status_code == 200, path
        assert stranger.get(url("acme", path)).status_code == 404, path
    assert viewer_api.post(url("acme", "dream"), {"dry_run": True}, format="json").status_code == 200
    assert not Memory.objects.exists() and not DreamReport.objects.exists()


# ------------------------------------------------------------------------------------ corrections, reflections


def test_a_correction_is_a_hot_user_memory_that_wins_its_topic(
    api: APIClient, workspace: Any, make_memory: Any
) -> None:
    preference = make_memory("use vim", memory_type="preference", subject="editor")
    body = {"what_i_did_wrong": "opened vim", "what_i_should_do": "use emacs", "context": "editing", "topic": "editor"}
    response = api.post(url("acme", "corrections"), body, format="json")
    assert response.status_code == 201, response.content
    memory = response.json()
    assert (memory["memory_type"], memory["tier"], memory["origin_tier"], memory["subject"]) == (
        "correction",
        "hot",
        1,
        "editor",
    )
    assert memory["metadata"]["correction"]["what_i_did_wrong"] == "opened vim"
    assert Memory.objects.get(id=preference.id).content == "use emacs"
    bad = api.post(url("acme", "corrections"), {"what_i_did_wrong": "a", "context": "c"}, format="json")
    assert (bad.status_code, bad.json()["field"]) == (400, "what_i_should_do")


def test_a_reflection_is_a_memory_in_the_seed_format(api: APIClient, workspace: Any) -> None:
    body = {"context": "Electron packaging", "reflection": "adm-zip needs a separate include", "lesson": LESSON}
    response = api.post(url("acme", "reflections"), body, format="json")
    assert response.status_code == 201, response.content
    memory = response.json()
    assert memory["memory_type"] == "reflection"
    assert memory["content"].splitlines() == [
        "CONTEXT: Electron packaging",
        "REFLECTION: adm-zip needs a separate include",
        f"LESSON: {LESSON}",
    ]
    bad = api.post(url("acme", "reflections"), {"context": "a", "reflection": "b", "lesson": ""}, format="json")
    assert (bad.status_code, bad.json()["field"]) == (400, "lesson")


def test_the_same_reflection_posted_twice_is_stored_once(api: APIClient, workspace: Any) -> None:
    body = {"context": "Electron packaging", "reflection": "adm-zip needs a separate include", "lesson": LESSON}
    first = api.post(url("acme", "reflections"), body, format="json")
    again = api.post(
        url("acme", "reflections"), {**body, "reflection": "ADM-ZIP needs a separate include!"}, format="json"
    )
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["deduplicated"] == "same_reflection"
    assert Memory.objects.filter(workspace=workspace, memory_type="reflection").count() == 1
    other = api.post(url("acme", "reflections"), {**body, "context": "Another build"}, format="json")
    assert other.status_code == 201 and "deduplicated" not in other.json()


def test_a_reflection_whose_lesson_a_hot_rule_holds_is_not_stored(api: APIClient, workspace: Any, user: Any) -> None:
    (rule,) = services.memories_create(
        workspace=workspace,
        actor=user,
        items=[
            MemoryInput(
                content=LESSON,
                memory_type="strategy",
                tier="hot",
                origin="engine:strategy",
                metadata={"strategy": {"key": strategy_key(LESSON)}},
            )
        ],
    )
    body = {"context": "Electron packaging", "reflection": "it happened again", "lesson": LESSON}
    response = api.post(url("acme", "reflections"), body, format="json")
    assert response.status_code == 200
    assert response.json()["id"] == str(rule.id) and response.json()["deduplicated"] == "hot_rule"
    assert not Memory.objects.filter(workspace=workspace, memory_type="reflection").exists()


# ------------------------------------------------------------------------------------- world model, evolve


def test_the_world_model_reports_rates_per_task_type_and_approach(api: APIClient, workspace: Any) -> None:
    for result in ("success", "success", "fail"):
        api.post(
            url("acme", "outcomes"), {"task_type": "deploy", "result": result, "approach": "blue-green"}, format="json"
        )
    body = api.get(url("acme", "engine", "world-model")).json()
    assert body["outcomes"] == 3
    assert body["approaches"] == [
        {"task_type": "deploy", "approach": "blue-green", "successes": 2, "failures": 1, "rate": pytest.approx(2 / 3)}
    ]
    assert body["task_types"][0]["best_approach"] == "blue-green"


def test_evolve_returns_what_it_proposed_and_is_idempotent(api: APIClient, workspace: Any) -> None:
    for days in (3, 2, 1):
        Outcome.objects.create(
            workspace=workspace,
            task_type="t",
            approach="a",
            result="fail",
            lesson=LESSON,
            created_at=timezone.now() - timedelta(days=days),
        )
    first = api.post(url("acme", "engine", "evolve"), {}, format="json")
    assert first.status_code == 200, first.content
    assert len(first.json()["created"]) == 1
    again = api.post(url("acme", "engine", "evolve"), {}, format="json").json()
    assert again == {"created": [], "vetoed": [], "questions": []}
    bad = api.post(url("acme", "engine", "evolve"), {"force": True}, format="json")
    assert (bad.status_code, bad.json()["field"]) == (400, "force")
    assert bad.json()["detail"] == "force: unknown field; evolve takes no parameters"
    assert api.post(url("acme", "engine", "evolve")).status_code == 200


def test_approve_and_reject_through_the_proposals_api_feed_the_engine(api: APIClient, workspace: Any) -> None:
    approved = three_lessons(api).json()["proposals"]["created"][0]
    rejected = three_lessons(api, "Always run the linter before pushing").json()["proposals"]["created"][0]
    response = api.post(url("acme", "proposals", str(approved["id"]), "approve"), {}, format="json")
    assert response.status_code == 200, response.content
    rule = Memory.objects.get(workspace=workspace, memory_type="strategy")
    assert (rule.tier, rule.content) == ("hot", LESSON)
    assert api.post(url("acme", "proposals", str(approved["id"]), "approve"), {}, format="json").status_code == 409
    response = api.post(url("acme", "proposals", str(rejected["id"]), "reject"), {"reason": "noise"}, format="json")
    assert response.status_code == 200
    reviews = Outcome.objects.filter(workspace=workspace, task_type=REVIEW_TASK_TYPE).order_by("pk")
    assert [(o.result, o.issue) for o in reviews] == [("success", ""), ("fail", "noise")]
    assert Proposal.objects.get(pk=rejected["id"]).payload["weight"] == pytest.approx(0.35)


# ------------------------------------------------------------------------------------------------- dream


def test_dream_applies_by_default_and_a_dry_run_stores_nothing(api: APIClient, workspace: Any, user: Any) -> None:
    stale = services.memory_create(
        workspace=workspace,
        actor=user,
        item=MemoryInput(content="an old rule", memory_type="strategy", tier="hot"),
    )
    Memory.objects.filter(id=stale.id).update(created_at=timezone.now() - timedelta(days=45))
    preview = api.post(url("acme", "dream"), {"dry_run": True}, format="json")
    assert preview.status_code == 200, preview.content
    assert preview.json()["id"] is None and preview.json()["report"]["counts"]["demoted"] == 1
    assert Memory.objects.get(id=stale.id).tier == "hot"
    applied = api.post(url("acme", "dream"), {}, format="json")
    assert applied.status_code == 201
    body = applied.json()
    assert body["id"] is not None and body["run_id"] is not None and body["dry_run"] is False
    (entry,) = body["report"]["demoted"]
    assert entry["memory_id"] == str(stale.id) and "unused for" in entry["reason"]
    assert Memory.objects.get(id=stale.id).tier == "warm"
    listed = api.get(url("acme", "dream")).json()["results"]
    assert [r["id"] for r in listed] == [body["id"]]
    assert api.get(url("acme", "dream", str(body["id"]))).json()["report"] == body["report"]
    bad = api.post(url("acme", "dream"), {"dry_run": "yes"}, format="json")
    assert (bad.status_code, bad.json()["field"]) == (400, "dry_run")
    unknown = api.post(url("acme", "dream"), {"dryrun": True}, format="json")
    assert (unknown.status_code, unknown.json()["detail"]) == (400, "dryrun: unknown field; expected dry_run")


def test_a_dream_report_of_another_workspace_is_not_found(
    api: APIClient, workspace: Any, other_workspace: Workspace
) -> None:
    report = DreamReport.objects.create(workspace=other_workspace, report={"dry_run": False})
    assert api.get(url("acme", "dream", str(report.pk))).status_code == 404


# ------------------------------------------------------------------------------------------ export, import


def test_export_is_a_zip_of_the_directory_and_imports_into_a_new_workspace(
    api: APIClient, workspace: Any, user: Any
) -> None:
    three_lessons(api)
    api.post(
        url("acme", "corrections"),
        {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c", "topic": "t"},
        format="json",
    )
    response = api.get(url("acme", "export"))
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert 'filename="memory-evolution-acme.zip"' in response["Content-Disposition"]
    data = response.content
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "memory-evolution/hot/corrections.md" in names and "memory-evolution/meta.json" in names
    services.workspace_create(owner=user, slug="copy", name="Copy")
    upload = api.post(url("copy", "import"), {"file": io.BytesIO(data)}, format="multipart")
    assert upload.status_code == 201, upload.content
    summary = upload.json()
    assert summary["created"]["outcomes"] == 3 and summary["created"]["corrections"] == 1
    assert summary["created"]["proposals"] == 1 and summary["origin"] == "acme"
    original = api.get(url("acme", "export") + "?format=json").json()["files"]
    copy = api.get(url("copy", "export") + "?format=json").json()["files"]
    timeless = {"meta.json", "engine/decay-scores.json"}  # they carry the export time
    assert {k: v for k, v in copy.items() if k not in timeless} == {
        k: v for k, v in original.items() if k not in timeless
    }
    assert json.loads(copy["meta.json"])["workspace"] == "acme"


def test_importing_a_malformed_directory_is_a_400_listing_every_problem(api: APIClient, workspace: Any) -> None:
    files = {
        "hot/memory.md": "- fine\n### bad\n",
        "reflections/log.md": "CONTEXT: orphan\n",
        "engine/sensor.json": "{not json",
    }
    response = api.post(url("acme", "import"), {"files": files}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert body["error"] == "invalid_directory"
    assert [(p["file"], p["line"]) for p in body["detail"]] == [
        ("engine/sensor.json", 1),
        ("hot/memory.md", 2),
        ("reflections/log.md", 1),
    ]
    assert all(p["message"] for p in body["detail"])
    assert not Memory.objects.filter(workspace=workspace).exists()


def test_bad_import_uploads_name_the_field(api: APIClient, workspace: Any) -> None:
    not_zip = api.post(url("acme", "import"), {"file": io.BytesIO(b"hello")}, format="multipart")
    assert (not_zip.status_code, not_zip.json()["field"]) == (400, "file")
    missing = api.post(url("acme", "import"), {"other": "x"}, format="multipart")
    assert (missing.status_code, missing.json()["field"]) == (400, "file")
    empty = api.post(url("acme", "import"), {"files": {}}, format="json")
    assert (empty.status_code, empty.json()["field"]) == (400, "files")
    not_text = api.post(url("acme", "import"), {"files": {"hot/memory.md": 3}}, format="json")
    assert (not_text.status_code, not_text.json()["field"]) == (400, "files.hot/memory.md")
    unknown = api.post(url("acme", "import"), {"files": {"hot/memory.md": "- a\n"}, "mode": "merge"}, format="json")
    assert (unknown.status_code, unknown.json()["detail"]) == (400, "mode: unknown field; expected files")
    other_upload = api.post(
        url("acme", "import"), {"file": io.BytesIO(b"x"), "zip": io.BytesIO(b"y")}, format="multipart"
    )
    assert (other_upload.status_code, other_upload.json()["field"]) == (400, "zip")
    bad_format = api.get(url("acme", "export") + "?format=tar")
    assert (bad_format.status_code, bad_format.json()["field"]) == (400, "format")
