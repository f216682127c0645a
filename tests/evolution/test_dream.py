"""The dream cycle: decay scores, HOT/WARM/COLD moves with reasons, patterns, pending proposals, dry run."""

from __future__ import annotations

import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from evolution import dream, engine, engine_selectors, services
from evolution.models import DreamReport, EvolutionRun, Outcome, Proposal
from history.models import EvolutionRecord
from memories.models import Memory, RetrievalEvent, Workspace

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def rule(
    ws: Workspace,
    content: str = "a rule",
    *,
    tier: str = "hot",
    days_idle: float = 0.0,
    access_count: int = 1,
    memory_type: str = "strategy",
    status: str = "active",
    origin: str = "user:alice",
    metadata: dict[str, Any] | None = None,
) -> Memory:
    at = NOW - timedelta(days=days_idle)
    return Memory.objects.create(
        id=uuid.uuid4(),
        workspace=ws,
        content=content,
        memory_type=memory_type,
        tier=tier,
        status=status,
        origin=origin,
        origin_tier=3 if origin.startswith("engine:") else 1,
        access_count=access_count,
        created_at=at - timedelta(days=1),
        updated_at=at,
        last_accessed=at,
        metadata=metadata or {},
    )


def use(memory: Memory, times: int, *, days_ago: float = 1.0, source: str = "search") -> None:
    RetrievalEvent.objects.bulk_create(
        [
            RetrievalEvent(
                workspace=memory.workspace,
                memory=memory,
                result_set=uuid.uuid4(),
                rank=0,
                source=source,
                created_at=NOW - timedelta(days=days_ago, minutes=i),
            )
            for i in range(times)
        ]
    )


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def test_relevance_in_the_report_follows_the_seed_formula_per_type(workspace: Workspace) -> None:
    manual = rule(workspace, "manual", days_idle=10, access_count=3)
    engine_rule = rule(workspace, "engine", days_idle=10, access_count=3, origin="engine:strategy")
    correction = rule(workspace, "fix", memory_type="correction", days_idle=10, access_count=3)
    warm = rule(workspace, "warm", tier="warm", days_idle=10, access_count=0, metadata={"decay": {"base": 2.0}})
    report = dream.dream_run(workspace=workspace, now=NOW, dry_run=True).report
    scores = {row["memory_id"]: row["score"] for row in report["lowest"]}
    decay = math.exp(-0.03 * 10)
    assert scores[str(manual.id)] == pytest.approx(decay * 2 * 1.5, abs=1e-6)
    assert scores[str(engine_rule.id)] == pytest.approx(decay * 2 * 1.0, abs=1e-6)
    assert scores[str(correction.id)] == pytest.approx(decay * 2 * 1.2, abs=1e-6)
    # access_count 0 counts as 1: log2(2) = 1; base 2 from metadata.
    assert scores[str(warm.id)] == pytest.approx(2.0 * decay * 1 * 0.8, abs=1e-6)
    assert report["scored"] == 4
    assert report["tracked_types"] == ["strategy", "correction", "preference"]


def test_an_unused_hot_rule_is_demoted_to_warm_with_its_reason_and_record(workspace: Workspace) -> None:
    stale = rule(workspace, "stale rule", days_idle=31, access_count=8)
    kept = rule(workspace, "kept rule", days_idle=2)
    result = dream.dream_run(workspace=workspace, now=NOW)
    assert result.pk is not None
    assert (fresh(stale).tier, fresh(stale).status) == ("warm", "active")
    assert fresh(kept).tier == "hot"
    (entry,) = result.report["demoted"]
    assert entry["memory_id"] == str(stale.id)
    assert "unused for 31.0 days" in entry["reason"]
    record = EvolutionRecord.objects.get(pk=entry["record_id"])
    assert (record.evolver, record.action) == ("Dream", "demote")
    assert record.before == {str(stale.id): {"tier": "hot"}}
    assert record.after == {str(stale.id): {"tier": "warm"}}
    assert record.run_id is not None and str(record.run_id) == result.report["run_id"]
    run = EvolutionRun.objects.get(id=record.run_id)
    assert (run.status, run.evolvers, run.dry_run) == ("completed", ["Dream"], False)


def test_a_decayed_warm_rule_is_archived_to_cold_never_deleted_and_the_reason_is_logged_first(
    workspace: Workspace,
) -> None:
    old = rule(workspace, "very old rule", tier="warm", days_idle=120)
    result = dream.dream_run(workspace=workspace, now=NOW)
    memory = fresh(old)
    assert (memory.tier, memory.status) == ("cold", "archived")
    (entry,) = result.report["archived"]
    assert "below the archive threshold 0.05" in entry["reason"]
    assert "Nothing is deleted" in entry["reason"]
    record = EvolutionRecord.objects.get(pk=entry["record_id"])
    assert record.action == "archive"
    assert record.before == {str(old.id): {"tier": "warm", "status": "active"}}
    assert record.timestamp == NOW


def test_a_rule_used_three_times_in_seven_days_comes_back_from_cold_to_hot(workspace: Workspace) -> None:
    archived = rule(workspace, "archived rule", tier="cold", status="archived", days_idle=200)
    use(archived, 3)
    inspected = rule(workspace, "only inspected", tier="cold", status="archived", days_idle=200)
    use(inspected, 5, source="inspector")
    result = dream.dream_run(workspace=workspace, now=NOW)
    assert (fresh(archived).tier, fresh(archived).status) == ("hot", "active")
    assert (fresh(inspected).tier, fresh(inspected).status) == ("cold", "archived")
    (entry,) = result.report["promoted"]
    assert "Used 3 times in the last 7 days" in entry["reason"]


def test_uses_brought_by_an_import_count_like_retrievals(workspace: Workspace) -> None:
    uses = [(NOW - timedelta(days=d)).isoformat() for d in (1, 2, 3)]
    warm = rule(workspace, "w", tier="warm", days_idle=1, metadata={"decay": {"recent_uses": uses}})
    dream.dream_run(workspace=workspace, now=NOW)
    assert fresh(warm).tier == "hot"


def test_a_correction_always_stays_hot_whatever_its_score(workspace: Workspace) -> None:
    ancient = rule(workspace, "fix", memory_type="correction", days_idle=1000)
    wandered = rule(workspace, "fix 2", memory_type="correction", tier="warm", days_idle=1000)
    result = dream.dream_run(workspace=workspace, now=NOW)
    assert fresh(ancient).tier == "hot"
    assert fresh(wandered).tier == "hot"
    assert [e["memory_id"] for e in result.report["promoted"]] == [str(wandered.id)]
    assert result.report["archived"] == []


def test_a_dry_run_reports_the_same_moves_and_writes_nothing(workspace: Workspace) -> None:
    stale = rule(workspace, "stale", days_idle=40)
    rule(workspace, "old", tier="warm", days_idle=150)
    for result in ("fail", "fail", "success"):
        Outcome.objects.create(
            workspace=workspace, task_type="deploy", approach="a", result=result, created_at=NOW - timedelta(days=1)
        )
    before = list(Memory.objects.order_by("id").values_list("id", "tier", "status", "metadata"))
    preview = dream.dream_run(workspace=workspace, now=NOW, dry_run=True)
    assert preview.pk is None
    assert preview.report["dry_run"] is True and preview.report["run_id"] is None
    assert list(Memory.objects.order_by("id").values_list("id", "tier", "status", "metadata")) == before
    assert not EvolutionRun.objects.exists()
    assert not EvolutionRecord.objects.exists()
    assert not DreamReport.objects.exists()
    applied = dream.dream_run(workspace=workspace, now=NOW)
    assert applied.report["counts"] == preview.report["counts"]
    assert [e["memory_id"] for e in applied.report["demoted"]] == [str(stale.id)]
    assert [r["reflection"] for r in applied.report["reflections"]] == [
        r["reflection"] for r in preview.report["reflections"]
    ]


def test_dreaming_twice_at_the_same_time_changes_and_logs_nothing_new(workspace: Workspace) -> None:
    rule(workspace, "stale", days_idle=40)
    rule(workspace, "older", tier="warm", days_idle=150)
    first = dream.dream_run(workspace=workspace, now=NOW)
    assert first.report["counts"]["demoted"] == 1 and first.report["counts"]["archived"] == 1
    assert first.report["counts"]["reflections"] == 1
    second = dream.dream_run(workspace=workspace, now=NOW)
    assert second.report["counts"] == {
        "promoted": 0,
        "demoted": 0,
        "archived": 0,
        "pending_proposals": 0,
        "reflections": 0,
    }
    assert [r.pk for r in dream.dream_report_list(workspace=workspace)] == [second.pk, first.pk]


def test_patterns_of_the_week_are_appended_as_dream_reflections_that_are_not_lessons(workspace: Workspace) -> None:
    for result, approach in [("fail", "rsync"), ("fail", "rsync"), ("success", "docker"), ("fail", "rsync")]:
        Outcome.objects.create(
            workspace=workspace,
            task_type="deploy",
            approach=approach,
            result=result,
            created_at=NOW - timedelta(days=2),
        )
    Outcome.objects.create(
        workspace=workspace, task_type="deploy", approach="x", result="fail", created_at=NOW - timedelta(days=9)
    )
    rule(workspace, "stale", days_idle=45)
    report = dream.dream_run(workspace=workspace, now=NOW).report
    first, second = report["reflections"]
    assert first["context"] == "deploy"
    assert first["reflection"] == "deploy failed 3 of 4 times in the last 7 days."
    assert first["lesson"] == "Prefer the approach 'docker' for deploy: it succeeded 1 of 1 times."
    assert second["context"] == "memory tiers"
    memory = Memory.objects.get(id=first["memory_id"])
    assert memory.memory_type == "reflection" and memory.origin == engine.DREAM_ORIGIN
    assert memory.metadata["reflection"]["topic"] == "dream"
    assert engine_selectors.is_dream_reflection(memory)
    # The dream's log is the engine's own output: its lessons never count towards a strategy.
    lessons, _ = engine_selectors.reflection_lessons(workspace=workspace)
    assert lessons == []


def test_outcome_pattern_falls_back_to_the_most_repeated_lesson_then_to_a_steady_success() -> None:
    def row(result: str, lesson: str = "", task: str = "build") -> Outcome:
        return Outcome(task_type=task, approach="a", result=result, lesson=lesson, created_at=NOW)

    failing = dream.outcome_pattern([row("fail", "pin deps"), row("fail", "pin deps"), row("fail", "other")])
    assert failing is not None and failing.lesson == "Apply the lesson recorded 2 time(s) for build: pin deps"
    steady = dream.outcome_pattern([row("success") for _ in range(3)])
    assert steady is not None and steady.lesson == "Keep the approach 'a' for build."
    assert dream.outcome_pattern([row("success"), row("fail")]) is None


def test_pending_proposals_are_listed_in_the_report(workspace: Workspace) -> None:
    Proposal.objects.create(workspace=workspace, kind="strategy", title="t", payload={"weight": 0.5})
    Proposal.objects.create(workspace=workspace, kind="strategy", title="done", status="approved")
    report = dream.dream_run(workspace=workspace, now=NOW).report
    assert [(p["title"], p["weight"]) for p in report["pending_proposals"]] == [("t", 0.5)]
    assert report["counts"]["pending_proposals"] == 1


def test_a_dream_run_reverts_like_any_evolution_run(workspace: Workspace, user: Any) -> None:
    stale = rule(workspace, "stale", days_idle=40)
    old = rule(workspace, "old", tier="warm", days_idle=150)
    result = dream.dream_run(workspace=workspace, now=NOW)
    run = EvolutionRun.objects.get(id=result.report["run_id"])
    services.run_revert(workspace=workspace, run=run, actor=user)
    assert (fresh(stale).tier, fresh(stale).status) == ("hot", "active")
    assert (fresh(old).tier, fresh(old).status) == ("warm", "active")


def test_the_decay_table_lists_tracked_memories_lowest_first(workspace: Workspace, make_memory: Any) -> None:
    low = rule(workspace, "low", tier="warm", days_idle=60)
    high = rule(workspace, "high", days_idle=1)
    make_memory("not tracked", memory_type="semantic")
    rows = dream.decay_table(workspace=workspace, now=NOW)
    assert [r.memory.id for r in rows] == [low.id, high.id]
    assert rows[0].kind == "rule"


def test_a_preference_is_scored_with_the_weight_of_the_rules_it_sits_with(workspace: Workspace) -> None:
    hot = rule(workspace, "Dana prefers short answers", memory_type="preference", days_idle=10, access_count=3)
    warm = rule(workspace, "Prefers tabs", memory_type="preference", tier="warm", days_idle=10, access_count=3)
    report = dream.dream_run(workspace=workspace, now=NOW, dry_run=True).report
    scores = {row["memory_id"]: row["score"] for row in report["lowest"]}
    decay = math.exp(-0.03 * 10)
    assert scores[str(hot.id)] == pytest.approx(decay * 2 * 1.5, abs=1e-6)
    assert scores[str(warm.id)] == pytest.approx(decay * 2 * 0.8, abs=1e-6)


def test_a_preference_used_three_times_in_a_week_is_promoted_to_hot(workspace: Workspace) -> None:
    used = rule(workspace, "Prefers answers in French", memory_type="preference", tier="warm", origin="agent:bot")
    once = rule(workspace, "Prefers dark mode", memory_type="preference", tier="warm")
    use(used, 3)
    use(once, 1)
    result = dream.dream_run(workspace=workspace, now=NOW)
    assert fresh(used).tier == "hot" and fresh(once).tier == "warm"
    (entry,) = result.report["promoted"]
    assert entry["memory_id"] == str(used.id) and "Used 3 times in the last 7 days" in entry["reason"]


def test_an_unused_preference_fades_to_cold_archived_and_comes_back_when_used(workspace: Workspace) -> None:
    stale = rule(workspace, "Prefers the old dashboard", memory_type="preference", days_idle=31, access_count=8)
    old = rule(workspace, "Prefers fax", memory_type="preference", tier="warm", days_idle=120)
    dream.dream_run(workspace=workspace, now=NOW)
    assert (fresh(stale).tier, fresh(stale).status) == ("warm", "active")
    assert (fresh(old).tier, fresh(old).status) == ("cold", "archived")
    use(old, 3, days_ago=0.5)
    result = dream.dream_run(workspace=workspace, now=NOW + timedelta(hours=1))
    assert (fresh(old).tier, fresh(old).status) == ("hot", "active")
    assert [e["memory_id"] for e in result.report["promoted"]] == [str(old.id)]
    # The move back is a record holding exactly what it changed.
    record = EvolutionRecord.objects.get(pk=result.report["promoted"][0]["record_id"])
    assert record.before == {str(old.id): {"tier": "cold", "status": "archived"}}
