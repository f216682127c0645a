"""The dream's reflections written by an LLM when LLM_BASE_URL names one (a real HTTP server on 127.0.0.1
speaking the chat completions shape), the deterministic draft otherwise, and when the endpoint fails."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from evolution import dream
from evolution.models import Proposal
from evolution.proposals import proposal_approve
from memories.models import Memory, Workspace
from tests.evolution.test_dream import NOW, rule
from tests.evolution.test_dream_proposals import failing_issue
from tests.evolution.test_llm import Script, completion, server

pytestmark = pytest.mark.django_db

__all__ = ["server"]  # the fake endpoint fixture, used by name

LLM_ANSWER = "REFLECTION: One HOT rule went unused for a month and left HOT.\nLESSON: Re-confirm the rules you rely on."


@pytest.fixture
def llm(settings: Any, server: tuple[str, Script]) -> Script:
    base, script = server
    settings.LLM_BASE_URL = base
    settings.LLM_MODEL = "local-model"
    settings.LLM_TIMEOUT_SECONDS = 2
    script.body = completion(LLM_ANSWER)
    return script


def stale_rule(workspace: Workspace) -> Memory:
    """A HOT rule unused for 31 days: the dream demotes it and logs the tier pattern."""
    return rule(workspace, "stale rule", days_idle=31, access_count=8)


def logged(workspace: Workspace) -> list[Memory]:
    return list(Memory.objects.filter(workspace=workspace, memory_type="reflection").order_by("created_at"))


def test_without_an_llm_the_dream_logs_the_detectors_own_sentences(settings: Any, workspace: Workspace) -> None:
    settings.LLM_BASE_URL = ""
    stale_rule(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    (entry,) = report["reflections"]
    assert entry["written_by"] == "deterministic" and "llm_error" not in entry
    assert entry["reflection"].startswith("The dream moved 1 memories")
    (memory,) = logged(workspace)
    assert memory.metadata["dream_pattern"]["reflection"] == entry["reflection"]


def test_with_an_llm_the_dream_logs_the_reflection_it_writes_from_the_draft(llm: Script, workspace: Workspace) -> None:
    stale_rule(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    (entry,) = report["reflections"]
    assert entry["written_by"] == "llm:openai-compatible"
    assert entry["reflection"] == "One HOT rule went unused for a month and left HOT."
    assert entry["lesson"] == "Re-confirm the rules you rely on."
    (memory,) = logged(workspace)
    assert memory.content == (
        "CONTEXT: memory tiers\nREFLECTION: One HOT rule went unused for a month and left HOT.\n"
        "LESSON: Re-confirm the rules you rely on."
    )
    draft = memory.metadata["dream_pattern"]
    assert draft["reflection"].startswith("The dream moved 1 memories") and draft["written_by"] == entry["written_by"]
    # The model was given the draft's facts.
    (request,) = llm.requests
    assert request["json"]["model"] == "local-model"
    assert draft["reflection"] in request["json"]["messages"][1]["content"]


def test_an_llm_worded_reflection_is_not_logged_again_within_the_week(llm: Script, workspace: Workspace) -> None:
    stale_rule(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    # The same pattern a day later (another rule demoted), worded differently by the model.
    rule(workspace, "another stale rule", days_idle=30)
    llm.body = completion("REFLECTION: A rule left HOT again.\nLESSON: Use it or lose it.")
    report = dream.dream_run(workspace=workspace, now=NOW + timedelta(days=1)).report
    assert report["reflections"] == []
    assert len(logged(workspace)) == 1


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, {"error": {"message": "model not loaded"}}, "HTTP 500: model not loaded"),
        (200, completion("I think rules matter."), "without a REFLECTION and a LESSON line"),
    ],
)
def test_an_llm_failure_logs_the_deterministic_draft_and_says_so(
    llm: Script, workspace: Workspace, status: int, body: Any, error: str
) -> None:
    llm.status, llm.body = status, body
    stale_rule(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    (entry,) = report["reflections"]
    assert entry["written_by"] == "deterministic"
    assert error in entry["llm_error"]
    assert entry["reflection"].startswith("The dream moved 1 memories")
    (memory,) = logged(workspace)
    assert error in memory.metadata["dream_pattern"]["llm_error"]
    assert memory.content.startswith("CONTEXT: memory tiers\nREFLECTION: The dream moved 1 memories")


def test_an_unusable_llm_setting_falls_back_too(settings: Any, workspace: Workspace) -> None:
    settings.LLM_BASE_URL = "ftp://127.0.0.1/v1"
    stale_rule(workspace)
    (entry,) = dream.dream_run(workspace=workspace, now=NOW, dry_run=True).report["reflections"]
    assert entry["written_by"] == "deterministic" and "is not an http(s):// URL" in entry["llm_error"]


def test_the_dream_page_says_who_wrote_the_reflection(llm: Script, workspace: Workspace, user: Any) -> None:
    from django.test import Client

    llm.status, llm.body = 503, {"error": "busy"}
    stale_rule(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW)
    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/w/acme/evolution/engine/dream/{report.pk}/").content.decode()
    assert "the LLM failed" in page and "HTTP 503: busy" in page


def test_the_dreams_reflection_proposals_are_written_by_the_llm_too(
    llm: Script, workspace: Workspace, user: Any
) -> None:
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = Proposal.objects.filter(workspace=workspace, kind="reflection")
    assert proposal.payload["written_by"] == "llm:openai-compatible"
    assert proposal.payload["reflection"] == "One HOT rule went unused for a month and left HOT."
    assert proposal.payload["context"] == "deploy"
    assert any("'disk full' made 2 tasks fail" in r["json"]["messages"][1]["content"] for r in llm.requests)
    # Proposed once a week, whatever the model says the next day.
    llm.body = completion("REFLECTION: Disk full again.\nLESSON: Prune.")
    dream.dream_run(workspace=workspace, now=NOW + timedelta(days=1))
    assert Proposal.objects.filter(workspace=workspace, kind="reflection").count() == 1
    # Approving logs the lines the person reviewed.
    decided = proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert decided.applied_record is not None
    (memory,) = Memory.objects.filter(id__in=decided.applied_record.output_ids)
    assert "REFLECTION: One HOT rule went unused for a month and left HOT." in memory.content


def test_a_reflection_proposal_keeps_the_detectors_draft_when_the_llm_fails(llm: Script, workspace: Workspace) -> None:
    llm.status, llm.body = 500, {"error": {"message": "model not loaded"}}
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = Proposal.objects.filter(workspace=workspace, kind="reflection")
    assert proposal.payload["reflection"] == "The issue 'disk full' made 2 tasks fail in the last 7 days."
    assert proposal.payload["written_by"] == "deterministic"
    assert "HTTP 500: model not loaded" in proposal.payload["llm_error"]
