"""Retrieval statistics kept from the retrieval events: profiles refreshed incrementally (new events, and
events that crossed a window boundary), CO_RETRIEVED counts from the result sets since the watermark, each
event counted once whichever of the scheduled job and a cycle's evolvers gets to it first."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from evolution import retrieval_stats, services
from evolution.models import ScheduledJob
from history.models import EvolutionRecord
from memories.models import Memory
from tests.evolution.conftest import EvolutionKit

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def profile(m: Memory) -> dict[str, Any]:
    return Memory.objects.select_related("score").get(id=m.id).score.retrieval_profile


def test_a_refresh_stores_the_profiles_and_a_second_at_the_same_clock_writes_nothing(kit: EvolutionKit) -> None:
    m, other = kit.mem("retrieved"), kit.mem("filler")
    for day in (1, 2, 3, 10, 20):
        kit.retrieve([other, m], age_days=day)
    kit.retrieve([m], source="get", age_days=0.5)
    kit.retrieve([m, other], source="inspector", age_days=0.5)  # dry reads never count
    first = retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW)
    assert (first.compared, first.written) == (2, 2)
    stored = profile(m)
    assert (stored["total_count"], stored["search_count"], stored["top1_count"]) == (6, 5, 0)
    assert stored["avg_search_rank"] == pytest.approx(1.0)  # second of two, counted from 0
    assert stored["velocity_7d"] == pytest.approx(4 / 7) and stored["velocity_30d"] == pytest.approx(6 / 30)
    again = retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW)
    assert again.written == 0 and profile(m) == stored
    assert not EvolutionRecord.objects.exists()


def test_an_incremental_refresh_reads_only_memories_whose_profile_can_have_changed(kit: EvolutionKit) -> None:
    quiet, busy, crossing = kit.mem("quiet"), kit.mem("busy"), kit.mem("crossing")
    kit.retrieve([quiet], age_days=3)
    kit.retrieve([busy], age_days=1)
    # 6.95 days old now: leaves the 7-day window an hour later.
    kit.retrieve([crossing], age_days=6.95)
    retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW)
    assert profile(crossing)["velocity_7d"] == pytest.approx(1 / 7)
    kit.retrieve([busy], age_days=0)
    later = kit.NOW + timedelta(hours=2)
    refresh = retrieval_stats.profiles_refresh(workspace=kit.workspace, now=later)
    assert sorted(refresh.aggregates.memory_ids) == sorted([str(busy.id), str(crossing.id)])
    assert profile(busy)["total_count"] == 2
    assert profile(crossing)["velocity_7d"] == 0.0 and profile(crossing)["total_count"] == 1
    assert profile(quiet)["total_count"] == 1
    # The same result as recomputing every profile.
    full = retrieval_stats.profiles_refresh(workspace=kit.workspace, now=later, full=True)
    assert full.compared == 3 and full.written == 0


def test_an_event_stored_late_with_an_earlier_time_is_still_counted(kit: EvolutionKit) -> None:
    m = kit.mem("late")
    retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW)
    # A slow flush stores, after the refresh, an event of a retrieval made before it.
    kit.retrieve([m], age_days=0.001)
    retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW + timedelta(minutes=5))
    assert profile(m)["total_count"] == 1


def test_a_dry_refresh_computes_and_writes_nothing(kit: EvolutionKit) -> None:
    m = kit.mem("retrieved")
    kit.retrieve([m], age_days=1)
    dry = retrieval_stats.profiles_refresh(workspace=kit.workspace, now=kit.NOW, dry_run=True)
    assert dry.written == 1 and profile(m) == {}
    assert not ScheduledJob.objects.filter(workspace=kit.workspace, state__has_key="profiles_at").exists()


def test_counting_adds_each_result_set_once_and_a_dry_count_writes_nothing(kit: EvolutionKit) -> None:
    a, b, c = kit.mem("a"), kit.mem("b"), kit.mem("c")
    kit.retrieve([a, b, c], age_days=2)
    kit.retrieve([b, a], age_days=1)
    kit.retrieve([a, c], source="inspector")
    planned = retrieval_stats.co_retrievals_count(workspace=kit.workspace, now=kit.NOW, dry_run=True)
    assert (planned.result_sets, planned.edges_created) == (2, 3) and kit.co_edge(a, b) is None
    counted = retrieval_stats.co_retrievals_count(workspace=kit.workspace, now=kit.NOW)
    assert (counted.result_sets, counted.edges_created, counted.edges_updated) == (2, 3, 0)
    ab = kit.co_edge(a, b)
    assert ab is not None and ab.co_retrieval_count == 2
    assert ab.first_co_retrieved_at == kit.NOW - timedelta(days=2)
    assert ab.last_co_retrieved_at == kit.NOW - timedelta(days=1)
    assert retrieval_stats.co_retrievals_count(workspace=kit.workspace, now=kit.NOW).result_sets == 0
    kit.retrieve([a, b])
    assert retrieval_stats.co_retrievals_count(workspace=kit.workspace, now=kit.NOW).edges_updated == 1
    assert kit.co_edge(a, b).co_retrieval_count == 3  # type: ignore[union-attr]
    assert not EvolutionRecord.objects.exists()


def test_the_job_and_a_cycle_count_each_event_once(kit: EvolutionKit) -> None:
    a, b = kit.mem("a", retention_score=0.5), kit.mem("b", retention_score=0.5)
    for k in range(5):
        kit.retrieve([a, b], age_days=1 + k)
    retrieval_stats.retrieval_stats_refresh(workspace=kit.workspace, now=kit.NOW)
    run = kit.run("RetrievalBasedStrengthening", "HebbianCoRetrieval")
    assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
    assert kit.co_edge(a, b).co_retrieval_count == 5  # type: ignore[union-attr]
    # The cycle boosted from the counts the job kept: min(0.3, (5 - 3) * 0.02) on top of strengthening.
    assert EvolutionRecord.objects.filter(run=run, evolver="HebbianCoRetrieval", action="boost").exists()
    kit.retrieve([b, a])
    kit.run("HebbianCoRetrieval", now=kit.NOW + timedelta(hours=1))
    retrieval_stats.retrieval_stats_refresh(workspace=kit.workspace, now=kit.NOW + timedelta(hours=2))
    assert kit.co_edge(a, b).co_retrieval_count == 6  # type: ignore[union-attr]


def test_reverting_a_run_keeps_the_counts_and_profiles_it_brought_up_to_date(kit: EvolutionKit) -> None:
    a, b = kit.mem("a", retention_score=0.5), kit.mem("b", retention_score=0.5)
    for k in range(5):
        kit.retrieve([a, b], age_days=1 + k)
    run = kit.run("RetrievalBasedStrengthening", "HebbianCoRetrieval")
    stored = profile(a)
    services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert kit.retention(a) == 0.5
    assert kit.co_edge(a, b).co_retrieval_count == 5  # type: ignore[union-attr]
    assert profile(a) == stored and stored["total_count"] == 5
    # Not counted again by the next run or job.
    kit.run("HebbianCoRetrieval", now=kit.NOW + timedelta(hours=1))
    retrieval_stats.retrieval_stats_refresh(workspace=kit.workspace, now=kit.NOW + timedelta(hours=2))
    assert kit.co_edge(a, b).co_retrieval_count == 5  # type: ignore[union-attr]


def test_a_workspace_counted_by_cycles_before_the_job_continues_from_their_watermark(kit: EvolutionKit) -> None:
    a, b = kit.mem("a"), kit.mem("b")
    kit.retrieve([a, b])
    run = kit.run("HebbianCoRetrieval")
    # As a cycle left it before the job kept the watermark: in the run summary only.
    last = max(kit.workspace.retrieval_events.values_list("id", flat=True))
    run.summary["evolvers"][0]["state"] = {"event_watermark": last}
    run.save(update_fields=["summary"])
    ScheduledJob.objects.filter(workspace=kit.workspace).update(state={})
    assert retrieval_stats.co_retrievals_count(workspace=kit.workspace, now=kit.NOW).result_sets == 0
    assert kit.co_edge(a, b).co_retrieval_count == 1  # type: ignore[union-attr]
