from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.algorithms import (
    EDGE_TYPES,
    OTHER_EDGE_CODE,
    SPREAD_EDGE_CODES,
    SPREAD_EDGE_TYPES,
    CSRGraph,
    build_csr,
    edge_type_code,
    edge_type_codes,
    edge_type_mask,
    edge_type_name,
    merge_csr,
    top_neighbours,
    top_neighbours_many,
)

ALL = edge_type_mask(range(len(EDGE_TYPES)))
RELATED = edge_type_code("RELATED")
FOLLOWS = edge_type_code("FOLLOWS")


def _graph(n: int, edges: list[tuple[int, int, float, str]]) -> CSRGraph:
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    w = np.array([e[2] for e in edges], dtype=np.float32)
    t = edge_type_codes(e[3] for e in edges)
    return build_csr(n, src, dst, w, t)


def test_edge_type_registry_has_the_fixed_order_and_other_for_unknown_names() -> None:
    assert EDGE_TYPES[:3] == ("RELATED", "RELATES_TO", "CO_RETRIEVED")
    assert EDGE_TYPES[-1] == "OTHER"
    assert len(EDGE_TYPES) == 15
    assert edge_type_code("MENTIONS") == 5
    assert edge_type_code(" mentions ") == 5
    assert edge_type_code("INSPIRED_BY") == OTHER_EDGE_CODE
    assert edge_type_name(5) == "MENTIONS"
    assert edge_type_name(99) == "OTHER"
    np.testing.assert_array_equal(edge_type_codes(["RELATED", "x"]), np.array([0, 14], dtype=np.int8))


def test_spreading_types_are_the_seed_list_without_follows() -> None:
    assert "FOLLOWS" not in SPREAD_EDGE_TYPES
    assert {"RELATED", "MENTIONS", "ANSWERED_BY", "PART_OF", "DERIVED_FROM"} <= SPREAD_EDGE_TYPES
    assert len(SPREAD_EDGE_TYPES) == 9
    assert {EDGE_TYPES[c] for c in SPREAD_EDGE_CODES} == SPREAD_EDGE_TYPES


def test_edge_type_mask_rejects_unknown_codes() -> None:
    assert edge_type_mask([0, 14]).tolist() == [True] + [False] * 13 + [True]
    with pytest.raises(ValueError, match="code"):
        edge_type_mask([15])


def test_rows_hold_out_and_in_edges_heaviest_first_ties_by_index() -> None:
    g = _graph(
        4,
        [(0, 3, 1.0, "RELATED"), (0, 1, 2.0, "MENTIONS"), (0, 2, 1.0, "FOLLOWS"), (2, 0, 0.5, "PART_OF")],
    )
    assert g.n_nodes == 4
    assert g.n_edges == 4
    assert g.indptr.tolist() == [0, 3, 3, 4, 4]
    assert g.indices[:3].tolist() == [1, 2, 3]
    assert g.weights[:3].tolist() == [2.0, 1.0, 1.0]
    assert [EDGE_TYPES[c] for c in g.edge_types[:3]] == ["MENTIONS", "FOLLOWS", "RELATED"]
    assert g.rev_indptr.tolist() == [0, 1, 2, 3, 4]
    assert g.rev_indices.tolist() == [2, 0, 0, 0]
    assert g.out_strength.tolist() == [4.0, 0.0, 0.5, 0.0]
    assert g.in_strength.tolist() == [0.5, 2.0, 1.0, 1.0]
    assert g.out_degree().tolist() == [3, 0, 1, 0]
    assert g.in_degree().tolist() == [1, 1, 1, 1]
    assert g.indices.dtype == np.int32
    assert g.weights.dtype == np.float32
    assert g.edge_types.dtype == np.int8
    assert g.indptr.dtype == np.int64


def test_snapshot_arrays_are_read_only() -> None:
    g = _graph(2, [(0, 1, 1.0, "RELATED")])
    with pytest.raises(ValueError, match="read-only"):
        g.weights[0] = 5.0


def test_empty_graph_builds() -> None:
    g = build_csr(3, np.array([]), np.array([]), np.array([]), np.array([]))
    assert g.indptr.tolist() == [0, 0, 0, 0]
    assert g.n_edges == 0
    assert build_csr(0, [], [], [], []).n_nodes == 0


@pytest.mark.parametrize(
    ("src", "dst", "w", "t", "message"),
    [
        ([0], [3], [1.0], [0], "endpoints"),
        ([-1], [0], [1.0], [0], "endpoints"),
        ([0], [1], [-1.0], [0], "weights"),
        ([0], [1], [np.nan], [0], "weights"),
        ([0], [1], [1.0], [15], "edge-type"),
        ([0, 1], [1], [1.0], [0], "length"),
    ],
)
def test_invalid_edges_are_rejected(src: list[int], dst: list[int], w: list[float], t: list[int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_csr(3, np.array(src), np.array(dst), np.array(w), np.array(t))


def test_csr_equals_the_scipy_matrix_of_the_edge_list_with_parallel_edges_summed() -> None:
    rng = np.random.default_rng(3)
    n, m = 300, 3000
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.integers(1, 5, m).astype(np.float32)
    g = build_csr(n, src, dst, w, rng.integers(0, 15, m))
    ours = sp.csr_matrix((g.weights, g.indices, g.indptr), shape=(n, n)).toarray()
    rev = sp.csr_matrix((g.rev_weights, g.rev_indices, g.rev_indptr), shape=(n, n)).toarray()
    expected = sp.coo_matrix((w, (src, dst)), shape=(n, n)).toarray()
    np.testing.assert_allclose(ours, expected)
    np.testing.assert_allclose(rev, expected.T)
    np.testing.assert_allclose(g.out_strength, expected.sum(axis=1))
    np.testing.assert_allclose(g.in_strength, expected.sum(axis=0))
    for u in range(n):
        row = slice(g.indptr[u], g.indptr[u + 1])
        keys = list(zip(-g.weights[row], g.indices[row], strict=True))
        assert keys == sorted(keys)


def _assert_same_graph(a: CSRGraph, b: CSRGraph) -> None:
    """Every array equal, strengths bit for bit (both are summed in row order)."""
    assert a.n_nodes == b.n_nodes
    for name in (
        "indptr",
        "indices",
        "weights",
        "edge_types",
        "rev_indptr",
        "rev_indices",
        "rev_weights",
        "rev_edge_types",
        "out_strength",
        "in_strength",
    ):
        left, right = getattr(a, name), getattr(b, name)
        assert left.dtype == right.dtype, name
        assert np.array_equal(left, right), name


def _random_edges(rng: np.random.Generator, n: int, m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (src, dst, type) triples, as the database holds them, with few distinct weights (ties)."""
    src, dst, t = rng.integers(0, n, m), rng.integers(0, n, m), rng.integers(0, len(EDGE_TYPES), m)
    _, first = np.unique(np.stack([src, dst, t]), axis=1, return_index=True)
    first.sort()
    w = rng.choice(np.array([0.0, 0.5, 1.0, 1.0, 2.0], dtype=np.float32), size=first.shape[0])
    return src[first], dst[first], w, t[first].astype(np.int8)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_rows_are_the_same_whatever_order_the_edges_come_in(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 30))
    src, dst, w, t = _random_edges(rng, n, int(rng.integers(0, 200)))
    perm = rng.permutation(src.shape[0])
    _assert_same_graph(build_csr(n, src, dst, w, t), build_csr(n, src[perm], dst[perm], w[perm], t[perm]))


def test_parallel_edges_of_equal_weight_sit_in_type_order() -> None:
    g = _graph(2, [(0, 1, 1.0, "MENTIONS"), (0, 1, 1.0, "RELATED"), (0, 1, 1.0, "LINKS_TO")])
    assert [EDGE_TYPES[c] for c in g.edge_types] == ["RELATED", "MENTIONS", "LINKS_TO"]
    assert [EDGE_TYPES[c] for c in g.rev_edge_types] == ["RELATED", "MENTIONS", "LINKS_TO"]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_merging_new_edges_and_nodes_equals_building_everything_at_once(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_new = int(rng.integers(1, 40))
    src, dst, w, t = _random_edges(rng, n_new, int(rng.integers(0, 300)))
    # Old graph: the edges known before, over the nodes that existed then (a sorted subset of the new
    # node set, like memory ids sorted before and after some memories were created).
    old_edges = rng.random(src.shape[0]) < rng.random()
    endpoints = np.zeros(n_new, dtype=np.bool_)
    endpoints[src[old_edges]] = True
    endpoints[dst[old_edges]] = True
    old_nodes = np.flatnonzero(endpoints | (rng.random(n_new) < 0.5))
    # Old isolated nodes that are gone now (deleted memories without edges) map to -1.
    n_gone = int(rng.integers(0, 3))
    node_map = np.concatenate([old_nodes, np.full(n_gone, -1)])
    order = rng.permutation(node_map.shape[0])
    keys = np.concatenate([old_nodes * 2 + 1, rng.integers(0, 2 * n_new, n_gone) * 2])[order]
    node_map = node_map[order][np.argsort(keys, kind="stable")]
    old_index = {int(v): i for i, v in enumerate(node_map) if v >= 0}
    old = build_csr(
        node_map.shape[0],
        [old_index[int(v)] for v in src[old_edges]],
        [old_index[int(v)] for v in dst[old_edges]],
        w[old_edges],
        t[old_edges],
    )
    fresh = ~old_edges
    merged = merge_csr(old, node_map, n_new, src[fresh], dst[fresh], w[fresh], t[fresh])
    _assert_same_graph(merged, build_csr(n_new, src, dst, w, t))


def test_merging_nothing_keeps_the_graph() -> None:
    g = _graph(3, [(0, 1, 1.0, "RELATED"), (2, 0, 0.5, "MENTIONS")])
    _assert_same_graph(merge_csr(g, np.arange(3), 3, [], [], [], []), g)
    grown = merge_csr(g, [0, 2, 3], 5, [], [], [], [])
    assert grown.indptr.tolist() == [0, 1, 1, 1, 2, 2]
    assert grown.indices.tolist() == [2, 0]


@pytest.mark.parametrize(
    ("node_map", "message"),
    [
        ([1, 0, 2], "increase"),
        ([0, 1, 5], "increase"),
        ([0, 1], "entries"),
        ([0, -1, 2], "has edges"),
    ],
)
def test_merge_rejects_a_renumbering_that_would_reorder_or_lose_edges(node_map: list[int], message: str) -> None:
    g = _graph(3, [(0, 1, 1.0, "RELATED")])
    with pytest.raises(ValueError, match=message):
        merge_csr(g, node_map, 4, [], [], [], [])


def test_merging_new_edges_into_a_large_graph_equals_rebuilding_it() -> None:
    # How fast the merge is against a rebuild is measured by bench/bench_graph.py (make bench-graph).
    rng = np.random.default_rng(1)
    n, m, k = 20_000, 100_000, 1_000
    src, dst = rng.integers(0, n, m + k), rng.integers(0, n, m + k)
    w = np.ones(m + k, dtype=np.float32)  # the common case: every edge at the default weight
    t = rng.integers(0, 15, m + k).astype(np.int8)
    old = build_csr(n, src[:m], dst[:m], w[:m], t[:m])
    merged = merge_csr(old, np.arange(n), n, src[m:], dst[m:], w[m:], t[m:])
    assert merged.n_edges == m + k
    _assert_same_graph(merged, build_csr(n, src, dst, w, t))


def test_top_neighbours_ignores_direction_filters_types_and_keeps_the_heaviest_duplicate() -> None:
    g = _graph(
        6,
        [
            (0, 1, 1.0, "RELATED"),
            (2, 0, 3.0, "MENTIONS"),
            (0, 3, 5.0, "FOLLOWS"),
            (1, 0, 2.0, "RELATED"),  # 1 again, heavier, via the in-edge
            (0, 0, 9.0, "RELATED"),  # self-loop
            (4, 0, 2.0, "PART_OF"),
        ],
    )
    allowed = edge_type_mask(SPREAD_EDGE_CODES)
    nb = top_neighbours(g, 0, 10, allowed)
    assert nb.nodes.tolist() == [2, 1, 4]
    assert nb.weights.tolist() == [3.0, 2.0, 2.0]
    assert [EDGE_TYPES[c] for c in nb.edge_types] == ["MENTIONS", "RELATED", "PART_OF"]
    assert top_neighbours(g, 0, 2, allowed).nodes.tolist() == [2, 1]
    assert top_neighbours(g, 0, 10, allowed, undirected=False).nodes.tolist() == [1]
    assert top_neighbours(g, 0, 10, ALL).nodes.tolist() == [3, 2, 1, 4]
    assert top_neighbours(g, 0, 0, ALL).nodes.tolist() == []
    with pytest.raises(ValueError, match="node"):
        top_neighbours(g, 6, 1, ALL)


def test_top_neighbours_reads_past_a_prefix_of_filtered_out_edges_on_a_hub() -> None:
    # 500 heavy FOLLOWS edges sort first in the hub's row; the allowed RELATED edges come after them.
    follows = [(0, i, 10.0, "FOLLOWS") for i in range(1, 501)]
    related = [(0, i, 1.0, "RELATED") for i in range(501, 531)]
    g = _graph(531, follows + related)
    nb = top_neighbours(g, 0, 20, edge_type_mask({RELATED}))
    assert nb.nodes.tolist() == list(range(501, 521))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(1, 40), undirected=st.booleans())
def test_top_neighbours_matches_a_brute_force_scan(seed: int, k: int, undirected: bool) -> None:
    rng = np.random.default_rng(seed)
    n, m = 40, 600
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    w = rng.integers(1, 4, m).astype(np.float32)  # few distinct weights: many ties
    t = rng.integers(0, 15, m).astype(np.int8)
    g = build_csr(n, src, dst, w, t)
    allowed = edge_type_mask({int(c) for c in rng.choice(15, size=4, replace=False)})
    for node in range(0, n, 7):
        best: dict[int, tuple[float, int]] = {}
        for s, d, wt, ty in zip(src, dst, w, t, strict=True):
            if not allowed[ty]:
                continue
            ends = [(s, d)] + ([(d, s)] if undirected else [])
            for a, b in ends:
                if a == node and b != node and (b not in best or wt > best[b][0]):
                    best[int(b)] = (float(wt), int(ty))
        expected = sorted(best, key=lambda v: (-best[v][0], v))[:k]
        got = top_neighbours(g, node, k, allowed, undirected=undirected)
        assert got.nodes.tolist() == expected
        assert got.weights.tolist() == [best[v][0] for v in expected]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), k=st.integers(0, 30), undirected=st.booleans())
def test_top_neighbours_of_many_nodes_at_once_equal_one_node_at_a_time(seed: int, k: int, undirected: bool) -> None:
    rng = np.random.default_rng(seed)
    n, m = int(rng.integers(1, 50)), int(rng.integers(0, 800))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    dst = np.where(rng.random(m) < 0.4, 0, dst)  # a hub whose rows outgrow the first prefix
    w = rng.integers(1, 4, m).astype(np.float32)
    t = rng.integers(0, 15, m).astype(np.int8)
    g = build_csr(n, src, dst, w, t)
    allowed = edge_type_mask({int(c) for c in rng.choice(15, size=int(rng.integers(1, 15)), replace=False)})
    queries = rng.integers(0, n, int(rng.integers(0, 12)))  # repeats allowed
    many = top_neighbours_many(g, queries, k, allowed, undirected=undirected)
    assert np.all(np.diff(many.owner) >= 0)
    for position, node in enumerate(queries.tolist()):
        one = top_neighbours(g, node, k, allowed, undirected=undirected)
        mine = many.owner == position
        assert many.nodes[mine].tolist() == one.nodes.tolist()
        assert many.weights[mine].tolist() == one.weights.tolist()
        assert many.edge_types[mine].tolist() == one.edge_types.tolist()


def test_top_neighbours_of_many_rejects_nodes_outside_the_graph() -> None:
    g = _graph(3, [(0, 1, 1.0, "RELATED")])
    with pytest.raises(ValueError, match="node 3"):
        top_neighbours_many(g, [0, 3], 2, ALL)
    assert top_neighbours_many(g, [], 2, ALL).nodes.tolist() == []
