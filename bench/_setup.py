"""Shared set-up for benchmarks: a Django environment on a throw-away SQLite file under var/bench/."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "var" / "bench"


def django_setup(db_name: str, *, fresh: bool) -> Path:
    """Point DATABASE_URL at var/bench/<db_name>, optionally deleting it first, and set Django up."""
    BENCH_DIR.mkdir(parents=True, exist_ok=True)
    path = BENCH_DIR / db_name
    if fresh:
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
    os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    # Each bench database numbers its workspaces from 1: their persisted vector indexes live apart.
    os.environ.setdefault("VECTOR_INDEX_DIR", str(BENCH_DIR / f"{path.stem}-vectors"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "smartmemory_site.settings")
    os.environ.setdefault("SIGNAL_BACKGROUND_FLUSH", "false")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return path


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]
