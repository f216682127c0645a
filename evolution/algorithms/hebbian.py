"""Hebbian co-retrieval: memories retrieved together wire together.

Every 2-combination of the memories in one search result set adds to the CO_RETRIEVED count of that
pair. Edges with count >= threshold (3) boost the retention of both ends:
boost = min(max_boost, (count - threshold) * per_unit), new = min(1, retention + boost).

Once-per-node rule: a memory touched by several qualifying edges is boosted once per run, by its
strongest edge (highest count, so also the largest boost; ties go to the lower partner position). Boosts
do not add up across edges, so a hub that co-occurs with everything cannot jump to 1.0 in one run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

DEFAULT_THRESHOLD = 3.0
DEFAULT_PER_UNIT = 0.02
DEFAULT_MAX_BOOST = 0.3


class CoRetrievalCounts(NamedTuple):
    """Unordered pairs (i < j, sorted by (i, j)) and how many times they were retrieved together."""

    i: IntArray
    j: IntArray
    counts: IntArray


def _expand_pairs(
    result_sets: Sequence[Sequence[int]], per_set: Sequence[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """Every 2-combination (i < j) of the distinct members of each set, with its set's `per_set` value
    (a weight, a time); None when no set has two distinct members. Positions must be non-negative."""
    parts_i: list[npt.NDArray[np.int64]] = []
    parts_j: list[npt.NDArray[np.int64]] = []
    parts_v: list[npt.NDArray[np.int64]] = []
    for members, value in zip(result_sets, per_set, strict=True):
        ids = np.unique(np.asarray(members, dtype=np.int64))
        if ids.size < 2:
            continue
        a, b = np.triu_indices(ids.size, k=1)
        parts_i.append(ids[a])
        parts_j.append(ids[b])
        parts_v.append(np.full(a.size, value, dtype=np.int64))
    if not parts_i:
        return None
    i = np.concatenate(parts_i)
    if i.min() < 0:
        raise ValueError("memory positions must be non-negative")
    return i, np.concatenate(parts_j), np.concatenate(parts_v)


def co_retrieval_pairs(
    result_sets: Sequence[Sequence[int]],
    weights: Sequence[int] | None = None,
) -> CoRetrievalCounts:
    """Count every 2-combination of every result set (duplicates inside one set are ignored).

    weights: optional count per result set (a flushed batch of identical searches adds its batch count);
    default 1 each. Sets with fewer than two distinct members contribute nothing.
    """
    if weights is not None and len(weights) != len(result_sets):
        raise ValueError("weights must have one entry per result set")
    per_set = [1] * len(result_sets) if weights is None else [int(w) for w in weights]
    expanded = _expand_pairs(result_sets, per_set)
    if expanded is None:
        empty = np.empty(0, dtype=np.intp)
        return CoRetrievalCounts(empty, empty.copy(), empty.copy())
    i, j, w = expanded
    key = i * (int(j.max()) + 1) + j
    uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    counts = np.bincount(inverse.ravel(), weights=w, minlength=uniq.size).astype(np.intp)
    return CoRetrievalCounts(i[first].astype(np.intp), j[first].astype(np.intp), counts)


class TimedCoRetrievalCounts(NamedTuple):
    """`CoRetrievalCounts` with, per pair, the earliest and latest time of the result sets holding it."""

    i: IntArray
    j: IntArray
    counts: IntArray
    first: npt.NDArray[np.int64]
    last: npt.NDArray[np.int64]


def timed_co_retrieval_pairs(result_sets: Sequence[Sequence[int]], times: Sequence[int]) -> TimedCoRetrievalCounts:
    """`co_retrieval_pairs` (each set counting once) and, from the same expansion of the 2-combinations,
    the smallest and largest of `times` (one integer per set, e.g. epoch microseconds) over the sets that
    contain each pair. Pairs come sorted by (i, j), as from co_retrieval_pairs.
    """
    if len(times) != len(result_sets):
        raise ValueError("times must have one entry per result set")
    expanded = _expand_pairs(result_sets, times)
    if expanded is None:
        empty = np.empty(0, dtype=np.intp)
        never = np.empty(0, dtype=np.int64)
        return TimedCoRetrievalCounts(empty, empty.copy(), empty.copy(), never, never.copy())
    i, j, t = expanded
    key = i * (int(j.max()) + 1) + j
    order = np.lexsort((t, key))
    key, i, j, t = key[order], i[order], j[order], t[order]
    starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    counts = np.diff(np.r_[starts, key.size]).astype(np.intp)
    return TimedCoRetrievalCounts(
        i[starts].astype(np.intp), j[starts].astype(np.intp), counts, t[starts], np.maximum.reduceat(t, starts)
    )


@dataclass(frozen=True, slots=True, eq=False)
class HebbianResult:
    """Retention after Hebbian boosts.

    retention: the full new retention array. indices: boosted positions (sorted); old, new, boost,
    partner (the other end of the edge used) and edge_count align with them.
    """

    retention: FloatArray
    indices: IntArray
    old: FloatArray
    new: FloatArray
    boost: FloatArray
    partner: IntArray
    edge_count: FloatArray
    threshold: float

    def reason(self, k: int, ids: Sequence[str] | None = None) -> str:
        """Audit sentence for entry `k` of `indices`; `ids` maps workspace positions to memory ids."""
        other = int(self.partner[k])
        name = ids[other] if ids is not None else str(other)
        capped = " (capped at 1.0)" if self.new[k] < self.old[k] + self.boost[k] else ""
        return (
            f"co-retrieved with {name} {self.edge_count[k]:g}x (>= {self.threshold:g}): "
            f"retention {self.old[k]:.6f} + {self.boost[k]:.6f} -> {self.new[k]:.6f}{capped}"
        )


def hebbian_boosts(
    edge_i: npt.ArrayLike,
    edge_j: npt.ArrayLike,
    counts: npt.ArrayLike,
    retention: npt.ArrayLike,
    threshold: float = DEFAULT_THRESHOLD,
    per_unit: float = DEFAULT_PER_UNIT,
    max_boost: float = DEFAULT_MAX_BOOST,
    *,
    max_edges: int | None = None,
) -> HebbianResult:
    """Boost both ends of every CO_RETRIEVED edge with count >= threshold, each node once (strongest edge).

    boost = min(max_boost, (count - threshold) * per_unit); new = min(1, retention + boost).
    (ran) count 10 -> +0.14 (0.5 -> 0.64, 0.6 -> 0.74); max_boost 0.1 -> 0.6; 0.95 caps at 1.0; count 2
    -> nothing. max_edges: when set, only the strongest `max_edges` qualifying edges are used (the
    per-cycle edge cap). Self-loops are ignored. Positions whose boost is 0 (count == threshold) are not
    reported. Retention is clamped to [0, 1] before boosting.
    """
    if per_unit < 0 or max_boost < 0:
        raise ValueError("per_unit and max_boost must be >= 0")
    ret = np.clip(np.asarray(retention, dtype=np.float64), 0.0, 1.0)
    ei = np.asarray(edge_i, dtype=np.intp).ravel()
    ej = np.asarray(edge_j, dtype=np.intp).ravel()
    c = np.asarray(counts, dtype=np.float64).ravel()
    if not ei.shape == ej.shape == c.shape:
        raise ValueError("edge_i, edge_j and counts must have the same length")
    n = ret.shape[0]
    if ei.size and (min(ei.min(), ej.min()) < 0 or max(ei.max(), ej.max()) >= n):
        raise ValueError("edge end out of range")
    keep = (c >= threshold) & (ei != ej)
    ei, ej, c = ei[keep], ej[keep], c[keep]
    if max_edges is not None and c.size > max_edges:
        strongest = np.lexsort((ej, ei, -c))[: max(max_edges, 0)]
        ei, ej, c = ei[strongest], ej[strongest], c[strongest]
    node = np.concatenate([ei, ej])
    partner = np.concatenate([ej, ei])
    count = np.concatenate([c, c])
    order = np.lexsort((partner, -count, node))
    node, partner, count = node[order], partner[order], count[order]
    first = np.ones(node.size, dtype=bool)
    first[1:] = node[1:] != node[:-1]
    node, partner, count = node[first], partner[first], count[first]
    boost = np.minimum(max_boost, (count - threshold) * per_unit)
    positive = boost > 0
    node, partner, count, boost = node[positive], partner[positive], count[positive], boost[positive]
    new_all = ret.copy()
    new_all[node] = np.minimum(1.0, ret[node] + boost)
    return HebbianResult(
        retention=new_all,
        indices=node,
        old=ret[node],
        new=new_all[node],
        boost=boost,
        partner=partner,
        edge_count=count,
        threshold=float(threshold),
    )
