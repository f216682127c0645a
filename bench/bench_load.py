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
   as generated. Errors (non-2xx, dropped connections) are counted.

Loopback only. Targets (offered load): zero errors, context p95 <= 100 ms.

    .venv/bin/python bench/bench_load.py --database postgres --processes 1,2
    make bench-load
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from _setup import ROOT, add_database_argument, django_setup, percentile, start_daphne, stop_server
from bench_surfacing import _strategy, data_stem, generated_queries

TARGET_P95_MS = 100.0
STRATEGIES = ("fast:recency", "factual:point-query", "deep:multi-hop", "legacy")


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


def _redis_url() -> str:
    subprocess.run([str(ROOT / "scripts" / "services.sh"), "start", "redis"], check=True)
    env = subprocess.run(
        [str(ROOT / "scripts" / "services.sh"), "env"], check=True, capture_output=True, text=True
    ).stdout
    return next(line.split("=", 1)[1] for line in env.split() if line.startswith("TEST_REDIS_URL="))


def _start_servers(n: int, database_url: str, redis_url: str) -> tuple[list[Any], list[int]]:
    env = {
        "THROTTLE_ENABLED": "false",
        # Runs and scheduled jobs are not what is measured here.
        "EVOLUTION_WORKER": "external",
        "SCHEDULER_ENABLED": "false",
        **({"REDIS_URL": redis_url} if redis_url else {}),
    }
    started = [start_daphne(database_url, env) for _ in range(n)]
    return [server for server, _ in started], [port for _, port in started]


class Client:
    """One keep-alive connection; reconnects after an error."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
        self.conn: http.client.HTTPConnection | None = None

    def post(self, path: str, body: dict[str, Any]) -> bool:
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.conn.request("POST", path, json.dumps(body), self.headers)
            response = self.conn.getresponse()
            response.read()
            return 200 <= response.status < 300
        except (OSError, http.client.HTTPException):
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            return False


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
            ok = client.post("/api/v1/workspaces/bench-load-writes/memories/", {"content": f"load write {k}"})
        (reads if kind == "read" else writes).add((time.perf_counter() - start - due) * 1000 if ok else None)

    # Enough threads that a slow answer delays no later request: the schedule, not the pool, sets the pace.
    with ThreadPoolExecutor(max_workers=64) as pool:
        list(pool.map(one, range(len(schedule))))
    return reads, writes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", default="1,2", help="server process counts to measure, e.g. 1,2")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds per phase")
    parser.add_argument("--clients", type=int, default=8, help="closed-loop clients (saturation)")
    parser.add_argument("--rate", type=float, default=50.0, help="offered context calls per second")
    parser.add_argument("--write-rate", type=float, default=10.0, help="offered memory creates per second")
    parser.add_argument("--memories", type=int, default=100_000, help="which generated surfacing workspace")
    add_database_argument(parser)
    args = parser.parse_args()
    counts = [int(n) for n in args.processes.split(",") if n.strip()]

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
    for n in counts:
        redis_url = _redis_url() if (n > 1 or args.database == "postgres") else ""
        servers, ports = _start_servers(n, db.url, redis_url)
        try:
            warm = [Client(port, token) for port in ports]
            for client in warm:
                for label in STRATEGIES:
                    client.post("/api/v1/workspaces/bench/context/", _context_body(random.Random(label), queries))
            print(f"{n} server process(es){' + Redis' if redis_url else ''}:")
            tally = saturate(ports, token, queries, args.clients, args.duration)
            saturation[n] = len(tally.times) / args.duration
            print(tally.line(f"saturation, {args.clients} clients", args.duration))
            reads, writes = offered(ports, token, queries, args.rate, args.write_rate, args.duration)
            print(reads.line(f"offered {args.rate:g} context/s", args.duration))
            print(writes.line(f"offered {args.write_rate:g} writes/s", args.duration))
            ok = reads.errors == 0 and writes.errors == 0 and percentile(reads.times, 95) <= TARGET_P95_MS
            verdict = "met" if ok else "MISSED"
            print(f"  target (no errors, context p95 <= {TARGET_P95_MS:.0f} ms at the offered load): {verdict}")
        finally:
            for server in servers:
                stop_server(server)
    if len(saturation) > 1:
        base = min(saturation)
        for n, rps in sorted(saturation.items()):
            print(
                f"throughput with {n} process(es): {rps:.1f} req/s = {rps / saturation[base]:.2f}x {base} process(es)"
            )
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
