"""Spreading activation: bounded breadth-first expansion from seed memories over meaningful edges.

From the seeds (the top lexical hits), walk edges of the allowed types in either direction, hop by hop up
to ``depth`` hops. From each node only its ``fan_out`` heaviest distinct neighbours are considered (ties:
lower node index), whether or not they were already reached, the way a ``LIMIT fan_out`` neighbour query
behaves. A node first reached at hop ``h`` scores ``damping ** h``; the shortest path wins, and among
equally short paths the first one found (seeds in the given order, then neighbours in weight order) is
kept as provenance. Seeds never appear in the result.

Work is bounded by the walk, not by the graph: at most ``len(seeds) * (1 + fan_out + ... +
fan_out ** (depth - 1))`` nodes are expanded, each reading a short prefix of its adjacency rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from surfacing.algorithms.graph import (
    SPREAD_EDGE_CODES,
    CSRGraph,
    edge_type_mask,
    edge_type_name,
    top_neighbours,
)

__all__ = ["DEFAULT_DAMPING", "DEFAULT_DEPTH", "DEFAULT_FAN_OUT", "SpreadHit", "spread"]

DEFAULT_DEPTH = 2
DEFAULT_FAN_OUT = 20
DEFAULT_DAMPING = 0.5


@dataclass(frozen=True)
class SpreadHit:
    """A node reached by spreading.

    ``score`` = damping ** hops; ``seed`` is the seed its path starts from; ``via`` the previous node on
    that path (the seed itself at hop 1); ``edge_type`` the type of the edge from ``via`` to it.
    """

    score: float
    hops: int
    seed: int
    edge_type: str
    via: int


def spread(
    graph: CSRGraph,
    seeds: Sequence[int],
    *,
    depth: int = DEFAULT_DEPTH,
    fan_out: int = DEFAULT_FAN_OUT,
    damping: float = DEFAULT_DAMPING,
    allowed_types: frozenset[int] = SPREAD_EDGE_CODES,
) -> dict[int, SpreadHit]:
    """Nodes reachable from ``seeds`` within ``depth`` undirected hops, keyed by node index.

    ``allowed_types`` are edge-type codes (``graph.SPREAD_EDGE_CODES`` by default, which leaves out
    FOLLOWS). Duplicate seeds count once. Raises ValueError for out-of-range seeds or parameters.
    """
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
    allowed = edge_type_mask(allowed_types)
    seed_set = set(unique_seeds)
    hits: dict[int, SpreadHit] = {}
    frontier = [(s, s) for s in unique_seeds]  # (node, originating seed)
    for hop in range(1, depth + 1):
        score = damping**hop
        next_frontier: list[tuple[int, int]] = []
        for node, origin in frontier:
            nb = top_neighbours(graph, node, fan_out, allowed)
            for v, t in zip(nb.nodes.tolist(), nb.edge_types.tolist(), strict=True):
                if v in seed_set or v in hits:
                    continue
                hits[v] = SpreadHit(score=score, hops=hop, seed=origin, edge_type=edge_type_name(t), via=node)
                next_frontier.append((v, origin))
        if not next_frontier:
            break
        frontier = next_frontier
    return hits
