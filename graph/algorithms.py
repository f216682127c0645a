"""Compressed sparse row (CSR) snapshot of a workspace's memory graph.

Nodes are dense indices ``0..n_nodes-1`` (the selector keeps the index <-> memory id map). Edges are
directed ``src -> dst`` with a non-negative weight and an edge-type code (``EDGE_TYPES``). The snapshot
holds both the out-adjacency (``indptr/indices/...``) and the in-adjacency (``rev_*``), so walks that
ignore direction read two contiguous slices instead of scanning the edge list.

Within every row, neighbours are ordered by weight descending, then neighbour index ascending, then edge
type. That order lets ``top_neighbours`` take the heaviest ``k`` neighbours of a node by reading a short
prefix of its rows instead of the whole row, which keeps bounded graph walks independent of hub degree and
graph size; being total, it also makes the arrays independent of the order edges arrived in, so
``merge_csr`` (new edges into an existing snapshot) gives exactly what a rebuild would.

Parallel edges are kept as separate entries; algorithms that sum over edges (PPR) therefore treat them
additively, like a multigraph.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = [
    "EDGE_TYPES",
    "OTHER_EDGE_CODE",
    "SPREAD_EDGE_CODES",
    "SPREAD_EDGE_TYPES",
    "CSRGraph",
    "ManyNeighbours",
    "Neighbours",
    "build_csr",
    "edge_type_code",
    "edge_type_codes",
    "edge_type_mask",
    "edge_type_name",
    "merge_csr",
    "top_neighbours",
    "top_neighbours_many",
]

EDGE_TYPES: tuple[str, ...] = (
    "RELATED",
    "RELATES_TO",
    "CO_RETRIEVED",
    "ANSWERED_BY",
    "PART_OF",
    "MENTIONS",
    "MENTIONED_IN",
    "LINKS_TO",
    "DERIVED_FROM",
    "FOLLOWS",
    "CONTRADICTS",
    "SUPERSEDES",
    "SUMMARIZES",
    "RESOLVES",
    "OTHER",
)
"""Edge-type registry; a type's int8 code is its position. Append only: codes are stable."""

_CODE_BY_NAME = {name: code for code, name in enumerate(EDGE_TYPES)}
OTHER_EDGE_CODE = _CODE_BY_NAME["OTHER"]

SPREAD_EDGE_TYPES: frozenset[str] = frozenset(
    {
        "RELATED",
        "RELATES_TO",
        "CO_RETRIEVED",
        "ANSWERED_BY",
        "PART_OF",
        "MENTIONS",
        "MENTIONED_IN",
        "LINKS_TO",
        "DERIVED_FROM",
    }
)
"""Edge types spreading activation follows by default. FOLLOWS (conversation order) is left
out: a chain of turns is adjacency in time, not in meaning."""

IntArray = npt.NDArray[np.int64]


def edge_type_code(name: str) -> int:
    """Code of edge type ``name`` (case-insensitive); unknown names map to OTHER."""
    return _CODE_BY_NAME.get(name.strip().upper(), OTHER_EDGE_CODE)


def edge_type_codes(names: Iterable[str]) -> npt.NDArray[np.int8]:
    """Vector of ``edge_type_code`` for each name (the selector's edge-type column)."""
    return np.fromiter((edge_type_code(n) for n in names), dtype=np.int8)


def edge_type_name(code: int) -> str:
    """Name of edge-type ``code``; out-of-range codes read as OTHER."""
    return EDGE_TYPES[code] if 0 <= code < len(EDGE_TYPES) else "OTHER"


SPREAD_EDGE_CODES: frozenset[int] = frozenset(edge_type_code(n) for n in SPREAD_EDGE_TYPES)


def edge_type_mask(codes: Iterable[int]) -> npt.NDArray[np.bool_]:
    """Boolean lookup table over all codes, True for ``codes``; ``mask[edge_types]`` filters edges."""
    mask = np.zeros(len(EDGE_TYPES), dtype=np.bool_)
    for code in codes:
        if not 0 <= code < len(EDGE_TYPES):
            raise ValueError(f"unknown edge-type code {code}")
        mask[code] = True
    return mask


@dataclass(frozen=True, eq=False)
class CSRGraph:
    """Immutable directed graph in CSR form with its reverse. Build it with ``build_csr``.

    Row ``u`` of the out-adjacency is ``indices[indptr[u]:indptr[u+1]]`` (targets of ``u``'s edges) with
    aligned ``weights`` and ``edge_types``; row ``v`` of the in-adjacency lists the sources of edges into
    ``v``. ``out_strength[u]`` / ``in_strength[v]`` are the summed weights of those rows (float64).
    """

    n_nodes: int
    indptr: npt.NDArray[np.int64]
    indices: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    edge_types: npt.NDArray[np.int8]
    rev_indptr: npt.NDArray[np.int64]
    rev_indices: npt.NDArray[np.int32]
    rev_weights: npt.NDArray[np.float32]
    rev_edge_types: npt.NDArray[np.int8]
    out_strength: npt.NDArray[np.float64]
    in_strength: npt.NDArray[np.float64]

    @property
    def n_edges(self) -> int:
        return int(self.indices.shape[0])

    def out_degree(self) -> IntArray:
        """Number of out-edges of every node (parallel edges counted)."""
        return np.diff(self.indptr)

    def in_degree(self) -> IntArray:
        """Number of in-edges of every node (parallel edges counted)."""
        return np.diff(self.rev_indptr)


_A = TypeVar("_A", bound="np.ndarray[Any, Any]")


def _readonly(array: _A) -> _A:
    array.flags.writeable = False
    return array


N_TYPE_SLOTS = 16
"""Edge-type codes fit in four bits (``len(EDGE_TYPES) <= 16``); merge keys pack them below the column."""


def _row_order(
    rows: IntArray, cols: IntArray, weight_rank: IntArray, types: IntArray, n_nodes: int, n_ranks: int
) -> IntArray:
    """Permutation sorting edges by (row, weight descending, col, edge type).

    ``weight_rank`` is 0 for the heaviest distinct weight. The edge type as the last key makes the order
    total over distinct edges (the database holds one edge per (source, target, type)), so the CSR does
    not depend on the order the edges arrived in: a rebuild and an incremental merge (``merge_csr``)
    give identical arrays. One argsort of a packed int64 key is about three times faster than
    ``np.lexsort`` on four keys; the packed key is used when it cannot overflow.
    """
    if n_nodes * n_ranks * n_nodes * N_TYPE_SLOTS < 2**63:
        key = ((rows * n_ranks + weight_rank) * n_nodes + cols) * N_TYPE_SLOTS + types
        return np.argsort(key)
    return np.lexsort((types, cols, weight_rank, rows))


def _indptr(rows: IntArray, n_nodes: int) -> npt.NDArray[np.int64]:
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_nodes), out=indptr[1:])
    return indptr


def _check_edges(n_nodes: int, s: IntArray, d: IntArray, w: npt.NDArray[np.float32], t: npt.NDArray[Any]) -> None:
    m = s.shape[0]
    if not d.shape[0] == w.shape[0] == t.shape[0] == m:
        raise ValueError(f"edge arrays differ in length: {m}, {d.shape[0]}, {w.shape[0]}, {t.shape[0]}")
    if m:
        if min(int(s.min()), int(d.min())) < 0 or max(int(s.max()), int(d.max())) >= n_nodes:
            raise ValueError(f"edge endpoints must be node indices in [0, {n_nodes})")
        if not np.all(np.isfinite(w)) or float(w.min()) < 0.0:
            raise ValueError("edge weights must be finite and >= 0")
        if int(t.min()) < 0 or int(t.max()) >= len(EDGE_TYPES):
            raise ValueError(f"edge-type codes must be in [0, {len(EDGE_TYPES)})")


def _edge_arrays(
    src: npt.ArrayLike, dst: npt.ArrayLike, weights: npt.ArrayLike, edge_types: npt.ArrayLike
) -> tuple[IntArray, IntArray, npt.NDArray[np.float32], npt.NDArray[Any]]:
    return (
        np.asarray(src, dtype=np.int64).ravel(),
        np.asarray(dst, dtype=np.int64).ravel(),
        np.asarray(weights, dtype=np.float32).ravel(),
        np.asarray(edge_types).ravel(),
    )


def _strength(sorted_rows: IntArray, sorted_weights: npt.NDArray[np.float32], n_nodes: int) -> npt.NDArray[np.float64]:
    # Summed in CSR order, so every build of the same edges gives the same bits whatever their input order.
    return np.bincount(sorted_rows, weights=sorted_weights.astype(np.float64), minlength=n_nodes).astype(np.float64)


def _assemble(
    n_nodes: int,
    fwd: tuple[IntArray, IntArray, npt.NDArray[np.float32], npt.NDArray[np.int8]],
    rev: tuple[IntArray, IntArray, npt.NDArray[np.float32], npt.NDArray[np.int8]],
) -> CSRGraph:
    """The graph from both adjacencies, each given as (rows, cols, weights, types) already in row order."""
    rows, cols, w, t = fwd
    rev_rows, rev_cols, rev_w, rev_t = rev
    return CSRGraph(
        n_nodes=n_nodes,
        indptr=_readonly(_indptr(rows, n_nodes)),
        indices=_readonly(cols.astype(np.int32)),
        weights=_readonly(w.astype(np.float32, copy=False)),
        edge_types=_readonly(t.astype(np.int8, copy=False)),
        rev_indptr=_readonly(_indptr(rev_rows, n_nodes)),
        rev_indices=_readonly(rev_cols.astype(np.int32)),
        rev_weights=_readonly(rev_w.astype(np.float32, copy=False)),
        rev_edge_types=_readonly(rev_t.astype(np.int8, copy=False)),
        out_strength=_readonly(_strength(rows, w, n_nodes)),
        in_strength=_readonly(_strength(rev_rows, rev_w, n_nodes)),
    )


def build_csr(
    n_nodes: int,
    src: npt.ArrayLike,
    dst: npt.ArrayLike,
    weights: npt.ArrayLike,
    edge_types: npt.ArrayLike,
) -> CSRGraph:
    """Build the out- and in-adjacency of ``n_nodes`` nodes from aligned edge arrays (vectorised).

    ``src``/``dst`` are node indices in ``[0, n_nodes)``, ``weights`` finite and >= 0 (stored float32),
    ``edge_types`` codes from ``EDGE_TYPES``. Rows are ordered by (weight descending, neighbour, type),
    a total order, so the result does not depend on the order of the input edges. Cost: two argsorts
    of the edge list, O(m log m).
    """
    if not 0 <= n_nodes < 2**31:
        raise ValueError(f"n_nodes must be in [0, 2**31), got {n_nodes}")
    s, d, w, t = _edge_arrays(src, dst, weights, edge_types)
    _check_edges(n_nodes, s, d, w, t)
    m = s.shape[0]
    t64 = t.astype(np.int64)
    # Rank distinct weights, heaviest first, so the sort key stays integral (exact, no float ties issues).
    if m == 0 or float(w.min()) == float(w.max()):
        # Uniform weights (the common default of 1.0) need no ranking pass.
        n_ranks, weight_rank = 1, np.zeros(m, dtype=np.int64)
    else:
        distinct, inverse = np.unique(w, return_inverse=True)
        n_ranks = int(distinct.shape[0])
        weight_rank = (n_ranks - 1 - inverse.ravel()).astype(np.int64)

    fwd = _row_order(s, d, weight_rank, t64, n_nodes, n_ranks)
    rev = _row_order(d, s, weight_rank, t64, n_nodes, n_ranks)
    t8 = t.astype(np.int8)
    return _assemble(n_nodes, (s[fwd], d[fwd], w[fwd], t8[fwd]), (d[rev], s[rev], w[rev], t8[rev]))


def _weight_key(w: npt.NDArray[np.float32]) -> IntArray:
    """A key ordering weights heaviest first: 2**32 - 1 minus the IEEE-754 bits, which for floats >= 0
    grow with the value (adding +0.0 turns -0.0 into +0.0 first, as the value comparison treats them)."""
    bits = (w.astype(np.float32) + np.float32(0.0)).view(np.uint32).astype(np.int64)
    return np.int64(2**32 - 1) - bits


def _concatenated_ranges(starts: IntArray, lengths: IntArray) -> IntArray:
    """``concatenate([arange(a, a + n) for a, n in zip(starts, lengths)])`` without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64)
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def _merge_direction(
    old: tuple[IntArray, npt.NDArray[np.int32], npt.NDArray[np.float32], npt.NDArray[np.int8], npt.NDArray[np.float64]],
    mapping: IntArray,
    identity: bool,
    n_nodes: int,
    new: tuple[IntArray, IntArray, npt.NDArray[np.float32], npt.NDArray[np.int8]],
) -> tuple[IntArray, npt.NDArray[np.int32], npt.NDArray[np.float32], npt.NDArray[np.int8], npt.NDArray[np.float64]]:
    """One adjacency (out or in) of ``merge_csr``: (indptr, cols, weights, types, strength) after the merge.

    Renumbering keeps the old entries in order and in place, so only the new entries need positions: a
    binary search inside each one's row, on (weight key, col, type), run for all of them at once
    (O(k log d) for k new entries in rows of degree d). The arrays are then copied once with the new
    entries inserted. Strengths of rows without new entries carry over; the rows that got entries are
    summed again in row order, as ``build_csr`` sums them, so the bits match a rebuild.
    """
    indptr, cols, weights, types, strength = old
    rows_new, cols_new, w_new, t_new = new
    kept = mapping >= 0
    deg = np.diff(indptr)
    counts = np.zeros(n_nodes, dtype=np.int64)
    counts[mapping[kept]] = deg[kept]
    old_ptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=old_ptr[1:])
    old_cols = cols if identity else mapping.astype(np.int32)[cols]
    wkey_new = _weight_key(w_new)
    order = np.lexsort((t_new, cols_new, wkey_new, rows_new))
    rows_new, cols_new, w_new, t_new, wkey_new = (
        rows_new[order],
        cols_new[order],
        w_new[order],
        t_new[order],
        wkey_new[order],
    )
    lo, hi = old_ptr[rows_new], old_ptr[rows_new + 1]
    while True:
        active = np.flatnonzero(lo < hi)
        if active.size == 0:
            break
        mid = (lo[active] + hi[active]) // 2
        mid_w, new_w = _weight_key(weights[mid]), wkey_new[active]
        mid_c, new_c = old_cols[mid].astype(np.int64), cols_new[active]
        before = (mid_w < new_w) | (
            (mid_w == new_w) & ((mid_c < new_c) | ((mid_c == new_c) & (types[mid] < t_new[active])))
        )
        lo[active] = np.where(before, mid + 1, lo[active])
        hi[active] = np.where(before, hi[active], mid)
    # np.insert places values sharing an insertion point in the order given: the sorted order above.
    merged_cols = np.insert(old_cols, lo, cols_new.astype(np.int32))
    merged_w = np.insert(weights, lo, w_new)
    merged_t = np.insert(types, lo, t_new)
    counts += np.bincount(rows_new, minlength=n_nodes)
    merged_ptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(counts, out=merged_ptr[1:])
    merged_strength = np.zeros(n_nodes, dtype=np.float64)
    merged_strength[mapping[kept]] = strength[kept]
    touched = np.unique(rows_new)
    lengths = merged_ptr[touched + 1] - merged_ptr[touched]
    entries = _concatenated_ranges(merged_ptr[touched], lengths)
    merged_strength[touched] = np.bincount(
        np.repeat(np.arange(touched.shape[0]), lengths),
        weights=merged_w[entries].astype(np.float64),
        minlength=touched.shape[0],
    )
    return merged_ptr, merged_cols, merged_w, merged_t, merged_strength


def merge_csr(
    graph: CSRGraph,
    node_map: npt.ArrayLike,
    n_nodes: int,
    src: npt.ArrayLike,
    dst: npt.ArrayLike,
    weights: npt.ArrayLike,
    edge_types: npt.ArrayLike,
) -> CSRGraph:
    """``graph`` with its nodes renumbered and new edges added: exactly what ``build_csr`` gives for the
    renumbered old edges plus the new ones (same arrays, strengths equal bit for bit).

    ``node_map[i]`` is the new index of old node ``i`` in ``[0, n_nodes)``, strictly increasing over the
    kept nodes (so renumbering keeps every row in order), or -1 to drop a node, which must have no
    edges. ``src`` .. ``edge_types`` are the new edges in new indices, as for ``build_csr``. Cost: a few
    O(n + m) copies plus O(k log d) searches for k new edges, against the O(m log m) sorts of a rebuild
    (1k edges into 1M: about 30 ms against 300 ms).
    """
    if not 0 <= n_nodes < 2**31:
        raise ValueError(f"n_nodes must be in [0, 2**31), got {n_nodes}")
    mapping = np.asarray(node_map, dtype=np.int64).ravel()
    if mapping.shape[0] != graph.n_nodes:
        raise ValueError(f"node_map has {mapping.shape[0]} entries for {graph.n_nodes} nodes")
    kept = mapping >= 0
    targets = mapping[kept]
    if targets.size and (int(targets.max()) >= n_nodes or not bool(np.all(np.diff(targets) > 0))):
        raise ValueError(f"node_map must increase strictly over kept nodes, within [0, {n_nodes})")
    if bool(np.any((graph.out_degree() + graph.in_degree())[~kept] > 0)):
        raise ValueError("node_map drops a node that has edges")
    s, d, w, t = _edge_arrays(src, dst, weights, edge_types)
    _check_edges(n_nodes, s, d, w, t)
    t8 = t.astype(np.int8)
    identity = n_nodes == graph.n_nodes and bool(kept.all())  # strictly increasing onto [0, n): i -> i
    fwd = _merge_direction(
        (graph.indptr, graph.indices, graph.weights, graph.edge_types, graph.out_strength),
        mapping,
        identity,
        n_nodes,
        (s, d, w, t8),
    )
    rev = _merge_direction(
        (graph.rev_indptr, graph.rev_indices, graph.rev_weights, graph.rev_edge_types, graph.in_strength),
        mapping,
        identity,
        n_nodes,
        (d, s, w, t8),
    )
    return CSRGraph(
        n_nodes=n_nodes,
        indptr=_readonly(fwd[0]),
        indices=_readonly(fwd[1]),
        weights=_readonly(fwd[2]),
        edge_types=_readonly(fwd[3]),
        rev_indptr=_readonly(rev[0]),
        rev_indices=_readonly(rev[1]),
        rev_weights=_readonly(rev[2]),
        rev_edge_types=_readonly(rev[3]),
        out_strength=_readonly(fwd[4]),
        in_strength=_readonly(rev[4]),
    )


class Neighbours(NamedTuple):
    """Distinct neighbours of a node, heaviest edge first (ties: lower node index first)."""

    nodes: IntArray
    weights: npt.NDArray[np.float32]
    edge_types: npt.NDArray[np.int8]


def _empty_neighbours() -> Neighbours:
    return Neighbours(np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int8))


def top_neighbours(
    graph: CSRGraph,
    node: int,
    k: int,
    allowed: npt.NDArray[np.bool_],
    *,
    undirected: bool = True,
) -> Neighbours:
    """The ``k`` heaviest distinct neighbours of ``node`` over edges whose type is allowed.

    ``allowed`` is a mask from ``edge_type_mask``. With ``undirected`` both out- and in-edges count; a
    neighbour joined by several edges appears once, with its heaviest edge. Self-loops are ignored.
    Reads row prefixes of length ``max(2k, 16)``, growing 4x only while filtered-out types or duplicates
    leave fewer than ``k`` candidates that are provably ahead of everything unread.
    """
    if not 0 <= node < graph.n_nodes:
        raise ValueError(f"node {node} is not in [0, {graph.n_nodes})")
    if k <= 0:
        return _empty_neighbours()
    rows = [(graph.indptr, graph.indices, graph.weights, graph.edge_types)]
    if undirected:
        rows.append((graph.rev_indptr, graph.rev_indices, graph.rev_weights, graph.rev_edge_types))
    spans = [(int(ip[node]), int(ip[node + 1])) for ip, _, _, _ in rows]
    chunk = max(2 * k, 16)
    while True:
        nbs: list[npt.NDArray[np.int32]] = []
        ws: list[npt.NDArray[np.float32]] = []
        ts: list[npt.NDArray[np.int8]] = []
        # Smallest (-weight, node) key among the last read entries of rows not read to the end: every
        # unread entry sorts at or after it, so candidates at or before it are final.
        boundary: tuple[float, int] | None = None
        for (_, ind, wts, typ), (a, b) in zip(rows, spans, strict=True):
            end = min(b, a + chunk)
            nb, w, t = ind[a:end], wts[a:end], typ[a:end]
            if end < b:
                last = (-float(w[-1]), int(nb[-1]))
                boundary = last if boundary is None or last < boundary else boundary
            keep = allowed[t] & (nb != node)
            nbs.append(nb[keep])
            ws.append(w[keep])
            ts.append(t[keep])
        nb_all = np.concatenate(nbs).astype(np.int64)
        w_all = np.concatenate(ws)
        t_all = np.concatenate(ts)
        order = np.lexsort((nb_all, -w_all))
        nb_all, w_all, t_all = nb_all[order], w_all[order], t_all[order]
        # First occurrence of each neighbour in this order is its heaviest edge.
        _, first = np.unique(nb_all, return_index=True)
        first.sort()
        nb_all, w_all, t_all = nb_all[first], w_all[first], t_all[first]
        if boundary is not None:
            neg_w, b_node = boundary
            neg = -w_all.astype(np.float64)
            final = (neg < neg_w) | ((neg == neg_w) & (nb_all <= b_node))
            if int(final.sum()) < k:
                chunk *= 4
                continue
        return Neighbours(nb_all[:k], w_all[:k], t_all[:k])


class ManyNeighbours(NamedTuple):
    """``top_neighbours`` of several nodes as flat arrays: entry ``i`` is a neighbour of the query node at
    position ``owner[i]``. Entries are grouped by owner (ascending) and, within a group, ordered as
    ``top_neighbours`` orders them."""

    owner: IntArray
    nodes: IntArray
    weights: npt.NDArray[np.float32]
    edge_types: npt.NDArray[np.int8]


def top_neighbours_many(
    graph: CSRGraph,
    nodes: npt.ArrayLike,
    k: int,
    allowed: npt.NDArray[np.bool_],
    *,
    undirected: bool = True,
) -> ManyNeighbours:
    """``top_neighbours(graph, u, k, allowed)`` for every ``u`` of ``nodes`` at once (vectorised).

    Same answer, entry for entry: the ``k`` heaviest distinct neighbours of each node (ties: lower index),
    each with the type of its first edge in the order out-row before in-row, then row order. Reads the
    same row prefixes (``max(2k, 16)``, growing 4x for the nodes whose prefix cannot yet prove its top
    ``k``), but for all nodes in one pass of array operations instead of one Python call per node.
    """
    queries = np.asarray(nodes, dtype=np.int64).ravel()
    for u in queries[(queries < 0) | (queries >= graph.n_nodes)].tolist()[:1]:
        raise ValueError(f"node {u} is not in [0, {graph.n_nodes})")
    if k <= 0 or queries.size == 0:
        return ManyNeighbours(
            np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), np.empty(0, np.int8)
        )
    rows = [(graph.indptr, graph.indices, graph.weights, graph.edge_types)]
    if undirected:
        rows.append((graph.rev_indptr, graph.rev_indices, graph.rev_weights, graph.rev_edge_types))
    chunk = np.full(queries.shape[0], max(2 * k, 16), dtype=np.int64)
    pending = np.arange(queries.shape[0], dtype=np.int64)
    done: list[tuple[IntArray, IntArray, npt.NDArray[np.float32], npt.NDArray[np.int8]]] = []
    while pending.size:
        q = queries[pending]
        n_q = q.shape[0]
        owner_parts: list[IntArray] = []
        entry_parts: list[IntArray] = []
        direction_parts: list[IntArray] = []
        nb_parts: list[IntArray] = []
        w_parts: list[npt.NDArray[np.float32]] = []
        t_parts: list[npt.NDArray[np.int8]] = []
        # Boundary per query: the smallest (-weight, node) among the last read entries of rows not read
        # to the end; every unread entry sorts at or after it.
        bound_w = np.full(n_q, np.inf)
        bound_nb = np.full(n_q, np.iinfo(np.int64).max, dtype=np.int64)
        for direction, (ip, ind, wts, typ) in enumerate(rows):
            start, stop = ip[q], ip[q + 1]
            end = np.minimum(stop, start + chunk[pending])
            lengths = end - start
            entries = _concatenated_ranges(start, lengths)
            owner_parts.append(np.repeat(np.arange(n_q, dtype=np.int64), lengths))
            entry_parts.append(entries)
            direction_parts.append(np.full(entries.shape[0], direction, dtype=np.int64))
            nb_parts.append(ind[entries].astype(np.int64))
            w_parts.append(wts[entries])
            t_parts.append(typ[entries])
            cut = np.flatnonzero(end < stop)
            last = end[cut] - 1
            last_w, last_nb = -wts[last].astype(np.float64), ind[last].astype(np.int64)
            earlier = (last_w < bound_w[cut]) | ((last_w == bound_w[cut]) & (last_nb < bound_nb[cut]))
            bound_w[cut] = np.where(earlier, last_w, bound_w[cut])
            bound_nb[cut] = np.where(earlier, last_nb, bound_nb[cut])
        owner = np.concatenate(owner_parts)
        nb = np.concatenate(nb_parts)
        w = np.concatenate(w_parts)
        t = np.concatenate(t_parts)
        entry = np.concatenate(entry_parts)
        direction_all = np.concatenate(direction_parts)
        keep = allowed[t] & (nb != q[owner])
        owner, nb, w, t, entry, direction_all = (
            owner[keep],
            nb[keep],
            w[keep],
            t[keep],
            entry[keep],
            direction_all[keep],
        )
        neg = -w.astype(np.float64)
        order = np.lexsort((entry, direction_all, nb, neg, owner))
        owner, nb, w, t, neg = owner[order], nb[order], w[order], t[order], neg[order]
        # First occurrence of each (query, neighbour) in this order is its heaviest edge.
        _, first = np.unique(owner * np.int64(graph.n_nodes) + nb, return_index=True)
        first.sort()
        owner, nb, w, t, neg = owner[first], nb[first], w[first], t[first], neg[first]
        final = (neg < bound_w[owner]) | ((neg == bound_w[owner]) & (nb <= bound_nb[owner]))
        proven = np.bincount(owner[final], minlength=n_q)
        resolved = np.isinf(bound_w) | (proven >= k)
        group_start = np.searchsorted(owner, np.arange(n_q))
        rank = np.arange(owner.shape[0]) - group_start[owner]
        take = resolved[owner] & (rank < k)
        done.append((pending[owner[take]], nb[take], w[take], t[take]))
        unresolved = ~resolved
        chunk[pending[unresolved]] *= 4
        pending = pending[unresolved]
    owners = np.concatenate([d[0] for d in done])
    by_owner = np.argsort(owners, kind="stable")
    return ManyNeighbours(
        owners[by_owner],
        np.concatenate([d[1] for d in done])[by_owner],
        np.concatenate([d[2] for d in done])[by_owner],
        np.concatenate([d[3] for d in done])[by_owner],
    )
