"""Exponential (Ebbinghaus) decay of retention, the ExponentialDecay evolver's arithmetic.

retention = exp(-days / stability), days since the reference time (last access, else event time, else
creation), stability in days (an e-folding time, default 30 d, not a half-life). Items whose retention
falls below the archive threshold (default 0.1) are archived.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

SECONDS_PER_DAY = 86_400.0
DEFAULT_STABILITY_DAYS = 30.0
DEFAULT_ARCHIVE_THRESHOLD = 0.1


def retention(days: npt.ArrayLike, stability: npt.ArrayLike) -> FloatArray:
    """exp(-days / stability), element-wise, in [0, 1].

    days: time since the reference event in days; negative values (clock skew) count as 0.
    stability: e-folding time in days; a non-positive stability means no memory at all (retention 0).
    """
    d = np.maximum(np.asarray(days, dtype=np.float64), 0.0)
    s = np.asarray(stability, dtype=np.float64)
    d, s = np.broadcast_arrays(d, s)
    out = np.zeros(d.shape, dtype=np.float64)
    positive = s > 0
    # A vanishing stability overflows the ratio to inf, and exp(-inf) = 0 is the intended limit.
    with np.errstate(over="ignore"):
        out[positive] = np.exp(-d[positive] / s[positive])
    return out


def days_since_reference(
    now_ts: float,
    last_accessed_ts: npt.ArrayLike,
    event_ts: npt.ArrayLike,
    created_ts: npt.ArrayLike,
) -> FloatArray:
    """Days from each memory's reference time to `now_ts` (all epoch seconds; NaN marks a missing time).

    Reference = last access if known, else event time if known, else creation time. Future reference
    times give 0 days. A memory with none of the three gives NaN, which `decay_plan` treats as 0 days.
    """
    last = np.asarray(last_accessed_ts, dtype=np.float64)
    event = np.asarray(event_ts, dtype=np.float64)
    created = np.asarray(created_ts, dtype=np.float64)
    ref = np.where(np.isfinite(last), last, np.where(np.isfinite(event), event, created))
    return np.maximum((now_ts - ref) / SECONDS_PER_DAY, 0.0)


@dataclass(frozen=True, slots=True, eq=False)
class DecayPlan:
    """Outcome of one decay pass, aligned arrays (one entry per planned memory).

    indices: positions of the memories in the caller's workspace arrays.
    days, stability: the inputs actually used (missing values already defaulted).
    retention: new retention in [0, 1]. archive: retention < archive_threshold.
    """

    indices: IntArray
    days: FloatArray
    stability: FloatArray
    retention: FloatArray
    archive: BoolArray
    archive_threshold: float

    @property
    def archived_indices(self) -> IntArray:
        """Workspace positions of the memories to archive."""
        return self.indices[self.archive]

    def reason(self, k: int) -> str:
        """Audit sentence for entry `k` (a position in this plan, not a workspace index)."""
        head = f"retention exp(-{self.days[k]:.2f}d/{self.stability[k]:.2f}d) = {self.retention[k]:.6f}"
        if self.archive[k]:
            return f"{head} < {self.archive_threshold:g}: archived"
        return f"{head} >= {self.archive_threshold:g}: kept"


def decay_plan(
    indices: npt.ArrayLike,
    days_ago: npt.ArrayLike,
    stability: npt.ArrayLike,
    archive_threshold: float = DEFAULT_ARCHIVE_THRESHOLD,
    *,
    default_stability: float = DEFAULT_STABILITY_DAYS,
) -> DecayPlan:
    """Plan the decay of the memories at `indices`.

    days_ago: days since each memory's reference time (see `days_since_reference`); NaN counts as 0.
    stability: per-memory stability in days; missing (NaN) or non-positive values use
    `default_stability`, so one bad metadata value cannot archive a memory outright.
    Archive when retention < archive_threshold: (ran) 69 d at 30 d stability -> 0.100259 kept,
    70 d -> 0.096972 archived.
    """
    if default_stability <= 0:
        raise ValueError("default_stability must be positive")
    idx = np.asarray(indices, dtype=np.intp).ravel()
    days = np.asarray(days_ago, dtype=np.float64).ravel()
    stab = np.asarray(stability, dtype=np.float64).ravel()
    if stab.size == 1 and idx.size != 1:
        stab = np.full(idx.shape, stab.item(), dtype=np.float64)
    if not idx.shape == days.shape == stab.shape:
        raise ValueError("indices, days_ago and stability must have the same length")
    days = np.where(np.isfinite(days), np.maximum(days, 0.0), 0.0)
    stab = np.where(np.isfinite(stab) & (stab > 0), stab, default_stability)
    ret = retention(days, stab)
    return DecayPlan(
        indices=idx,
        days=days,
        stability=stab,
        retention=ret,
        archive=ret < archive_threshold,
        archive_threshold=float(archive_threshold),
    )
