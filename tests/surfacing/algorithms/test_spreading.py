from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graph.algorithms import (
    EDGE_TYPES,
    CSRGraph,
    build_csr,
    edge_type_code,
    edge_type_codes,
    top_neighbours,
    top_neighbours_many,
)
from surfacing.algorithms import spreading
from surfacing.algorithms.spreading import SpreadHit, spread


def _graph(n: int, edges: list[tuple[int, int, str]], weights: list[float] | None = None) -> CSRGraph:
    w = np.ones(len(edges)) if weights is None else np.array(weights)
    return build_csr(
        n,
        np.array([e[0] for e in edges], dtype=np.int64),
        np.array([e[1] for e in edges], dtype=np.int64),
        w,
        edge_type_codes(e[2] for e in edges),
    )


S1, X, Y, Z = 0, 1, 2, 3


def test_reference_vector_shortest_path_wins() -> None:
    # (ran) seed S1 reaches X at 1, Y at 2, Z at 1 and 2 -> {X: .5, Y: .25, Z: .5}.
    g = _graph(4, [(S1, X, "RELATED"), (X, Y, "MENTIONS"), (S1, Z, "PART_OF"), (X, Z, "RELATED")])
    hits = spread(g, [S1])
    assert {k: v.score for k, v in hits.items()} == {X: 0.5, Y: 0.25, Z: 0.5}
    assert hits[Z] == SpreadHit(score=0.5, hops=1, seed=S1, edge_type="PART_OF", via=S1)
    assert hits[Y] == SpreadHit(score=0.25, hops=2, seed=S1, edge_type="MENTIONS", via=X)


def test_walk_ignores_edge_direction() -> None:
    g = _graph(3, [(1, 0, "MENTIONED_IN"), (2, 1, "ANSWERED_BY")])
    hits = spread(g, [0])
    assert hits[1].hops == 1
    assert hits[2] == SpreadHit(0.25, 2, 0, "ANSWERED_BY", 1)


def test_follows_edges_are_not_walked_by_default_but_can_be_allowed() -> None:
    g = _graph(3, [(0, 1, "FOLLOWS"), (0, 2, "RELATED")])
    assert set(spread(g, [0])) == {2}
    allowed = frozenset({edge_type_code("FOLLOWS")})
    assert set(spread(g, [0], allowed_types=allowed)) == {1}


def test_depth_limits_the_hops() -> None:
    chain = _graph(5, [(i, i + 1, "RELATED") for i in range(4)])
    assert set(spread(chain, [0], depth=1)) == {1}
    assert {k: v.score for k, v in spread(chain, [0], depth=3).items()} == {1: 0.5, 2: 0.25, 3: 0.125}
    assert spread(chain, [0], depth=0) == {}


def test_damping_sets_the_score_per_hop() -> None:
    chain = _graph(3, [(0, 1, "RELATED"), (1, 2, "RELATED")])
    hits = spread(chain, [0], damping=0.8)
    assert hits[1].score == pytest.approx(0.8)
    assert hits[2].score == pytest.approx(0.64)


def test_seeds_are_excluded_and_each_hit_credits_the_first_seed_that_reached_it() -> None:
    g = _graph(4, [(0, 2, "RELATED"), (1, 2, "RELATED"), (0, 1, "RELATED"), (1, 3, "RELATED")])
    hits = spread(g, [1, 0, 1])
    assert set(hits) == {2, 3}
    assert hits[2].seed == 1
    assert hits[3].seed == 1


def test_fan_out_keeps_the_heaviest_neighbours_with_ties_by_index() -> None:
    edges = [(0, i, "RELATED") for i in range(1, 8)]
    g = _graph(8, edges, weights=[1, 5, 1, 5, 2, 1, 1])
    assert sorted(spread(g, [0], fan_out=3, depth=1)) == [2, 4, 5]
    assert sorted(spread(g, [0], fan_out=4, depth=1)) == [1, 2, 4, 5]
    assert spread(g, [0], fan_out=0) == {}


def test_fan_out_counts_already_reached_neighbours_like_a_limited_query() -> None:
    # Node 1's heaviest neighbour is the seed; with fan_out 1 nothing new is reached through it.
    g = _graph(3, [(0, 1, "RELATED"), (1, 2, "RELATED")], weights=[2.0, 1.0])
    assert set(spread(g, [0], fan_out=1)) == {1}
    assert set(spread(g, [0], fan_out=2)) == {1, 2}


def test_invalid_arguments_are_rejected() -> None:
    g = _graph(2, [(0, 1, "RELATED")])
    with pytest.raises(ValueError, match="seed"):
        spread(g, [2])
    with pytest.raises(ValueError, match="depth"):
        spread(g, [0], depth=-1)
    with pytest.raises(ValueError, match="fan_out"):
        spread(g, [0], fan_out=-1)
    with pytest.raises(ValueError, match="damping"):
        spread(g, [0], damping=0.0)


def test_no_seeds_reach_nothing() -> None:
    assert spread(_graph(2, [(0, 1, "RELATED")]), []) == {}


def test_expansions_are_bounded_by_seeds_times_fan_out_powers_on_a_large_graph() -> None:
    rng = np.random.default_rng(11)
    n, m = 100_000, 1_000_000
    g = build_csr(n, rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m), np.zeros(m, dtype=np.int8))
    seeds, fan_out, depth = [1, 2, 3, 4, 5], 20, 2
    with mock.patch.object(spreading, "top_neighbours", wraps=top_neighbours) as calls:
        hits = spread(g, seeds, fan_out=fan_out, depth=depth)
    assert calls.call_count <= len(seeds) * (1 + fan_out)
    assert len(hits) <= len(seeds) * (fan_out + fan_out**2)
    assert len(hits) > 400  # random graph: the walk really fans out
    assert all(EDGE_TYPES[0] == h.edge_type for h in hits.values())
    assert all(h.score == 0.5**h.hops for h in hits.values())


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    depth=st.integers(0, 4),
    fan_out=st.integers(0, 8),
    damping=st.sampled_from([0.5, 0.8, 1.0]),
    undirected_types=st.booleans(),
)
def test_the_vectorised_walk_equals_the_node_by_node_walk_on_random_graphs(
    seed: int, depth: int, fan_out: int, damping: float, undirected_types: bool
) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    m = int(rng.integers(0, 400))
    src, dst = rng.integers(0, n, m), rng.integers(0, n, m)
    # Few distinct weights and a hub: many ties, parallel edges, self-loops, rows longer than a prefix.
    hub = rng.random(m) < 0.3
    dst = np.where(hub, 0, dst)
    w = rng.choice(np.array([0.5, 1.0, 1.0, 2.0]), size=m)
    t = rng.integers(0, len(EDGE_TYPES), m).astype(np.int8)
    g = build_csr(n, src, dst, w, t)
    seeds = rng.integers(0, n, int(rng.integers(0, 6))).tolist()
    allowed = (
        spreading.SPREAD_EDGE_CODES
        if undirected_types
        else frozenset(int(c) for c in rng.choice(len(EDGE_TYPES), size=5, replace=False))
    )
    fast = spread(g, seeds, depth=depth, fan_out=fan_out, damping=damping, allowed_types=allowed)
    slow = spreading.spread_stepwise(g, seeds, depth=depth, fan_out=fan_out, damping=damping, allowed_types=allowed)
    assert list(fast.items()) == list(slow.items())  # same hits, same provenance, same discovery order


def test_the_walk_expands_each_hop_in_one_call_over_a_bounded_frontier() -> None:
    rng = np.random.default_rng(11)
    n, m = 100_000, 1_000_000
    g = build_csr(n, rng.integers(0, n, m), rng.integers(0, n, m), rng.random(m), np.zeros(m, dtype=np.int8))
    seeds, fan_out, depth = [1, 2, 3, 4, 5], 20, 2
    with mock.patch.object(spreading, "top_neighbours_many", wraps=top_neighbours_many) as calls:
        hits = spread(g, seeds, fan_out=fan_out, depth=depth)
    assert calls.call_count == depth
    frontier_sizes = [len(call.args[1]) for call in calls.call_args_list]
    assert frontier_sizes[0] == len(seeds)
    assert frontier_sizes[1] <= len(seeds) * fan_out
    assert hits == spreading.spread_stepwise(g, seeds, fan_out=fan_out, depth=depth)
