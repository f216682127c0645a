from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memories import services
from memories.models import Edge, Memory, Workspace
from surfacing import graphstore
from surfacing.algorithms.graph import edge_type_code
from surfacing.graphstore import SqlGraphStore, graph_store, set_graph_store

pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.fixture
def store() -> Iterator[SqlGraphStore]:
    sql_store = SqlGraphStore()
    set_graph_store(sql_store)
    yield sql_store
    set_graph_store(None)


def link(workspace: Workspace, a: Memory, b: Memory, edge_type: str = "RELATED", weight: float = 1.0) -> Edge:
    return services.edge_link(workspace=workspace, source=a, target=b, edge_type=edge_type, weight=weight)


def edges_of(subgraph: graphstore.Subgraph) -> set[tuple[uuid.UUID, uuid.UUID, int, float]]:
    csr = subgraph.csr
    found = set()
    for u in range(csr.n_nodes):
        for e in range(int(csr.indptr[u]), int(csr.indptr[u + 1])):
            found.add(
                (subgraph.ids[u], subgraph.ids[int(csr.indices[e])], int(csr.edge_types[e]), float(csr.weights[e]))
            )
    return found


def test_snapshot_holds_every_memory_and_edge_of_the_workspace(
    store: SqlGraphStore, workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c, lonely = (make_memory(t) for t in ("a", "b", "c", "lonely"))
    link(workspace, a, b, "MENTIONS", 2.5)
    link(workspace, b, c, "PART_OF")
    link(workspace, a, c, "FOLLOWS", 0.5)
    x, y = make_memory("x", ws=other_workspace), make_memory("y", ws=other_workspace)
    link(other_workspace, x, y)

    snapshot = store.full_snapshot(workspace)

    assert set(snapshot.ids) == {a.id, b.id, c.id, lonely.id}
    assert all(snapshot.ids[i] == mid for mid, i in snapshot.index.items())
    assert edges_of(snapshot) == {
        (a.id, b.id, edge_type_code("MENTIONS"), 2.5),
        (b.id, c.id, edge_type_code("PART_OF"), 1.0),
        (a.id, c.id, edge_type_code("FOLLOWS"), 0.5),
    }
    assert snapshot.csr.n_edges == 3


def test_snapshot_is_cached_until_an_edge_write_bumps_the_generation(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    link(workspace, a, b)
    first = store.full_snapshot(workspace)
    with CaptureQueriesContext(connection) as queries:
        again = store.full_snapshot(workspace)
    assert again is first
    assert len(queries) == 1  # the generation check only

    link(workspace, b, c)
    fresh = store.full_snapshot(workspace)
    assert fresh is not first
    assert fresh.csr.n_edges == 2
    assert fresh.generation == first.generation + 1


def test_neighbourhood_of_the_sql_store_is_the_whole_snapshot(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    link(workspace, a, b)
    sub = store.neighbourhood(workspace, [a.id], hops=1, max_nodes=1)
    assert sub is store.full_snapshot(workspace)
    assert sub.nodes_of([b.id, uuid.uuid4(), a.id]) == [sub.index[b.id], sub.index[a.id]]


def test_a_recreated_workspace_never_sees_its_predecessors_snapshot(
    store: SqlGraphStore, user: Any, make_memory: Callable[..., Memory]
) -> None:
    first = services.workspace_create(owner=user, slug="temp", name="Temp")
    a, b = make_memory("a", ws=first), make_memory("b", ws=first)
    link(first, a, b)
    assert store.full_snapshot(first).csr.n_edges == 1
    pk = first.pk
    first.delete()
    # Same row id and generation as the deleted one (SQLite reuses the highest rowid).
    second = Workspace.objects.create(pk=pk, slug="temp2", name="Temp 2", graph_generation=1)
    assert store.full_snapshot(second).csr.n_edges == 0


def test_empty_workspace_gives_an_empty_graph(store: SqlGraphStore, workspace: Workspace) -> None:
    snapshot = store.full_snapshot(workspace)
    assert snapshot.csr.n_nodes == 0
    assert snapshot.ids == []


def test_concurrent_readers_build_one_snapshot(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_memory("a"), make_memory("b")
    link(workspace, a, b)
    snapshot = graphstore.load_snapshot(workspace.pk, 1)
    version = store._version(workspace)
    builds: list[int] = []
    gate = threading.Event()

    def slow_load(workspace_id: int, generation: int) -> graphstore.Subgraph:
        builds.append(workspace_id)
        gate.wait(2)
        return snapshot

    # Threads must not touch the test's database transaction: the version read and the load are stubbed.
    monkeypatch.setattr(graphstore, "load_snapshot", slow_load)
    monkeypatch.setattr(store, "_version", lambda ws: version)
    results: list[graphstore.Subgraph] = []
    threads = [threading.Thread(target=lambda: results.append(store.full_snapshot(workspace))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert builds == [workspace.pk]
    assert [r is snapshot for r in results] == [True] * 4


def test_factory_returns_one_sql_store_by_default(settings: Any) -> None:
    set_graph_store(None)
    settings.GRAPH_BACKEND = "sql"
    try:
        assert isinstance(graph_store(), SqlGraphStore)
        assert graph_store() is graph_store()
    finally:
        set_graph_store(None)


def test_hex_id_mapping_resolves_colliding_high_halves_exactly() -> None:
    shared = 0x1234_5678_9ABC_DEF0
    ids = [uuid.UUID(int=(shared << 64) | low) for low in (5, 1, 9)] + [uuid.UUID(int=7)]
    keys = graphstore._NodeKeys("".join(i.hex for i in ids))
    lookup = keys.lookup("".join(i.hex for i in [ids[2], ids[3], ids[0], uuid.UUID(int=99)]))
    decoded = keys.uuids()
    assert [decoded[i] for i in lookup[:3]] == [ids[2], ids[3], ids[0]]
    assert lookup[3] == -1
    assert np.all(np.diff([u.int for u in decoded]) > 0)
