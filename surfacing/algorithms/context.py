"""Context: relevance that flows from a hit to the memories next to it.

A memory rarely stands alone. The answer to "what did Caroline research?" is often the turn after the one
that names the research, or the question just before it; the reasons for a decision are the notes the
decision record links to. Each seed (a candidate with its query relevance) passes part of its relevance
to the memories up to ``hops`` edges away:

- along a *sequence* edge (FOLLOWS: the turn before and the turn after), both ways, times ``damping``;
- along a *citation* edge (RELATED, DERIVED_FROM, ANSWERED_BY, ...), times ``damping`` from the citing
  memory to what it cites, and times ``damping * backlink`` the other way: what a hit links to is its
  supporting context, while a memory that links to a hit is about it but less often explains it.

Each edge also multiplies by its weight, capped at 1. A reached memory keeps the best value any path of
at most ``hops`` edges gives it (max-product); seeds start from their own relevance, so a seed is only
listed when a stronger neighbour lifts it. The result says, per reached node, the value, the hop count,
the seed its best path starts from, the edge type of the last step and the node before it
(``SpreadHit``), so the path can be shown.

Work is one vectorised neighbour read per hop and direction for all frontier nodes at once, ``fan_out``
neighbours per node, and bounded whatever the graph's degree: offers below ``min_value`` are dropped (a
caller passes the value under which a memory cannot reach the results any more), each hop passes on
from at most twice as many nodes as there are seeds (the best it improved: a turn's two neighbours
each), and the best ``max_hits`` are returned. A conversation turn has two FOLLOWS
neighbours; a densely linked memory may have hundreds of links, and without the bounds thirty seeds
reached thousands of memories in two hops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from graph.algorithms import EDGE_TYPES, CSRGraph, edge_type_code, edge_type_name, top_neighbours_many
from surfacing.algorithms.spreading import SpreadHit

__all__ = ["CITATION_EDGE_TYPES", "SEQUENCE_EDGE_TYPES", "context_damping", "propagate_relevance"]

FloatArray = npt.NDArray[np.float64]

SEQUENCE_EDGE_TYPES: frozenset[str] = frozenset({"FOLLOWS"})
CITATION_EDGE_TYPES: frozenset[str] = frozenset({"RELATED", "RELATES_TO", "DERIVED_FROM", "ANSWERED_BY", "LINKS_TO"})
"""Explicit links between memories. Left out: PART_OF and MENTIONS (a session or an entity joins every
turn that belongs to it or names it: a hub, not context), CO_RETRIEVED (usage, walked by spreading),
and the evolution's bookkeeping edges (SUPERSEDES, SUMMARIZES, RESOLVES, CONTRADICTS)."""


def context_damping(
    damping: float,
    backlink: float,
    sequence: Iterable[str] = SEQUENCE_EDGE_TYPES,
    citation: Iterable[str] = CITATION_EDGE_TYPES,
) -> tuple[FloatArray, FloatArray]:
    """Per edge-type code: the factor along the edge (``forward``) and against it (``backward``); 0 for
    types that are not walked."""
    forward = np.zeros(len(EDGE_TYPES))
    backward = np.zeros(len(EDGE_TYPES))
    for name in sequence:
        forward[edge_type_code(name)] = backward[edge_type_code(name)] = damping
    for name in citation:
        forward[edge_type_code(name)] = damping
        backward[edge_type_code(name)] = damping * backlink
    return forward, backward


def _reversed(graph: CSRGraph) -> CSRGraph:
    """The same graph with every edge turned around (views, no copies)."""
    return replace(
        graph,
        indptr=graph.rev_indptr,
        indices=graph.rev_indices,
        weights=graph.rev_weights,
        edge_types=graph.rev_edge_types,
        rev_indptr=graph.indptr,
        rev_indices=graph.indices,
        rev_weights=graph.weights,
        rev_edge_types=graph.edge_types,
        out_strength=graph.in_strength,
        in_strength=graph.out_strength,
    )


def propagate_relevance(
    graph: CSRGraph,
    seeds: Sequence[int],
    relevance: Sequence[float],
    *,
    hops: int,
    forward: FloatArray,
    backward: FloatArray,
    fan_out: int = 8,
    min_value: float = 0.0,
    max_hits: int | None = None,
) -> dict[int, SpreadHit]:
    """Nodes whose best propagated relevance beats what they had, keyed by node (see the module text).

    ``seeds`` are node indices with their ``relevance`` (aligned, in [0, 1]); a seed listed twice keeps
    its larger value. ``forward`` / ``backward`` give the factor of each edge-type code along and against
    the edge (``context_damping``), each in [0, 1]. ``fan_out`` bounds the neighbours read per node, hop
    and direction, heaviest edges first; ``min_value`` and ``max_hits`` bound the result (module text).
    """
    if len(seeds) != len(relevance):
        raise ValueError(f"seeds and relevance must align, got {len(seeds)} and {len(relevance)}")
    if hops < 0:
        raise ValueError(f"hops must be >= 0, got {hops}")
    factors = (np.asarray(forward, dtype=np.float64), np.asarray(backward, dtype=np.float64))
    for table in factors:
        if table.shape != (len(EDGE_TYPES),) or table.min() < 0.0 or table.max() > 1.0:
            raise ValueError(f"forward and backward need one factor in [0, 1] per edge type ({len(EDGE_TYPES)})")
    if not seeds or hops == 0 or not any(table.any() for table in factors):
        return {}
    nodes = np.asarray(seeds, dtype=np.int64)
    if nodes.min() < 0 or nodes.max() >= graph.n_nodes:
        raise ValueError(f"seeds must be node indices in [0, {graph.n_nodes})")
    values = np.clip(np.nan_to_num(np.asarray(relevance, dtype=np.float64), nan=0.0), 0.0, 1.0)
    best: dict[int, float] = {}
    origin: dict[int, int] = {}
    for node, value in zip(nodes.tolist(), values.tolist(), strict=True):
        if value > best.get(node, -1.0):
            best[node], origin[node] = value, node
    directions = [(g, table) for g, table in zip((graph, _reversed(graph)), factors, strict=True) if table.any()]
    hits: dict[int, SpreadHit] = {}
    frontier = np.fromiter(best, dtype=np.int64, count=len(best))
    breadth = 2 * frontier.size
    for hop in range(1, hops + 1):
        if frontier.size == 0:
            break
        frontier_values = np.fromiter((best[n] for n in frontier.tolist()), dtype=np.float64, count=frontier.size)
        parts = []
        for directed, table in directions:
            nb = top_neighbours_many(directed, frontier, fan_out, table > 0.0, undirected=False)
            offered = frontier_values[nb.owner] * table[nb.edge_types] * np.minimum(nb.weights, 1.0)
            parts.append((nb.owner, nb.nodes, nb.edge_types, offered))
        owner, reached_nodes, types, offered = (np.concatenate(column) for column in zip(*parts, strict=True))
        # Strongest offer per reached node: sort by node, then offer descending, keep the first.
        order = np.lexsort((-offered, reached_nodes))
        reached, first = np.unique(reached_nodes[order], return_index=True)
        winners = order[first]
        # Best offers first, so the cap keeps the strongest.
        by_value = np.argsort(-offered[winners], kind="stable")
        improved: list[int] = []
        for node, at in zip(reached[by_value].tolist(), winners[by_value].tolist(), strict=True):
            value = float(offered[at])
            if value < min_value:
                break
            if value <= best.get(node, 0.0):
                continue
            via = int(frontier[owner[at]])
            best[node], origin[node] = value, origin[via]
            hits[node] = SpreadHit(value, hop, origin[via], edge_type_name(int(types[at])), via)
            improved.append(node)
        # `improved` is best first: only the strongest pass relevance on.
        frontier = np.asarray(improved[:breadth], dtype=np.int64)
    if max_hits is not None and len(hits) > max_hits:
        # The strongest; a kept hit's path runs through stronger nodes, which are kept as well.
        kept = sorted(hits, key=lambda n: -hits[n].score)[:max_hits]
        hits = {n: hits[n] for n in kept}
    return hits
