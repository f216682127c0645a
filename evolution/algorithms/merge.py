"""Near-duplicate groups for merge proposals: which memories say the same thing, and which one to keep.

Two memories of the same type are duplicates when their embeddings have cosine >= threshold (0.95 by
default) or their normalised contents are identical (``engine.lesson_key``: NFKC, case-folded, punctuation
and runs of whitespace collapsed). Groups are the connected components of that relation; the kept memory of
a group is the best ranked one (lowest origin tier: a person's words over an evolver's over the engine's;
then higher confidence, more accesses, older, lower position), and a group keeps only the members that are
direct duplicates of it (cosine to the kept one >= threshold, or the same content), so a chain of
near-duplicates never merges two memories that are not alike themselves.

A memory written by a person (origin tier 1) is never merged into a memory with another origin: that
member leaves the group and stays as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from evolution.algorithms.engine import lesson_key
from evolution.algorithms.interference import interference_pairs

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

DEFAULT_THRESHOLD = 0.95
# Neighbours per memory searched for duplicates: a memory with more near-identical copies than this still
# joins them through the copies' own neighbourhoods (connected components).
DEFAULT_TOP_K = 20
PERSON_TIER = 1


@dataclass(frozen=True, slots=True)
class MergeCandidates:
    """Active, unpinned memories of a workspace, aligned by position.

    vectors: (n, d) embeddings (any scale; rows are normalised here). type_codes: equal codes = same memory
    type. origin_tier: 1 person, 2 evolver, 3 engine. origins: the origin strings (compared for tier 1).
    confidence, access_count, created_ts (epoch seconds): the ranking of the kept memory.
    """

    vectors: npt.NDArray[np.floating]
    type_codes: IntArray
    contents: Sequence[str]
    origin_tier: IntArray
    origins: Sequence[str]
    confidence: FloatArray
    access_count: IntArray
    created_ts: FloatArray


@dataclass(frozen=True, slots=True)
class MergeGroup:
    """One group: `keep` and the `merged` positions, with each merged one's cosine to `keep` and whether its
    normalised content is identical to the kept one's."""

    keep: int
    merged: tuple[int, ...]
    cosine: tuple[float, ...]
    same_content: tuple[bool, ...]

    @property
    def members(self) -> tuple[int, ...]:
        return (self.keep, *self.merged)


def unit_rows(vectors: npt.ArrayLike) -> npt.NDArray[np.float32]:
    """Rows scaled to length 1 (float32); zero or non-finite rows become zero rows (never similar)."""
    v = np.asarray(vectors, dtype=np.float32)
    if v.ndim != 2:
        raise ValueError("vectors must be 2-dimensional (n, d)")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    ok = np.isfinite(norms) & (norms > 0)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=ok)
    return out


def content_codes(contents: Sequence[str]) -> IntArray:
    """An integer per row, equal for equal normalised contents; -1 for contents that normalise to nothing."""
    keys = [lesson_key(c) for c in contents]
    _, inverse = np.unique(np.asarray(keys, dtype=object), return_inverse=True)
    codes = np.asarray(inverse, dtype=np.intp).ravel()
    empty = np.fromiter((not k for k in keys), dtype=bool, count=len(keys))
    codes[empty] = -1
    return codes


def _rank_order(c: MergeCandidates) -> IntArray:
    """Positions best first: origin tier asc, confidence desc, access count desc, created asc, position asc."""
    n = len(c.type_codes)
    return np.lexsort(
        (
            np.arange(n),
            np.asarray(c.created_ts, dtype=np.float64),
            -np.asarray(c.access_count, dtype=np.int64),
            -np.asarray(c.confidence, dtype=np.float64),
            np.asarray(c.origin_tier, dtype=np.int64),
        )
    ).astype(np.intp)


def duplicate_groups(
    c: MergeCandidates, *, threshold: float = DEFAULT_THRESHOLD, top_k: int = DEFAULT_TOP_K
) -> list[MergeGroup]:
    """Groups of >= 2 duplicates (see the module doc), ordered by their kept memory's position."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError("threshold must be in (0, 1]")
    types = np.asarray(c.type_codes, dtype=np.intp)
    n = types.size
    if n < 2:
        return []
    unit = unit_rows(c.vectors)
    if unit.shape[0] != n:
        raise ValueError("vectors and type_codes must have the same length")
    codes = content_codes(c.contents)
    src: list[IntArray] = []
    dst: list[IntArray] = []
    for t in np.unique(types):
        rows = np.flatnonzero(types == t)
        if rows.size < 2:
            continue
        pairs = interference_pairs(unit[rows], np.arange(rows.size), top_k=top_k, threshold=threshold)
        src.append(rows[pairs.i])
        dst.append(rows[pairs.j])
    # Identical contents of one type: link every row to the first row with the same (type, content).
    has = np.flatnonzero(codes >= 0)
    if has.size:
        slot = types[has].astype(np.int64) * (int(codes.max()) + 1) + codes[has]
        _, first, inverse = np.unique(slot, return_index=True, return_inverse=True)
        src.append(has)
        dst.append(has[first[np.asarray(inverse).ravel()]])
    if not src:
        return []
    a = np.concatenate(src)
    b = np.concatenate(dst)
    graph = coo_matrix((np.ones(a.size, dtype=np.int8), (a, b)), shape=(n, n))
    n_comp, labels = connected_components(graph, directed=False)
    sizes = np.bincount(labels, minlength=n_comp)
    order = _rank_order(c)
    tiers = np.asarray(c.origin_tier, dtype=np.int64)
    rank = np.empty(n, dtype=np.intp)
    rank[order] = np.arange(n)
    by_comp = np.argsort(labels, kind="stable")
    starts = np.searchsorted(labels[by_comp], np.arange(n_comp + 1))
    groups: list[MergeGroup] = []
    seen = np.zeros(n_comp, dtype=bool)
    # Walking positions best first, the first member met of a component is its kept memory.
    for keep in order[sizes[labels[order]] >= 2].tolist():
        comp = labels[keep]
        if seen[comp]:
            continue
        seen[comp] = True
        others = by_comp[starts[comp] : starts[comp + 1]]
        others = others[others != keep]
        cos = np.clip(unit[others] @ unit[keep], -1.0, 1.0).astype(np.float64)
        same = (codes[others] == codes[keep]) & (codes[keep] >= 0)
        alike = (cos >= threshold) | same
        foreign_person = (tiers[others] == PERSON_TIER) & np.fromiter(
            (c.origins[k] != c.origins[keep] for k in others.tolist()), dtype=bool, count=others.size
        )
        chosen = alike & ~foreign_person
        if not chosen.any():
            continue
        # Merged members best first, as a person would read them.
        idx = np.flatnonzero(chosen)
        idx = idx[np.argsort(rank[others[idx]], kind="stable")]
        groups.append(
            MergeGroup(
                keep=int(keep),
                merged=tuple(int(k) for k in others[idx]),
                cosine=tuple(round(float(x), 6) for x in cos[idx]),
                same_content=tuple(bool(x) for x in same[idx]),
            )
        )
    groups.sort(key=lambda g: g.keep)
    return groups


def merged_tags(keep_tags: Sequence[str], other_tags: Sequence[Sequence[str]], limit: int) -> list[str]:
    """The kept memory's tags, then every new tag of the merged ones in order, without repeats, at most
    `limit`."""
    out = list(dict.fromkeys(keep_tags))
    seen = set(out)
    for tags in other_tags:
        for tag in tags:
            if tag not in seen:
                seen.add(tag)
                out.append(tag)
    return out[:limit] if len(out) > limit else out
