"""MCP benchmark: get_working_context over MCP (Streamable HTTP at /mcp/) against the same call over REST.

On a generated workspace (bench/surfacing_data.py: 100k memories and 1M edges by default, built once into
var/bench/mcp-<memories>.sqlite3 and reused; --fresh rebuilds it), one daphne server on 127.0.0.1 serves
all three, and one client process calls them with the same HTTP stack (httpx2, keep-alive connections):

- REST: POST /api/v1/workspaces/bench/context/ (token auth), the JSON read;
- MCP: tools/call get_working_context through the SDK's ClientSession (bearer = the same token), the
  result parsed as an agent's runtime parses it;
- MCP, raw: the same JSON-RPC message POSTed to /mcp/ by hand and its JSON read: the server's share of
  the difference, without the SDK client's.

Each query runs over all three, in rotating order, so they see the same machine load; p50 and p95 of each
are printed side by side with the ratio of the p50s and what MCP adds at p50 (also the median of the
per-query differences). On a shared machine wall times swing with the load, so each call's CPU time is
measured too: the server's (every thread of the daphne process, from /proc/<pid>/task/*/schedstat, in
nanoseconds) and the client's. Rows: the workspace's default mode (legacy) and router deep:multi-hop.

Target (the README's performance table): MCP adds <= 5 ms at p50.

    make bench-mcp            # or: .venv/bin/python bench/bench_mcp.py [--memories 20000] [--runs 60] [--fresh]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _setup import ROOT, add_database_argument, django_setup, percentile, sidecar_path

TARGET_ADDED_MS = 5.0
ROWS: dict[str, dict[str, Any]] = {
    "default (legacy)": {},
    "router deep:multi-hop": {"mode": "router", "strategy": "deep:multi-hop"},
}


def _ensure_workspace(args: argparse.Namespace, sidecar: Path) -> dict[str, Any]:
    from memories.models import Memory, Workspace

    workspace = Workspace.objects.filter(slug="bench").first()
    if (
        not args.fresh
        and workspace is not None
        and sidecar.exists()
        and Memory.objects.filter(workspace=workspace).count() == args.memories
    ):
        print(f"reusing workspace 'bench': {args.memories:,} memories")
        meta: dict[str, Any] = json.loads(sidecar.read_text())
        return meta
    from surfacing_data import generate

    generated = generate(n_memories=args.memories, n_edges=args.memories * 10)
    meta = {"topics": generated.topic_words, "vocabulary": generated.vocabulary}
    sidecar.write_text(json.dumps(meta))
    return meta


def _queries(topics: list[list[str]], vocabulary: list[str], runs: int, seed: int = 13) -> list[str]:
    """Queries as agents write them, from the generated topics so they hit real clusters."""
    rng = random.Random(seed)
    common = vocabulary[40:400]
    return [f"why did the {t[0]} {t[2]} {rng.choice(common)} change" for t in (rng.choice(topics) for _ in range(runs))]


def _token(username: str) -> str:
    from django.core.management import call_command

    out = io.StringIO()
    call_command("create_api_token", username, stdout=out)
    return out.getvalue().split()[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(database_url: str) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "DJANGO_SETTINGS_MODULE": "smartmemory_site.settings",
        "LOG_LEVEL": "WARNING",
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "smartmemory_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return server, f"http://127.0.0.1:{port}"
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise RuntimeError("daphne did not start") from None
            time.sleep(0.2)


@dataclass
class Way:
    """One way of calling: wall time, server CPU and client CPU of each call, in ms."""

    wall: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)


def _cpu_ns(pid: int) -> int:
    """CPU time of every live thread of process ``pid`` (the scheduler's nanosecond count, not clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended meanwhile
    return total


async def _measure(url: str, token: str, queries: list[str], server_pid: int) -> dict[str, dict[str, Way]]:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    results: dict[str, dict[str, Way]] = {}
    raw_headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-11-25"}
    async with (
        httpx2.AsyncClient(base_url=url, headers={"Authorization": f"Token {token}"}, timeout=120) as rest,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http,
        streamable_http_client(url + "/mcp/", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()

        async def over_rest(body: dict[str, Any]) -> float:
            started = time.perf_counter()
            response = await rest.post("/api/v1/workspaces/bench/context/", json=body)
            data = response.json()
            elapsed = (time.perf_counter() - started) * 1000.0
            if response.status_code != 200 or not data["items"]:
                raise RuntimeError(f"REST {response.status_code}: {str(data)[:300]}")
            return elapsed

        async def over_mcp(body: dict[str, Any]) -> float:
            started = time.perf_counter()
            result = await session.call_tool("get_working_context", {"workspace": "bench", **body})
            elapsed = (time.perf_counter() - started) * 1000.0
            if result.is_error or not json.loads(result.content[0].text)["items"]:  # type: ignore[union-attr]
                raise RuntimeError(f"MCP: {result.content[0]}")
            return elapsed

        async def over_raw(body: dict[str, Any]) -> float:
            message = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "get_working_context", "arguments": {"workspace": "bench", **body}},
            }
            started = time.perf_counter()
            response = await http.post(url + "/mcp/", json=message, headers=raw_headers)
            data = response.json()
            answer = json.loads(data["result"]["content"][0]["text"])  # the REST body, as the others read it
            elapsed = (time.perf_counter() - started) * 1000.0
            if response.status_code != 200 or data["result"]["isError"] or not answer["items"]:
                raise RuntimeError(f"MCP raw {response.status_code}: {str(data)[:300]}")
            return elapsed

        ways = {"REST": over_rest, "MCP": over_mcp, "MCP raw": over_raw}
        for label, extra in ROWS.items():
            base = {"session_id": "bench-mcp", "k": 20, **extra}
            for way in ways.values():  # untimed: the server's caches warm up for every way in
                await way({**base, "query": queries[0]})
            timings = {name: Way() for name in ways}
            order = list(ways)
            for k, text in enumerate(queries):
                for name in order[k % 3 :] + order[: k % 3]:
                    server, client = _cpu_ns(server_pid), time.process_time_ns()
                    wall = await ways[name]({**base, "query": text})
                    record = timings[name]
                    record.server_cpu.append((_cpu_ns(server_pid) - server) / 1e6)
                    record.client_cpu.append((time.process_time_ns() - client) / 1e6)
                    record.wall.append(wall)
            results[label] = timings
    return results


def _report(label: str, timings: dict[str, Way]) -> list[str]:
    rest = timings["REST"]
    rest50 = percentile(rest.wall, 50)
    lines = [f"  {label}:"]
    mean = statistics.mean
    for name, way in timings.items():
        p50 = percentile(way.wall, 50)
        line = (
            f"    {name:<8} p50 {p50:7.1f} ms  p95 {percentile(way.wall, 95):7.1f} ms  (n={len(way.wall)})  "
            f"CPU per call: server {mean(way.server_cpu):5.1f} ms, client {mean(way.client_cpu):4.1f} ms"
        )
        if name != "REST":
            added = p50 - rest50
            paired = statistics.median(m - r for m, r in zip(way.wall, rest.wall, strict=True))
            line += (
                f"\n    {'':<8} {p50 / rest50:.2f}x REST; adds {added:+.1f} ms at p50 "
                f"(per-query median {paired:+.1f} ms), CPU {mean(way.server_cpu) - mean(rest.server_cpu):+.1f} ms "
                f"server, {mean(way.client_cpu) - mean(rest.client_cpu):+.1f} ms client"
            )
            if name == "MCP":
                line += f"; target <= {TARGET_ADDED_MS:.0f} ms: {'met' if added <= TARGET_ADDED_MS else 'MISSED'}"
        lines.append(line)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000, help="size of the workspace (edges: 10 per memory)")
    parser.add_argument("--runs", type=int, default=60, help="queries per row, each over REST and over MCP")
    parser.add_argument("--fresh", action="store_true", help="regenerate the workspace")
    add_database_argument(parser)
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("LOG_LEVEL", "WARNING")  # one INFO line per client request otherwise
    db_name = f"mcp-{args.memories}.sqlite3"
    db = django_setup(db_name, fresh=args.fresh, database=args.database)
    from memories.embeddings import embedder_for
    from memories.models import Workspace
    from memories.vectorindex import vector_index, vector_index_settle

    meta = _ensure_workspace(args, sidecar_path(f"mcp-{args.memories}", args.database))
    workspace = Workspace.objects.get(slug="bench")
    embedder = embedder_for(workspace)
    # Built (or loaded) and persisted here, so the server loads it instead of building it inside a request.
    vector_index(workspace=workspace, model=embedder.name, dim=embedder.dim)
    vector_index_settle()
    token = _token(workspace.memberships.get(role="owner").user.get_username())
    queries = _queries(meta["topics"], meta["vocabulary"], args.runs)

    print(
        f"database {db.label}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; "
        f"workspace of {args.memories:,} memories"
    )
    server, url = _start_server(db.url)
    try:
        results = asyncio.run(_measure(url, token, queries, server.pid))
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
    print("get_working_context, k=20, one daphne server and client: REST vs MCP (Streamable HTTP, SDK client) vs raw:")
    for label, timings in results.items():
        for line in _report(label, timings):
            print(line)


if __name__ == "__main__":
    main()
