"""RetrievalBasedStrengthening: retrieved memories gain retention, unretrieved ones lose it."""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, ClassVar

import numpy as np
import orjson

from core.errors import InvalidInput
from evolution import selectors
from evolution.algorithms.retrieval import SHORT_WINDOW_DAYS, RetrievalProfile, strengthening
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import FloatArray, _epochs, _setting
from evolution.models import EvolutionRun
from history.models import Action
from memories.models import Workspace


def _empty_profile(n: int, lookback_days: float) -> RetrievalProfile:
    return RetrievalProfile(
        total_count=np.zeros(n, np.intp),
        search_count=np.zeros(n, np.intp),
        avg_rank=np.zeros(n, np.float64),
        velocity_7d=np.zeros(n, np.float64),
        velocity_30d=np.zeros(n, np.float64),
        top1_count=np.zeros(n, np.intp),
        last_retrieved_days_ago=np.full(n, np.inf, np.float64),
        lookback_days=lookback_days,
    )


class StoredProfiles:
    """The profiles kept in Memory.retrieval_profile: the keys of `RetrievalProfile.as_dict`, with
    the time of the last retrieval (ISO, UTC) instead of its age, so a stored profile only changes when its
    counts or windows do.

    Built for a whole workspace at once: the arrays become lists once (indexing numpy scalars per memory
    and key cost more than the rest of the loop), and the times are formatted by numpy, each distinct one
    once (`iso_milliseconds`; with `datetime.isoformat` per memory, 62k profiles took twice as long).
    """

    def __init__(self, profile: RetrievalProfile, last_at: FloatArray) -> None:
        columns = profile.count_columns()
        self.keys = [*columns, "last_retrieved_at"]
        texts: list[str | None] = [None] * last_at.size
        known = np.flatnonzero(np.isfinite(last_at))
        if known.size:
            distinct, inverse = np.unique(last_at[known], return_inverse=True)
            formatted = iso_milliseconds(distinct)
            for k, at in zip(known.tolist(), inverse.tolist(), strict=True):
                texts[k] = formatted[at]
        # One tuple of values per memory, in key order (zip in C), made a dict when asked for.
        self.values: list[tuple[Any, ...]] = list(
            zip(*(column.tolist() for column in columns.values()), texts, strict=True)
        )

    def __getitem__(self, k: int) -> dict[str, Any]:
        return dict(zip(self.keys, self.values[k], strict=True))


def iso_milliseconds(epochs: FloatArray) -> list[str]:
    """`datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")` of every epoch, by numpy.

    Rounded as datetime rounds a float timestamp (to the microsecond, half to even, on the fraction), then
    truncated to milliseconds as isoformat does; identical on 600k sampled values, edge cases included.
    """
    fraction, whole = np.modf(np.asarray(epochs, dtype=np.float64))
    micros = whole.astype(np.int64) * 1_000_000 + np.rint(fraction * 1e6).astype(np.int64)
    texts: list[str] = np.datetime_as_string(micros.astype("datetime64[us]"), unit="ms").tolist()
    return [f"{text}+00:00" for text in texts]


def _profile_value(stored: Any) -> Any:
    """The stored profile as a value: the column as read is JSON text on SQLite, decoded by orjson (the
    stdlib takes what orjson refuses). Decoding with orjson costs ~1 us a profile, encoding the new profile
    with the stdlib to compare texts cost ~6 us; a cycle reads one per retrieved memory (62k here)."""
    if isinstance(stored, str | bytes):
        try:
            return orjson.loads(stored)
        except orjson.JSONDecodeError:
            return json.loads(stored)
    return stored


@register
class RetrievalBasedStrengthening:
    """The testing effect: retrieved memories gain retention, unretrieved ones slowly lose it.

    Profiles (stored in Memory.retrieval_profile) come from the workspace's retrieval events of used
    sources (search, get, context, helpful; never inspector reads): total, search count, average
    0-based search rank, velocity_7d / velocity_30d in retrievals per day, top-1 count, time of the
    last retrieval. Retrieved within 30 days: retention = min(1, base + 0.1 ln(1 + total) / (1 + rank) *
    v7 / (v30 + 1e-6)); otherwise retention *= 1 - 0.005 * elapsed_days. elapsed_days is capped by the
    time since this evolver's previous applied run, so running it hourly or daily decays alike instead
    of compounding a full window per run. Settings: retrieval_weight, unretrieved_decay_rate, lookback_days.
    """

    name: ClassVar[str] = "RetrievalBasedStrengthening"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        weight = _setting(workspace, self.name, "retrieval_weight", 0.1)
        decay_rate = _setting(workspace, self.name, "unretrieved_decay_rate", 0.005)
        lookback = _setting(workspace, self.name, "lookback_days", 30.0)
        if lookback <= SHORT_WINDOW_DAYS:
            raise InvalidInput("evolution settings lookback_days must exceed 7", field="lookback_days")
        rows = selectors.retention_rows(workspace=workspace)
        n = len(rows)
        result.stats.update(memories=n, boosted=0, decayed=0, profiles=0)
        if n == 0:
            return result
        ids = [row[0] for row in rows]
        old_retention = [row[1] for row in rows]
        position = {mid: k for k, mid in enumerate(ids)}
        profile = _empty_profile(n, lookback)
        now_ts = now.timestamp()
        search_count = profile.search_count
        rank_sum = np.zeros(n, np.float64)
        in_short = np.zeros(n, np.float64)
        in_lookback = np.zeros(n, np.float64)
        aggregates = selectors.retrieval_aggregates(
            workspace=workspace, now=now, lookback_days=lookback, short_days=SHORT_WINDOW_DAYS
        )
        # Positions of the retrieved memories among the active ones (-1: not active, left out).
        at = np.fromiter(
            (position.get(mid, -1) for mid in aggregates.memory_ids), dtype=np.intp, count=len(aggregates.memory_ids)
        )
        known = at >= 0
        k_at = at[known]
        profile.total_count[k_at] = aggregates.total[known]
        search_count[k_at] = aggregates.search[known]
        rank_sum[k_at] = aggregates.rank_sum[known]
        profile.top1_count[k_at] = aggregates.top1[known]
        in_short[k_at] = aggregates.in_short[known]
        in_lookback[k_at] = aggregates.in_lookback[known]
        profile.last_retrieved_days_ago[k_at] = np.maximum(now_ts - aggregates.last_at[known], 0.0) / 86_400.0
        last_at_array = np.full(n, math.nan)
        last_at_array[k_at] = aggregates.last_at[known]
        np.divide(rank_sum, search_count, out=profile.avg_rank, where=search_count > 0)
        profile.velocity_7d[:] = in_short / SHORT_WINDOW_DAYS
        profile.velocity_30d[:] = in_lookback / lookback
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
        has_events_array = profile.total_count > 0
        touched = np.flatnonzero((outcome.retention != np.asarray(old_retention)) | has_events_array)
        has_events = has_events_array.tolist()
        stored_profiles = StoredProfiles(profile, last_at_array)
        profiles = 0
        for k in touched.tolist():
            old_ret = old_retention[k]
            changes: dict[str, tuple[Any, Any]] = {"retention_score": (old_ret, new_ret[k])}
            if has_events[k]:
                new_profile = stored_profiles[k]
                old_profile = _profile_value(rows[k][3])
                changes["retrieval_profile"] = (old_profile, new_profile)
                profiles += new_profile != old_profile
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
        result.stats.update(boosted=len(boosted), decayed=len(decayed), profiles=profiles)
        # Every active memory's retention as it stands once this commits (untouched ones kept theirs), for
        # the Hebbian evolver that follows in the cycle.
        selectors.hand_over_active_retention(
            workspace=workspace, rows=list(zip(ids, old_retention if dry_run else new_ret, strict=True))
        )
        return result
