from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from graph.algorithms import CSRGraph, build_csr
from surfacing.algorithms.ppr import (
    PowerIterationError,
    PPRResult,
    candidate_centrality,
    normalise_by_max,
    ppr_power,
    ppr_push,
    top_k,
)

A, B, C, D, E = range(5)
REFERENCE_EDGES = [(A, B), (B, C), (C, A), (C, D), (E, D)]
# (ran) networkx.pagerank(alpha=0.85, personalization={A: 1}) at its tol=1e-6, rounded.
RAN = {A: 0.347274, B: 0.295184, C: 0.250907, D: 0.106634, E: 0.0}
# The exact fixed point, rounded. networkx stops early at tol=1e-6, so D in RAN is 1.1e-6 below it.
EXACT = {A: 0.347275, B: 0.295184, C: 0.250906, D: 0.106635, E: 0.0}

SPARSE = 0  # dense_max_nodes=0 forces the dict-based push path
DENSE = 10**9


def _csr(n: int, edges: list[tuple[int, int]], weights: list[float] | None = None) -> CSRGraph:
    w = np.ones(len(edges)) if weights is None else np.array(weights)
    src = np.array([e[0] for e in edges], dtype=np.int64)
    dst = np.array([e[1] for e in edges], dtype=np.int64)
    return build_csr(n, src, dst, w, np.zeros(len(edges), dtype=np.int8))


def _dense(result: PPRResult, n: int) -> np.ndarray:
    out = np.zeros(n)
    out[list(result.scores)] = list(result.scores.values())
    return out


def _random_graph(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted random digraph, average out-degree ~5, with parallel edges, self-loops and ~1/6 of the
    nodes dangling (no out-edges)."""
    rng = np.random.default_rng(seed)
    m = 6 * n
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    keep = src % 6 != 0
    src, dst = src[keep], dst[keep]
    w = rng.integers(1, 6, src.shape[0]).astype(np.float64)
    return src, dst, w


def _networkx_ppr(
    n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray, seeds: list[int], undirected: bool
) -> np.ndarray:
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(n))
    g.add_weighted_edges_from(zip(src.tolist(), dst.tolist(), w.tolist(), strict=True))
    if undirected:
        g.add_weighted_edges_from(zip(dst.tolist(), src.tolist(), w.tolist(), strict=True))
    ref = nx.pagerank(g, alpha=0.85, personalization=dict.fromkeys(seeds, 1.0), tol=1e-12, max_iter=1000)
    return np.array([ref[i] for i in range(n)])


def test_power_iteration_reproduces_the_networkx_reference_vector() -> None:
    g = _csr(5, REFERENCE_EDGES)
    as_networkx = ppr_power(g, [A], tol=1e-6)  # networkx's own tolerance and stopping rule
    np.testing.assert_allclose(as_networkx, [RAN[v] for v in range(5)], atol=1e-6)
    np.testing.assert_allclose(ppr_power(g, [A]), [EXACT[v] for v in range(5)], atol=1e-6)


@pytest.mark.parametrize("path", [SPARSE, DENSE])
def test_push_reproduces_the_reference_vector(path: int) -> None:
    result = ppr_push(_csr(5, REFERENCE_EDGES), [A], epsilon=1e-12, dense_max_nodes=path)
    assert result.converged
    assert E not in result.scores
    got = _dense(result, 5)
    np.testing.assert_allclose(got, [EXACT[v] for v in range(5)], atol=1e-6)
    # The published vector is networkx stopped at tol=1e-6; within that rounding it agrees too.
    np.testing.assert_allclose(got, [RAN[v] for v in range(5)], atol=1.5e-6)
    assert result.residual_mass < 1e-10


@pytest.mark.parametrize(
    ("n", "undirected", "seed"),
    [(1_000, False, 1), (1_000, True, 2), (5_000, False, 3), (10_000, True, 4), (10_000, False, 5)],
)
def test_push_and_power_agree_with_networkx_on_random_weighted_graphs(n: int, undirected: bool, seed: int) -> None:
    src, dst, w = _random_graph(n, seed)
    seeds = [7, 13, 29, 7]  # a duplicate seed counts once, like a personalisation dict
    reference = _networkx_ppr(n, src, dst, w, [7, 13, 29], undirected)
    g = build_csr(n, src, dst, w, np.zeros(src.shape[0], dtype=np.int8))

    power = ppr_power(g, seeds, undirected=undirected)
    assert np.abs(power - reference).sum() < 1e-6
    assert power.sum() == pytest.approx(1.0, abs=1e-9)

    result = ppr_push(g, seeds, epsilon=1e-9, max_pushes=10**7, undirected=undirected)
    estimate = _dense(result, n)
    error = np.abs(estimate - reference).sum()
    assert result.converged
    assert error < 1e-4
    # The estimate never overshoots, so its L1 error is exactly the reported residual mass.
    assert np.all(estimate <= reference + 1e-9)
    assert result.residual_mass == pytest.approx(error, abs=1e-6)
    assert sum(result.scores.values()) + result.residual_mass == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("undirected", [False, True])
def test_dict_and_array_push_paths_agree(undirected: bool) -> None:
    n = 1_000
    src, dst, w = _random_graph(n, 9)
    g = build_csr(n, src, dst, w, np.zeros(src.shape[0], dtype=np.int8))
    exact = ppr_power(g, [3, 4], undirected=undirected)
    for path in (SPARSE, DENSE):
        result = ppr_push(g, [3, 4], epsilon=1e-8, undirected=undirected, dense_max_nodes=path)
        assert result.converged
        assert np.abs(_dense(result, n) - exact).sum() == pytest.approx(result.residual_mass, abs=1e-8)
        assert result.residual_mass < 1e-3


def test_undirected_walk_matches_networkx_on_a_simple_undirected_graph() -> None:
    rng = np.random.default_rng(21)
    g_nx = nx.gnm_random_graph(400, 1200, seed=21)
    for u, v in g_nx.edges():
        g_nx[u][v]["weight"] = float(rng.integers(1, 4))
    edges = list(g_nx.edges(data="weight"))
    reference = nx.pagerank(g_nx, alpha=0.85, personalization={0: 1.0, 5: 1.0}, tol=1e-12, max_iter=500)
    g = _csr(400, [(u, v) for u, v, _ in edges], [wt for _, _, wt in edges])
    power = ppr_power(g, [0, 5], undirected=True)
    np.testing.assert_allclose(power, [reference[i] for i in range(400)], atol=1e-9)


def test_a_dangling_node_returns_its_mass_to_the_seeds() -> None:
    # 0 -> 1 and 1 has no out-edges: x0 = (1 - a) + a * x1, x1 = a * x0.
    alpha = 0.85
    expected = [1 / (1 + alpha), alpha / (1 + alpha)]
    g = _csr(2, [(0, 1)])
    np.testing.assert_allclose(ppr_power(g, [0]), expected, atol=1e-9)
    np.testing.assert_allclose(_dense(ppr_push(g, [0], epsilon=1e-12), 2), expected, atol=1e-9)


def test_edge_weights_split_the_walk_proportionally() -> None:
    g = _csr(3, [(0, 1), (0, 2), (1, 0), (2, 0)], [3.0, 1.0, 1.0, 1.0])
    x = ppr_power(g, [0])
    assert x[1] == pytest.approx(3 * x[2])


def test_hitting_max_pushes_returns_a_valid_partial_estimate() -> None:
    n = 2_000
    src, dst, w = _random_graph(n, 5)
    g = build_csr(n, src, dst, w, np.zeros(src.shape[0], dtype=np.int8))
    exact = ppr_power(g, [1])
    for path in (SPARSE, DENSE):
        result = ppr_push(g, [1], epsilon=1e-9, max_pushes=50, dense_max_nodes=path)
        assert not result.converged
        assert result.pushes == 50
        assert result.scores
        estimate = _dense(result, n)
        assert np.all(estimate <= exact + 1e-12)
        assert result.residual_mass == pytest.approx(1.0 - estimate.sum(), abs=1e-12)


@pytest.mark.parametrize("path", [SPARSE, DENSE])
def test_zero_pushes_still_returns_the_seeds(path: int) -> None:
    result = ppr_push(_csr(3, [(0, 1)]), [0, 2], max_pushes=0, dense_max_nodes=path)
    assert not result.converged
    assert result.pushes == 0
    assert result.scores == pytest.approx({0: 0.075, 2: 0.075})
    assert result.residual_mass == pytest.approx(0.85)


@pytest.mark.parametrize("path", [SPARSE, DENSE])
def test_push_work_on_a_million_edge_graph_is_bounded_by_epsilon_not_size(path: int) -> None:
    rng = np.random.default_rng(17)
    alpha, epsilon = 0.85, 1e-4
    bound = 1 / ((1 - alpha) * epsilon)
    pushes, touched = [], []
    for n in (10_000, 100_000):
        m = 10 * n
        g = build_csr(n, rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m), np.zeros(m, np.int8))
        result = ppr_push(g, [1, 2, 3, 4, 5], alpha=alpha, epsilon=epsilon, dense_max_nodes=path)
        assert result.converged
        assert result.pushes <= bound
        pushes.append(result.pushes)
        touched.append(len(result.scores))
    # Ten times the nodes and edges (the larger graph has 1M edges), about the same work and reach.
    assert pushes[1] < 2 * pushes[0]
    assert touched[1] < 2 * touched[0]
    assert touched[1] < 100_000 // 20


def test_no_seeds_give_an_empty_result() -> None:
    g = _csr(2, [(0, 1)])
    assert ppr_push(g, []) == PPRResult({}, True, 0, 0.0)
    np.testing.assert_array_equal(ppr_power(g, []), [0.0, 0.0])


def test_invalid_arguments_are_rejected() -> None:
    g = _csr(2, [(0, 1)])
    with pytest.raises(ValueError, match="seed"):
        ppr_push(g, [2])
    with pytest.raises(ValueError, match="seed"):
        ppr_power(g, [-1])
    with pytest.raises(ValueError, match="alpha"):
        ppr_push(g, [0], alpha=1.0)
    with pytest.raises(ValueError, match="epsilon"):
        ppr_push(g, [0], epsilon=0.0)
    with pytest.raises(ValueError, match="max_pushes"):
        ppr_push(g, [0], max_pushes=-1)


def test_power_iteration_reports_non_convergence() -> None:
    with pytest.raises(PowerIterationError):
        ppr_power(_csr(5, REFERENCE_EDGES), [A], max_iter=2)


def test_top_k_orders_by_score_then_node_index() -> None:
    scores = {5: 0.2, 1: 0.5, 3: 0.2, 9: 0.1, 2: 0.2}
    assert top_k(scores, 3) == [(1, 0.5), (2, 0.2), (3, 0.2)]
    assert top_k(scores) == [(1, 0.5), (2, 0.2), (3, 0.2), (5, 0.2), (9, 0.1)]
    assert top_k(scores, 0) == []
    assert top_k({}, 5) == []


def test_top_k_matches_a_full_sort_on_many_ties() -> None:
    rng = np.random.default_rng(2)
    scores = {int(i): float(v) for i, v in zip(rng.permutation(5000), rng.integers(0, 20, 5000), strict=True)}
    expected = sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:100]
    assert top_k(scores, 100) == expected


def test_normalise_by_max_scales_the_best_to_one() -> None:
    assert normalise_by_max({1: 0.2, 2: 0.5}) == {1: pytest.approx(0.4), 2: 1.0}
    assert normalise_by_max({1: 0.0}) == {1: 0.0}
    assert normalise_by_max({}) == {}


def test_candidate_centrality_normalises_over_the_candidates_only() -> None:
    scores = {0: 0.6, 1: 0.2, 2: 0.1}
    np.testing.assert_allclose(candidate_centrality(scores, [1, 2, 7]), [1.0, 0.5, 0.0])
    np.testing.assert_array_equal(candidate_centrality(scores, [7, 8]), [0.0, 0.0])
    assert candidate_centrality(scores, []).shape == (0,)
