"""Keep a Bolt graph store and the database's edges equal (``manage.py graph_sync``).

The store itself is ``graph.bolt``; this module reads and writes the memories app's edges through its
services, so it lives above memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from django.db import transaction

from graph.bolt import MICRO, Neo4jGraphStore, micro_weight, now_ms, type_name
from graph.store import EdgeRef
from graph.writes import graph_touch
from memories import services
from memories.models import Edge, Memory, Workspace

__all__ = ["GraphDiff", "Reconciled", "diff_with_sql", "reconcile_sql", "sync_workspace"]


def _sql_edges(workspace: Workspace, batch: int) -> Iterator[list[EdgeRef]]:
    rows = (
        Edge.objects.filter(workspace=workspace)
        .order_by()
        .values_list("source_id", "target_id", "edge_type", "weight")
        .iterator(chunk_size=batch)
    )
    chunk: list[EdgeRef] = []
    for source, target, edge_type, weight in rows:
        chunk.append(EdgeRef(source, target, edge_type, float(weight)))
        if len(chunk) >= batch:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def sync_workspace(
    store: Neo4jGraphStore,
    workspace: Workspace,
    *,
    batch: int = 5_000,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[int, int, int]:
    """Make the graph of ``workspace`` equal its database edges; return (sent, swept edges, swept nodes).

    Every edge is MERGEd with the sync's start time as its mark, then whatever still carries an older
    mark (edges deleted in the database, nodes left without edges) is swept. Readers never see an
    empty graph on the way. An edge the write hooks add while the sync runs carries a later mark and
    survives the sweep; one they remove meanwhile may come back until the next sync.
    """
    mark = now_ms()
    total = Edge.objects.filter(workspace=workspace).count()
    sent = 0
    for chunk in _sql_edges(workspace, batch):
        sent += store.merge_edges(workspace, chunk, mark=mark)
        if progress is not None:
            progress(sent, total)
    swept_edges, swept_nodes = store.sweep(workspace, mark)
    return sent, swept_edges, swept_nodes


@dataclass(frozen=True)
class GraphDiff:
    """Differences between a workspace's database edges and its graph (keys: source, target, type)."""

    only_in_graph: dict[tuple[uuid.UUID, uuid.UUID, str], float]
    only_in_sql: dict[tuple[uuid.UUID, uuid.UUID, str], float]
    weight_differs: dict[tuple[uuid.UUID, uuid.UUID, str], tuple[float, float]]  # (sql, graph)

    @property
    def equal(self) -> bool:
        return not (self.only_in_graph or self.only_in_sql or self.weight_differs)


def diff_with_sql(store: Neo4jGraphStore, workspace: Workspace) -> GraphDiff:
    """Compare the graph with the database; weights equal when they agree to the graph's 6 decimals."""
    graph = store.read_edges(workspace)
    sql = {
        (source, target, type_name(edge_type)): float(weight)
        for source, target, edge_type, weight in Edge.objects.filter(workspace=workspace).values_list(
            "source_id", "target_id", "edge_type", "weight"
        )
    }
    differs = {
        key: (sql[key], graph[key])
        for key in sql.keys() & graph.keys()
        if abs(micro_weight(sql[key]) / MICRO - graph[key]) > 0.5 / MICRO
    }
    return GraphDiff(
        only_in_graph={k: w for k, w in graph.items() if k not in sql},
        only_in_sql={k: w for k, w in sql.items() if k not in graph},
        weight_differs=differs,
    )


def graph_only_memories(workspace: Workspace, diff: GraphDiff) -> set[uuid.UUID]:
    """Endpoints of graph-only edges that are not memories of the workspace (cannot be restored)."""
    endpoints = {k[0] for k in diff.only_in_graph} | {k[1] for k in diff.only_in_graph}
    present = set(Memory.objects.filter(workspace=workspace, id__in=list(endpoints)).values_list("id", flat=True))
    return endpoints - present


@dataclass(frozen=True)
class Reconciled:
    inserted: int
    reweighted: int
    deleted: int
    unrestorable: int  # graph-only edges whose memories are gone from the database


def reconcile_sql(store: Neo4jGraphStore, workspace: Workspace, diff: GraphDiff, *, prune: bool) -> Reconciled:
    """Rebuild the database edges from the graph: insert graph-only edges, take the graph's weights and,
    with ``prune``, delete database-only edges. Edges between memories the database no longer has are
    counted, not restored (their content is gone)."""
    missing = graph_only_memories(workspace, diff)
    restorable = {k: w for k, w in diff.only_in_graph.items() if k[0] not in missing and k[1] not in missing}
    with transaction.atomic():
        services.edges_bulk_link(
            workspace=workspace,
            edges=[
                Edge(workspace=workspace, source_id=s, target_id=t, edge_type=ty, weight=w)
                for (s, t, ty), w in restorable.items()
            ],
        )
        changed = []
        if diff.weight_differs:
            by_key = {(e.source_id, e.target_id, e.edge_type): e for e in _edges_for(workspace, diff.weight_differs)}
            for key, (_sql_weight, graph_weight) in diff.weight_differs.items():
                edge = by_key.get(key)
                if edge is not None:
                    edge.weight = graph_weight
                    changed.append(edge)
            Edge.objects.bulk_update(changed, ["weight"], batch_size=500)
        deleted = 0
        if prune and diff.only_in_sql:
            doomed = [e.pk for e in _edges_for(workspace, diff.only_in_sql)]
            for start in range(0, len(doomed), 900):
                deleted += Edge.objects.filter(pk__in=doomed[start : start + 900]).delete()[0]
        if changed or deleted:
            graph_touch(workspace=workspace, rewrites=True)
    return Reconciled(len(restorable), len(changed), deleted, len(diff.only_in_graph) - len(restorable))


def _edges_for(workspace: Workspace, keys: Iterable[tuple[uuid.UUID, uuid.UUID, str]]) -> list[Edge]:
    wanted = set(keys)
    sources = sorted({k[0] for k in wanted})
    found: list[Edge] = []
    for start in range(0, len(sources), 900):
        found.extend(
            e
            for e in Edge.objects.filter(workspace=workspace, source_id__in=sources[start : start + 900]).only(
                "id", "source_id", "target_id", "edge_type", "weight"
            )
            if (e.source_id, e.target_id, type_name(e.edge_type)) in wanted
        )
    return found
