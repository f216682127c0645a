"""Time travel: a workspace aged 100 days by the clock given to the scheduler, with nothing but the scheduled
jobs (and the worker working the cycles they queue) changing it. Unused memories fade and compress down the
ladder, an unused episode is archived, a rule used every other day is promoted to HOT and keeps its
activation, its retrieval profile and its co-retrieval count hold exactly what its retrievals say."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from evolution import jobs
from evolution.algorithms.compression import CompressionTier
from evolution.locks import DatabaseJobLocks
from evolution.models import DreamReport, EvolutionRun, ScheduledJob
from evolution.scheduler import Scheduler
from history.models import EvolutionRecord
from memories.algorithms.activation import BOOST_DIRECT
from memories.models import Memory, Status, Tier
from memories.selectors import compressed_originals
from memories.signalbus.base import Boost, Retrieval, apply_signals
from tests.evolution.conftest import EvolutionKit

pytestmark = [pytest.mark.django_db, pytest.mark.api]

STEP_DAYS = 4
DAYS = 100
LONG = "The billing service moved to the new queue on 2025-03-04 after the 17 minute outage; " * 4


def retrieve(kit: EvolutionKit, memories: list[Memory], at: Any) -> None:
    """What a search returning `memories` leaves for the flush: a direct boost each, one result set."""
    result_set = uuid.uuid4()
    signals: list[Boost | Retrieval] = []
    for rank, m in enumerate(memories, start=1):
        signals.append(Boost(kit.workspace.pk, m.id, BOOST_DIRECT, at))
        signals.append(Retrieval(kit.workspace.pk, m.id, result_set, rank, "search", "billing rule", "s1", at))
    apply_signals(signals)


def test_a_workspace_aged_100_days_by_its_scheduled_jobs_alone(kit: EvolutionKit, settings: Any) -> None:
    settings.EVOLUTION_WORKER = "external"
    ws = kit.workspace
    ws.evolution_settings = {"compression_enabled": True, "cycle_every_hours": 24 * 10, "dream_every_hours": 24 * 7}
    ws.save()
    derived: dict[str, Any] = {"origin": "evolver:Seed", "origin_tier": 2, "age_days": 0}
    unused = kit.mem(LONG, activation_score=0.4, **derived)
    authored = kit.mem("Dana prefers short answers.", origin="user:alice", age_days=0)
    episode = kit.mem("We rolled back the deploy on Friday.", memory_type="episodic", **derived)
    rule = kit.mem("Retry billing calls twice before paging.", memory_type="strategy", **derived)
    partner = kit.mem("Billing retries are idempotent.", memory_type="fact", **derived)

    clock = [kit.NOW]
    scheduler = Scheduler(worker="w1", now=lambda: clock[0], locks=DatabaseJobLocks())
    tiers: list[int] = []
    searches: list[datetime] = []
    for day in range(0, DAYS + 1, STEP_DAYS):
        clock[0] = kit.NOW + timedelta(days=day)
        if day < DAYS:
            # Two searches a step, a minute apart, then the jobs look.
            for _ in range(2):
                retrieve(kit, [rule, partner], clock[0])
                searches.append(clock[0])
                clock[0] += timedelta(minutes=1)
        scheduler.tick()
        jobs.work_available("w1")
        tiers.append(Memory.objects.get(id=unused.id).compression_tier)

    end = clock[0]
    a, b, e, r = (Memory.objects.select_related("score").get(id=m.id) for m in (unused, authored, episode, rule))
    # Faded: the sweep stored the decayed activation (0.4 halved every 30 days) at the last tick's clock.
    assert a.activation_score == pytest.approx(0.4 * 2 ** (-DAYS / 30), abs=1e-9)
    assert a.activation_last_boost_at == end
    # Compressed one rung at a time as it faded, by the scheduled cycles, down to a tombstone.
    seen = [CompressionTier(t) for t in dict.fromkeys(tiers)]
    assert unused.compression_tier == CompressionTier.FULL
    assert seen == [CompressionTier.SUMMARY, CompressionTier.SKELETON, CompressionTier.TOMBSTONE]
    # The row keeps only the tombstone; the record of the step that left FULL keeps the full text.
    assert a.content.startswith("[compressed:") and a.snapshots == []
    assert compressed_originals(workspace=a.workspace, memories=[a])[a.id].content == LONG
    # Written by a person: never compressed.
    assert b.compression_tier == CompressionTier.FULL and b.content == "Dana prefers short answers."
    # The unused episode's retention followed the forgetting curve until the cycle archived it.
    assert e.status == Status.ARCHIVED and e.score.retention_score < 0.1
    archived = EvolutionRecord.objects.get(evolver="ExponentialDecay", action="archive", links__memory_id=e.id)
    assert archived.run is not None and archived.run.scheduled
    assert EvolutionRecord.objects.filter(evolver="DecaySweep", links__memory_id=e.id).exists()
    # The rule used every other day: HOT by the dream, warm, uncompressed.
    assert r.tier == Tier.HOT and r.compression_tier == CompressionTier.FULL and r.activation_score > 0.9
    # Its profile and its co-retrieval count say exactly what its 50 searches did (each counted once,
    # whether the retrieval job or a cycle got to them first).
    profile = r.score.retrieval_profile
    assert profile["total_count"] == profile["search_count"] == len(searches) == 50
    assert profile["velocity_7d"] == pytest.approx(sum(1 for t in searches if t > end - timedelta(days=7)) / 7)
    # (SQLite's julianday keeps about a millisecond of the time.)
    assert abs(datetime.fromisoformat(profile["last_retrieved_at"]) - searches[-1]) <= timedelta(milliseconds=1)
    edge = kit.co_edge(rule, partner)
    assert edge is not None and edge.co_retrieval_count == len(searches)
    # Every job ran at the scheduler's clock: the cycle at least ten days apart, the dream a week.
    cycles = list(EvolutionRun.objects.filter(workspace=ws, scheduled=True).order_by("started_at"))
    assert [(c.started_at - kit.NOW).days for c in cycles] == list(range(0, DAYS, 12))
    dreams = list(DreamReport.objects.filter(workspace=ws).order_by("created_at"))
    assert [(d.created_at - kit.NOW).days for d in dreams] == list(range(0, DAYS + 1, 8))
    last = dict(ScheduledJob.objects.filter(workspace=ws).values_list("job", "last_run_at"))
    # The kit writes its rows without vectors: the embed job gave them theirs at the first ticks, then had
    # nothing to do.
    assert last.pop("embed") <= kit.NOW + timedelta(days=1)
    assert last == {
        "retrieval": end,
        "decay": end,
        "cycle": cycles[-1].started_at,
        "dream": dreams[-1].created_at,
    }
