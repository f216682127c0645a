"""Surfacing benchmark: get_working_context per strategy, in process and over HTTP, and PPR vs networkx.

On a generated workspace of 100k memories and 1M edges (bench/surfacing_data.py; built once into
var/bench/surfacing.sqlite3, or the bench_surfacing database with --database postgres, and reused;
--fresh rebuilds it), this prints:

- graph snapshot build time (the first deep query of a process pays it) and, last, the time to extend it
  after an edge write (what the first deep query after a conversation ingest pays);
- the vector index of the workspace's embedder (built, or loaded from var/vectors, before timing): every
  router query but a point query takes its semantic candidates from it;
- p50/p95 of get_working_context per strategy in process (router mode with an explicit strategy, plus
  legacy mode), recording boosts as a real call does (the bus is flushed between queries, untimed), and
  the CPU a call costs (this thread, plus its backend process on PostgreSQL: steady on a busy machine);
- the same over HTTP against a daphne server on 127.0.0.1 (token auth, one keep-alive connection; a web process
  only, its scheduled jobs left to workers, which bench_workers measures);
- PPR forward push (the service's settings) vs networkx.pagerank with the same personalisation on the
  same 1M-edge graph, as a speed ratio, and the L1 distance of the two on a 10k-node graph.

Targets (the README's performance table): fast:recency p50 <= 25 ms; deep:multi-hop p50 <= 80 ms and p95 <= 150 ms;
PPR >= 50x networkx; L1 <= 1e-4 on <= 10k nodes.

    make bench-surfacing            # or: .venv/bin/python bench/bench_surfacing.py [--fresh] [--runs 60]
    .venv/bin/python bench/bench_surfacing.py --database postgres   # the same on PostgreSQL
"""

from __future__ import annotations

import argparse
import gc
import http.client
import json
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

from _setup import (
    BenchDatabase,
    add_database_argument,
    django_setup,
    percentile,
    sidecar_path,
    start_daphne,
    stop_server,
)


def data_stem(memories: int) -> str:
    """The name of a generated workspace's database and sidecar: the 100k default keeps its old name."""
    return "surfacing" if memories == 100_000 else f"surfacing-{memories}"


TARGETS = {"fast:recency": (25.0, None), "deep:multi-hop": (80.0, 150.0)}


ENTITY_ROW = "factual:point-query (entity)"


def _strategy(label: str) -> str:
    """The strategy a row of the report runs ("factual:point-query (entity)" runs factual:point-query)."""
    return label.split(" ")[0]


def _queries(
    topics: list[list[str]], vocabulary: list[str], entities: list[str], runs: int, seed: int = 11
) -> dict[str, list[str]]:
    """Queries as agents write them, built from the generated topics so they hit real clusters; the
    entity row names generated entities (hubs of up to 10^4 MENTIONS edges), so the point query takes
    its graph path."""
    rng = random.Random(seed)
    picks = [rng.choice(topics) for _ in range(runs)]
    common = vocabulary[40:400]
    return {
        "fast:recency": [f"latest {t[0]} {t[1]} {rng.choice(common)}" for t in picks],
        "factual:point-query": [f"{t[0]}s" for t in picks],
        ENTITY_ROW: [f"show {rng.choice(entities)}" for _ in range(runs)],
        "deep:multi-hop": [f"why did the {t[0]} {t[2]} {rng.choice(common)} change" for t in picks],
        "legacy": [f"{t[1]} {t[0]} {rng.choice(common)}" for t in picks],
    }


def generated_queries(memories: int, database: str, runs: int) -> tuple[Any, dict[str, list[str]]]:
    """The generated workspace of ``memories`` (Django set up on it already) and the report's query sets of
    ``runs`` queries each; exits with advice when this backend has none yet."""
    from memories.models import Memory, Workspace

    sidecar = sidecar_path(data_stem(memories), database)
    workspace = Workspace.objects.filter(slug="bench").first()
    if workspace is None or not sidecar.exists():
        raise SystemExit(f"no bench workspace on {database}: run bench/bench_surfacing.py --database {database} first")
    meta = json.loads(sidecar.read_text())
    entities = list(
        Memory.objects.filter(workspace=workspace, memory_type="entity")
        .order_by("subject")
        .values_list("content", flat=True)
    )
    return workspace, _queries(meta["topics"], meta["vocabulary"], entities, runs)


def _ensure_workspace(args: argparse.Namespace) -> dict[str, Any]:
    from django.db import connection

    from memories.embeddings import embedder_for
    from memories.models import Edge, Memory, Workspace

    sidecar = sidecar_path(data_stem(args.memories), args.database)
    workspace = Workspace.objects.filter(slug="bench").first()
    if (
        not args.fresh
        and workspace is not None
        and sidecar.exists()
        and Memory.objects.filter(workspace=workspace).count() == args.memories
        and (args.embedder is None or workspace.embedder == args.embedder)
        # Generated before vectors carried their model's name, or with its vectors left to the embed job:
        # the vector index would not hold them all.
        and not Memory.objects.filter(workspace=workspace)
        .exclude(embedding_model=embedder_for(workspace).name)
        .exists()
    ):
        meta: dict[str, Any] = json.loads(sidecar.read_text())
        meta["edges"] = Edge.objects.filter(workspace=workspace).count()
        print(f"reusing workspace 'bench': {args.memories:,} memories, {meta['edges']:,} edges ({connection.vendor})")
        return meta
    from surfacing_data import generate

    started = time.perf_counter()
    generated = generate(n_memories=args.memories, n_edges=args.edges, embedder=args.embedder or "")
    print(f"generated {args.memories:,} memories, {generated.edges:,} edges in {time.perf_counter() - started:.0f} s")
    meta = {"topics": generated.topic_words, "vocabulary": generated.vocabulary, "edges": generated.edges}
    sidecar.write_text(json.dumps(meta))
    return meta


def _server_cpu_ns() -> int:
    """CPU time (ns) of this connection's PostgreSQL backend process so far (0 on SQLite: in process).

    With it, the CPU column is what a call costs on either backend, whatever else the machine runs."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return 0
    global _BACKEND_PID
    if _BACKEND_PID is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            _BACKEND_PID = int(cursor.fetchone()[0])
    return int(Path(f"/proc/{_BACKEND_PID}/schedstat").read_text().split()[0])


_BACKEND_PID: int | None = None


def _timed(fn: Any, cpu: list[float] | None = None) -> float:
    server = _server_cpu_ns() if cpu is not None else 0
    started, thread = time.perf_counter(), time.thread_time()
    fn()
    if cpu is not None:
        server = _server_cpu_ns() - server
        cpu.append((time.thread_time() - thread) * 1000.0 + server / 1e6)
    return (time.perf_counter() - started) * 1000.0


def _report(label: str, strategy: str, times: list[float], cpu: list[float] | None = None) -> str:
    p50, p95 = percentile(times, 50), percentile(times, 95)
    cpu_note = f"  [CPU p50 {percentile(cpu, 50):6.1f} ms]" if cpu else ""
    target = TARGETS.get(strategy)
    verdict = ""
    if target is not None:
        ok = p50 <= target[0] and (target[1] is None or p95 <= target[1])
        limits = f"p50 <= {target[0]:.0f}" + (f", p95 <= {target[1]:.0f}" if target[1] else "")
        verdict = f"  target {limits}: {'met' if ok else 'MISSED'}"
    return f"  {label:<10} {strategy:<29} p50 {p50:7.1f} ms  p95 {p95:7.1f} ms  (n={len(times)}){cpu_note}{verdict}"


def _resident_bytes() -> int:
    """This process's resident set size (Linux /proc)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _figures(times: list[float], cpu: list[float] | None = None) -> dict[str, float]:
    out = {"p50": percentile(times, 50), "p95": percentile(times, 95)}
    if cpu:
        out["cpu_p50"] = percentile(cpu, 50)
    return out


def bench_in_process(workspace: Any, queries: dict[str, list[str]]) -> dict[str, tuple[list[float], list[float]]]:
    from memories.signalbus import signal_bus
    from surfacing.retrieval import get_working_context

    results: dict[str, tuple[list[float], list[float]]] = {}
    bus = signal_bus()
    for strategy, texts in queries.items():
        mode = "legacy" if strategy == "legacy" else "router"
        explicit = None if strategy == "legacy" else _strategy(strategy)
        # One untimed call warms the SQLite page cache for this query shape.
        get_working_context(workspace, "bench", texts[0], k=20, strategy=explicit, mode=mode)
        bus.flush()
        times: list[float] = []
        cpu: list[float] = []
        for text in texts:

            def call(t: str = text, s: str | None = explicit, m: str = mode) -> None:
                get_working_context(workspace, "bench", t, k=20, strategy=s, mode=m)

            times.append(_timed(call, cpu))
            bus.flush()
        results[strategy] = (times, cpu)
    return results


def bench_http(db: BenchDatabase, token: str, queries: dict[str, list[str]]) -> dict[str, list[float]]:
    # A web process only: the scheduled jobs (the hourly decay sweep, retrieval statistics) would start at
    # once in a fresh server's embedded worker and sweep the whole workspace while it is measured; their
    # cost beside requests is bench_workers' subject.
    server, port = start_daphne(db.url, {"EVOLUTION_WORKER": "external", "SCHEDULER_ENABLED": "false"})
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}

        def post(body: dict[str, Any]) -> None:
            conn.request("POST", "/api/v1/workspaces/bench/context/", json.dumps(body), headers)
            response = conn.getresponse()
            payload = response.read()
            if response.status != 200:
                raise RuntimeError(f"HTTP {response.status}: {payload[:300]!r}")

        results: dict[str, list[float]] = {}
        for strategy, texts in queries.items():
            base: dict[str, Any] = {"session_id": "bench-http", "k": 20}
            base.update(
                {"mode": "legacy"} if strategy == "legacy" else {"mode": "router", "strategy": _strategy(strategy)}
            )
            post({**base, "query": texts[0]})  # warms the server's graph snapshot and caches
            results[strategy] = [_timed(lambda t=text, b=base: post({**b, "query": t})) for text in texts]
        conn.close()
        return results
    finally:
        stop_server(server)


def _networkx_digraph(graph: Any) -> Any:
    """The CSR graph as a weighted networkx DiGraph (parallel typed edges merged by summing weights)."""
    import networkx as nx
    import scipy.sparse as sp

    n = graph.n_nodes
    matrix = sp.csr_matrix((graph.weights.astype("float64"), graph.indices.copy(), graph.indptr.copy()), shape=(n, n))
    matrix.sum_duplicates()
    return nx.from_scipy_sparse_array(matrix, create_using=nx.DiGraph, edge_attribute="weight")


def _merged_csr(graph: Any) -> Any:
    """The same graph as build_csr input with parallel edges merged, so both sides see one graph."""
    import numpy as np
    import scipy.sparse as sp

    from graph.algorithms import build_csr

    n = graph.n_nodes
    data = (graph.weights.astype("float64"), graph.indices.copy(), graph.indptr.copy())
    coo = sp.csr_matrix(data, shape=(n, n)).tocoo()
    coo.sum_duplicates()
    return build_csr(n, coo.row, coo.col, coo.data, np.zeros(coo.nnz, dtype=np.int8))


def bench_ppr(snapshot: Any, runs: int) -> list[str]:
    import networkx as nx
    import numpy as np

    from graph.algorithms import build_csr
    from surfacing.algorithms.ppr import ppr_power, ppr_push
    from surfacing.settings import SurfacingSettings

    cfg = SurfacingSettings()
    rng = np.random.default_rng(5)
    lines = []

    def dense(scores: dict[int, float], n: int) -> Any:
        out = np.zeros(n)
        for node, value in scores.items():
            out[node] = value
        return out

    # Speed: directed PPR on the full 1M-edge graph, the same seeds and graph for both.
    started = time.perf_counter()
    merged = _merged_csr(snapshot.csr)
    g = _networkx_digraph(merged)
    n = merged.n_nodes
    print(f"  (networkx graph built in {time.perf_counter() - started:.1f} s, untimed)")
    seeds = [int(s) for s in rng.choice(n, size=cfg.graph_seeds, replace=False)]
    started = time.perf_counter()
    nx_scores = nx.pagerank(g, alpha=cfg.ppr_alpha, personalization=dict.fromkeys(seeds, 1.0), weight="weight")
    nx_seconds = time.perf_counter() - started
    exact = np.fromiter((nx_scores[i] for i in range(n)), np.float64, n)
    top = set(np.argsort(-exact)[:100].tolist())
    for epsilon in (cfg.ppr_epsilon, 1e-6):
        push_times = []
        result = None
        for _ in range(runs):
            started = time.perf_counter()
            result = ppr_push(merged, seeds, alpha=cfg.ppr_alpha, epsilon=epsilon, max_pushes=10_000_000)
            push_times.append(time.perf_counter() - started)
        assert result is not None
        push = float(np.median(push_times))
        estimate = dense(result.scores, n)
        overlap = len(top & set(np.argsort(-estimate)[:100].tolist()))
        lines.append(
            f"  PPR {n:,} nodes / {merged.n_edges:,} edges: networkx.pagerank {nx_seconds * 1000:,.0f} ms, "
            f"ppr_push(epsilon={epsilon:g}) {push * 1000:.1f} ms -> {nx_seconds / push:,.0f}x faster "
            f"(target >= 50x); L1 {np.abs(exact - estimate).sum():.2e} (push residual bound "
            f"{result.residual_mass:.2e}), top-100 overlap {overlap}/100"
        )

    # Agreement: a 10k-node graph with the bench's degree profile (a few hubs, mean out-degree 8),
    # both sides run to tight tolerances so the distance measures the push, not networkx's stopping rule.
    keep, m = 10_000, 80_000
    hubs = rng.zipf(1.6, size=m) % keep
    src = rng.integers(0, keep, size=m)
    dst = np.where(rng.random(m) < 0.3, hubs, rng.integers(0, keep, size=m))
    ok = src != dst
    sub = _merged_csr(
        build_csr(
            keep, src[ok], dst[ok], rng.choice([1.0, 0.5, 2.0], size=int(ok.sum())), np.zeros(int(ok.sum()), np.int8)
        )
    )
    gs = _networkx_digraph(sub)
    seeds = [int(s) for s in rng.choice(keep, size=cfg.graph_seeds, replace=False)]
    exact_nx = nx.pagerank(
        gs, alpha=cfg.ppr_alpha, personalization=dict.fromkeys(seeds, 1.0), weight="weight", tol=1e-12, max_iter=1000
    )
    exact = np.fromiter((exact_nx[i] for i in range(keep)), np.float64, keep)
    started = time.perf_counter()
    result = ppr_push(sub, seeds, alpha=cfg.ppr_alpha, epsilon=1e-9, max_pushes=50_000_000)
    push_ms = (time.perf_counter() - started) * 1000
    power = ppr_power(sub, seeds, alpha=cfg.ppr_alpha, tol=1e-12, max_iter=1000)
    lines.append(
        f"  PPR agreement on {keep:,} nodes / {sub.n_edges:,} edges: L1(ppr_push eps=1e-9 [{push_ms:.0f} ms], "
        f"networkx tol=1e-12) = {np.abs(exact - dense(result.scores, keep)).sum():.2e} (target <= 1e-4); "
        f"L1(ppr_power, networkx) = {np.abs(exact - power).sum():.2e}"
    )
    return lines


def bench_refresh(workspace: Any, n_edges: int = 100, seed: int = 3) -> str:
    """Snapshot refresh after an edge write: ``n_edges`` new edges between existing memories, then one
    read, inside a transaction that is rolled back (the bench workspace stays as generated)."""
    from django.db import transaction

    from graph.store import SqlGraphStore
    from memories import services
    from memories.models import Edge, Memory

    store = SqlGraphStore()
    store.full_snapshot(workspace)
    ids = list(Memory.objects.filter(workspace=workspace).values_list("id", flat=True)[:20_000])
    rng = random.Random(seed)

    class Rollback(Exception):
        pass

    try:
        with transaction.atomic():
            services.edges_bulk_link(
                workspace=workspace,
                edges=[
                    Edge(workspace=workspace, source_id=a, target_id=b, edge_type="LINKS_TO", weight=0.5)
                    for a, b in (rng.sample(ids, 2) for _ in range(n_edges))
                ],
            )
            started, cpu = time.perf_counter(), time.process_time()
            extended = store.full_snapshot(workspace)
            line = (
                f"snapshot after {n_edges} new edges: {'extended' if extended.incremental else 'REBUILT'} in "
                f"{(time.perf_counter() - started) * 1000:.0f} ms wall, {(time.process_time() - cpu) * 1000:.0f} ms CPU"
            )
            raise Rollback
    except Rollback:
        pass
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=60, help="queries per strategy")
    parser.add_argument("--fresh", action="store_true", help="regenerate the workspace")
    parser.add_argument(
        "--embedder", metavar="SPEC", help="the workspace's EMBEDDER spec (default: the site's; another regenerates)"
    )
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument("--skip-ppr", action="store_true")
    parser.add_argument("--json", default="", help="also write the percentiles to this JSON file (bench_scale)")
    add_database_argument(parser)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    db = django_setup(f"{data_stem(args.memories)}.sqlite3", fresh=args.fresh, database=args.database)
    from graph.store import graph_store
    from memories.embeddings import embedder_for
    from memories.models import Memory, Workspace
    from memories.tokens import api_token_create
    from memories.vectorindex import vector_index, vector_index_settle

    meta = _ensure_workspace(args)
    workspace = Workspace.objects.get(slug="bench")
    entities = list(
        Memory.objects.filter(workspace=workspace, memory_type="entity")
        .order_by("subject")
        .values_list("content", flat=True)
    )
    queries = _queries(meta["topics"], meta["vocabulary"], entities, args.runs)

    print(f"database {db.label}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    gc.collect()
    resident = _resident_bytes()
    started, cpu = time.perf_counter(), time.process_time()
    snapshot = graph_store().neighbourhood(workspace, [], hops=2, max_nodes=0)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    gc.collect()
    grown = (_resident_bytes() - resident) / 2**20
    per_million = grown / max(snapshot.csr.n_edges / 1e6, 1e-9)
    print(
        f"graph snapshot: {snapshot.csr.n_nodes:,} nodes, {snapshot.csr.n_edges:,} edges built in "
        f"{seconds:.2f} s wall, {cpu:.2f} s CPU; the process grew {grown:.0f} MiB ({per_million:.0f} MiB per 1M edges)"
    )

    started = time.perf_counter()
    embedder = embedder_for(workspace)
    index = vector_index(workspace=workspace, model=embedder.name, dim=embedder.dim)
    settled = vector_index_settle()
    print(
        f"vector index: {len(index):,} {embedder.name} vectors ready in {time.perf_counter() - started:.1f} s"
        f" ({'settled' if settled else 'still building'}; a persisted index loads in about a second)"
    )

    print("get_working_context, k=20 (router mode with the strategy given; legacy = mode legacy):")
    figures: dict[str, Any] = {"database": db.label, "memories": args.memories, "edges": meta["edges"]}
    for strategy, (times, cpu_ms) in bench_in_process(workspace, queries).items():
        print(_report("in-process", strategy, times, cpu_ms))
        figures[f"in-process {strategy}"] = _figures(times, cpu_ms)
    if not args.skip_http:
        user = workspace.memberships.get(role="owner").user
        token = api_token_create(user=user, name="bench")
        for strategy, times in bench_http(db, token.key, queries).items():
            print(_report("HTTP", strategy, times))
            figures[f"HTTP {strategy}"] = _figures(times)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    if not args.skip_ppr:
        print("PPR alone:")
        for line in bench_ppr(snapshot, runs=5):
            print(line)
    print(bench_refresh(workspace))


if __name__ == "__main__":
    main()
