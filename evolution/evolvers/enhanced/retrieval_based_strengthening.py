"""RetrievalBasedStrengthening: retrieved memories gain retention, unretrieved ones lose it."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from evolution import retrieval_stats, selectors
from evolution.algorithms.retrieval import RetrievalProfile, strengthening
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import _epochs, _setting
from evolution.models import EvolutionRun
from history.models import Action
from memories.models import Workspace


@register
class RetrievalBasedStrengthening:
    """The testing effect: retrieved memories gain retention, unretrieved ones slowly lose it.

    Profiles (stored in Memory.retrieval_profile, kept by the scheduled retrieval job and refreshed here
    first, evolution.retrieval_stats; observations, so not in this evolver's records) come from the
    workspace's retrieval events of used sources (search, get, context, helpful; never inspector reads):
    total, search count, average 0-based search rank, velocity_7d / velocity_30d in retrievals per day,
    top-1 count, time of the last retrieval. Retrieved within 30 days: retention = min(1, base + 0.1
    ln(1 + total) / (1 + rank) * v7 / (v30 + 1e-6)); otherwise retention *= 1 - 0.005 * elapsed_days.
    elapsed_days is capped by the time since this evolver's previous applied run, so running it hourly or
    daily decays alike instead of compounding a full window per run. Settings: retrieval_weight,
    unretrieved_decay_rate, lookback_days.
    """

    name: ClassVar[str] = "RetrievalBasedStrengthening"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        weight = _setting(workspace, self.name, "retrieval_weight", 0.1)
        decay_rate = _setting(workspace, self.name, "unretrieved_decay_rate", 0.005)
        lookback = retrieval_stats.lookback_days(workspace)
        rows = selectors.retention_rows(workspace=workspace)
        n = len(rows)
        result.stats.update(memories=n, boosted=0, decayed=0, profiles=0)
        if n == 0:
            return result
        ids = [row[0] for row in rows]
        old_retention = [row[1] for row in rows]
        position = {mid: k for k, mid in enumerate(ids)}
        # The profiles the scheduled retrieval job keeps, brought up to now over the whole workspace (and
        # stored, unless this is a dry run) by the job's own refresh, so a cycle never reads stale ones.
        refresh = retrieval_stats.profiles_refresh(workspace=workspace, now=now, full=True, dry_run=dry_run)
        aggregates = refresh.aggregates
        every = retrieval_stats.profile_of(aggregates, now=now, lookback=lookback)
        # Positions of the retrieved memories among the active ones (-1: not active, left out).
        at = np.fromiter(
            (position.get(mid, -1) for mid in aggregates.memory_ids), dtype=np.intp, count=len(aggregates.memory_ids)
        )
        known = at >= 0
        k_at = at[known]
        profile = RetrievalProfile(
            total_count=np.zeros(n, np.intp),
            search_count=np.zeros(n, np.intp),
            avg_rank=np.zeros(n, np.float64),
            velocity_7d=np.zeros(n, np.float64),
            velocity_30d=np.zeros(n, np.float64),
            top1_count=np.zeros(n, np.intp),
            last_retrieved_days_ago=np.full(n, np.inf, np.float64),
            lookback_days=lookback,
        )
        columns = every.count_columns()
        for name, column in profile.count_columns().items():
            column[k_at] = columns[name][known]
        profile.last_retrieved_days_ago[k_at] = every.last_retrieved_days_ago[known]
        now_ts = now.timestamp()
        cursor = selectors.evolver_cursor(workspace=workspace, name=self.name)
        since_previous = (now - cursor.ran_at).total_seconds() / 86_400.0 if cursor.ran_at else math.inf
        age = np.minimum((now_ts - _epochs([row[2] for row in rows])) / 86_400.0, since_previous)
        outcome = strengthening(
            old_retention,
            profile.total_count,
            profile.avg_rank,
            profile.velocity_7d,
            profile.velocity_30d,
            profile.last_retrieved_days_ago,
            weight,
            decay_rate,
            lookback,
            age_days=age,
        )
        boosted = MemoryUpdates(self.name, Action.BOOST, "retrieval strengthening (testing effect)")
        decayed = MemoryUpdates(self.name, Action.DECAY, f"not retrieved in {lookback:g} days: unretrieved decay")
        new_ret = outcome.retention.tolist()
        boost, elapsed, factor = outcome.boost.tolist(), outcome.elapsed_days.tolist(), outcome.decay_factor.tolist()
        retrieved = outcome.retrieved.tolist()
        touched = np.flatnonzero(outcome.retention != np.asarray(old_retention))
        for k in touched.tolist():
            old_ret = old_retention[k]
            changes: dict[str, tuple[Any, Any]] = {"retention_score": (old_ret, new_ret[k])}
            if retrieved[k]:
                boosted.add(
                    ids[k], changes, f"retrieval boost {boost[k]:.6f}: retention {old_ret:.6f} -> {new_ret[k]:.6f}"
                )
            else:
                decayed.add(
                    ids[k],
                    changes,
                    f"not retrieved in {lookback:g}d: retention x (1 - {decay_rate:g} x {elapsed[k]:.2f}d) = "
                    f"x {factor[k]:.6f}; {old_ret:.6f} -> {new_ret[k]:.6f}",
                )
        result.records = apply_updates([boosted, decayed], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(boosted=len(boosted), decayed=len(decayed), profiles=refresh.written)
        # Every active memory's retention as it stands once this commits (untouched ones kept theirs), for
        # the Hebbian evolver that follows in the cycle.
        selectors.hand_over_active_retention(
            workspace=workspace, rows=list(zip(ids, old_retention if dry_run else new_ret, strict=True))
        )
        return result
