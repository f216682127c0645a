"""Typed-memory evolvers over a real database: contradictions, drift, goals, summary proposals."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from core.errors import Conflict, NotFound
from evolution.evolvers.typed import (
    ContradictionSurfacer,
    PreferenceDriftDetector,
    SummaryEvolver,
    goal_resolution_revert,
)
from evolution.llm import FakeClient
from evolution.models import Proposal, ProposalStatus
from evolution.proposals import proposal_approve
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.algorithms.embedding import to_bytes
from memories.embeddings import default_embedder
from memories.inputs import MemoryInput
from memories.models import Memory, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def replaced(kit: Any, subject: str, *days_ago: float) -> Memory:
    """A preference replaced once `days_ago` each (before the kit's clock)."""
    log = [(kit.NOW - timedelta(days=d)).isoformat() for d in days_ago]
    return kit.mem("latest", memory_type="preference", subject=subject, replace_log=log, replace_count=len(log))


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


# -- ContradictionSurfacer ------------------------------------------------------------------------


def test_contradiction_surfacer_reports_clusters_and_writes_nothing(kit: Any, workspace: Workspace, user: Any) -> None:
    for text in ("prod is up", "prod is down", "prod is degraded"):
        memory_services.memory_create(
            workspace=workspace, actor=user, item=MemoryInput(content=text, memory_type="state", subject="prod")
        )
    memory_services.memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="queue full", memory_type="state", subject="queue")
    )
    memory_services.memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="queue empty", memory_type="state", subject="queue")
    )
    rows = kit.memory_rows()
    run = kit.run("ContradictionSurfacer")
    assert kit.memory_rows() == rows
    records = list(EvolutionRecord.objects.filter(run=run).order_by("id"))
    assert [len(r.input_ids) for r in records] == [3, 2]
    assert all(r.action == "flag" and not r.before and not r.after for r in records)
    assert "state[prod]" in records[0].reason
    assert run.summary["evolvers"][0]["stats"]["clusters"] == 2


def test_contradiction_surfacer_is_not_in_the_default_cycle() -> None:
    from evolution.evolvers import default_cycle

    assert "ContradictionSurfacer" not in default_cycle()
    assert {"PreferenceDriftDetector", "GoalResolver", "SummaryEvolver"} <= set(default_cycle())


def test_a_retired_memory_leaves_its_contradiction_cluster(kit: Any) -> None:
    a = kit.mem("up", memory_type="state", subject="prod")
    b = kit.mem("down", memory_type="state", subject="prod", status="archived")
    a.conflicts_with = [str(b.id)]
    a.save()
    b.conflicts_with = [str(a.id)]
    b.save()
    result = ContradictionSurfacer().evolve(kit.workspace, dry_run=True, run=None, now=kit.NOW)
    assert result.records == []


# -- PreferenceDriftDetector ----------------------------------------------------------------------


def test_three_replaces_within_thirty_days_flag_drift(kit: Any) -> None:
    pref = replaced(kit, "editor", 20, 10, 1)
    steady = replaced(kit, "theme", 90, 60, 1)
    run = kit.run("PreferenceDriftDetector")
    flags = fresh(pref).drift_flags
    assert len(flags) == 1
    assert flags[0]["reason"] == "preference[editor] changed 3x in last 30d"
    assert flags[0]["replaces_in_window"] == 3
    assert fresh(steady).drift_flags == []
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "annotate"
    assert record.after[str(pref.id)]["drift_flags"] == flags


def test_drift_detection_is_idempotent_within_its_window(kit: Any) -> None:
    pref = replaced(kit, "editor", 20, 10, 1)
    kit.run("PreferenceDriftDetector")
    rows = kit.memory_rows()
    second = kit.run("PreferenceDriftDetector", now=kit.NOW + timedelta(days=2))
    assert kit.memory_rows() == rows
    assert second.summary["counts"]["records"] == 0
    # A fresh burst, every replace after the flagged one, flags again.
    later = kit.NOW + timedelta(days=40)
    pref.refresh_from_db()
    pref.replace_log = [*pref.replace_log, *[(later - timedelta(days=d)).isoformat() for d in (5, 3, 1)]]
    pref.save()
    kit.run("PreferenceDriftDetector", now=later)
    assert len(fresh(pref).drift_flags) == 2


def test_drift_dry_run_changes_nothing_and_revert_removes_the_flag(kit: Any, workspace: Workspace) -> None:
    from evolution import services

    replaced(kit, "editor", 3, 2, 1)
    rows = kit.memory_rows()
    dry = kit.run("PreferenceDriftDetector", dry_run=True)
    assert kit.memory_rows() == rows
    assert dry.summary["counts"]["records"] == 1
    applied = kit.run("PreferenceDriftDetector")
    services.run_revert(workspace=workspace, run=applied, actor=None)
    assert kit.memory_rows() == rows


def test_drift_types_setting_limits_the_detector(kit: Any, workspace: Workspace) -> None:
    workspace.evolution_settings = {"PreferenceDriftDetector": {"memory_types": ["goal"]}}
    workspace.save()
    pref = replaced(kit, "editor", 3, 2, 1)
    kit.run("PreferenceDriftDetector")
    assert fresh(pref).drift_flags == []


def test_drift_flags_come_from_real_replaces(workspace: Workspace, user: Any) -> None:
    first = memory_services.memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="v0", memory_type="preference", subject="editor")
    )
    for k in range(1, 4):
        memory_services.memory_create(
            workspace=workspace,
            actor=user,
            item=MemoryInput(content=f"v{k}", memory_type="preference", subject="editor"),
        )
    from django.utils import timezone

    result = PreferenceDriftDetector().evolve(workspace, dry_run=False, run=None, now=timezone.now())
    assert len(result.records) == 1
    assert fresh(first).drift_flags[0]["reason"] == "preference[editor] changed 3x in last 30d"


# -- GoalResolver ---------------------------------------------------------------------------------

GOAL = "Ship the billing migration to PostgreSQL"


def test_identical_evidence_resolves_a_goal_and_a_paraphrase_does_not(kit: Any) -> None:
    goal = kit.mem(GOAL, memory_type="goal", metadata={"owner": "alice"})
    other = kit.mem("Reduce p95 latency of the search API below 200 ms", memory_type="goal")
    event = kit.mem(GOAL, memory_type="event")
    kit.mem("Search API p95 latency dropped below 200 ms after the cache change", memory_type="outcome")
    run = kit.run("GoalResolver")
    resolved = fresh(goal)
    assert resolved.status == Status.RESOLVED
    assert resolved.metadata["previous_status"] == "active"
    assert resolved.metadata["resolved_by"] == str(event.id)
    assert resolved.metadata["resolved_score"] == pytest.approx(1.0, abs=1e-6)
    assert resolved.metadata["owner"] == "alice"
    assert fresh(other).status == Status.ACTIVE
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "resolve"
    assert "cosine 1.0000 >= 0.85" in record.reason


def test_a_close_paraphrase_below_085_does_not_resolve(kit: Any) -> None:
    goal = kit.mem(GOAL, memory_type="goal")
    kit.mem("We shipped the billing migration to PostgreSQL", memory_type="finding")
    kit.run("GoalResolver")
    assert fresh(goal).status == Status.ACTIVE


def test_goal_resolver_reads_stored_embeddings(kit: Any) -> None:
    a, b = kit.cosine_pair(0.9)
    dim = default_embedder().dim
    pad = bytes(4 * (dim - 4))
    goal = kit.mem("unrelated words", memory_type="goal", embedding=a + pad)
    kit.mem("other words entirely", memory_type="event", embedding=b + pad)
    kit.run("GoalResolver")
    assert fresh(goal).status == Status.RESOLVED
    assert fresh(goal).metadata["resolved_score"] == pytest.approx(0.9, abs=1e-6)


def test_goal_resolution_revert_restores_the_goal(kit: Any, workspace: Workspace, user: Any) -> None:
    goal = kit.mem(GOAL, memory_type="goal", embedding=to_bytes(default_embedder().embed([GOAL])[0]))
    kit.mem(GOAL, memory_type="event")
    before = kit.memory_rows()[goal.id]
    kit.run("GoalResolver")
    assert fresh(goal).status == Status.RESOLVED
    revert = goal_resolution_revert(workspace=workspace, goal_id=goal.id, actor=user)
    assert revert.action == "revert"
    assert kit.memory_rows()[goal.id] == before
    with pytest.raises(NotFound):
        goal_resolution_revert(workspace=workspace, goal_id=goal.id, actor=user)


def test_goal_resolution_revert_refuses_after_a_later_change(kit: Any, workspace: Workspace) -> None:
    goal = kit.mem(GOAL, memory_type="goal")
    kit.mem(GOAL, memory_type="event")
    kit.run("GoalResolver")
    Memory.objects.filter(id=goal.id).update(status=Status.ABANDONED)
    with pytest.raises(Conflict, match="status changed"):
        goal_resolution_revert(workspace=workspace, goal_id=goal.id, actor=None)


def test_goal_resolution_revert_of_one_goal_leaves_the_others(kit: Any, workspace: Workspace) -> None:
    g1 = kit.mem(GOAL, memory_type="goal")
    g2 = kit.mem("Rotate the API tokens", memory_type="goal")
    kit.mem(GOAL, memory_type="event")
    kit.mem("Rotate the API tokens", memory_type="outcome")
    kit.run("GoalResolver")
    goal_resolution_revert(workspace=workspace, goal_id=g1.id, actor=None)
    assert fresh(g1).status == Status.ACTIVE
    assert fresh(g2).status == Status.RESOLVED


def test_goal_resolver_dry_run_changes_nothing(kit: Any) -> None:
    kit.mem(GOAL, memory_type="goal")
    kit.mem(GOAL, memory_type="event")
    rows = kit.memory_rows()
    run = kit.run("GoalResolver", dry_run=True)
    assert kit.memory_rows() == rows
    assert run.summary["counts"]["records"] == 1


def test_goal_resolver_threshold_setting(kit: Any, workspace: Workspace) -> None:
    workspace.evolution_settings = {"GoalResolver": {"threshold": 0.8}}
    workspace.save()
    goal = kit.mem(GOAL, memory_type="goal")
    kit.mem("We shipped the billing migration to PostgreSQL", memory_type="finding")
    kit.run("GoalResolver")
    assert fresh(goal).status == Status.RESOLVED


# -- SummaryEvolver -------------------------------------------------------------------------------


def stale_events(kit: Any, n: int = 3, *, age_days: float = 60.0, subject: str = "deploy") -> list[Memory]:
    return [
        kit.mem(f"deploy {k} failed on step {k}", memory_type="event", subject=subject, age_days=age_days)
        for k in range(n)
    ]


def test_stale_group_becomes_a_pending_proposal_and_originals_are_untouched(kit: Any) -> None:
    events = stale_events(kit)
    rows = kit.memory_rows()
    run = kit.run("SummaryEvolver")
    assert kit.memory_rows() == rows
    (proposal,) = Proposal.objects.all()
    assert proposal.status == ProposalStatus.PENDING
    assert proposal.kind == "summary"
    assert sorted(proposal.source_ids) == sorted(str(e.id) for e in events)
    payload = proposal.payload
    assert payload["memory_type"] == "fact"
    assert payload["confidence"] == 0.7
    assert payload["subject"] == "deploy"
    assert payload["content"].startswith("deploy: ")
    # An event at confidence 1.0, 60 days old, decays to 0.5 ** (60 / 14) = 0.051271 (half-life 14 d).
    assert payload["decayed_confidence"][str(events[0].id)] == pytest.approx(0.051271, abs=1e-6)
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.after["proposal_id"] == proposal.pk
    assert "awaiting approval" in record.reason


def test_summary_proposals_are_not_repeated(kit: Any) -> None:
    stale_events(kit)
    kit.run("SummaryEvolver")
    again = kit.run("SummaryEvolver")
    assert Proposal.objects.count() == 1
    assert again.summary["counts"]["records"] == 0


def test_a_rejected_group_is_not_proposed_again(kit: Any, workspace: Workspace) -> None:
    from evolution.proposals import proposal_reject

    stale_events(kit)
    kit.run("SummaryEvolver")
    proposal_reject(workspace=workspace, proposal_id=Proposal.objects.get().pk, actor=None, reason="keep them")
    dry = kit.run("SummaryEvolver", dry_run=True)
    assert dry.summary["counts"]["records"] == 0
    kit.run("SummaryEvolver")
    assert Proposal.objects.count() == 1


def test_summary_dry_run_creates_no_proposal(kit: Any) -> None:
    stale_events(kit)
    run = kit.run("SummaryEvolver", dry_run=True)
    assert Proposal.objects.count() == 0
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.dry_run
    assert record.after["payload"]["summarizes"]


@pytest.mark.parametrize(
    ("n", "age_days", "expected"),
    [(2, 60.0, 0), (3, 10.0, 0), (3, 60.0, 1), (5, 30.0, 1)],
)
def test_summary_groups_need_three_stale_memories(kit: Any, n: int, age_days: float, expected: int) -> None:
    stale_events(kit, n, age_days=age_days)
    kit.run("SummaryEvolver")
    assert Proposal.objects.count() == expected


def test_summaries_and_summarized_memories_never_join_a_group(kit: Any) -> None:
    events = stale_events(kit, 4)
    Memory.objects.filter(id=events[0].id).update(summarized_by=events[1].id)
    Memory.objects.filter(id=events[1].id).update(summarizes=[str(events[0].id)])
    kit.run("SummaryEvolver")
    assert Proposal.objects.count() == 0


def test_summary_uses_the_llm_client(kit: Any, workspace: Workspace) -> None:
    stale_events(kit)
    fake = FakeClient("Deploys failed three times in a row.")
    result = SummaryEvolver(client=fake).evolve(workspace, dry_run=False, run=None, now=kit.NOW)
    assert [c[0] for c in fake.calls] == ["condense"]
    assert "deploy 0 failed on step 0" in fake.calls[0][1]
    assert Proposal.objects.get().payload["content"] == "Deploys failed three times in a row."
    assert result.stats["proposed"] == 1


def test_approving_a_summary_creates_the_fact_and_links_the_originals(
    kit: Any, workspace: Workspace, user: Any
) -> None:
    events = stale_events(kit)
    kit.run("SummaryEvolver")
    proposal = proposal_approve(workspace=workspace, proposal_id=Proposal.objects.get().pk, actor=user)
    summary = Memory.objects.get(memory_type="fact")
    assert sorted(summary.summarizes) == sorted(str(e.id) for e in events)
    assert summary.confidence == pytest.approx(0.7)
    assert summary.origin == "evolver:SummaryEvolver"
    assert all(fresh(e).summarized_by == summary.id for e in events)
    assert all(fresh(e).content == e.content and fresh(e).status == Status.ACTIVE for e in events)
    assert proposal.applied_record is not None
    assert proposal.applied_record.actor_id == user.pk
    # Summarized memories are not grouped again.
    kit.run("SummaryEvolver")
    assert Proposal.objects.count() == 1
