"""Background workers: activation flush throughput, boost-to-browser latency, and the scheduled cycle on
100k memories beside live /context/ traffic (SQLite by default, PostgreSQL with --database postgres).

1. Flush throughput: result sets as `retrieval_signals` publishes them (k=20 items, a boost and a
   retrieval event each, plus 10 co-retrieved partner boosts) over a 10k-memory workspace, written by the
   flush the web process runs every SIGNAL_FLUSH_SECONDS (LocalSignalBus -> apply_signals), their boosts
   alone and then with their retrieval events, and, when Redis answers, by the Redis stream flush
   `run_workers` runs. boosts/s = Boost signals / flush seconds (events written in the same transactions
   are not counted). Target >= 20,000 boosts/s.
2. Boost-to-browser latency: a real Chromium on the site (logged in through the login form) holds the
   activation WebSocket of the workspace (/ws/workspaces/<slug>/activation/, as the memory list does) and,
   at a random moment within the flush interval, POSTs /context/ (token auth); latency = from the answer
   (the boosts are queued before it leaves the server) to the socket's message announcing the boosted
   memories, both read on the browser's clock, through daphne with its embedded flusher every
   --flush-seconds (1). Target p95 <= flush interval + 250 ms.
3. The scheduled cycle: the 100k-memory workspace bench_evolution builds (its saved copy is reused, and
   built here once when missing) gets a schedule (cycle_every_hours) and a real `manage.py run_workers`
   beside daphne (EVOLUTION_WORKER=external, flushing every --cycle-flush-seconds, 5) runs the due jobs (the
   retrieval statistics and the decay sweep, whose first run on the workspace writes nearly every row) and
   queues and works the whole default cycle. Meanwhile one client POSTs /context/ at a steady rate
   (--context-rate, 5/s); its p95 while the cycle runs is compared with its p95 at the same rate before
   (idle). Targets: the cycle <= 15 s; /context/ p95 during the cycle <= 2x idle.

    make bench-workers          # or: .venv/bin/python bench/bench_workers.py
    .venv/bin/python bench/bench_workers.py --database postgres
    .venv/bin/python bench/bench_workers.py --skip cycle --latency-samples 60
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _setup import (
    BENCH_DIR,
    ROOT,
    BenchDatabase,
    add_database_argument,
    bench_database,
    django_setup,
    percentile,
    redis_url,
    start_daphne,
    stop_server,
)

FLUSH_TARGET = 20_000.0
LATENCY_MARGIN_MS = 250.0
CYCLE_TARGET_SECONDS = 15.0
CONTEXT_RATIO_TARGET = 2.0
EVOLUTION_SLUG = "bench-evolution"
FLUSH_SLUG = "bench-flush"
PASSWORD = "bench-workers-password"
CHROMIUM = "/usr/bin/chromium"


def evolution_tag(memories: int, seed: int) -> str:
    """The key of bench_evolution's saved copy (sizes, seed, and the migrations it was built with)."""
    schema = hashlib.sha1(" ".join(sorted(p.name for p in ROOT.glob("*/migrations/0*.py"))).encode()).hexdigest()[:8]
    return f"{memories}-{seed}-{schema}"


def prepare_database(args: argparse.Namespace) -> tuple[BenchDatabase, bool]:
    """This benchmark's database, started from bench_evolution's saved 100k workspace when the cycle is
    measured (copied, so both benchmarks keep their own). Returns it and whether the workspace must be built."""
    if "cycle" in args.skip:
        return bench_database("workers.sqlite3", fresh=True, database=args.database), False
    tag = evolution_tag(args.memories, args.seed)
    source = bench_database("evolution.sqlite3", fresh=False, database=args.database)
    suffix = "" if args.database == "sqlite" else f"-{args.database}"
    info = BENCH_DIR / f"evolution-{tag}{suffix}.json"
    db = bench_database("workers.sqlite3", fresh=True, database=args.database)
    if not info.exists() or not source.copy_exists(tag):
        return db, True
    started = time.perf_counter()
    if db.path is not None:
        shutil.copyfile(source._copy_path(tag), db.path)
    else:
        db._admin_sql(
            f'DROP DATABASE IF EXISTS "{db.name}" WITH (FORCE)',
            f'CREATE DATABASE "{db.name}" TEMPLATE "{source._copy_name(tag)}"',
        )
    took = time.perf_counter() - started
    print(f"copied bench_evolution's {args.memories:,}-memory workspace ({tag}) in {took:.1f} s")
    return db, False


def build_evolution_workspace(args: argparse.Namespace, db: BenchDatabase) -> None:
    """bench_evolution's loader, into this database; saved as bench_evolution's copy for both to reuse."""
    sys.path.insert(0, str(Path(__file__).parent))
    import bench_evolution
    from django.db import connection

    tag = evolution_tag(args.memories, args.seed)
    now = datetime.now(UTC).replace(microsecond=0)
    print(f"building the {args.memories:,}-memory workspace (bench_evolution's loader; kept for next time) ...")
    started = time.perf_counter()
    data = bench_evolution.build_workspace(args.memories, args.seed, now)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
        if connection.vendor == "sqlite":
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    source = bench_database("evolution.sqlite3", fresh=False, database=args.database)
    connection.close()
    if db.path is not None:
        shutil.copyfile(db.path, source._copy_path(tag))
    else:
        source._admin_sql(
            f'DROP DATABASE IF EXISTS "{source._copy_name(tag)}"',
            f'CREATE DATABASE "{source._copy_name(tag)}" TEMPLATE "{db.name}"',
        )
    suffix = "" if args.database == "sqlite" else f"-{args.database}"
    saved = {k: v for k, v in data.items() if k != "workspace"}
    (BENCH_DIR / f"evolution-{tag}{suffix}.json").write_text(
        json.dumps({**saved, "ids": [str(i) for i in data["ids"]], "now": now.isoformat()})
    )
    print(f"  built in {time.perf_counter() - started:.0f} s")


def make_users(flush_memories: int) -> dict[str, Any]:
    """The account (password and token), its flush workspace, and its membership of the 100k workspace."""
    from django.contrib.auth import get_user_model

    from memories import services
    from memories.inputs import MemoryInput
    from memories.models import Role, Workspace
    from memories.tokens import api_token_create

    user = get_user_model().objects.create_user("bench-workers", password=PASSWORD)
    token = api_token_create(user=user, name="bench").key
    workspace = services.workspace_create(owner=user, slug=FLUSH_SLUG, name="Bench flush")
    rng = random.Random(11)
    words = ["deploy", "rollback", "billing", "replica", "cache", "queue", "schema", "token", "session", "export"]
    started = time.perf_counter()
    made: list[Any] = []
    for start in range(0, flush_memories, 2000):
        made.extend(
            services.memories_create(
                workspace=workspace,
                actor=user,
                items=[
                    MemoryInput(content=f"note {i}: " + " ".join(rng.sample(words, 4)), memory_type="episodic")
                    for i in range(start, min(flush_memories, start + 2000))
                ],
            )
        )
    print(f"flush workspace: {len(made):,} memories in {time.perf_counter() - started:.1f} s")
    evolution = Workspace.objects.filter(slug=EVOLUTION_SLUG).first()
    if evolution is not None:
        services.membership_set(workspace=evolution, user=user, role=Role.EDITOR)
    return {"user": user, "token": token, "workspace": workspace, "ids": [m.id for m in made]}


def result_sets(workspace_id: int, ids: list[Any], count: int, rng: random.Random) -> list[list[Any]]:
    """What `retrieval_signals` publishes for `count` context calls (k=20, 10 partners)."""
    from django.utils import timezone

    from memories.signalbus import Boost, Retrieval, Signal

    out: list[list[Any]] = []
    for _ in range(count):
        now = timezone.now()
        rs = uuid.uuid4()
        picked = rng.sample(ids, 30)
        signals: list[Signal] = []
        for rank, mid in enumerate(picked[:20], start=1):
            signals.append(Boost(workspace_id, mid, 0.02, now))
            signals.append(Retrieval(workspace_id, mid, rs, rank, "context", "why the deploy failed", "s-1", now))
        signals.extend(Boost(workspace_id, mid, 0.01, now) for mid in picked[20:])
        out.append(signals)
    return out


def bench_flush(users: dict[str, Any], rounds: int, per_round: int, redis_url: str) -> dict[str, float]:
    """Boosts/s of the embedded flush (and of the Redis stream flush when Redis answers)."""
    from memories.signalbus import Boost, LocalSignalBus
    from memories.signalbus.redis import RedisSignalBus

    rng = random.Random(5)
    workspace_id, ids = users["workspace"].pk, users["ids"]
    figures: dict[str, float] = {}
    bus = LocalSignalBus(interval=3600)
    bus.publish([s for batch in result_sets(workspace_id, ids, 50, rng) for s in batch])
    bus.flush()  # warms the page cache and the statements
    # Boosts alone (the activation flush), then the shape the flusher gets in service: with the events.
    for shape in ("boosts", "service"):
        boosts = signals = 0
        seconds = 0.0
        for _ in range(rounds):
            batch = [s for group in result_sets(workspace_id, ids, per_round, rng) for s in group]
            if shape == "boosts":
                batch = [s for s in batch if isinstance(s, Boost)]
            bus.publish(batch)
            started = time.perf_counter()
            bus.flush()
            seconds += time.perf_counter() - started
            boosts += sum(1 for s in batch if isinstance(s, Boost))
            signals += len(batch)
        figures[shape] = boosts / seconds
        events = f" + {signals - boosts:,} retrieval events" if signals > boosts else ""
        print(
            f"embedded flush (LocalSignalBus -> apply_signals), {shape}: {boosts:,} boosts{events} in {rounds} "
            f"flushes of {per_round} result sets, {seconds:.2f} s: {boosts / seconds:,.0f} boosts/s "
            f"({signals / seconds:,.0f} signals/s; target >= {FLUSH_TARGET:,.0f} boosts/s)"
        )
    try:
        import redis

        redis.Redis.from_url(redis_url, socket_connect_timeout=1).ping()
    except Exception as exc:
        print(f"Redis stream flush: skipped, {redis_url} does not answer ({type(exc).__name__})")
        return figures
    stream = f"bench:workers:{uuid.uuid4().hex}"
    publisher = RedisSignalBus(redis_url, stream=stream, consumer="web")
    worker = RedisSignalBus(redis_url, stream=stream, consumer="worker")
    try:
        boosts = signals = 0
        seconds = 0.0
        for _ in range(rounds):
            groups = result_sets(workspace_id, ids, per_round, rng)
            for group in groups:
                publisher.publish(group)
            started = time.perf_counter()
            while publisher.pending():
                worker.flush()
            seconds += time.perf_counter() - started
            boosts += sum(1 for g in groups for s in g if isinstance(s, Boost))
            signals += sum(len(g) for g in groups)
        figures["redis"] = boosts / seconds
        print(
            f"Redis stream flush (run_workers' RedisSignalBus.flush): {boosts:,} boosts in {seconds:.2f} s: "
            f"{boosts / seconds:,.0f} boosts/s ({signals / seconds:,.0f} signals/s)"
        )
    finally:
        publisher._redis.delete(stream, f"{stream}:pending", f"{stream}:dead")
        publisher.close()
        worker.close()
    return figures


_LATENCY_JS = """
async ({slug, token, samples, interval}) => {
  const socket = new WebSocket(`ws://${location.host}/ws/workspaces/${slug}/activation/`);
  await new Promise((ok, fail) => { socket.onopen = ok; socket.onerror = fail; });
  const latencies = [];
  for (let i = 0; i < samples; i++) {
    // A random moment within the flush interval, so the samples cover every phase of it.
    await new Promise(ok => setTimeout(ok, Math.random() * interval * 1000));
    const pushed = new Promise(ok => { socket.onmessage = () => ok(performance.now()); });
    const started = performance.now();
    const response = await fetch(`/api/v1/workspaces/${slug}/context/`, {
      method: "POST", credentials: "omit",
      headers: {"Authorization": `Token ${token}`, "Content-Type": "application/json"},
      body: JSON.stringify({query: "deploy rollback billing", k: 20, session_id: "bench-latency"}),
    });
    if (response.status !== 200) throw new Error(`context answered ${response.status}`);
    await response.json();
    // The boosts were queued before the answer left the server: from here on it is the bus and the push.
    const answered = performance.now();
    latencies.push([answered - started, (await pushed) - answered]);
    socket.onmessage = null;
  }
  socket.close();
  return latencies;
}
"""


def login(page: Any, port: int) -> None:
    page.goto(f"http://127.0.0.1:{port}/accounts/login/")
    page.get_by_label("Username").fill("bench-workers")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state("load")
    if "/accounts/login/" in page.url:
        raise RuntimeError("logging in through the login form failed")


def bench_latency(port: int, token: str, samples: int, interval: float) -> list[tuple[float, float]]:
    """(request ms, answer-to-push ms) per sample, on the browser's clock."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--headless", "--no-sandbox", "--disable-gpu"]
        )
        try:
            page = browser.new_page()
            login(page, port)
            page.goto(f"http://127.0.0.1:{port}/w/{FLUSH_SLUG}/")
            latencies: list[tuple[float, float]] = page.evaluate(
                _LATENCY_JS, {"slug": FLUSH_SLUG, "token": token, "samples": samples, "interval": interval}
            )
        finally:
            browser.close()
    return latencies


class ContextClient:
    """POSTs /context/ of the 100k workspace back to back on one connection; keeps (wall start, ms)."""

    def __init__(self, port: int, token: str, queries: list[str]) -> None:
        self.port, self.token, self.queries = port, token, queries
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()
        self.errors = 0

    def one(self, conn: http.client.HTTPConnection, k: int) -> None:
        body = json.dumps({"query": self.queries[k % len(self.queries)], "k": 20, "session_id": "bench-cycle"})
        headers = {"Authorization": f"Token {self.token}", "Content-Type": "application/json"}
        wall, started = time.time(), time.perf_counter()
        conn.request("POST", f"/api/v1/workspaces/{EVOLUTION_SLUG}/context/", body, headers)
        response = conn.getresponse()
        response.read()
        took = (time.perf_counter() - started) * 1000
        if response.status != 200:
            self.errors += 1
            return
        self.samples.append((wall, took))

    def run(self, count: int | None = None, rate: float = 0.0) -> None:
        """`count` requests (None: until stopped), started `rate` a second (0: back to back); a request that
        ends after its successor's slot delays it, so no more than one is ever in flight."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        k = 0
        began = time.perf_counter()
        while not self.stop.is_set() and (count is None or k < count):
            if rate > 0:
                # Pacing to a steady request rate, not a synchronisation.
                self.stop.wait(max(0.0, began + k / rate - time.perf_counter()))
            self.one(conn, k)
            k += 1
        conn.close()


def context_queries(count: int) -> list[str]:
    from memories.models import Memory

    rng = random.Random(17)
    contents = list(
        Memory.objects.filter(workspace__slug=EVOLUTION_SLUG).order_by("?").values_list("content", flat=True)[:count]
    )
    return [" ".join(rng.sample(c.split(), min(3, len(c.split())))) for c in contents]


def bench_cycle(db: BenchDatabase, port: int, token: str, idle_requests: int, rate: float) -> dict[str, float]:
    """Idle /context/ p95, then the scheduled cycle worked by run_workers while /context/ goes on at the
    same rate."""
    from django.db import connections

    from evolution.models import EvolutionRun, ScheduledJob
    from memories.models import Workspace

    queries = context_queries(200)
    client = ContextClient(port, token, queries)
    client.run(count=30)  # warms the server's caches, graph snapshot and vector index
    client.samples.clear()
    client.run(count=idle_requests, rate=rate)
    idle = [ms for _, ms in client.samples]
    idle_p50, idle_p95 = percentile(idle, 50), percentile(idle, 95)
    print(
        f"/context/ on the {EVOLUTION_SLUG} workspace, idle: {len(idle)} requests, "
        f"p50 {idle_p50:.1f} ms, p95 {idle_p95:.1f} ms"
    )

    workspace = Workspace.objects.get(slug=EVOLUTION_SLUG)
    workspace.evolution_settings = {**(workspace.evolution_settings or {}), "cycle_every_hours": 24}
    workspace.save(update_fields=["evolution_settings"])
    connections.close_all()
    log_path = BENCH_DIR / f"bench-workers-{db.label}.log"
    env = {
        **os.environ,
        "DATABASE_URL": db.url,
        "EVOLUTION_WORKER": "external",
        "SCHEDULER_ENABLED": "true",
        "SCHEDULER_CHECK_SECONDS": "1",
        "PYTHONUNBUFFERED": "1",
    }
    client.samples.clear()
    during = threading.Thread(target=client.run, kwargs={"rate": rate}, name="context-client", daemon=True)
    during.start()
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "run_workers", "--poll", "0.2"], cwd=ROOT, env=env, stdout=log, stderr=log
        )
    try:
        deadline = time.monotonic() + 600
        found: re.Match[str] | None = None
        while found is None:
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"run_workers ended or never finished the cycle:\n{log_path.read_text()[-3000:]}")
            found = re.search(r"run (\S+) \(" + EVOLUTION_SLUG + r"\): (\w+) in ([\d.]+) s", log_path.read_text())
            time.sleep(0.2)
    finally:
        client.stop.set()
        during.join(timeout=120)
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=120)
        except subprocess.TimeoutExpired:
            worker.kill()
    run = EvolutionRun.objects.get(pk=found.group(1))
    seconds = float(found.group(3))
    assert run.finished_at is not None
    end = run.finished_at.timestamp()
    window = [ms for wall, ms in client.samples if end - seconds <= wall <= end]
    p50, p95 = percentile(window, 50), percentile(window, 95)
    for job in ScheduledJob.objects.filter(workspace__slug=EVOLUTION_SLUG).exclude(job="cycle").order_by("id"):
        print(f"  scheduled {job.job} job before the cycle: {job.last_status} in {job.last_seconds:.1f} s")
    for entry in run.summary.get("evolvers", []):
        print(f"  {entry['name']:32s} {entry['status']:9s} {entry['seconds']:6.2f} s  {entry['records']:5} records")
    print(
        f"scheduled cycle (queued by the scheduler, worked by run_workers): {run.status} in {seconds:.1f} s "
        f"(target <= {CYCLE_TARGET_SECONDS:g} s), {run.summary.get('counts', {}).get('records', 0)} records"
    )
    print(
        f"/context/ during the cycle: {len(window)} requests, p50 {p50:.1f} ms, p95 {p95:.1f} ms = "
        f"{p95 / idle_p95:.2f}x idle p95 (target <= {CONTEXT_RATIO_TARGET:g}x); {client.errors} errors; "
        f"worker log {log_path}"
    )
    return {"cycle": seconds, "idle_p95": idle_p95, "during_p95": p95, "ratio": p95 / idle_p95}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000, help="size of the cycle's workspace")
    parser.add_argument("--seed", type=int, default=7, help="bench_evolution's seed (its saved copy's key)")
    parser.add_argument("--flush-memories", type=int, default=10_000)
    parser.add_argument("--flush-rounds", type=int, default=8)
    parser.add_argument("--flush-result-sets", type=int, default=250, help="result sets per flush (k=20 each)")
    parser.add_argument("--latency-samples", type=int, default=40)
    parser.add_argument("--flush-seconds", type=int, default=1, help="SIGNAL_FLUSH_SECONDS of the measured daphne")
    parser.add_argument("--cycle-flush-seconds", type=int, default=5, help="SIGNAL_FLUSH_SECONDS beside the cycle")
    parser.add_argument("--idle-requests", type=int, default=100)
    parser.add_argument("--context-rate", type=float, default=5.0, help="/context/ requests a second (0: back to back)")
    parser.add_argument("--redis", help="Redis of the stream flush (default: $TEST_REDIS_URL, or one started here)")
    parser.add_argument("--skip", default="", help="comma-separated: flush, latency, cycle")
    add_database_argument(parser)
    args = parser.parse_args()
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    # The embedded configuration: the web process flushes its own bus and pushes over its own channel layer.
    for name in ("REDIS_URL", "NEO4J_URI", "LLM_BASE_URL"):
        os.environ.pop(name, None)

    db, build = prepare_database(args)
    # bench_evolution's workspace and its vectors are of the hashing model (see there).
    os.environ.setdefault("EMBEDDER", "hashing")
    django_setup("workers.sqlite3", fresh=False, database=args.database)
    if build:
        build_evolution_workspace(args, db)
    users = make_users(args.flush_memories)
    print(f"database {db.label}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    results: dict[str, Any] = {}
    if "flush" not in args.skip:
        results["flush"] = bench_flush(users, args.flush_rounds, args.flush_result_sets, args.redis or redis_url())
    from django.db import connections

    connections.close_all()

    def serve(flush_seconds: int) -> tuple[Any, int]:
        return start_daphne(
            db.url,
            env={
                "SIGNAL_FLUSH_SECONDS": str(flush_seconds),
                "SIGNAL_BACKGROUND_FLUSH": "true",
                "EVOLUTION_WORKER": "external",
                "SCHEDULER_ENABLED": "false",
                "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            },
        )

    if "latency" not in args.skip:
        server, port = serve(args.flush_seconds)
        try:
            latencies = bench_latency(port, users["token"], args.latency_samples, args.flush_seconds)
        finally:
            stop_server(server)
        target = args.flush_seconds * 1000 + LATENCY_MARGIN_MS
        pushed = [after for _, after in latencies]
        whole = [before + after for before, after in latencies]
        p95 = percentile(pushed, 95)
        results["latency_p95"] = p95
        print(
            f"boost-to-browser over the WebSocket (daphne, flush every {args.flush_seconds} s), {len(pushed)} "
            f"samples: from the /context/ answer (the boost queued) to the push p50 {percentile(pushed, 50):.0f} ms, "
            f"p95 {p95:.0f} ms, max {max(pushed):.0f} ms (target <= {target:.0f} ms: {p95 / target:.2f}x of it); "
            f"from the request's start p95 {percentile(whole, 95):.0f} ms"
        )
    if "cycle" not in args.skip:
        # The cycle beside a web process flushing at its default interval, as `make run` and deploy.md run it.
        server, port = serve(args.cycle_flush_seconds)
        try:
            results["cycle"] = bench_cycle(db, port, users["token"], args.idle_requests, args.context_rate)
        finally:
            stop_server(server)
    verdict = {True: "met", False: "missed"}
    parts = []
    if "flush" in results:
        parts.append(f"flush {verdict[results['flush']['boosts'] >= FLUSH_TARGET]} (boosts alone)")
        parts.append(f"{verdict[results['flush']['service'] >= FLUSH_TARGET]} (with their retrieval events)")
    if "latency_p95" in results:
        parts.append(f"latency {verdict[results['latency_p95'] <= args.flush_seconds * 1000 + LATENCY_MARGIN_MS]}")
    if "cycle" in results:
        cycle = results["cycle"]
        parts.append(f"cycle {verdict[cycle['cycle'] <= CYCLE_TARGET_SECONDS]}")
        parts.append(f"/context/ during the cycle {verdict[cycle['ratio'] <= CONTEXT_RATIO_TARGET]}")
    print(f"targets ({db.label}): " + ", ".join(parts))


if __name__ == "__main__":
    main()
