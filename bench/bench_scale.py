"""The embedded default against the scale-out backend, side by side: SQLite vs PostgreSQL.

Runs, once per backend and each in its own process, the surfacing benchmark in process (bench_surfacing.py
--skip-http --skip-ppr: get_working_context per strategy on the generated 100k-memory / 1M-edge workspace,
generated on first use per backend) and the ingestion benchmark (bench_ingest.py), then prints p50 / p95
of each strategy on both backends with the PostgreSQL / SQLite ratio of the p50s, and the ingestion rates.

Target: PostgreSQL p50 within 1.5x of SQLite for every strategy. PostgreSQL is a throw-away cluster
started the way `make test` starts it (scripts/with_postgres.sh): this runs under it, and both PostgreSQL
runs use that one cluster.

    make bench-scale                       # or: .venv/bin/python bench/bench_scale.py
    .venv/bin/python bench/bench_scale.py --memories 1000000 --edges 5000000 --skip-ingest
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _setup import DATABASES, ROOT, postgres_server

TARGET_RATIO = 1.5


def _run(script: str, database: str, extra: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        command = [sys.executable, str(ROOT / "bench" / script), "--database", database, "--json", str(out), *extra]
        print(f"$ {' '.join(command[1:])}", flush=True)
        subprocess.run(command, check=True, cwd=ROOT, env={**os.environ, "LOG_LEVEL": "WARNING"})
        figures: dict[str, Any] = json.loads(out.read_text())
        return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=60, help="queries per strategy")
    parser.add_argument("--ingest-count", type=int, default=100_000, help="memories of the bulk-ingestion run")
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="regenerate the surfacing workspaces")
    args = parser.parse_args()
    postgres_server()  # runs this again under scripts/with_postgres.sh unless it already runs there

    surfacing: dict[str, dict[str, Any]] = {}
    ingest: dict[str, dict[str, Any]] = {}
    for database in DATABASES:
        extra = ["--memories", str(args.memories), "--edges", str(args.edges), "--runs", str(args.runs)]
        extra += ["--skip-http", "--skip-ppr", *(["--fresh"] if args.fresh else [])]
        surfacing[database] = _run("bench_surfacing.py", database, extra)
        if not args.skip_ingest:
            ingest[database] = _run("bench_ingest.py", database, ["--count", str(args.ingest_count)])

    sqlite, postgres = surfacing["sqlite"], surfacing["postgres"]
    print(
        f"\nget_working_context, k=20, in process, {args.memories:,} memories / {sqlite['edges']:,} edges, "
        f"{args.runs} queries per strategy (ms)"
    )
    print(f"  {'strategy':<40} {'SQLite p50 / p95':>18} {'PostgreSQL p50 / p95':>22} {'ratio p50':>10}")
    worst = 0.0
    for key, mine in sqlite.items():
        if not key.startswith("in-process ") or key not in postgres:
            continue
        theirs = postgres[key]
        ratio = theirs["p50"] / mine["p50"]
        worst = max(worst, ratio)
        print(
            f"  {key.removeprefix('in-process '):<40} {mine['p50']:8.1f} / {mine['p95']:7.1f} "
            f"{theirs['p50']:12.1f} / {theirs['p95']:7.1f} {ratio:9.2f}x"
        )
    verdict = "met" if worst <= TARGET_RATIO else "MISSED"
    print(
        f"  worst ratio {worst:.2f}x (target: PostgreSQL p50 <= {TARGET_RATIO}x SQLite for every strategy: {verdict})"
    )
    if ingest:
        print(f"\ningestion ({args.ingest_count:,} memories in bulk, then 20,000 conversation turns)")
        for database, figures in ingest.items():
            print(
                f"  {database:<10} {figures['memories_per_s']:9,.0f} memories/s  {figures['turns_per_s']:7,.0f} turns/s"
            )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end")


if __name__ == "__main__":
    main()
