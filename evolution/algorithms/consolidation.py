"""Working -> episodic consolidation (EnhancedWorkingToEpisodic): buffer threshold, clustering, summary.

Times are epoch seconds (float); `now` is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evolution.algorithms.text import jaccard_matrix

FloatArray = npt.NDArray[np.float64]

BASE_THRESHOLD = 40
MIN_THRESHOLD = 10
RECENT_SECONDS = 3600.0
CLUSTER_JACCARD = 0.3
CLUSTER_TIME_AFFINITY = 0.5
CLUSTER_TIME_SCALE_SECONDS = 3600.0
EPISODE_WEIGHT_HOURS = 24.0
EPISODE_MIN_WEIGHT = 0.1


@dataclass(frozen=True, slots=True)
class WorkingItem:
    """One working memory: its workspace position, content and creation time (epoch seconds)."""

    index: int
    content: str
    created_at_ts: float


def adaptive_threshold(avg_len: float, frac_recent: float) -> int:
    """Working-buffer size that triggers consolidation.

    max(10, int(40 * (1 - 0.3 * ((min(1.5, avg_len / 100) + frac_recent) / 2))))
    avg_len: mean content length in characters; frac_recent: fraction of items younger than 1 h.
    Longer and fresher buffers consolidate sooner. (ran) 50 chars all recent -> 31; 200 chars recent
    -> 25; 50 chars 2 h old -> 37. The 1e-9 guards int() against a product like 30.999999999999996.
    """
    if not 0.0 <= frac_recent <= 1.0:
        raise ValueError("frac_recent must be in [0, 1]")
    load = (min(1.5, max(avg_len, 0.0) / 100.0) + frac_recent) / 2.0
    return max(MIN_THRESHOLD, math.floor(BASE_THRESHOLD * (1.0 - 0.3 * load) + 1e-9))


def buffer_threshold(items: Sequence[WorkingItem], now: float) -> int:
    """`adaptive_threshold` of a working buffer at time `now` (an empty buffer gives the base 40)."""
    if not items:
        return adaptive_threshold(0.0, 0.0)
    lengths = np.fromiter((len(it.content) for it in items), dtype=np.float64, count=len(items))
    created = np.fromiter((it.created_at_ts for it in items), dtype=np.float64, count=len(items))
    recent = (now - created) < RECENT_SECONDS
    return adaptive_threshold(float(lengths.mean()), float(recent.mean()))


def cluster_working(
    items: Sequence[WorkingItem],
    *,
    min_jaccard: float = CLUSTER_JACCARD,
    min_time_affinity: float = CLUSTER_TIME_AFFINITY,
) -> list[list[int]]:
    """Greedy clusters of working items, as lists of `WorkingItem.index`.

    Items are visited oldest first (ties by index). Each unassigned item seeds a cluster and takes every
    still-unassigned item whose word-set Jaccard with the seed is > min_jaccard (0.3) and whose time
    affinity exp(-|dt| / 3600 s) with the seed is > min_time_affinity (0.5, i.e. |dt| < 41.6 min).
    Comparing with the seed (not with any member) keeps clusters from chaining across the buffer.
    Every item ends in exactly one cluster; singletons are returned too, since the whole buffer is
    being consolidated. Clusters come out in the order of their seeds, members in time order.
    """
    if not items:
        return []
    order = sorted(range(len(items)), key=lambda k: (items[k].created_at_ts, items[k].index))
    ordered = [items[k] for k in order]
    sim = jaccard_matrix([it.content for it in ordered])
    ts = np.fromiter((it.created_at_ts for it in ordered), dtype=np.float64, count=len(ordered))
    time_affinity = np.exp(-np.abs(ts[:, None] - ts[None, :]) / CLUSTER_TIME_SCALE_SECONDS)
    joins = (sim > min_jaccard) & (time_affinity > min_time_affinity)
    unassigned = np.ones(len(ordered), dtype=bool)
    clusters: list[list[int]] = []
    for seed in range(len(ordered)):
        if not unassigned[seed]:
            continue
        members = joins[seed] & unassigned
        members[seed] = True
        unassigned &= ~members
        clusters.append([ordered[k].index for k in np.flatnonzero(members)])
    return clusters


def recency_weights(created_ts: npt.ArrayLike, now: float) -> FloatArray:
    """w = exp(-age_hours / 24), age from `created_ts` (epoch seconds) to `now`, future ages as 0."""
    age_h = np.maximum(now - np.asarray(created_ts, dtype=np.float64), 0.0) / 3600.0
    weights: FloatArray = np.exp(-age_h / EPISODE_WEIGHT_HOURS)
    return weights


def episode_summary(cluster_items: Sequence[WorkingItem], now: float) -> str:
    """Episodic summary of one cluster: lines `[w=%.2f] content`, oldest first, keeping w > 0.1.

    w = exp(-age_hours / 24), so items older than 24 * ln 10 = 55.3 h drop out. Returns "" when no item
    is recent enough (the caller still archives the cluster's sources).
    """
    if not cluster_items:
        return ""
    ordered = sorted(cluster_items, key=lambda it: (it.created_at_ts, it.index))
    weights = recency_weights([it.created_at_ts for it in ordered], now)
    return "\n".join(
        f"[w={w:.2f}] {it.content}" for it, w in zip(ordered, weights, strict=True) if w > EPISODE_MIN_WEIGHT
    )
