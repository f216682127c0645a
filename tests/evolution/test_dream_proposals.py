"""The dream's reflection and promotion proposals: created once, applied as one revertible record."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.errors import Conflict, InvalidInput
from evolution import dream, engine, engine_inputs, engine_selectors
from evolution.dream_proposals import promotion_drafts, reflection_drafts
from evolution.models import Outcome, Proposal, ProposalStatus
from evolution.proposals import proposal_approve, proposal_create, proposal_reject
from memories.inputs import MemoryInput
from memories.models import Edge, EdgeType, Memory, Workspace
from memories.services import memories_create, record_revert

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
LESSON = "Always pin the base image digest"


def failing_issue(ws: Workspace, issue: str = "disk full", days: tuple[float, ...] = (1, 2)) -> None:
    for d in days:
        Outcome.objects.create(
            workspace=ws,
            task_type="deploy",
            result="fail",
            issue=issue,
            solution="prune old images",
            created_at=NOW - timedelta(days=d),
        )


def reflect(ws: Workspace, days_ago: float, lesson: str = LESSON, topic: str | None = "dream") -> Memory:
    item = engine_inputs.ReflectionInput(
        context="docker builds",
        reflection=f"noticed on day {days_ago}",
        lesson=lesson,
        topic=topic,
        created_at=NOW - timedelta(days=days_ago),
    )
    return engine.reflection_record(
        workspace=ws, actor=None, item=item, origin=engine.DREAM_ORIGIN, evolve=False
    ).memory


def kinds(ws: Workspace, kind: str) -> list[Proposal]:
    return list(Proposal.objects.filter(workspace=ws, kind=kind).order_by("id"))


def rows(ws: Workspace) -> dict[Any, tuple[Any, ...]]:
    names = [f.attname for f in Memory._meta.concrete_fields]
    return {
        r[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in r)
        for r in Memory.objects.filter(workspace=ws).values_list(*names)
    }


def edges(ws: Workspace) -> set[tuple[Any, ...]]:
    return set(Edge.objects.filter(workspace=ws).values_list("id", "source_id", "target_id", "edge_type"))


# -- reflections ----------------------------------------------------------------------------------


def test_the_dream_proposes_a_repeated_issue_as_a_reflection_in_the_seed_format(workspace: Workspace) -> None:
    failing_issue(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    (proposal,) = kinds(workspace, "reflection")
    assert report["proposed"] == [{"id": proposal.pk, "kind": "reflection", "title": proposal.title}]
    assert proposal.status == ProposalStatus.PENDING
    assert proposal.payload["context"] == "deploy"
    assert proposal.payload["reflection"] == "The issue 'disk full' made 2 tasks fail in the last 7 days."
    assert proposal.payload["lesson"] == "When 'disk full' comes up: prune old images"
    assert proposal.payload["evidence"] == ["sensor:S-0002", "sensor:S-0001"]  # oldest first


def test_the_report_counts_the_proposals_this_dream_made_among_those_waiting(workspace: Workspace) -> None:
    failing_issue(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    (proposal,) = kinds(workspace, "reflection")
    assert report["counts"]["pending_proposals"] == 1
    assert [p["id"] for p in report["pending_proposals"]] == [proposal.pk]


def test_a_pattern_is_proposed_once_within_seven_days_and_again_after(workspace: Workspace) -> None:
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    dream.dream_run(workspace=workspace, now=NOW + timedelta(days=1))
    assert len(kinds(workspace, "reflection")) == 1
    failing_issue(workspace, days=(-9, -9.5))
    dream.dream_run(workspace=workspace, now=NOW + timedelta(days=10))
    assert len(kinds(workspace, "reflection")) == 2


def test_a_dry_run_dream_lists_the_proposals_it_would_make_and_creates_none(workspace: Workspace) -> None:
    failing_issue(workspace)
    report = dream.dream_run(workspace=workspace, now=NOW, dry_run=True).report
    assert [p["kind"] for p in report["proposed"]] == ["reflection"] and report["proposed"][0]["id"] is None
    assert not Proposal.objects.exists()


def test_another_workspace_s_outcomes_never_appear(workspace: Workspace, other_workspace: Workspace) -> None:
    failing_issue(other_workspace)
    assert reflection_drafts(workspace=workspace, now=NOW) == []
    assert len(reflection_drafts(workspace=other_workspace, now=NOW)) == 1


def test_approving_a_reflection_writes_it_to_the_log_and_revert_removes_it(workspace: Workspace, user: Any) -> None:
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "reflection")
    before = rows(workspace)
    approved = proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    record = approved.applied_record
    assert record is not None and record.evolver == "Dream" and record.action == "create"
    memory = Memory.objects.get(id=record.output_ids[0])
    assert memory.memory_type == "reflection" and memory.origin == engine.DREAM_ORIGIN
    assert memory.content == engine_inputs.reflection_content(
        "deploy", proposal.payload["reflection"], proposal.payload["lesson"]
    )
    assert engine_selectors.is_dream_reflection(memory)
    record_revert(workspace=workspace, record_id=record.pk, actor=user)
    assert rows(workspace) == before
    with pytest.raises(Conflict, match="already decided"):
        proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user)


def test_a_rewritten_reflection_is_the_reviewer_s(workspace: Workspace, user: Any) -> None:
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "reflection")
    approved = proposal_approve(
        workspace=workspace, proposal_id=proposal.pk, actor=user, payload={"lesson": "Alert on disk at 80%"}
    )
    assert approved.status == ProposalStatus.MODIFIED
    memory = Memory.objects.get(id=approved.applied_record.output_ids[0])  # type: ignore[union-attr]
    assert memory.origin == "user:alice" and memory.metadata["reflection"]["lesson"] == "Alert on disk at 80%"
    other, _ = proposal_create(
        workspace=workspace, kind="reflection", title="x", payload={"context": "c", "reflection": None}
    )
    with pytest.raises(InvalidInput, match=r"^payload\.reflection: this field is required$"):
        proposal_approve(workspace=workspace, proposal_id=other.pk, actor=user)


def test_rejecting_a_reflection_keeps_the_reason_and_writes_nothing(workspace: Workspace, user: Any) -> None:
    failing_issue(workspace)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "reflection")
    before = rows(workspace)
    rejected = proposal_reject(workspace=workspace, proposal_id=proposal.pk, actor=user, reason="a one-off")
    assert rejected.decision_reason == "a one-off" and rows(workspace) == before


# -- promotions -----------------------------------------------------------------------------------


def test_a_lesson_in_three_dream_reflections_within_seven_days_is_proposed_for_hot(workspace: Workspace) -> None:
    sources = [reflect(workspace, d) for d in (6, 3, 1)]
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "promotion")
    assert proposal.payload["rule"] == LESSON and proposal.payload["target"] is None
    assert proposal.source_ids == [str(m.id) for m in sources]
    assert "appears in 3 reflections within 7 days" in proposal.rationale
    dream.dream_run(workspace=workspace, now=NOW + timedelta(hours=1))
    assert len(kinds(workspace, "promotion")) == 1


def test_two_reflections_or_three_spread_over_more_than_seven_days_are_not_enough(workspace: Workspace) -> None:
    reflect(workspace, 1)
    reflect(workspace, 2)
    reflect(workspace, 20)
    assert promotion_drafts(workspace=workspace, now=NOW) == []


def test_a_lesson_the_engine_already_proposed_or_a_hot_rule_holds_is_not_promoted(workspace: Workspace) -> None:
    for d in (6, 3, 1):
        reflect(workspace, d, topic=None)  # a person's reflections: the engine proposes a strategy for them
    engine.engine_evolve(workspace=workspace, now=NOW)
    assert len(kinds(workspace, "strategy")) == 1
    assert promotion_drafts(workspace=workspace, now=NOW) == []
    for d in (6, 3, 1):
        reflect(workspace, d, lesson="Tag every release")
    memories_create(
        workspace=workspace,
        actor=None,
        items=[MemoryInput(content="tag every release!", memory_type="strategy", tier="hot", origin="user:alice")],
    )
    assert promotion_drafts(workspace=workspace, now=NOW) == []


def test_the_covenant_keeps_secrets_out_of_promotions(workspace: Workspace) -> None:
    for d in (6, 3, 1):
        reflect(workspace, d, lesson="Paste the api_key into the build log")
    assert promotion_drafts(workspace=workspace, now=NOW) == []


def test_another_workspace_s_reflections_never_count(workspace: Workspace, other_workspace: Workspace) -> None:
    reflect(workspace, 1)
    for d in (6, 3):
        reflect(other_workspace, d)
    assert promotion_drafts(workspace=workspace, now=NOW) == []
    assert promotion_drafts(workspace=other_workspace, now=NOW) == []


def test_approving_a_promotion_creates_a_hot_rule_linked_to_its_reflections_and_revert_restores_all(
    workspace: Workspace, user: Any
) -> None:
    sources = [reflect(workspace, d) for d in (6, 3, 1)]
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "promotion")
    before, links = rows(workspace), edges(workspace)
    approved = proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    record = approved.applied_record
    assert record is not None and record.action == "promote"
    rule = Memory.objects.get(id=record.output_ids[0])
    assert (rule.memory_type, rule.tier, rule.origin, rule.content) == ("strategy", "hot", "engine:strategy", LESSON)
    assert rule.metadata["strategy"]["proposal_id"] == proposal.pk
    derived = Edge.objects.filter(source=rule, edge_type=EdgeType.DERIVED_FROM)
    assert {e.target_id for e in derived} == {m.id for m in sources}
    record_revert(workspace=workspace, record_id=record.pk, actor=user)
    assert rows(workspace) == before and edges(workspace) == links
    with pytest.raises(Conflict):
        proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user)


def test_approving_a_promotion_raises_an_existing_warm_rule_with_the_same_text(workspace: Workspace, user: Any) -> None:
    (warm,) = memories_create(
        workspace=workspace,
        actor=None,
        items=[MemoryInput(content=LESSON.lower(), memory_type="strategy", tier="warm", origin="user:alice")],
    )
    for d in (6, 3, 1):
        reflect(workspace, d)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "promotion")
    assert proposal.payload["target"] == str(warm.id)
    before = rows(workspace)
    approved = proposal_approve(workspace=workspace, proposal_id=proposal.pk, actor=user)
    warm.refresh_from_db()
    assert warm.tier == "hot" and Memory.objects.filter(memory_type="strategy").count() == 1
    record_revert(workspace=workspace, record_id=approved.applied_record_id or 0, actor=user)
    assert rows(workspace) == before


def test_a_rewritten_promotion_is_checked_by_the_covenant_and_becomes_the_reviewer_s(
    workspace: Workspace, user: Any
) -> None:
    for d in (6, 3, 1):
        reflect(workspace, d)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "promotion")
    with pytest.raises(InvalidInput, match="covenant"):
        proposal_approve(
            workspace=workspace, proposal_id=proposal.pk, actor=user, payload={"rule": "Print the password"}
        )
    approved = proposal_approve(
        workspace=workspace, proposal_id=proposal.pk, actor=user, payload={"rule": "Pin base images by digest"}
    )
    rule = Memory.objects.get(id=approved.applied_record.output_ids[0])  # type: ignore[union-attr]
    assert rule.origin == "user:alice" and rule.content == "Pin base images by digest" and rule.tier == "hot"


def test_rejecting_a_promotion_changes_nothing_and_it_is_not_proposed_again(workspace: Workspace, user: Any) -> None:
    for d in (6, 3, 1):
        reflect(workspace, d)
    dream.dream_run(workspace=workspace, now=NOW)
    (proposal,) = kinds(workspace, "promotion")
    before = rows(workspace)
    proposal_reject(workspace=workspace, proposal_id=proposal.pk, actor=user, reason="too narrow")
    assert rows(workspace) == before
    assert promotion_drafts(workspace=workspace, now=NOW) == []
