"""Neo4jGraphStore against the real FalkorDB Bolt endpoint that pytest starts (tests/services.py).

Every test works in its own namespace of workspace keys and drops it afterwards, so runs sharing the
server never see or delete each other's nodes.
"""

from __future__ import annotations

import io
import os
import random
import socket
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from graph.algorithms import edge_type_code
from graph.bolt import Neo4jGraphStore
from graph.store import EdgeRef, SqlGraphStore, Subgraph, graph_store, set_graph_store
from memories import services
from memories.models import Edge, Memory, Workspace
from surfacing import retrieval
from surfacing.algorithms.ppr import ppr_push
from surfacing.algorithms.spreading import spread
from surfacing.pins import DbPinStore, set_pin_store

NEO4J_URI = os.environ.get("TEST_NEO4J_URI", "bolt://127.0.0.1:7688")

pytestmark = [pytest.mark.services, pytest.mark.django_db]

Make = Callable[..., Memory]
EdgeKey = tuple[uuid.UUID, uuid.UUID, int, float]


def link_all(workspace: Workspace, rows: list[tuple[Memory, Memory, str, float]]) -> None:
    services.edges_bulk_link(
        workspace=workspace,
        edges=[Edge(workspace=workspace, source=a, target=b, edge_type=t, weight=w) for a, b, t, w in rows],
    )


def edges_of(subgraph: Subgraph) -> set[EdgeKey]:
    csr = subgraph.csr
    return {
        (subgraph.ids[u], subgraph.ids[int(csr.indices[e])], int(csr.edge_types[e]), round(float(csr.weights[e]), 6))
        for u in range(csr.n_nodes)
        for e in range(int(csr.indptr[u]), int(csr.indptr[u + 1]))
    }


def hops_from(subgraph: Subgraph, seeds: list[uuid.UUID]) -> dict[uuid.UUID, int]:
    """Undirected BFS distance of every node within reach of the seeds (reference, not the store's code)."""
    csr = subgraph.csr
    start = [subgraph.index[s] for s in seeds if s in subgraph.index]
    dist = {s: 0 for s in start}
    queue = deque(start)
    while queue:
        u = queue.popleft()
        for lo, hi, cols in (
            (csr.indptr[u], csr.indptr[u + 1], csr.indices),
            (csr.rev_indptr[u], csr.rev_indptr[u + 1], csr.rev_indices),
        ):
            for v in cols[int(lo) : int(hi)].tolist():
                if v not in dist:
                    dist[v] = dist[u] + 1
                    queue.append(v)
    return {subgraph.ids[i]: d for i, d in dist.items()}


@pytest.fixture
def random_graph(workspace: Workspace, make_memory: Make) -> list[Memory]:
    """60 memories, 150 edges of mixed types; weights from a small set so ties are common.

    Parallel edges between one pair get distinct weights: for equal ones the SQL snapshot's order is
    its database's GROUP BY order (sorted on SQLite, not defined on PostgreSQL).
    """
    rng = random.Random(11)
    memories = [make_memory(f"memory {i}") for i in range(60)]
    types = ["RELATED", "MENTIONS", "PART_OF", "FOLLOWS", "CO_RETRIEVED", "LINKS_TO"]
    seen: set[tuple[frozenset[uuid.UUID], float]] = set()
    rows: list[tuple[Memory, Memory, str, float]] = []
    while len(rows) < 150:
        a, b = rng.sample(memories[:55], 2)  # the last five stay isolated
        t, w = rng.choice(types), rng.choice([0.25, 0.5, 1.0, 1.0, 2.0, 0.123457])
        if (frozenset((a.id, b.id)), w) not in seen:
            seen.add((frozenset((a.id, b.id)), w))
            rows.append((a, b, t, w))
    link_all(workspace, rows)
    return memories


def test_graph_sync_copies_a_workspace_and_the_graph_then_equals_the_database(
    neo: Neo4jGraphStore, mirrored: Neo4jGraphStore, workspace: Workspace, make_memory: Make, capsys: Any
) -> None:
    set_graph_store(SqlGraphStore())  # data written before the graph existed: nothing mirrored
    memories = [make_memory(f"m{i}") for i in range(30)]
    link_all(workspace, [(memories[i], memories[i + 1], "FOLLOWS", 1.0 + i / 8) for i in range(29)])
    link_all(workspace, [(memories[i], memories[0], "MENTIONS", 0.5) for i in range(5, 30, 5)])
    assert neo.counts(workspace) == (0, 0)
    set_graph_store(neo)

    call_command("graph_sync", "--to", "neo4j", "--workspace", "acme", "--batch", "10")

    out = capsys.readouterr().out
    assert "acme: 10/34 edges" in out and "acme: 34/34 edges" in out
    assert "graph holds 30 nodes, 34 edges" in out
    sql = {
        (s, t, ty): w
        for s, t, ty, w in Edge.objects.filter(workspace=workspace).values_list(
            "source_id", "target_id", "edge_type", "weight"
        )
    }
    assert neo.read_edges(workspace) == sql
    call_command("graph_sync", "--to", "sql", "--workspace", "acme")  # verifies: raises when they differ
    assert "0 edges only in the graph, 0 only in the database, 0 with another weight" in capsys.readouterr().out


def test_a_second_sync_removes_what_the_database_no_longer_has_and_keeps_the_rest(
    neo: Neo4jGraphStore, workspace: Workspace, make_memory: Make
) -> None:
    a, b, c, d = (make_memory(t) for t in "abcd")
    link_all(workspace, [(a, b, "RELATED", 1.0), (b, c, "RELATED", 1.0), (c, d, "MENTIONS", 0.5)])
    set_graph_store(neo)
    try:
        call_command("graph_sync", "--to", "neo4j", "--workspace", "acme", stdout=io.StringIO())
        assert neo.counts(workspace) == (4, 3)
        Edge.objects.filter(workspace=workspace, source=c, target=d).delete()  # behind the hooks' back
        Edge.objects.filter(workspace=workspace, source=a, target=b).update(weight=3.5)
        call_command("graph_sync", "--to", "neo4j", "--workspace", "acme", stdout=io.StringIO())
    finally:
        set_graph_store(None)
    assert neo.read_edges(workspace) == {(a.id, b.id, "RELATED"): 3.5, (b.id, c.id, "RELATED"): 1.0}
    assert neo.counts(workspace) == (3, 2)  # d has no edge left: its node went too


def test_neighbourhood_holds_the_same_nodes_and_edges_as_the_sql_snapshot_within_the_hops(
    neo: Neo4jGraphStore, workspace: Workspace, random_graph: list[Memory]
) -> None:
    from surfacing.graph_sync import sync_workspace

    sync_workspace(neo, workspace)
    full = SqlGraphStore().full_snapshot(workspace)
    all_edges = edges_of(full)
    rng = random.Random(5)
    for hops in (1, 2, 3):
        for _ in range(4):
            seeds = [m.id for m in rng.sample(random_graph, 3)]
            dist = hops_from(full, seeds)
            sub = neo.neighbourhood(workspace, seeds, hops=hops, max_nodes=10_000)
            assert not sub.truncated
            assert set(sub.ids) == {m for m, d in dist.items() if d <= hops}
            # Every edge of a node inside the horizon; edges between two nodes on the horizon are not read.
            expected = {e for e in all_edges if dist.get(e[0], 99) < hops or dist.get(e[1], 99) < hops}
            assert edges_of(sub) == expected
            assert sub.ids == sorted(sub.ids, key=lambda u: u.int)  # the SQL snapshot's node order


def test_spreading_and_ppr_give_the_same_results_on_both_backends(
    neo: Neo4jGraphStore, workspace: Workspace, random_graph: list[Memory]
) -> None:
    from surfacing.graph_sync import sync_workspace

    sync_workspace(neo, workspace)
    full = SqlGraphStore().full_snapshot(workspace)
    rng = random.Random(9)
    for _ in range(6):
        seeds = [m.id for m in rng.sample(random_graph, 4)]
        sub = neo.neighbourhood(workspace, seeds, hops=2, max_nodes=10_000)
        for fan_out in (2, 3, 20):  # small fan-outs make weight ties decide, by node order
            on_sql = spread(full.csr, full.nodes_of(seeds), depth=2, fan_out=fan_out)
            on_neo = spread(sub.csr, sub.nodes_of(seeds), depth=2, fan_out=fan_out)
            as_ids = {
                full.ids[n]: (h.score, h.hops, full.ids[h.seed], h.edge_type, full.ids[h.via])
                for n, h in on_sql.items()
            }
            assert as_ids == {
                sub.ids[n]: (h.score, h.hops, sub.ids[h.seed], h.edge_type, sub.ids[h.via]) for n, h in on_neo.items()
            }
            assert on_sql  # the walks reach something, so equality is not vacuous
        # PPR sees the whole component once every reachable node has been expanded.
        whole = neo.neighbourhood(workspace, seeds, hops=60, max_nodes=10_000)
        for undirected in (False, True):
            p_sql = ppr_push(full.csr, full.nodes_of(seeds), epsilon=1e-9, undirected=undirected)
            p_neo = ppr_push(whole.csr, whole.nodes_of(seeds), epsilon=1e-9, undirected=undirected)
            a = {full.ids[n]: s for n, s in p_sql.scores.items()}
            b = {whole.ids[n]: s for n, s in p_neo.scores.items()}
            assert a.keys() == b.keys()
            assert max(abs(a[k] - b[k]) for k in a) < 1e-9


def test_a_seed_without_edges_is_still_a_node_as_in_the_sql_snapshot(
    neo: Neo4jGraphStore, workspace: Workspace, random_graph: list[Memory]
) -> None:
    from surfacing.graph_sync import sync_workspace

    sync_workspace(neo, workspace)
    lonely, linked = random_graph[-1], random_graph[0]
    sub = neo.neighbourhood(workspace, [lonely.id, linked.id], hops=60, max_nodes=10_000)
    full = SqlGraphStore().full_snapshot(workspace)
    assert sub.nodes_of([lonely.id]) != []
    p_sql = ppr_push(full.csr, full.nodes_of([lonely.id, linked.id]), epsilon=1e-9)
    p_neo = ppr_push(sub.csr, sub.nodes_of([lonely.id, linked.id]), epsilon=1e-9)
    a = {full.ids[n]: s for n, s in p_sql.scores.items()}
    b = {sub.ids[n]: s for n, s in p_neo.scores.items()}
    assert a.keys() == b.keys() and max(abs(a[k] - b[k]) for k in a) < 1e-9


def test_working_context_is_the_same_with_either_store(
    neo: Neo4jGraphStore, workspace: Workspace, make_memory: Make
) -> None:
    from surfacing.graph_sync import sync_workspace

    set_pin_store(DbPinStore())
    decision = make_memory("We picked JWT for authentication", memory_type="decision")
    balancer = make_memory("The load balancer has no sticky sessions")
    rfc = make_memory("RFC 7519 reference kept for the team")
    tokens = make_memory("Refresh tokens rotate daily")
    make_memory("Lunch is at noon")
    link_all(
        workspace,
        [(decision, balancer, "RELATED", 1.0), (balancer, rfc, "MENTIONS", 0.5), (tokens, decision, "RELATED", 2.0)],
    )
    sync_workspace(neo, workspace)
    now = timezone.now()
    results = []
    try:
        for store in (SqlGraphStore(), neo):
            set_graph_store(store)
            ctx = retrieval.get_working_context(
                workspace, "s", "why did we pick JWT?", mode="router", record=False, now=now
            )
            results.append([(i.id, round(i.score, 12), i.provenance) for i in ctx.items])
    finally:
        set_graph_store(None)
        set_pin_store(None)
    assert results[0] == results[1]
    assert {rfc.id, balancer.id, tokens.id} <= {row[0] for row in results[0]}


def test_another_workspaces_nodes_never_appear(
    neo: Neo4jGraphStore,
    workspace: Workspace,
    other_workspace: Workspace,
    make_memory: Make,
) -> None:
    from surfacing.graph_sync import sync_workspace

    mine = [make_memory(f"mine {i}") for i in range(5)]
    theirs = [make_memory(f"theirs {i}", ws=other_workspace) for i in range(5)]
    link_all(workspace, [(mine[i], mine[i + 1], "RELATED", 1.0) for i in range(4)])
    link_all(other_workspace, [(theirs[i], theirs[i + 1], "RELATED", 1.0) for i in range(4)])
    # The same memory ids written under another namespace (another database sharing the server).
    stranger = Neo4jGraphStore(NEO4J_URI, namespace=neo.namespace + "x_", driver=neo.driver)
    try:
        stranger.merge_edges(workspace, [EdgeRef(mine[0].id, theirs[0].id, "RELATED", 9.0)])
        sync_workspace(neo, workspace)
        sync_workspace(neo, other_workspace)

        sub = neo.neighbourhood(workspace, [mine[0].id], hops=10, max_nodes=1_000)
        assert set(sub.ids) == {m.id for m in mine}
        foreign_seed = neo.neighbourhood(workspace, [theirs[2].id], hops=10, max_nodes=1_000)
        assert foreign_seed.csr.n_edges == 0
        assert set(neo.neighbourhood(other_workspace, [theirs[0].id], hops=10, max_nodes=1_000).ids) == {
            m.id for m in theirs
        }
    finally:
        stranger.drop_workspace(workspace)
    assert neo.counts(workspace) == (5, 4)


def test_max_nodes_cuts_the_neighbourhood_fairly_and_says_so(
    neo: Neo4jGraphStore, workspace: Workspace, make_memory: Make
) -> None:
    a, b = make_memory("seed a"), make_memory("seed b")
    hub_fans = [make_memory(f"a fan {i}") for i in range(30)]
    b_fans = [make_memory(f"b fan {i}") for i in range(3)]
    neo.merge_edges(
        workspace,
        [EdgeRef(a.id, m.id, "RELATED", 5.0 + i) for i, m in enumerate(hub_fans)]
        + [EdgeRef(b.id, m.id, "RELATED", 0.5 + i) for i, m in enumerate(b_fans)],
    )
    sub = neo.neighbourhood(workspace, [a.id, b.id], hops=1, max_nodes=8)
    assert sub.truncated
    assert len(sub.ids) == 8
    # Rank first: each seed's heaviest neighbours before the hub's lighter ones.
    assert {m.id for m in b_fans} <= set(sub.ids)
    assert {m.id for m in hub_fans[-3:]} <= set(sub.ids)
    whole = neo.neighbourhood(workspace, [a.id, b.id], hops=1, max_nodes=100)
    assert not whole.truncated and len(whole.ids) == 35


def test_a_node_with_more_edges_than_the_cap_keeps_its_heaviest(
    bolt: Neo4jGraphStore, workspace: Workspace, make_memory: Make
) -> None:
    capped = Neo4jGraphStore(NEO4J_URI, namespace=f"t{uuid.uuid4().hex[:12]}_", driver=bolt.driver, max_neighbours=10)
    try:
        hub = make_memory("hub")
        ids = sorted((uuid.uuid4() for _ in range(25)), key=lambda u: u.int)
        # Weights 1.0 for all but five heavier ones: the cap keeps those and then the lowest ids.
        capped.merge_edges(
            workspace, [EdgeRef(hub.id, m, "MENTIONS", 2.0 if i >= 20 else 1.0) for i, m in enumerate(ids)]
        )
        sub = capped.neighbourhood(workspace, [hub.id], hops=1, max_nodes=100)
        assert not sub.truncated  # a bound like spreading's fan-out, not a cut at max_nodes
        assert set(sub.ids) == {hub.id, *ids[20:], *ids[:5]}
    finally:
        capped.drop_workspace(workspace)


def test_edge_writes_through_the_services_reach_the_graph_after_commit(
    mirrored: Neo4jGraphStore,
    workspace: Workspace,
    make_memory: Make,
    user: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:
    a, b, c = (make_memory(t) for t in "abc")
    with django_capture_on_commit_callbacks(execute=True):
        services.edge_link(workspace=workspace, source=a, target=b, edge_type="RELATED", weight=0.75)
    with django_capture_on_commit_callbacks(execute=True):
        link_all(workspace, [(b, c, "MENTIONS", 1.5), (a, c, "FOLLOWS", 1.0)])
    assert mirrored.read_edges(workspace) == {
        (a.id, b.id, "RELATED"): 0.75,
        (b.id, c.id, "MENTIONS"): 1.5,
        (a.id, c.id, "FOLLOWS"): 1.0,
    }
    with django_capture_on_commit_callbacks(execute=True):
        services.memory_delete_hard(workspace=workspace, memory=c, actor=user)
    assert mirrored.read_edges(workspace) == {(a.id, b.id, "RELATED"): 0.75}
    assert mirrored.counts(workspace) == (2, 1)


def test_a_graph_that_is_down_does_not_fail_the_database_write(
    workspace: Workspace, make_memory: Make, django_capture_on_commit_callbacks: Any
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again at once: nothing listens there
    down = Neo4jGraphStore(f"bolt://127.0.0.1:{port}", timeout=1.0)
    set_graph_store(down)
    try:
        a, b = make_memory("a"), make_memory("b")
        with django_capture_on_commit_callbacks(execute=True):
            services.edge_link(workspace=workspace, source=a, target=b, edge_type="RELATED")
    finally:
        set_graph_store(None)
        down.close()
    assert Edge.objects.filter(workspace=workspace).count() == 1
    assert down.write_failures == 1


def test_weights_keep_six_decimals_and_rows_are_chunked_under_the_parameter_budget(
    neo: Neo4jGraphStore, workspace: Workspace
) -> None:
    hub = uuid.uuid4()
    fans = [uuid.uuid4() for _ in range(400)]  # ~40 KB of rows: far above what one statement may carry
    neo.merge_edges(workspace, [EdgeRef(hub, f, "RELATED", 0.1234567 + i) for i, f in enumerate(fans)])
    edges = neo.read_edges(workspace)
    assert len(edges) == 400
    assert edges[(hub, fans[0], "RELATED")] == 0.123457
    assert edges[(hub, fans[399], "RELATED")] == 399.123457
    neo.ping()  # the server survived


def test_graph_sync_to_sql_verifies_then_rebuilds_the_database_from_the_graph(
    neo: Neo4jGraphStore, workspace: Workspace, make_memory: Make, capsys: Any
) -> None:
    from surfacing.graph_sync import sync_workspace

    a, b, c = (make_memory(t) for t in "abc")
    link_all(workspace, [(a, b, "RELATED", 1.0), (b, c, "MENTIONS", 0.5)])
    sync_workspace(neo, workspace)
    Edge.objects.filter(workspace=workspace, source=a, target=b).delete()
    Edge.objects.filter(workspace=workspace, source=b, target=c).update(weight=0.25)
    link_all(workspace, [(c, a, "FOLLOWS", 1.0)])  # only in the database (no hooks: sql store)
    set_graph_store(neo)
    try:
        with pytest.raises(CommandError, match="differ for acme"):
            call_command("graph_sync", "--to", "sql", "--workspace", "acme")
        assert "1 edges only in the graph, 1 only in the database, 1 with another weight" in capsys.readouterr().out
        call_command("graph_sync", "--to", "sql", "--workspace", "acme", "--apply")
        rows = set(Edge.objects.filter(workspace=workspace).values_list("source_id", "target_id", "weight"))
        assert rows == {(a.id, b.id, 1.0), (b.id, c.id, 0.5), (c.id, a.id, 1.0)}
        call_command("graph_sync", "--to", "sql", "--workspace", "acme", "--apply", "--prune")
        rows = set(Edge.objects.filter(workspace=workspace).values_list("source_id", "target_id", "weight"))
        assert rows == {(a.id, b.id, 1.0), (b.id, c.id, 0.5)}
        call_command("graph_sync", "--to", "sql", "--workspace", "acme")
    finally:
        set_graph_store(None)


def test_graph_sync_of_all_workspaces_drops_the_nodes_of_deleted_ones(
    mirrored: Neo4jGraphStore, workspace: Workspace, make_memory: Make, capsys: Any
) -> None:
    ghost = 987_654
    mirrored.merge_edges(ghost, [EdgeRef(uuid.uuid4(), uuid.uuid4(), "RELATED", 1.0)])
    a, b = make_memory("a"), make_memory("b")
    Edge.objects.create(workspace=workspace, source=a, target=b)
    call_command("graph_sync", "--to", "neo4j")
    assert f"dropped 2 nodes of deleted workspace {mirrored.namespace}{ghost}" in capsys.readouterr().out
    assert mirrored.workspace_keys() == [mirrored.workspace_key(workspace)]


def test_healthz_reports_the_bolt_graph_when_it_is_the_backend(
    neo: Neo4jGraphStore, settings: Any, client: Any
) -> None:
    settings.GRAPH_BACKEND = "neo4j"
    set_graph_store(neo)
    try:
        body = client.get("/healthz").json()
        assert body["status"] == "ok" and body["checks"]["neo4j"]["ok"] is True
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        down = Neo4jGraphStore(f"bolt://127.0.0.1:{port}", timeout=1.0)
        set_graph_store(down)
        response = client.get("/healthz")
        down.close()
        assert response.status_code == 503
        assert response.json()["checks"]["neo4j"]["ok"] is False
    finally:
        set_graph_store(None)


def test_the_factory_builds_the_bolt_store_from_settings(settings: Any) -> None:
    settings.GRAPH_BACKEND = "neo4j"
    settings.NEO4J_URI = NEO4J_URI
    set_graph_store(None)
    try:
        store = graph_store()
        assert isinstance(store, Neo4jGraphStore)
        store.ping()
        assert graph_store() is store
        store.close()  # safe: the driver no longer sends the GOODBYE that wedges FalkorDB
    finally:
        set_graph_store(None)


def test_edge_type_codes_and_weights_land_in_the_csr(neo: Neo4jGraphStore, workspace: Workspace) -> None:
    a, b = sorted((uuid.uuid4(), uuid.uuid4()), key=lambda u: u.int)
    neo.merge_edges(workspace, [EdgeRef(a, b, "part_of", 2.5), EdgeRef(b, a, "WEIRD-TYPE", 1.0)])
    sub = neo.neighbourhood(workspace, [a], hops=1, max_nodes=10)
    assert edges_of(sub) == {(a, b, edge_type_code("PART_OF"), 2.5), (b, a, edge_type_code("OTHER"), 1.0)}
    assert np.all(sub.csr.out_strength == np.array([2.5, 1.0]))
