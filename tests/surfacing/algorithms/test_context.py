from __future__ import annotations

import numpy as np
import pytest

from graph.algorithms import EDGE_TYPES, CSRGraph, build_csr, edge_type_code, edge_type_codes
from surfacing.algorithms.context import context_damping, propagate_relevance
from surfacing.algorithms.spreading import SpreadHit

FORWARD, BACKWARD = context_damping(0.8, 0.75)


def _graph(n: int, edges: list[tuple[int, int, str]], weights: list[float] | None = None) -> CSRGraph:
    return build_csr(
        n,
        np.array([e[0] for e in edges], dtype=np.int64),
        np.array([e[1] for e in edges], dtype=np.int64),
        np.ones(len(edges)) if weights is None else np.array(weights),
        edge_type_codes(e[2] for e in edges),
    )


def _chain(n: int) -> CSRGraph:
    # Turn i FOLLOWS turn i - 1, as conversation ingestion writes them.
    return _graph(n, [(i, i - 1, "FOLLOWS") for i in range(1, n)])


def propagate(graph: CSRGraph, seeds: list[int], relevance: list[float], hops: int = 2) -> dict[int, SpreadHit]:
    return propagate_relevance(graph, seeds, relevance, hops=hops, forward=FORWARD, backward=BACKWARD)


def test_damping_tables_walk_sequences_both_ways_and_citations_weaker_backwards() -> None:
    follows, related, mentions = (edge_type_code(t) for t in ("FOLLOWS", "RELATED", "MENTIONS"))
    assert FORWARD[follows] == BACKWARD[follows] == 0.8
    assert FORWARD[related] == 0.8 and BACKWARD[related] == pytest.approx(0.6)
    assert FORWARD[mentions] == BACKWARD[mentions] == 0.0
    assert FORWARD.shape == BACKWARD.shape == (len(EDGE_TYPES),)


def test_a_turn_lifts_the_turns_before_and_after_it_by_damping_per_hop() -> None:
    hits = propagate(_chain(7), [3], [1.0])
    assert {n: round(h.score, 6) for n, h in hits.items()} == {1: 0.64, 2: 0.8, 4: 0.8, 5: 0.64}
    assert hits[5] == SpreadHit(pytest.approx(0.64), 2, 3, "FOLLOWS", 4)
    assert hits[2].via == 3


def test_a_hit_lends_more_to_what_it_cites_than_to_what_cites_it() -> None:
    # 0 (a decision) RELATED -> 1 (its reason); 2 (a goal) RELATED -> 0; 3 DERIVED_FROM nothing relevant.
    graph = _graph(4, [(0, 1, "RELATED"), (2, 0, "RELATED"), (3, 2, "MENTIONS")])
    hits = propagate(graph, [0], [1.0], hops=1)
    assert hits[1].score == pytest.approx(0.8)
    assert hits[2].score == pytest.approx(0.6)
    assert 3 not in hits


def test_each_memory_keeps_its_strongest_path_and_seeds_their_own_relevance() -> None:
    hits = propagate(_chain(6), [0, 4], [0.5, 0.9])
    # node 2 is two hops from both seeds: 0.9 * 0.64 beats 0.5 * 0.64; node 1 is one hop from seed 0
    # (0.4) and three from seed 4: the shorter, weaker path is the only one within two hops.
    assert hits[2].seed == 4 and hits[2].score == pytest.approx(0.576)
    assert hits[1].seed == 0 and hits[1].score == pytest.approx(0.4)
    assert hits[3].score == pytest.approx(0.72)
    assert 4 not in hits  # a seed is listed only when a neighbour lifts it above its own relevance
    lifted = propagate(_chain(3), [0, 1], [0.1, 1.0], hops=1)
    assert lifted[0] == SpreadHit(pytest.approx(0.8), 1, 1, "FOLLOWS", 1)


def test_edge_weights_scale_what_passes() -> None:
    graph = _graph(3, [(0, 1, "RELATED"), (0, 2, "RELATED")], weights=[0.5, 3.0])
    hits = propagate(graph, [0], [1.0], hops=1)
    assert hits[1].score == pytest.approx(0.4)
    assert hits[2].score == pytest.approx(0.8)  # weights above 1 count as 1


def test_nothing_propagates_without_hops_factors_or_seeds() -> None:
    graph = _chain(4)
    zeros = np.zeros(len(EDGE_TYPES))
    assert propagate(graph, [1], [1.0], hops=0) == {}
    assert propagate_relevance(graph, [1], [1.0], hops=2, forward=zeros, backward=zeros) == {}
    assert propagate(graph, [], []) == {}


def test_bad_arguments_are_refused() -> None:
    graph = _chain(3)
    with pytest.raises(ValueError, match="align"):
        propagate(graph, [0, 1], [1.0])
    with pytest.raises(ValueError, match="node indices"):
        propagate(graph, [5], [1.0])
    with pytest.raises(ValueError, match="per edge type"):
        propagate_relevance(graph, [0], [1.0], hops=1, forward=np.full(len(EDGE_TYPES), 1.5), backward=BACKWARD)


def test_the_walk_is_bounded_by_a_minimum_value_and_a_number_of_hits() -> None:
    # A hub linked to fifty memories, each linked to one more: a dense graph, not a conversation.
    edges = [(0, i, "RELATED") for i in range(1, 51)] + [(i, 50 + i, "RELATED") for i in range(1, 51)]
    graph = _graph(101, edges, weights=[1.0 - i / 100 for i in range(50)] + [1.0] * 50)
    everything = propagate_relevance(graph, [0], [1.0], hops=2, forward=FORWARD, backward=BACKWARD, fan_out=100)
    # Fifty memories at the first hop; the second passes on from the best two (twice the seeds) only.
    assert len(everything) == 52
    assert {everything[n].via for n in everything if everything[n].hops == 2} == {1, 2}
    capped = propagate_relevance(
        graph, [0], [1.0], hops=2, forward=FORWARD, backward=BACKWARD, fan_out=100, max_hits=10
    )
    assert len(capped) == 10
    assert sorted(capped) == sorted(everything, key=lambda n: -everything[n].score)[:10]
    assert all(hit.via == 0 or hit.via in capped for hit in capped.values())  # paths stay whole
    floor = propagate_relevance(
        graph, [0], [1.0], hops=2, forward=FORWARD, backward=BACKWARD, fan_out=100, min_value=0.7
    )
    assert floor and all(hit.score >= 0.7 for hit in floor.values())
    assert all(hit.hops == 1 for hit in floor.values())  # 0.8 * 0.8 = 0.64 < 0.7 at the second hop
