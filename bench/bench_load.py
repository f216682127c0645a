"""Load over HTTP: several server processes, closed-loop saturation and an open-loop offered load.

On the surfacing benchmark's 100k-memory / 1M-edge workspace (bench_surfacing.py generates it; run that
first with the same --database), for each process count in --processes:

1. N daphne processes on 127.0.0.1 (PostgreSQL: with Redis for the channel layer and the signal stream,
   as several processes need; SQLite: Redis only when N > 1), each warmed by one context call per strategy;
2. saturation: --clients closed-loop clients, each on its own keep-alive connection to one process (round
   robin), POST /context/ back to back for --duration seconds: throughput and p50 / p95 / p99;
3. offered load: --rate context calls/s plus --write-rate single memory creates/s on a fixed schedule for
   --duration seconds, latency counted from when each request was due (a stalled server shows as latency,
   not as fewer requests); writes go to a second workspace of the same user, so the 100k workspace stays
   as generated. Errors (non-2xx, dropped connections) are counted;
4. offered load during an applied evolution run: N fresh processes on a copy of the database (and of its
   persisted vector indexes; dropped after, so the generated workspace stays pristine for later runs) with
   EVOLUTION_WORKER=thread, the same offered load without an end; after --idle seconds an applied enhanced
   cycle of the 100k workspace is queued through the REST API (POST .../evolution/runs/ {"dry_run": false},
   202 + run id) and worked by a server's embedded worker thread, polled (GET .../runs/{id}/) until it ends,
   then reverted through the API (POST .../runs/{id}/revert/: a large run's revert is queued for the worker,
   202, and polled until summary.revert says it ended; a small one answers once it committed) while the
   load goes on, then --tail seconds more. Per phase (idle, cycle, revert, after): requests, p50 / p95 / p99
   of every request counted from when it was due, errors by status, 5xx apart, and "unsent": requests a
   backlog kept waiting more than 30 s (given up, as a client would; so an overloaded phase does not carry
   its backlog into the next) or still queued at the end; the cycle's wall time and its
   evolvers' transactions (summary.evolvers[].longest_transaction_ms), the revert's wall time and
   summary.revert (transactions, longest_transaction_ms).

Loopback only. Targets: zero errors and context p95 <= 100 ms at the offered load; during the applied run
and its revert, no 5xx (nor a dropped connection) and p99 <= 1 s for every other request. The load average
is printed beside the figures: on a shared machine, latency is not an absolute speed; 5xx counts and the
transactions' lengths are what the phase checks.

    .venv/bin/python bench/bench_load.py --database postgres --processes 1,2
    .venv/bin/python bench/bench_load.py --processes 1 --skip saturation,offered   # the evolution phase alone
    make bench-load
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from _setup import (
    BenchDatabase,
    add_database_argument,
    django_setup,
    percentile,
    redis_url,
    start_daphne,
    stop_server,
)
from bench_surfacing import _strategy, data_stem, generated_queries

TARGET_P95_MS = 100.0
STRATEGIES = ("fast:recency", "factual:point-query", "deep:multi-hop", "legacy")
WRITES_PATH = "/api/v1/workspaces/bench-load-writes/memories/"


@dataclass
class Tally:
    times: list[float] = field(default_factory=list)
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, ms: float | None) -> None:
        with self.lock:
            if ms is None:
                self.errors += 1
            else:
                self.times.append(ms)

    def line(self, label: str, seconds: float) -> str:
        t = self.times
        return (
            f"  {label:<34} {len(t) / seconds:7.1f} req/s  p50 {percentile(t, 50):7.1f}  p95 {percentile(t, 95):7.1f}"
            f"  p99 {percentile(t, 99):7.1f} ms  errors {self.errors}"
        )


def _start_servers(
    n: int, database_url: str, redis_url: str, extra: dict[str, str] | None = None
) -> tuple[list[Any], list[int]]:
    env = {
        "THROTTLE_ENABLED": "false",
        # Runs and scheduled jobs are not what is measured here (the evolution phase works its run: ``extra``).
        "EVOLUTION_WORKER": "external",
        "SCHEDULER_ENABLED": "false",
        **({"REDIS_URL": redis_url} if redis_url else {}),
        **(extra or {}),
    }
    started = [start_daphne(database_url, env) for _ in range(n)]
    return [server for server, _ in started], [port for _, port in started]


class Client:
    """One keep-alive connection; reconnects after an error."""

    def __init__(self, port: int, token: str, timeout: float = 30.0) -> None:
        self.port = port
        self.timeout = timeout
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, bytes]:
        """(HTTP status, body); status 0 when the connection dropped or timed out."""
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            self.conn.request(method, path, None if body is None else json.dumps(body), self.headers)
            response = self.conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return 0, b""

    def post(self, path: str, body: dict[str, Any]) -> bool:
        return 200 <= self.call("POST", path, body)[0] < 300


def _context_body(rng: random.Random, queries: dict[str, list[str]]) -> dict[str, Any]:
    label = rng.choice(STRATEGIES)
    body: dict[str, Any] = {"query": rng.choice(queries[label]), "k": 20, "session_id": "load"}
    body.update({"mode": "legacy"} if label == "legacy" else {"mode": "router", "strategy": _strategy(label)})
    return body


def saturate(ports: list[int], token: str, queries: dict[str, list[str]], clients: int, seconds: float) -> Tally:
    tally = Tally()
    stop = time.monotonic() + seconds

    def run(k: int) -> None:
        rng, client = random.Random(k), Client(ports[k % len(ports)], token)
        while time.monotonic() < stop:
            started = time.perf_counter()
            ok = client.post("/api/v1/workspaces/bench/context/", _context_body(rng, queries))
            tally.add((time.perf_counter() - started) * 1000 if ok else None)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally


def offered(
    ports: list[int], token: str, queries: dict[str, list[str]], rate: float, write_rate: float, seconds: float
) -> tuple[Tally, Tally]:
    reads, writes = Tally(), Tally()
    local = threading.local()
    rng = random.Random(3)
    schedule: list[tuple[float, str]] = []
    for kind, per_second in (("read", rate), ("write", write_rate)):
        if per_second > 0:
            schedule += [(k / per_second, kind) for k in range(int(seconds * per_second))]
    schedule.sort()
    bodies = [_context_body(rng, queries) for _ in schedule]
    start = time.perf_counter() + 0.5

    def one(k: int) -> None:
        due, kind = schedule[k]
        if not hasattr(local, "clients"):
            local.clients = [Client(port, token) for port in ports]
        client = local.clients[k % len(ports)]
        wait = start + due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        if kind == "read":
            ok = client.post("/api/v1/workspaces/bench/context/", bodies[k])
        else:
            ok = client.post(WRITES_PATH, {"content": f"load write {k}"})
        (reads if kind == "read" else writes).add((time.perf_counter() - start - due) * 1000 if ok else None)

    # Enough threads that a slow answer delays no later request: the schedule, not the pool, sets the pace.
    with ThreadPoolExecutor(max_workers=64) as pool:
        list(pool.map(one, range(len(schedule))))
    return reads, writes


RUNS_PATH = "/api/v1/workspaces/bench/evolution/runs/"
TARGET_RUN_P99_MS = 1000.0
PHASES = ("idle", "cycle", "revert", "after")
EVOLUTION_COPY = "load-evolution"
UNSENT = -1
GIVE_UP_SECONDS = 30.0  # a request not sent by this long after it was due is given up (as the client's timeout)


@dataclass(frozen=True)
class Outcome:
    due: float  # seconds after the load began when the request was due (sent, for the run's own requests)
    kind: str  # "context", "write" or "run" (the benchmark's polls of the run)
    status: int  # HTTP status; 0: dropped or timed out (30 s); UNSENT: not sent within 30 s of due, or by the end
    ms: float  # from when it was due to its answer


class OpenLoad:
    """The offered load of `offered`, open-ended: context calls to the 100k workspace and memory creates in the
    second one on a fixed schedule (k / rate s) until stopped, each outcome kept with the time it was due, so
    that the windows of a run (the cycle, the revert) are cut out afterwards. A dispatcher thread hands each
    request to a pool of 128 threads when it is due; a request that finds every thread busy waits, and that
    wait counts in its latency (open loop: a stalled server shows as latency, not as fewer requests)."""

    def __init__(
        self, ports: list[int], token: str, queries: dict[str, list[str]], rate: float, write_rate: float
    ) -> None:
        self.ports, self.token, self.queries = ports, token, queries
        self.rate, self.write_rate = rate, write_rate
        self.outcomes: list[Outcome] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.start = time.perf_counter() + 0.2
        self.tag = f"{time.time():.0f}"
        self.thread = threading.Thread(target=self._dispatch, name="open-load")

    def now(self) -> float:
        return time.perf_counter() - self.start

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def _due(self) -> Iterator[tuple[float, str]]:
        """Both schedules merged in time order: context calls at k / rate, writes at k / write_rate."""
        reads = writes = 0
        while True:
            read_at = reads / self.rate if self.rate > 0 else math.inf
            write_at = writes / self.write_rate if self.write_rate > 0 else math.inf
            if read_at <= write_at:
                yield read_at, "context"
                reads += 1
            else:
                yield write_at, "write"
                writes += 1

    def _dispatch(self) -> None:
        local = threading.local()
        rng = random.Random(5)

        def one(k: int, due: float, kind: str, body: dict[str, Any]) -> None:
            late = self.now() - due
            if late > GIVE_UP_SECONDS:
                # A client would have given up by now: sent this late it would only lengthen the backlog, and
                # carry the load of one phase (the cycle) into the next (the revert).
                self.record(Outcome(due, kind, UNSENT, late * 1000))
                return
            if not hasattr(local, "clients"):
                local.clients = [Client(port, self.token) for port in self.ports]
            client = local.clients[k % len(self.ports)]
            path = "/api/v1/workspaces/bench/context/" if kind == "context" else WRITES_PATH
            status, _ = client.call("POST", path, body)
            self.record(Outcome(due, kind, status, (self.now() - due) * 1000))

        pool = ThreadPoolExecutor(max_workers=128)
        sent: list[tuple[Future[None], float, str]] = []
        try:
            for k, (due, kind) in enumerate(self._due()):
                wait = self.start + due - time.perf_counter()
                if (wait > 0 and self.stopping.wait(wait)) or self.stopping.is_set():
                    break
                body = (
                    _context_body(rng, self.queries)
                    if kind == "context"
                    else {"content": f"load write {self.tag}-{k} beside an evolution run"}
                )
                sent.append((pool.submit(one, k, due, kind, body), due, kind))
        finally:
            # Requests still waiting for a thread when the load stops were due and never sent: a backlog the
            # server did not keep up with. They count as UNSENT, as late as they were by then.
            pool.shutdown(wait=True, cancel_futures=True)
            stopped = self.now()
            for future, due, kind in sent:
                if future.cancelled():
                    self.record(Outcome(due, kind, UNSENT, (stopped - due) * 1000))

    def __enter__(self) -> OpenLoad:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.thread.join()


def _phase_of(due: float, marks: dict[str, float]) -> str:
    """idle until the run is queued, cycle until it is seen finished, then the revert request, then after."""
    if due < marks["run_posted"]:
        return "idle"
    if due < marks["run_done"]:
        return "cycle"
    if due < marks["revert_posted"]:
        return "between"
    return "revert" if due < marks["revert_done"] else "after"


def _phase_lines(outcomes: list[Outcome], phase: str, seconds: float) -> tuple[list[str], bool]:
    """The report lines of one phase (per kind: requests, p50 / p95 / p99 of every request, a dropped or unsent
    one by how late it was when given up, errors by status, 5xx apart) and whether it met the run's target
    (no 5xx, none dropped or unsent, p99 <= 1 s)."""
    lines, met = [], True
    for kind in ("context", "write", "run"):
        mine = [o for o in outcomes if o.kind == kind]
        if not mine:
            continue
        every = [o.ms for o in mine]
        errors = Counter(o.status for o in mine if not 200 <= o.status < 300)
        server = sum(n for code, n in errors.items() if code >= 500)
        names = {0: "dropped", UNSENT: "unsent"}
        shown = ", ".join(f"{names.get(code, code)} x{n}" for code, n in sorted(errors.items())) or "none"
        p50, p95, p99 = (percentile(every, q) for q in (50, 95, 99))
        lines.append(
            f"    {kind:<8} {len(mine):6d} requests ({len(mine) / max(seconds, 1e-9):5.1f}/s)  p50 {p50:7.1f}"
            f"  p95 {p95:7.1f}  p99 {p99:7.1f} ms  5xx {server}  errors: {shown}"
        )
        met = met and server == 0 and not errors.get(0) and not errors.get(UNSENT) and p99 <= TARGET_RUN_P99_MS
    return lines, met


def _cycle_lines(run: dict[str, Any], wall: float) -> list[str]:
    """The cycle's wall time, as the client saw it and as the run's row says, and its evolvers' transactions."""
    summary = run.get("summary") or {}
    entries = summary.get("evolvers", [])
    started, finished = run.get("started_at"), run.get("finished_at")
    server = ""
    if started and finished:
        took = datetime.fromisoformat(finished) - datetime.fromisoformat(started)
        server = f", {took.total_seconds():.1f} s queued to finished by the run's row"
    lines = [f"  cycle: {run.get('status')} in {wall:.1f} s from the POST to the poll that saw it end{server}"]
    for entry in entries:
        lines.append(
            f"    {entry.get('name', '?'):<32} {entry.get('status', '?'):<6} {entry.get('seconds', 0):7.1f} s"
            f"  {entry.get('records', 0):6d} records  {entry.get('transactions', 0):5d} transactions,"
            f" longest {entry.get('longest_transaction_ms', 0):8.1f} ms"
        )
    if entries:
        worst = max(entries, key=lambda e: float(e.get("longest_transaction_ms") or 0))
        longest = float(worst.get("longest_transaction_ms") or 0)
        lines.append(f"    longest transaction of the cycle: {longest:.1f} ms ({worst.get('name')})")
    return lines


def _revert_state(run: dict[str, Any]) -> str:
    return str(((run.get("summary") or {}).get("revert") or {}).get("state", "queued"))


def _poll_run(
    control: Client,
    load: OpenLoad,
    run_id: str,
    run: dict[str, Any],
    ended: Callable[[dict[str, Any]], bool],
    timeout: float,
) -> dict[str, Any]:
    """GET the run every 0.5 s (each poll counted as a request of the load) until ``ended`` says so; the run as
    last seen. Gives up after ``timeout`` seconds."""
    started = load.now()
    while not ended(run):
        time.sleep(0.5)
        sent = load.now()
        status, raw = control.call("GET", f"{RUNS_PATH}{run_id}/?limit=1")
        load.record(Outcome(sent, "run", status, (load.now() - sent) * 1000))
        if status == 200:
            run = json.loads(raw)
        if load.now() - started > timeout:
            raise RuntimeError(f"run {run_id} not ended after {timeout:.0f} s: {run.get('summary')!r:.300}")
    return run


def evolution_under_load(ports: list[int], token: str, queries: dict[str, list[str]], args: argparse.Namespace) -> bool:
    """The offered load through an applied enhanced cycle of the 100k workspace and its revert, both through the
    REST API (202 + run id, polled every 0.5 s; so is a queued revert). Prints each phase and
    returns whether the cycle and the revert met the target."""
    control = Client(ports[0], token, timeout=3600)
    marks: dict[str, float] = {}
    loads: dict[str, float] = {}
    with OpenLoad(ports, token, queries, args.rate, args.write_rate) as load:
        time.sleep(args.idle + 0.2)
        loads["idle"] = os.getloadavg()[0]
        marks["run_posted"] = load.now()
        status, raw = control.call("POST", RUNS_PATH, {"dry_run": False})
        if status != 202:
            raise RuntimeError(f"POST {RUNS_PATH} answered {status}: {raw[:300]!r}")
        run: dict[str, Any] = json.loads(raw)
        run_id = run["run_id"]
        print(f"  run {run_id} queued {marks['run_posted']:.1f} s into the load", flush=True)
        run = _poll_run(
            control, load, run_id, run, lambda r: r.get("status") not in ("queued", "running"), args.run_timeout
        )
        marks["run_done"] = load.now()
        print(f"  run {run.get('status')} at {marks['run_done']:.1f} s; reverting it", flush=True)
        loads["cycle"] = os.getloadavg()[0]
        marks["revert_posted"] = load.now()
        revert_status, revert_raw = control.call("POST", f"{RUNS_PATH}{run_id}/revert/")
        print(f"  revert answered {revert_status} at {load.now():.1f} s", flush=True)
        if revert_status == 202:
            # A large run's revert is queued for the server's worker: polled until it has ended.
            run = _poll_run(
                control, load, run_id, run, lambda r: _revert_state(r) not in ("queued", "reverting"), args.run_timeout
            )
            print(f"  revert {_revert_state(run)} at {load.now():.1f} s (worked by the server's worker)", flush=True)
        marks["revert_done"] = load.now()
        loads["revert"] = os.getloadavg()[0]
        time.sleep(args.tail)
        marks["end"] = load.now()
        loads["after"] = os.getloadavg()[0]
    outcomes = list(load.outcomes)
    _, raw = control.call("GET", f"{RUNS_PATH}{run_id}/?limit=1")
    final: dict[str, Any] = json.loads(raw) if raw else run
    bounds = {
        "idle": (0.0, marks["run_posted"]),
        "cycle": (marks["run_posted"], marks["run_done"]),
        "revert": (marks["revert_posted"], marks["revert_done"]),
        "after": (marks["revert_done"], marks["end"]),
    }
    met_run = True
    print(
        f"  offered load ({args.rate:g} context/s + {args.write_rate:g} writes/s) through an applied enhanced cycle"
        " and its revert; latency from when each request was due, over every request (errors too):"
    )
    for phase in PHASES:
        begin, end = bounds[phase]
        mine = [o for o in outcomes if _phase_of(o.due, marks) == phase and o.due < marks["end"]]
        lines, met = _phase_lines(mine, phase, end - begin)
        note = ""
        if phase == "idle":
            reads = [o for o in mine if o.kind == "context"]
            ok = all(200 <= o.status < 300 for o in mine) and percentile([o.ms for o in reads], 95) <= TARGET_P95_MS
            note = f"; target no errors, context p95 <= {TARGET_P95_MS:.0f} ms: {'met' if ok else 'MISSED'}"
        elif phase in ("cycle", "revert"):
            met_run = met_run and met
            note = f"; target no 5xx or dropped, p99 <= {TARGET_RUN_P99_MS:.0f} ms: {'met' if met else 'MISSED'}"
        print(f"  {phase} {end - begin:.1f} s, load average {loads[phase]:.1f}{note}")
        for line in lines:
            print(line)
    for line in _cycle_lines(run, marks["run_done"] - marks["run_posted"]):
        print(line)
    revert = (final.get("summary") or {}).get("revert", {})
    wall = marks["revert_done"] - marks["revert_posted"]
    print(
        f"  revert: HTTP {revert_status} in {wall:.1f} s, run {final.get('status')}; summary.revert: state"
        f" {revert.get('state')}, {revert.get('reverted')} of {revert.get('records')} records in"
        f" {revert.get('transactions')} transactions, longest {revert.get('longest_transaction_ms')} ms"
    )
    if not 200 <= revert_status < 300:
        print(f"    the revert answered: {revert_raw[:500]!r}")
        met_run = False
    return met_run


def _serve_copy(db: BenchDatabase) -> tuple[str, Path]:
    """A copy of the benchmark's database (and of its persisted vector indexes) for the evolution phase, so that
    the generated 100k workspace stays as generated: (its DATABASE_URL, its VECTOR_INDEX_DIR)."""
    from django.db import connection

    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the copy is of the file alone
    started = time.perf_counter()
    db.save_copy(EVOLUTION_COPY)
    vectors = Path(os.environ["VECTOR_INDEX_DIR"])
    copied = vectors.with_name(f"{vectors.name}-{EVOLUTION_COPY}")
    shutil.rmtree(copied, ignore_errors=True)
    if vectors.exists():
        shutil.copytree(vectors, copied)
    print(f"  copied the database for the run in {time.perf_counter() - started:.1f} s (dropped after)")
    return db.copy_url(EVOLUTION_COPY), copied


def _warm(ports: list[int], token: str, queries: dict[str, list[str]]) -> None:
    for port in ports:
        client = Client(port, token)
        for label in STRATEGIES:
            client.post("/api/v1/workspaces/bench/context/", _context_body(random.Random(label), queries))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2", help="server process counts to measure, e.g. 1,2")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=8, help="closed-loop clients (saturation)")
    parser.add_argument("--rate", type=float, default=50.0, help="offered context calls per second")
    parser.add_argument("--write-rate", type=float, default=10.0, help="offered memory creates per second")
    parser.add_argument("--memories", type=int, default=100_000, help="which generated surfacing workspace")
    parser.add_argument("--idle", type=float, default=20.0, help="evolution phase: seconds of load before the run")
    parser.add_argument("--tail", type=float, default=5.0, help="evolution phase: seconds of load after the revert")
    parser.add_argument("--run-timeout", type=float, default=1800.0, help="evolution phase: give up on the run after")
    parser.add_argument(
        "--skip", default="", help="comma-separated phases to leave out: saturation, offered, evolution"
    )
    add_database_argument(parser)
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",") if n.strip()]
    skip = {name.strip() for name in args.skip.split(",") if name.strip()}
    unknown = skip - {"saturation", "offered", "evolution"}
    if unknown:
        parser.error(f"--skip: unknown phase {sorted(unknown)[0]!r}")

    db = django_setup(f"{data_stem(args.memories)}.sqlite3", fresh=False, database=args.database)
    from memories import services
    from memories.models import Workspace
    from memories.tokens import api_token_create

    workspace, queries = generated_queries(args.memories, args.database, 200)
    owner = workspace.memberships.get(role="owner").user
    if not Workspace.objects.filter(slug="bench-load-writes").exists():
        services.workspace_create(owner=owner, slug="bench-load-writes", name="Load bench writes")
    token = api_token_create(user=owner, name="bench-load").key

    print(f"database {db.label}; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    saturation: dict[int, float] = {}
    verdicts: list[str] = []
    for n in counts:
        redis = redis_url() if (n > 1 or args.database == "postgres") else ""
        label = f"{n} server process(es){' + Redis' if redis else ''}"
        if not {"saturation", "offered"} <= skip:
            servers, ports = _start_servers(n, db.url, redis)
            try:
                _warm(ports, token, queries)
                print(f"{label}:")
                if "saturation" not in skip:
                    tally = saturate(ports, token, queries, args.clients, args.duration)
                    saturation[n] = len(tally.times) / args.duration
                    print(tally.line(f"saturation, {args.clients} clients", args.duration))
                if "offered" not in skip:
                    reads, writes = offered(ports, token, queries, args.rate, args.write_rate, args.duration)
                    print(reads.line(f"offered {args.rate:g} context/s", args.duration))
                    print(writes.line(f"offered {args.write_rate:g} writes/s", args.duration))
                    ok = reads.errors == 0 and writes.errors == 0 and percentile(reads.times, 95) <= TARGET_P95_MS
                    verdict = "met" if ok else "MISSED"
                    print(f"  target (no errors, context p95 <= {TARGET_P95_MS:.0f} ms at the offered load): {verdict}")
            finally:
                for server in servers:
                    stop_server(server)
        if "evolution" not in skip:
            print(f"{label}, evolution run worked by the servers' embedded worker thread (EVOLUTION_WORKER=thread):")
            url, vectors = _serve_copy(db)
            servers, ports = _start_servers(
                n, url, redis, {"EVOLUTION_WORKER": "thread", "VECTOR_INDEX_DIR": str(vectors)}
            )
            try:
                _warm(ports, token, queries)
                met = evolution_under_load(ports, token, queries, args)
                verdicts.append(f"{label}: {'met' if met else 'MISSED'}")
            finally:
                for server in servers:
                    stop_server(server)
                db.drop_copy(EVOLUTION_COPY)
                shutil.rmtree(vectors, ignore_errors=True)
    if len(saturation) > 1:
        base = min(saturation)
        for n, rps in sorted(saturation.items()):
            print(
                f"throughput with {n} process(es): {rps:.1f} req/s = {rps / saturation[base]:.2f}x {base} process(es)"
            )
    for line in verdicts:
        print(f"target during the applied run and its revert (no 5xx, p99 <= {TARGET_RUN_P99_MS:.0f} ms), {line}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
