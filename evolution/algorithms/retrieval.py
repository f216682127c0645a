"""Retrieval profiles and retrieval-based strengthening (the testing effect).

Velocity unit: retrievals per day. velocity_7d = retrievals in the last 7 days / 7; velocity_30d =
retrievals in the last `lookback_days` (default 30) / lookback_days. Under this reading a typical profile
is made of whole event counts (total 47, velocity_7d 3.1 = 22 events / 7 d, velocity_30d 0.8 = 24 events
/ 30 d, the example the tests check); a per-week reading would need fractional event counts. The
strengthening formula only uses the ratio velocity_7d / velocity_30d, so it is unit-free as long as both
velocities share a unit.

boost     = weight * ln(1 + total) * 1 / (1 + avg_rank) * v7 / (v30 + 1e-6)
retention = min(1, base + boost)                          when retrieved within lookback_days
retention = base * (1 - decay_rate * elapsed_days)         otherwise (elapsed days within the window)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

EPSILON = 1e-6
SHORT_WINDOW_DAYS = 7.0
DEFAULT_LOOKBACK_DAYS = 30.0
DEFAULT_WEIGHT = 0.1
DEFAULT_DECAY_RATE = 0.005


@dataclass(frozen=True, slots=True, eq=False)
class RetrievalProfile:
    """Retrieval statistics of a whole workspace: one entry per memory position.

    total_count: all retrieval events given (any age). search_count: events that carried a search rank.
    avg_rank: mean 0-based search rank over the search events (0.0 when there are none).
    velocity_7d, velocity_30d: retrievals per day over the last 7 days and the last `lookback_days`.
    top1_count: search events at rank 0. last_retrieved_days_ago: age of the newest event (inf if none).
    """

    total_count: IntArray
    search_count: IntArray
    avg_rank: FloatArray
    velocity_7d: FloatArray
    velocity_30d: FloatArray
    top1_count: IntArray
    last_retrieved_days_ago: FloatArray
    lookback_days: float

    def __len__(self) -> int:
        return int(self.total_count.shape[0])

    def count_columns(self) -> dict[str, IntArray | FloatArray]:
        """The profile's keys except the age, in the order a stored profile lists them, with the array holding
        each."""
        return {
            "total_count": self.total_count,
            "search_count": self.search_count,
            "avg_search_rank": self.avg_rank,
            "velocity_7d": self.velocity_7d,
            "velocity_30d": self.velocity_30d,
            "top1_count": self.top1_count,
        }

    def as_dict(self, k: int) -> dict[str, float | int | None]:
        """The JSON profile of memory `k`: the ``count_columns`` keys and ``last_retrieved_days_ago``."""
        last = float(self.last_retrieved_days_ago[k])
        profile: dict[str, float | int | None] = {key: column[k].item() for key, column in self.count_columns().items()}
        profile["last_retrieved_days_ago"] = last if math.isfinite(last) else None
        return profile


def profiles_from_events(
    memory_index: npt.ArrayLike,
    ranks: npt.ArrayLike,
    ages_days: npt.ArrayLike,
    n_memories: int,
    lookback_days: float = DEFAULT_LOOKBACK_DAYS,
) -> RetrievalProfile:
    """Aggregate retrieval events into per-memory profiles with `np.bincount` (no per-event loop).

    memory_index: workspace position of the retrieved memory, one entry per event.
    ranks: 0-based rank in the search results; negative or NaN for a retrieval that was not a ranked
    search (a get by id). ages_days: event age in days at `now` (negative ages count as 0; NaN ages count
    in total_count only).
    """
    if lookback_days <= SHORT_WINDOW_DAYS:
        raise ValueError("lookback_days must exceed the 7-day short window")
    idx = np.asarray(memory_index, dtype=np.intp).ravel()
    rank = np.asarray(ranks, dtype=np.float64).ravel()
    age = np.asarray(ages_days, dtype=np.float64).ravel()
    if not idx.shape == rank.shape == age.shape:
        raise ValueError("memory_index, ranks and ages_days must have the same length")
    if idx.size and (idx.min() < 0 or idx.max() >= n_memories):
        raise ValueError("memory_index out of range")
    age = np.maximum(age, 0.0)
    is_search = np.isfinite(rank) & (rank >= 0)
    in_7 = age < SHORT_WINDOW_DAYS
    in_lookback = age < lookback_days

    def count(mask: BoolArray | None = None) -> IntArray:
        sel = idx if mask is None else idx[mask]
        return np.bincount(sel, minlength=n_memories).astype(np.intp)

    total = count()
    search = count(is_search)
    rank_sum = np.bincount(idx[is_search], weights=rank[is_search], minlength=n_memories)
    avg_rank = np.zeros(n_memories, dtype=np.float64)
    np.divide(rank_sum, search, out=avg_rank, where=search > 0)
    last = np.full(n_memories, np.inf, dtype=np.float64)
    dated = np.isfinite(age)
    np.minimum.at(last, idx[dated], age[dated])
    return RetrievalProfile(
        total_count=total,
        search_count=search,
        avg_rank=avg_rank,
        velocity_7d=count(in_7) / SHORT_WINDOW_DAYS,
        velocity_30d=count(in_lookback) / float(lookback_days),
        top1_count=count(is_search & (rank == 0)),
        last_retrieved_days_ago=last,
        lookback_days=float(lookback_days),
    )


@dataclass(frozen=True, slots=True, eq=False)
class StrengtheningResult:
    """Per-memory outcome of retrieval strengthening (arrays aligned with the inputs).

    retention: new retention in [0, 1]. old: the clamped base retention.
    boost: the formula's boost (0 where not retrieved in the window).
    retrieved: retrieved within lookback_days (boost branch) else unretrieved decay branch.
    elapsed_days / decay_factor: the decay branch's inputs (0 / 1 on the boost branch).
    changed: positions (into the arrays) whose retention moved.
    """

    retention: FloatArray
    old: FloatArray
    boost: FloatArray
    retrieved: BoolArray
    elapsed_days: FloatArray
    decay_factor: FloatArray
    changed: IntArray
    weight: float
    decay_rate: float
    lookback_days: float

    def reason(self, k: int) -> str:
        """Audit sentence for position `k`."""
        move = f"{self.old[k]:.6f} -> {self.retention[k]:.6f}"
        if self.retrieved[k]:
            return f"retrieval strengthening: boost {self.boost[k]:.6f}; retention {move}"
        return (
            f"not retrieved in {self.lookback_days:g}d: retention x (1 - {self.decay_rate:g} x "
            f"{self.elapsed_days[k]:.2f}d) = x {self.decay_factor[k]:.6f}; retention {move}"
        )


def retrieval_boost(
    total: npt.ArrayLike,
    avg_rank: npt.ArrayLike,
    v7: npt.ArrayLike,
    v30: npt.ArrayLike,
    weight: float = DEFAULT_WEIGHT,
) -> FloatArray:
    """weight * ln(1 + total) * 1/(1 + avg_rank) * v7 / (v30 + 1e-6), element-wise, never negative.

    (ran) total 10, rank 1.0, v7 2, v30 4 -> 0.059947; total 10, rank 0, v7 1, v30 1 -> 0.239789.
    Missing (NaN) or negative ranks count as rank 0.
    """
    t = np.maximum(np.asarray(total, dtype=np.float64), 0.0)
    r = np.asarray(avg_rank, dtype=np.float64)
    r = np.where(np.isfinite(r) & (r > 0), r, 0.0)
    fast = np.maximum(np.asarray(v7, dtype=np.float64), 0.0)
    slow = np.maximum(np.asarray(v30, dtype=np.float64), 0.0)
    result: FloatArray = weight * np.log1p(t) / (1.0 + r) * fast / (slow + EPSILON)
    return result


def strengthening(
    base_retention: npt.ArrayLike,
    total: npt.ArrayLike,
    avg_rank: npt.ArrayLike,
    v7: npt.ArrayLike,
    v30: npt.ArrayLike,
    days_since_last: npt.ArrayLike,
    weight: float = DEFAULT_WEIGHT,
    decay_rate: float = DEFAULT_DECAY_RATE,
    lookback_days: float = DEFAULT_LOOKBACK_DAYS,
    *,
    age_days: npt.ArrayLike | None = None,
) -> StrengtheningResult:
    """New retention after retrieval strengthening; every input is an array over the same memories.

    Retrieved within the window (days_since_last < lookback_days): min(1, base + retrieval_boost).
    Otherwise (days_since_last >= lookback_days, or inf for never retrieved): base * (1 - decay_rate *
    elapsed), elapsed = the days of the window the memory has been unretrieved, i.e. min(days_since_last,
    lookback_days, age_days when given): at most 1 - 0.005 * 30 = 0.85 per run with the defaults, and a
    memory younger than the window only loses its own age's worth. Results are clamped to [0, 1].
    """
    if weight < 0 or decay_rate < 0 or lookback_days <= 0:
        raise ValueError("weight and decay_rate must be >= 0 and lookback_days > 0")
    base = np.clip(np.asarray(base_retention, dtype=np.float64), 0.0, 1.0)
    since = np.asarray(days_since_last, dtype=np.float64)
    since = np.where(np.isnan(since), np.inf, np.maximum(since, 0.0))
    retrieved = since < lookback_days
    boost = np.where(retrieved, retrieval_boost(total, avg_rank, v7, v30, weight), 0.0)
    elapsed = np.minimum(since, lookback_days)
    if age_days is not None:
        age = np.asarray(age_days, dtype=np.float64)
        elapsed = np.minimum(elapsed, np.where(np.isfinite(age), np.maximum(age, 0.0), lookback_days))
    elapsed = np.where(retrieved, 0.0, elapsed)
    factor = np.clip(1.0 - decay_rate * elapsed, 0.0, 1.0)
    new = np.clip(np.where(retrieved, base + boost, base * factor), 0.0, 1.0)
    base, new = np.broadcast_arrays(base, new)
    return StrengtheningResult(
        retention=np.array(new, dtype=np.float64),
        old=np.array(base, dtype=np.float64),
        boost=np.broadcast_to(boost, new.shape).astype(np.float64),
        retrieved=np.broadcast_to(retrieved, new.shape).copy(),
        elapsed_days=np.broadcast_to(elapsed, new.shape).astype(np.float64),
        decay_factor=np.broadcast_to(factor, new.shape).astype(np.float64),
        changed=np.flatnonzero(new != base),
        weight=float(weight),
        decay_rate=float(decay_rate),
        lookback_days=float(lookback_days),
    )
