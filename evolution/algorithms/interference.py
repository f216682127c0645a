"""Interference between similar memories, the InterferenceBased evolver's arithmetic.

Two memories whose embeddings have cosine >= 0.85 and that are among each other's top-5 neighbours
compete: both scores are multiplied by (1 - cosine * 0.05). Each unordered pair counts once; a memory in
several pairs is penalised once per pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

DEFAULT_THRESHOLD = 0.85
DEFAULT_TOP_K = 5
DEFAULT_WEIGHT = 0.05
# One block of similarities (candidates x all rows, float32) stays under this size, whatever `chunk` says.
# 32 MB is glibc's largest mmap threshold: a freed block up to that size can go back to the heap for the
# next one to reuse, where a 256 MB block was a fresh mapping each time, paying a page fault per 4 KB
# (80k x 256 matrix, 3,246 candidates, 3 runs each: 1.38-1.47 s against 1.52-1.85 s; 8 MB: 2.9 s).
MAX_BLOCK_BYTES = 32 * 1024 * 1024


class InterferencePairs(NamedTuple):
    """Unordered similar pairs, i < j, sorted by (i, j); sims are cosines in [-1, 1] (float64)."""

    i: IntArray
    j: IntArray
    sims: FloatArray


def _empty_pairs() -> InterferencePairs:
    return InterferencePairs(np.empty(0, np.intp), np.empty(0, np.intp), np.empty(0, np.float64))


def interference_pairs(
    matrix: npt.ArrayLike,
    candidate_rows: npt.ArrayLike,
    *,
    top_k: int = DEFAULT_TOP_K,
    threshold: float = DEFAULT_THRESHOLD,
    chunk: int = 2048,
) -> InterferencePairs:
    """Pairs (candidate, neighbour) with cosine >= threshold among each candidate's top_k neighbours.

    matrix: (n, d) L2-normalised embeddings (float32 is used as is; other dtypes are converted).
    candidate_rows: rows whose neighbourhoods are searched (the new or changed memories); duplicates ignored.
    Neighbours come from the whole matrix, excluding the row itself and zero (or non-finite) vectors.

    Blocked matrix multiply: at most `chunk` candidates per block, fewer when n is large so that a block
    stays under MAX_BLOCK_BYTES. Within a block only entries >= threshold are kept before ranking; every
    such entry beats every entry below the threshold, so the top_k of the survivors (ties to the lower row
    index) are exactly the qualifying members of the top_k neighbours, without a partition of the whole
    (block x n) array. Each unordered pair is returned once, with i < j.
    """
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    if chunk < 1:
        raise ValueError("chunk must be at least 1")
    if not np.isfinite(threshold):
        raise ValueError("threshold must be finite")
    m = np.asarray(matrix, dtype=np.float32)
    if m.ndim != 2:
        raise ValueError("matrix must be 2-dimensional (n, d)")
    n = m.shape[0]
    cand = np.unique(np.asarray(candidate_rows, dtype=np.intp).ravel())
    if cand.size and (cand[0] < 0 or cand[-1] >= n):
        raise ValueError("candidate_rows out of range")
    if n == 0 or cand.size == 0:
        return _empty_pairs()
    sq_norm = np.einsum("ij,ij->i", m, m)
    usable = np.isfinite(sq_norm) & (sq_norm > 0)
    unusable_cols = np.flatnonzero(~usable)
    cand = cand[usable[cand]]
    rows_per_block = max(1, min(chunk, MAX_BLOCK_BYTES // (4 * n)))
    found_i: list[IntArray] = []
    found_j: list[IntArray] = []
    found_s: list[npt.NDArray[np.float32]] = []
    for start in range(0, cand.size, rows_per_block):
        rows = cand[start : start + rows_per_block]
        block = m[rows] @ m.T
        block[np.arange(rows.size), rows] = -np.inf
        if unusable_cols.size:
            block[:, unusable_cols] = -np.inf
        # flatnonzero + divmod is several times faster than 2-D np.nonzero on a mostly-False mask.
        r, c = np.divmod(np.flatnonzero(block.ravel() >= threshold), n)
        if r.size == 0:
            continue
        v = block[r, c]
        order = np.lexsort((c, -v, r))
        r, c, v = r[order], c[order], v[order]
        rank_in_row = np.arange(r.size) - np.searchsorted(r, r, side="left")
        keep = rank_in_row < top_k
        found_i.append(rows[r[keep]])
        found_j.append(c[keep].astype(np.intp))
        found_s.append(v[keep])
    if not found_i:
        return _empty_pairs()
    a = np.concatenate(found_i)
    b = np.concatenate(found_j)
    s = np.clip(np.concatenate(found_s).astype(np.float64), -1.0, 1.0)
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo.astype(np.int64) * n + hi
    # A pair found from both ends keeps its larger cosine (the two products can differ in the last bit).
    order = np.lexsort((-s, key))
    key, lo, hi, s = key[order], lo[order], hi[order], s[order]
    first = np.ones(key.size, dtype=bool)
    first[1:] = key[1:] != key[:-1]
    return InterferencePairs(lo[first], hi[first], s[first])


@dataclass(frozen=True, slots=True, eq=False)
class InterferenceResult:
    """Scores after interference.

    scores: the full new score array (same length as the input).
    indices: positions whose score was penalised (sorted); old/new/factor/pair_count align with them.
    pairs: the pairs applied (for naming partners in audit records).
    """

    scores: FloatArray
    indices: IntArray
    old: FloatArray
    new: FloatArray
    factor: FloatArray
    pair_count: IntArray
    pairs: InterferencePairs
    weight: float

    def partners(self, index: int) -> tuple[IntArray, FloatArray]:
        """Workspace positions paired with `index` and the cosines of those pairs."""
        p = self.pairs
        at_i = p.i == index
        at_j = p.j == index
        return np.concatenate([p.j[at_i], p.i[at_j]]), np.concatenate([p.sims[at_i], p.sims[at_j]])

    def reason(self, k: int, ids: Sequence[str] | None = None) -> str:
        """Audit sentence for entry `k` of `indices`; `ids` maps workspace positions to memory ids."""
        index = int(self.indices[k])
        others, sims = self.partners(index)
        names = [ids[int(o)] if ids is not None else str(int(o)) for o in others]
        listed = ", ".join(f"{name} (cos {sim:.4f})" for name, sim in zip(names, sims, strict=True))
        return (
            f"interference with {int(self.pair_count[k])} similar memories [{listed}]: "
            f"score {self.old[k]:.6f} x {self.factor[k]:.6f} = {self.new[k]:.6f}"
        )


def apply_interference(
    scores: npt.ArrayLike,
    pairs_i: npt.ArrayLike,
    pairs_j: npt.ArrayLike,
    sims: npt.ArrayLike,
    weight: float = DEFAULT_WEIGHT,
) -> InterferenceResult:
    """score *= (1 - sim * weight) at both ends of every pair, once per pair a memory belongs to.

    Cosines are clipped to [0, 1] and weight must be in [0, 1], so a score never increases and never
    goes negative. Pairs with i == j are ignored. Scores are float64; the input array is not modified.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError("weight must be in [0, 1]")
    old_all = np.asarray(scores, dtype=np.float64)
    pi = np.asarray(pairs_i, dtype=np.intp).ravel()
    pj = np.asarray(pairs_j, dtype=np.intp).ravel()
    ps = np.asarray(sims, dtype=np.float64).ravel()
    if not pi.shape == pj.shape == ps.shape:
        raise ValueError("pairs_i, pairs_j and sims must have the same length")
    distinct = pi != pj
    pi, pj, ps = pi[distinct], pj[distinct], ps[distinct]
    n = old_all.shape[0]
    if pi.size and (min(pi.min(), pj.min()) < 0 or max(pi.max(), pj.max()) >= n):
        raise ValueError("pair index out of range")
    f = 1.0 - np.clip(ps, 0.0, 1.0) * weight
    nodes = np.concatenate([pi, pj])
    factor = np.ones(n, dtype=np.float64)
    np.multiply.at(factor, nodes, np.concatenate([f, f]))
    counts = np.bincount(nodes, minlength=n)
    new_all = old_all * factor
    touched = np.flatnonzero(counts)
    return InterferenceResult(
        scores=new_all,
        indices=touched,
        old=old_all[touched],
        new=new_all[touched],
        factor=factor[touched],
        pair_count=counts[touched].astype(np.intp),
        pairs=InterferencePairs(pi, pj, ps),
        weight=float(weight),
    )
