"""Spreading activation: bounded breadth-first expansion from seed memories over meaningful edges.

From the seeds (the top lexical hits), walk edges of the allowed types in either direction, hop by hop up
to ``depth`` hops. From each node only its ``fan_out`` heaviest distinct neighbours are considered (ties:
lower node index), whether or not they were already reached, the way a ``LIMIT fan_out`` neighbour query
behaves. A node first reached at hop ``h`` scores ``damping ** h``; the shortest path wins, and among
equally short paths the first one found (seeds in the given order, then neighbours in weight order) is
kept as provenance. Seeds never appear in the result.

Work is bounded by the walk, not by the graph: at most ``len(seeds) * (1 + fan_out + ... +
fan_out ** (depth - 1))`` nodes are expanded, each reading a short prefix of its adjacency rows.

``spread`` expands a whole hop at once: ``top_neighbours_many`` gives every frontier node's fan-out as
flat arrays (frontier order, then neighbour order), nodes already reached are masked out, and the first
occurrence of each remaining node wins, which is exactly the order the node-by-node walk
(``spread_stepwise``, the plain statement of the rule, kept for tests) would meet them in. A deep query
(5 seeds, fan-out 20, depth 2, ~950 hits on the 1M-edge bench graph) costs about 2.5 ms instead of 8 ms.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple

import numpy as np

from graph.algorithms import (
    EDGE_TYPES,
    SPREAD_EDGE_CODES,
    CSRGraph,
    edge_type_mask,
    edge_type_name,
    top_neighbours,
    top_neighbours_many,
)

__all__ = ["DEFAULT_DAMPING", "DEFAULT_DEPTH", "DEFAULT_FAN_OUT", "SpreadHit", "spread", "spread_stepwise"]

DEFAULT_DEPTH = 2
DEFAULT_FAN_OUT = 20
DEFAULT_DAMPING = 0.5


class SpreadHit(NamedTuple):
    """A node reached by spreading (immutable).

    ``score`` = damping ** hops; ``seed`` is the seed its path starts from; ``via`` the previous node on
    that path (the seed itself at hop 1); ``edge_type`` the type of the edge from ``via`` to it;
    ``strength`` the product of the path's edge weights, each capped at 1 (a CO_RETRIEVED edge weighs
    its co-retrieval count, so a pair seen together once is a weak path and an explicit link a full one). A named
    tuple rather than a frozen dataclass: a deep query makes ~1,000 of them, and a dataclass's
    ``__init__`` alone cost more than the whole vectorised walk.
    """

    score: float
    hops: int
    seed: int
    edge_type: str
    via: int
    strength: float = 1.0


def _checked_seeds(graph: CSRGraph, seeds: Sequence[int], depth: int, fan_out: int, damping: float) -> list[int]:
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    if fan_out < 0:
        raise ValueError(f"fan_out must be >= 0, got {fan_out}")
    if not 0.0 < damping <= 1.0:
        raise ValueError(f"damping must be in (0, 1], got {damping}")
    unique_seeds = list(dict.fromkeys(int(s) for s in seeds))
    for s in unique_seeds:
        if not 0 <= s < graph.n_nodes:
            raise ValueError(f"seed {s} is not a node index in [0, {graph.n_nodes})")
    return unique_seeds


def spread(
    graph: CSRGraph,
    seeds: Sequence[int],
    *,
    depth: int = DEFAULT_DEPTH,
    fan_out: int = DEFAULT_FAN_OUT,
    damping: float = DEFAULT_DAMPING,
    allowed_types: frozenset[int] = SPREAD_EDGE_CODES,
) -> dict[int, SpreadHit]:
    """Nodes reachable from ``seeds`` within ``depth`` undirected hops, keyed by node index (in the order
    they were reached).

    ``allowed_types`` are edge-type codes (``graph.SPREAD_EDGE_CODES`` by default, which leaves out
    FOLLOWS). Duplicate seeds count once. Raises ValueError for out-of-range seeds or parameters. Same
    result as ``spread_stepwise``, one vectorised expansion per hop.
    """
    unique_seeds = _checked_seeds(graph, seeds, depth, fan_out, damping)
    allowed = edge_type_mask(allowed_types)
    reached = np.zeros(graph.n_nodes, dtype=np.bool_)
    frontier = np.asarray(unique_seeds, dtype=np.int64)
    origin = frontier
    strength = np.ones(frontier.shape[0])
    reached[frontier] = True
    hits: dict[int, SpreadHit] = {}
    for hop in range(1, depth + 1):
        if frontier.size == 0:
            break
        nb = top_neighbours_many(graph, frontier, fan_out, allowed)
        fresh = ~reached[nb.nodes]
        nodes, owner, types, weights = nb.nodes[fresh], nb.owner[fresh], nb.edge_types[fresh], nb.weights[fresh]
        # Entries come in walk order (frontier node, then its neighbours by weight): the first occurrence
        # of a node is where the node-by-node walk would have reached it.
        _, first = np.unique(nodes, return_index=True)
        first.sort()
        owner = owner[first]
        strength = strength[owner] * np.minimum(weights[first].astype(np.float64), 1.0)
        via, origin, frontier, types = frontier[owner], origin[owner], nodes[first], types[first]
        reached[frontier] = True
        names = [EDGE_TYPES[t] for t in types.tolist()]
        rows = zip(repeat(damping**hop), repeat(hop), origin.tolist(), names, via.tolist(), strength.tolist())
        hits.update(zip(frontier.tolist(), map(SpreadHit._make, rows), strict=True))
    return hits


def spread_stepwise(
    graph: CSRGraph,
    seeds: Sequence[int],
    *,
    depth: int = DEFAULT_DEPTH,
    fan_out: int = DEFAULT_FAN_OUT,
    damping: float = DEFAULT_DAMPING,
    allowed_types: frozenset[int] = SPREAD_EDGE_CODES,
) -> dict[int, SpreadHit]:
    """``spread`` node by node: the rule as written in the module docstring, one ``top_neighbours`` call
    per expanded node. The specification ``spread`` is tested against; about 5x slower."""
    unique_seeds = _checked_seeds(graph, seeds, depth, fan_out, damping)
    allowed = edge_type_mask(allowed_types)
    seed_set = set(unique_seeds)
    hits: dict[int, SpreadHit] = {}
    frontier = [(s, s, 1.0) for s in unique_seeds]  # (node, originating seed, path strength)
    for hop in range(1, depth + 1):
        score = damping**hop
        next_frontier: list[tuple[int, int, float]] = []
        for node, origin, strength in frontier:
            nb = top_neighbours(graph, node, fan_out, allowed)
            for v, t, w in zip(nb.nodes.tolist(), nb.edge_types.tolist(), nb.weights.tolist(), strict=True):
                if v in seed_set or v in hits:
                    continue
                path = strength * min(float(w), 1.0)
                hits[v] = SpreadHit(score, hop, origin, edge_type_name(t), node, path)
                next_frontier.append((v, origin, path))
        if not next_frontier:
            break
        frontier = next_frontier
    return hits
