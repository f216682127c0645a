"""Where a context call's database time goes: every query of get_working_context, timed, with its plan.

On the surfacing benchmark's workspace (bench_surfacing.py generates it; run that first with the same
--database), one warm call per strategy is traced: each SQL statement with its wall time, then, for the
slowest ``--plans`` statements, the plan (PostgreSQL: EXPLAIN (ANALYZE, BUFFERS); SQLite: EXPLAIN QUERY
PLAN). The figures tell which query shape to fix; the benchmark itself reports the percentiles.

    .venv/bin/python bench/explain_context.py --database postgres [--plans 3] [--strategy deep:multi-hop]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from _setup import add_database_argument, django_setup

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _trace(call: Any) -> list[tuple[float, str, Any]]:
    from django.db import connection

    seen: list[tuple[float, str, Any]] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            seen.append(((time.perf_counter() - started) * 1000, sql, params))

    with connection.execute_wrapper(wrapper):
        call()
    return seen


def _plan(sql: str, params: Any) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        else:
            cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return "\n".join(("      " + " | ".join(str(c) for c in row))[:240] for row in cursor.fetchall())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=100_000, help="which generated workspace (its size)")
    parser.add_argument("--plans", type=int, default=3, help="plans shown per strategy (slowest first)")
    parser.add_argument("--strategy", action="append", help="only these rows (default: every strategy)")
    add_database_argument(parser)
    args = parser.parse_args()
    from bench_surfacing import _strategy, data_stem, generated_queries

    django_setup(f"{data_stem(args.memories)}.sqlite3", fresh=False, database=args.database)

    from memories.signalbus import signal_bus
    from surfacing.retrieval import get_working_context

    workspace, queries = generated_queries(args.memories, args.database, 3)
    for label, texts in queries.items():
        if args.strategy and label not in args.strategy:
            continue
        mode = "legacy" if label == "legacy" else "router"
        strategy = None if label == "legacy" else _strategy(label)

        def call(text: str, m: str = mode, s: str | None = strategy) -> None:
            get_working_context(workspace, "explain", text, k=20, strategy=s, mode=m)

        call(texts[0])  # warm caches and the graph snapshot
        signal_bus().flush()
        started = time.perf_counter()
        trace = _trace(lambda t=texts[1]: call(t))
        total = (time.perf_counter() - started) * 1000
        signal_bus().flush()
        in_db = sum(ms for ms, _, _ in trace)
        print(f"\n== {label} ({texts[1]!r}): {total:.1f} ms, {len(trace)} queries, {in_db:.1f} ms in the database")
        for ms, sql, _ in trace:
            print(f"  {ms:7.2f} ms  {' '.join(sql.split())[:150]}")
        for ms, sql, params in sorted(trace, key=lambda item: -item[0])[: args.plans]:
            print(f"  -- plan of the {ms:.2f} ms query:")
            print(_plan(sql, params))


if __name__ == "__main__":
    main()
