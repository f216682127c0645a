"""Compressed sparse row (CSR) snapshot of a workspace's memory graph.

Nodes are dense indices ``0..n_nodes-1`` (the selector keeps the index <-> memory id map). Edges are
directed ``src -> dst`` with a non-negative weight and an edge-type code (``EDGE_TYPES``). The snapshot
holds both the out-adjacency (``indptr/indices/...``) and the in-adjacency (``rev_*``), so walks that
ignore direction read two contiguous slices instead of scanning the edge list.

Within every row, neighbours are ordered by weight descending, then neighbour index ascending. That order
lets ``top_neighbours`` take the heaviest ``k`` neighbours of a node by reading a short prefix of its rows
instead of the whole row, which keeps bounded graph walks independent of hub degree and graph size.

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
    "Neighbours",
    "build_csr",
    "edge_type_code",
    "edge_type_codes",
    "edge_type_mask",
    "edge_type_name",
    "top_neighbours",
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
"""Edge types spreading activation follows by default (seed 001). FOLLOWS (conversation order) is left
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


def _row_order(rows: IntArray, cols: IntArray, weight_rank: IntArray, n_nodes: int, n_ranks: int) -> IntArray:
    """Permutation sorting edges by (row, weight descending, col).

    ``weight_rank`` is 0 for the heaviest distinct weight. One argsort of a packed int64 key is about
    three times faster than ``np.lexsort`` on three keys; the packed key is used when it cannot overflow.
    """
    if n_nodes * n_ranks * n_nodes < 2**63:
        key = (rows * n_ranks + weight_rank) * n_nodes + cols
        return np.argsort(key)
    inner = np.argsort(weight_rank * n_nodes + cols, kind="stable")
    return inner[np.argsort(rows[inner], kind="stable")]


def _indptr(rows: IntArray, n_nodes: int) -> npt.NDArray[np.int64]:
    indptr = np.zeros(n_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n_nodes), out=indptr[1:])
    return indptr


def build_csr(
    n_nodes: int,
    src: npt.ArrayLike,
    dst: npt.ArrayLike,
    weights: npt.ArrayLike,
    edge_types: npt.ArrayLike,
) -> CSRGraph:
    """Build the out- and in-adjacency of ``n_nodes`` nodes from aligned edge arrays (vectorised).

    ``src``/``dst`` are node indices in ``[0, n_nodes)``, ``weights`` finite and >= 0 (stored float32),
    ``edge_types`` codes from ``EDGE_TYPES``. Cost: two argsorts of the edge list, O(m log m).
    """
    if not 0 <= n_nodes < 2**31:
        raise ValueError(f"n_nodes must be in [0, 2**31), got {n_nodes}")
    s = np.asarray(src, dtype=np.int64).ravel()
    d = np.asarray(dst, dtype=np.int64).ravel()
    w = np.asarray(weights, dtype=np.float32).ravel()
    t = np.asarray(edge_types).ravel()
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
    t8 = t.astype(np.int8)
    # Rank distinct weights, heaviest first, so the sort key stays integral (exact, no float ties issues).
    if m == 0 or float(w.min()) == float(w.max()):
        # Uniform weights (the common default of 1.0) need no ranking pass.
        n_ranks, weight_rank = 1, np.zeros(m, dtype=np.int64)
    else:
        distinct, inverse = np.unique(w, return_inverse=True)
        n_ranks = int(distinct.shape[0])
        weight_rank = (n_ranks - 1 - inverse.ravel()).astype(np.int64)

    fwd = _row_order(s, d, weight_rank, n_nodes, n_ranks)
    rev = _row_order(d, s, weight_rank, n_nodes, n_ranks)
    return CSRGraph(
        n_nodes=n_nodes,
        indptr=_readonly(_indptr(s, n_nodes)),
        indices=_readonly(d[fwd].astype(np.int32)),
        weights=_readonly(w[fwd]),
        edge_types=_readonly(t8[fwd]),
        rev_indptr=_readonly(_indptr(d, n_nodes)),
        rev_indices=_readonly(s[rev].astype(np.int32)),
        rev_weights=_readonly(w[rev]),
        rev_edge_types=_readonly(t8[rev]),
        out_strength=_readonly(np.bincount(s, weights=w, minlength=n_nodes).astype(np.float64)),
        in_strength=_readonly(np.bincount(d, weights=w, minlength=n_nodes).astype(np.float64)),
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
