from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from evolution.derived import insert_derived
from graph import store as graphstore
from graph.algorithms import edge_type_code
from graph.store import SqlGraphStore, graph_store, set_graph_store
from history import audit
from history.models import Action
from memories import services
from memories.inputs import SessionInput, TurnInput
from memories.models import Edge, Memory, Workspace

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


def _same_graph(a: graphstore.Subgraph, b: graphstore.Subgraph) -> None:
    """Equal node ids and equal CSR arrays (a merge must give exactly what a rebuild gives)."""
    assert a.ids == b.ids
    assert a.index == b.index
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
        assert np.array_equal(getattr(a.csr, name), getattr(b.csr, name)), name


def test_an_edge_write_extends_the_snapshot_with_the_new_edges_only(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    link(workspace, a, b, "MENTIONS", 2.0)
    first = store.full_snapshot(workspace)
    assert not first.incremental
    d = make_memory("d")  # a new memory: a new node, placed in id order
    link(workspace, c, d, "RELATED", 0.5)
    link(workspace, d, a)

    with CaptureQueriesContext(connection) as queries:
        extended = store.full_snapshot(workspace)

    assert extended.incremental
    assert extended.generation == first.generation + 2
    # Counters, the edges above the largest id held (by primary key), the memory ids.
    assert len(queries) == 3
    assert "id >" in queries[1]["sql"]
    _same_graph(extended, graphstore.load_snapshot(workspace.pk, extended.generation))
    assert edges_of(extended) == {
        (a.id, b.id, edge_type_code("MENTIONS"), 2.0),
        (c.id, d.id, edge_type_code("RELATED"), 0.5),
        (d.id, a.id, edge_type_code("RELATED"), 1.0),
    }


def test_a_memory_created_without_edges_becomes_a_node_when_the_snapshot_is_extended(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    link(workspace, a, b)
    store.full_snapshot(workspace)
    lonely, c = make_memory("lonely"), make_memory("c")
    link(workspace, b, c)
    extended = store.full_snapshot(workspace)
    assert extended.incremental
    assert lonely.id in extended.index
    _same_graph(extended, graphstore.load_snapshot(workspace.pk, extended.generation))


def test_extending_after_conversation_ingests_equals_a_rebuild(
    store: SqlGraphStore, workspace: Workspace, user: Any
) -> None:
    def ingest(day: int, lines: list[tuple[str, str]]) -> None:
        services.conversation_ingest(
            workspace=workspace,
            actor=user,
            sessions=[
                SessionInput(
                    started_at=datetime(2025, 3, day, 9, tzinfo=UTC),
                    turns=tuple(TurnInput(speaker=who, text=text) for who, text in lines),
                )
            ],
        )

    ingest(1, [("Ana", "Berlin office moves to Potsdam"), ("Ben", "Does Potsdam have parking for Ana?")])
    store.full_snapshot(workspace)
    ingest(2, [("Ana", "Potsdam lease signed with Clara"), ("Clara", "Berlin stays open until May")])
    ingest(3, [("Ben", "Clara booked the Potsdam movers"), ("Ana", "Great, Ben")])
    extended = store.full_snapshot(workspace)
    assert extended.incremental
    assert extended.csr.n_edges == Edge.objects.filter(workspace=workspace).count()
    _same_graph(extended, graphstore.load_snapshot(workspace.pk, extended.generation))


def test_a_hard_delete_makes_the_next_read_rebuild(
    store: SqlGraphStore, workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    link(workspace, a, b)
    link(workspace, b, c)
    store.full_snapshot(workspace)
    services.memory_delete_hard(workspace=workspace, memory=c, actor=user)
    rebuilt = store.full_snapshot(workspace)
    assert not rebuilt.incremental
    assert set(rebuilt.ids) == {a.id, b.id}
    assert edges_of(rebuilt) == {(a.id, b.id, edge_type_code("RELATED"), 1.0)}


def test_reverting_a_record_that_created_edges_makes_the_next_read_rebuild(
    store: SqlGraphStore, workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    link(workspace, a, b)
    now = timezone.now()
    with transaction.atomic():
        edge_ids = insert_derived(workspace=workspace, memories=[], edges=[(b.id, a.id, "DERIVED_FROM")], now=now)
        (record,) = audit.records_save(
            [
                audit.record_build(
                    workspace=workspace,
                    evolver="test",
                    action=Action.CREATE,
                    reason="an edge to revert",
                    output_ids=[a.id],
                    after={audit.CREATED_EDGES: edge_ids},
                    now=now,
                )
            ]
        )
    assert store.full_snapshot(workspace).csr.n_edges == 2
    services.record_revert(workspace=workspace, record_id=record.pk, actor=user)
    rebuilt = store.full_snapshot(workspace)
    assert not rebuilt.incremental
    assert edges_of(rebuilt) == {(a.id, b.id, edge_type_code("RELATED"), 1.0)}


def test_a_memory_deleted_behind_the_services_back_is_noticed_at_the_next_edge_write(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c, d = (make_memory(t) for t in "abcd")
    link(workspace, a, b)
    store.full_snapshot(workspace)
    Memory.objects.filter(pk=b.pk).delete()  # cascades to its edge; no counter moves
    link(workspace, c, d)
    fresh = store.full_snapshot(workspace)
    assert not fresh.incremental  # a node with edges vanished: extending cannot express that
    assert edges_of(fresh) == {(c.id, d.id, edge_type_code("RELATED"), 1.0)}


def test_an_edge_dropped_while_reading_makes_the_next_change_rebuild(
    store: SqlGraphStore, workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    stranger = make_memory("x", ws=other_workspace)
    # Not possible through the services: an edge of this workspace whose source is not one of its memories.
    Edge.objects.create(workspace=workspace, source=stranger, target=a)
    link(workspace, a, b)
    assert store.full_snapshot(workspace).csr.n_edges == 1
    link(workspace, b, c)
    assert not store.full_snapshot(workspace).incremental


def test_edge_writers_take_the_workspace_row_before_inserting_edges(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    edge_table, workspace_table = Edge._meta.db_table, Workspace._meta.db_table
    with CaptureQueriesContext(connection) as queries:
        link(workspace, a, b)
        services.edges_bulk_link(workspace=workspace, edges=[Edge(workspace=workspace, source=b, target=c)])
    statements = [q["sql"] for q in queries]
    touches = [i for i, sql in enumerate(statements) if sql.startswith(f'UPDATE "{workspace_table}"')]
    # executemany is logged as "<n> times: INSERT ...".
    inserts = [i for i, sql in enumerate(statements) if f'INTO "{edge_table}"' in sql and "INSERT" in sql]
    assert len(touches) == len(inserts) == 2
    assert touches[0] < inserts[0] < touches[1] < inserts[1]


def test_concurrent_readers_build_one_snapshot(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = make_memory("a"), make_memory("b")
    link(workspace, a, b)
    version = store._version(workspace)
    assert version is not None
    built = graphstore._build(workspace.pk, version)
    builds: list[int] = []
    gate = threading.Event()

    def slow_build(workspace_id: int, v: Any) -> Any:
        builds.append(workspace_id)
        gate.wait(2)
        return built

    # Threads must not touch the test's database transaction: the version read and the build are stubbed.
    monkeypatch.setattr(graphstore, "_build", slow_build)
    monkeypatch.setattr(store, "_version", lambda ws: version)
    results: list[graphstore.Subgraph] = []
    threads = [threading.Thread(target=lambda: results.append(store.full_snapshot(workspace))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert builds == [workspace.pk]
    assert [r is built.subgraph for r in results] == [True] * 4


def test_concurrent_readers_extend_a_stale_snapshot_once(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    link(workspace, a, b)
    store.full_snapshot(workspace)
    link(workspace, b, c)
    version = store._version(workspace)
    assert version is not None
    slot = store._slot(workspace.pk)
    assert slot.snapshot is not None
    extended = graphstore._extend(slot.snapshot, workspace.pk, version)
    assert extended is not None
    calls: list[str] = []
    gate = threading.Event()

    def slow_extend(old: Any, workspace_id: int, v: Any) -> Any:
        calls.append("extend")
        gate.wait(2)
        return extended

    def no_build(workspace_id: int, v: Any) -> Any:
        calls.append("build")
        raise AssertionError("a stale snapshot that can be extended must not be rebuilt")

    monkeypatch.setattr(graphstore, "_extend", slow_extend)
    monkeypatch.setattr(graphstore, "_build", no_build)
    monkeypatch.setattr(store, "_version", lambda ws: version)
    results: list[graphstore.Subgraph] = []
    threads = [threading.Thread(target=lambda: results.append(store.full_snapshot(workspace))) for _ in range(4)]
    for t in threads:
        t.start()
    gate.set()
    for t in threads:
        t.join()
    assert calls == ["extend"]
    assert [r is extended.subgraph for r in results] == [True] * 4


def test_the_cache_keeps_the_most_recently_used_workspaces(
    settings: Any, user: Any, make_memory: Callable[..., Memory]
) -> None:
    settings.GRAPH_SNAPSHOT_WORKSPACES = 2
    store = SqlGraphStore()
    assert store.max_workspaces == 2
    spaces = [services.workspace_create(owner=user, slug=f"ws{i}", name=f"W{i}") for i in range(3)]
    for ws in spaces:
        link(ws, make_memory("a", ws=ws), make_memory("b", ws=ws))
    store.full_snapshot(spaces[0])
    store.full_snapshot(spaces[1])
    store.full_snapshot(spaces[0])  # now the most recent
    store.full_snapshot(spaces[2])
    assert store.cached_workspaces() == [spaces[0].pk, spaces[2].pk]
    assert SqlGraphStore(max_workspaces=5).max_workspaces == 5


def test_a_snapshot_being_built_is_not_evicted(user: Any) -> None:
    store = SqlGraphStore(max_workspaces=1)
    busy = store._slot(1)
    with busy.lock:
        store._slot(2)
        assert store.cached_workspaces() == [1, 2]  # over the bound while workspace 1 builds
    store._slot(3)
    assert store.cached_workspaces() == [3]


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


def test_snapshot_ids_and_index_behave_like_a_list_and_a_dict(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    link(workspace, a, b)
    snapshot = store.full_snapshot(workspace)
    ordered = sorted([a.id, b.id, c.id], key=lambda u: u.int)
    assert list(snapshot.ids) == ordered
    assert snapshot.ids == ordered
    assert snapshot.ids[-1] == ordered[-1]
    assert snapshot.ids[1:] == ordered[1:]
    with pytest.raises(IndexError):
        snapshot.ids[3]
    assert dict(snapshot.index) == {mid: i for i, mid in enumerate(ordered)}
    assert snapshot.index.get(uuid.uuid4(), -1) == -1
    assert snapshot.index.get(ordered[2]) == 2
    assert snapshot.nodes_of([ordered[2], uuid.uuid4(), ordered[0]]) == [2, 0]
    assert "not a uuid" not in snapshot.index
    with pytest.raises(KeyError):
        snapshot.index[uuid.uuid4()]


def test_node_positions_resolve_colliding_high_halves() -> None:
    shared = 0x1234_5678_9ABC_DEF0
    ids = [uuid.UUID(int=(shared << 64) | low) for low in (5, 1, 9)] + [uuid.UUID(int=7)]
    keys = graphstore._NodeKeys("".join(i.hex for i in ids))
    decoded = keys.uuids()
    assert [keys.position(i) for i in ids] == [decoded.index(i) for i in ids]
    assert keys.position(uuid.UUID(int=(shared << 64) | 2)) == -1
    missing = uuid.UUID(int=(shared << 64) | 2)
    assert keys.positions([*ids, missing]).tolist() == [*(decoded.index(i) for i in ids), -1]


def test_a_co_retrieved_edge_weighs_its_count_until_it_is_seen_often(
    store: SqlGraphStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c, d = (make_memory(text) for text in ("a", "b", "c", "d"))
    for source, target, count in ((a, b, 3), (a, c, 25), (a, d, 0)):
        edge = link(workspace, source, target, "CO_RETRIEVED")
        Edge.objects.filter(pk=edge.pk).update(co_retrieval_count=count)
    weights = {(s, t): w for s, t, _, w in edges_of(store.neighbourhood(workspace, [a.id], hops=1, max_nodes=10))}
    assert weights[(a.id, b.id)] == pytest.approx(3 / graphstore.CO_RETRIEVED_FULL_COUNT)
    assert weights[(a.id, c.id)] == 1.0  # seen together often: its full weight
    assert weights[(a.id, d.id)] == 1.0  # no count (an edge written by hand): its own weight
