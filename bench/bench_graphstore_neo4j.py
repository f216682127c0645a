"""Bolt graph store on FalkorDB: sync throughput and neighbourhood latency on 10k-edge workspaces.

Compares the store's frontier expansion (one query per chunk of frontier ids per hop) with a single
variable-length-path query returning the same per-node lists, on two generated graphs of 10k edges:
"conversation" (sessions of 20 turns: FOLLOWS chains, PART_OF a session node, MENTIONS of 300 entities
with Zipf popularity, so a few hubs) and "sparse" (uniform random, average degree 4).
Uses --uri, or $TEST_NEO4J_URI, or else FalkorDB started the way the tests start it (bench/_setup.py:
bolt_uri), which only runs inside scripts/isolated.sh; writes only under the key namespace "bench_" and
deletes it afterwards.

    scripts/isolated.sh .venv/bin/python bench/bench_graphstore_neo4j.py [--queries 30]
    .venv/bin/python bench/bench_graphstore_neo4j.py --uri bolt://127.0.0.1:7687
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
import uuid
from dataclasses import dataclass

from _setup import bolt_uri, django_setup, percentile

VARLEN = """
UNWIND $ids AS x
MATCH (s:Memory {id: x})
WHERE s.ws = $ws
MATCH (s)-[:EDGE*0..%d]-(a:Memory)
WITH DISTINCT a
MATCH (a)-[e:EDGE]-(b:Memory)
WHERE b.ws = $ws
WITH a, b, e ORDER BY e.w DESC, b.id
WITH a, collect(b.id)[0..$cap] AS nb,
     collect(e.wk * 2 + CASE WHEN startNode(e) = a THEN 1 ELSE 0 END)[0..$cap] AS wk
RETURN a.id AS a, nb, wk
"""


def varlen_neighbourhood(store, workspace, seeds, hops):  # type: ignore[no-untyped-def]
    """The alternative: one variable-length query, then the same subgraph build (no max_nodes admission)."""
    from graph.bolt import _unpack

    started = time.perf_counter()
    admitted = {s.hex: 0 for s in seeds}
    edges = {}
    for records in store._chunked(
        VARLEN % (hops - 1), "ids", list(admitted), ws=store.workspace_key(workspace), cap=store.max_neighbours
    ):
        for record in records:
            a = record["a"]
            admitted.setdefault(a, 1)
            for b, packed in zip(record["nb"], record["wk"], strict=True):
                w, code, out = _unpack(int(packed))
                admitted.setdefault(b, 1)
                edges[(a, b, code) if out else (b, a, code)] = w
    return store._subgraph(admitted, edges, False, started)


def report(label: str, times: list[float], sizes: list[tuple[int, ...]]) -> None:
    nodes = statistics.median(s[0] for s in sizes)
    edges = statistics.median(s[1] for s in sizes)
    print(
        f"{label}: p50 {percentile(times, 50):.1f} ms, p95 {percentile(times, 95):.1f} ms;"
        f" median {nodes:.0f} nodes / {edges:.0f} edges"
    )


@dataclass(frozen=True)
class FakeWorkspace:
    pk: int


def conversation_graph(
    rng: random.Random, n_edges: int
) -> tuple[list[tuple[uuid.UUID, uuid.UUID, str, float]], list[uuid.UUID]]:
    entities = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(300)]
    edges: dict[tuple[uuid.UUID, uuid.UUID, str], float] = {}
    turns: list[uuid.UUID] = []
    while len(edges) < n_edges:
        session = uuid.UUID(int=rng.getrandbits(128))
        previous = None
        for _ in range(20):
            turn = uuid.UUID(int=rng.getrandbits(128))
            turns.append(turn)
            edges[(turn, session, "PART_OF")] = 1.0
            if previous is not None:
                edges[(turn, previous, "FOLLOWS")] = 1.0
            for _ in range(rng.choice([0, 0, 1, 1, 2])):
                entity = entities[min(int(rng.paretovariate(1.1)) - 1, len(entities) - 1)]
                edges[(turn, entity, "MENTIONS")] = round(rng.uniform(0.3, 1.0), 6)
            previous = turn
    return [(s, t, ty, w) for (s, t, ty), w in edges.items()], turns


def sparse_graph(
    rng: random.Random, n_edges: int
) -> tuple[list[tuple[uuid.UUID, uuid.UUID, str, float]], list[uuid.UUID]]:
    nodes = [uuid.UUID(int=rng.getrandbits(128)) for _ in range(n_edges // 2)]
    edges: dict[tuple[uuid.UUID, uuid.UUID, str], float] = {}
    types = ["RELATED", "MENTIONS", "PART_OF", "CO_RETRIEVED", "LINKS_TO"]
    while len(edges) < n_edges:
        a, b = rng.sample(nodes, 2)
        edges[(a, b, rng.choice(types))] = round(rng.uniform(0.1, 2.0), 6)
    return [(s, t, ty, w) for (s, t, ty), w in edges.items()], nodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uri", help="Bolt URI (default: $TEST_NEO4J_URI, or FalkorDB started here)")
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    args.uri = args.uri or bolt_uri()
    django_setup("graphstore_neo4j.sqlite3", fresh=False)
    from graph.bolt import Neo4jGraphStore
    from graph.store import EdgeRef
    from surfacing.algorithms.ppr import ppr_push
    from surfacing.algorithms.spreading import spread

    store = Neo4jGraphStore(args.uri, namespace="bench_")
    store.ping()
    rng = random.Random(7)
    try:
        for ws_id, (name, make) in enumerate((("conversation", conversation_graph), ("sparse", sparse_graph)), 1):
            workspace = FakeWorkspace(ws_id)
            store.drop_workspace(ws_id)
            rows, seeds_pool = make(rng, args.edges)
            started = time.perf_counter()
            store.merge_edges(ws_id, [EdgeRef(s, t, ty, w) for s, t, ty, w in rows])
            took = time.perf_counter() - started
            nodes, _ = store.counts(ws_id)
            print(f"[{name}] synced {len(rows)} edges ({nodes} nodes) in {took:.1f} s: {len(rows) / took:,.0f} edges/s")
            seed_sets = [rng.sample(seeds_pool, args.seeds) for _ in range(args.queries)]
            for hops in (1, 2):
                max_nodes = args.seeds * 21**hops  # what get_working_context asks for (fan-out 20)
                times: list[float] = []
                sizes: list[tuple[int, ...]] = []
                walk: list[float] = []
                for seeds in seed_sets:
                    t0 = time.perf_counter()
                    sub = store.neighbourhood(workspace, seeds, hops=hops, max_nodes=max_nodes)
                    times.append((time.perf_counter() - t0) * 1000)
                    sizes.append((sub.csr.n_nodes, sub.csr.n_edges, sub.truncated))
                    t1 = time.perf_counter()
                    seed_nodes = sub.nodes_of(seeds)
                    spread(sub.csr, seed_nodes, depth=hops, fan_out=20)
                    ppr_push(sub.csr, seed_nodes)
                    walk.append((time.perf_counter() - t1) * 1000)
                report(f"[{name}] frontier hops={hops}", times, sizes)
                cut = sum(s[2] for s in sizes)
                print(f"    truncated {cut}/{len(sizes)}; spread+PPR on it p50 {percentile(walk, 50):.1f} ms")
                times, sizes = [], []
                for seeds in seed_sets:
                    t0 = time.perf_counter()
                    sub = varlen_neighbourhood(store, workspace, seeds, hops)
                    times.append((time.perf_counter() - t0) * 1000)
                    sizes.append((sub.csr.n_nodes, sub.csr.n_edges))
                report(f"[{name}] var-length hops={hops} (one query, no max_nodes admission)", times, sizes)
    finally:
        for key in store.workspace_keys():
            store.drop_workspace(key)
        store.close()


if __name__ == "__main__":
    main()
