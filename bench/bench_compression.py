"""Bytes the compression ladder keeps: a generated workspace taken FULL -> SUMMARY -> SKELETON -> TOMBSTONE.

Inserts N agent memories (origin tier 2) of about 600 characters each, opts the workspace in, and runs the
CompressionLadder three times (activation set to 0.3, then 0.1, then 0.01, every memory 40 days old), so
every memory takes the three steps. After each stage it measures the bytes the workspace holds for its
text: memory rows (content + snapshots JSON) and evolution records (before + after JSON), and the size of
the SQLite file after VACUUM. Then it reverts the three runs, newest first, and checks that every content is
the original byte for byte.

    .venv/bin/python bench/bench_compression.py [--memories 2000] [--database sqlite|postgres]
"""

from __future__ import annotations

import argparse
import json
import random
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from _setup import add_database_argument, django_setup

WORDS = (
    "billing outage invoice postgres migration deploy runbook alice bob carol decided because writes second "
    "queue worker latency budget march april owner review dashboard alert index cache session token"
).split()


def text(rng: random.Random, k: int) -> str:
    sentences: list[str] = []
    while sum(len(s) for s in sentences) < 600:
        words = [rng.choice(WORDS) for _ in range(rng.randint(8, 16))]
        words[0] = words[0].capitalize()
        sentences.append(" ".join(words) + f" {k % 97 + rng.randint(1, 400)}.")
    return " ".join(sentences)


def measure(workspace: Any) -> dict[str, int]:
    from django.db import connection

    from history.models import EvolutionRecord
    from memories.models import Memory

    rows = Memory.objects.filter(workspace=workspace).values_list("content", "snapshots")
    memory_bytes = sum(len(c.encode()) + len(json.dumps(s).encode()) for c, s in rows)
    record_bytes = sum(
        len(json.dumps(b).encode()) + len(json.dumps(a).encode())
        for b, a in EvolutionRecord.objects.filter(workspace=workspace).values_list("before", "after")
    )
    out = {"memory_bytes": memory_bytes, "record_bytes": record_bytes, "total_bytes": memory_bytes + record_bytes}
    if connection.vendor == "sqlite":
        with connection.cursor() as cur:
            cur.execute("VACUUM")
            cur.execute("PRAGMA page_count")
            pages = cur.fetchone()[0]
            cur.execute("PRAGMA page_size")
            out["sqlite_file_bytes"] = pages * cur.fetchone()[0]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memories", type=int, default=2000)
    add_database_argument(parser)
    args = parser.parse_args()
    django_setup("compression.sqlite3", fresh=True, database=args.database)

    from django.contrib.auth import get_user_model

    from evolution import services as evolution_services
    from memories import services
    from memories.bulk import bulk_insert
    from memories.models import Memory

    rng = random.Random(19)
    user = get_user_model().objects.create_user("bench")
    workspace = services.workspace_create(owner=user, slug="bench", name="Bench")
    workspace.evolution_settings = {"compression_enabled": True}
    workspace.save()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    made = now - timedelta(days=40)
    originals = {}
    rows = []
    for k in range(args.memories):
        content = text(rng, k)
        mid = uuid.uuid4()
        originals[mid] = content
        rows.append(
            Memory(
                id=mid,
                workspace=workspace,
                memory_type="episodic",
                content=content,
                origin="agent:bench",
                origin_tier=2,
                created_at=made,
                updated_at=made,
            )
        )
    bulk_insert(Memory, rows)
    report: dict[str, Any] = {"memories": args.memories, "stages": {"full": measure(workspace)}}
    runs = []
    for stage, activation, day in (("summary", 0.3, 1), ("skeleton", 0.1, 2), ("tombstone", 0.01, 3)):
        at = now + timedelta(days=day)
        Memory.objects.filter(workspace=workspace).update(activation_score=activation, activation_last_boost_at=at)
        started = time.perf_counter()
        runs.append(
            evolution_services.evolution_run(
                workspace=workspace, actor=user, evolvers=["CompressionLadder"], dry_run=False, now=at
            )
        )
        report["stages"][stage] = {**measure(workspace), "seconds": round(time.perf_counter() - started, 2)}
    tiers = set(Memory.objects.filter(workspace=workspace).values_list("compression_tier", flat=True))
    for run in reversed(runs):
        evolution_services.run_revert(workspace=workspace, run=run, actor=user)
    restored = dict(Memory.objects.filter(workspace=workspace).values_list("id", "content"))
    report["tiers_after_ladder"] = sorted(tiers)
    report["revert_exact"] = all(restored[mid].encode() == content.encode() for mid, content in originals.items())
    full = report["stages"]["full"]["total_bytes"]
    tomb = report["stages"]["tombstone"]["total_bytes"]
    report["tombstone_total_over_full"] = round(tomb / full, 3)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
