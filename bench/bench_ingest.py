"""Bulk ingestion throughput with the site's embedder on SQLite or PostgreSQL (target >= 2,000 memories/s for 100k).

Runs the real write path, `memories.services.memories_create` (validation-free typed inputs, one
embedding batch per chunk, bulk INSERT, FTS5 triggers or the generated tsvector), in chunks of 5,000 as an agent calling
POST /memories/bulk/ would, then a conversation ingestion of 20k turns with entity extraction. With a slow
embedder (minilm, the default when installed) such writes store the memories without a vector and the
scheduler's embed job embeds them in the background: the bench then runs that job for `--embed-seconds`
and prints its rate, and how long the whole backlog takes at that rate. `EMBEDDER=hashing` measures inline embedding.

    make bench-ingest            # or: .venv/bin/python bench/bench_ingest.py --count 100000 [--database postgres]
"""

from __future__ import annotations

import argparse
import json
import random
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _setup import add_database_argument, django_setup

TARGET_PER_SECOND = 2000.0

WORDS = (
    "jwt token session cookie load balancer redis postgres deploy incident latency cache kafka queue "
    "billing invoice customer refund gateway auth review decision migration schema index rollback "
    "dashboard alert grafana kubernetes pod node scale memory budget roadmap goal meeting dana lee "
).split()


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 24))).capitalize() + "."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--chunk", type=int, default=5_000)
    parser.add_argument("--turns", type=int, default=20_000)
    parser.add_argument(
        "--embed-seconds", type=float, default=30.0, help="how long to run the embed job on the backlog (0: not)"
    )
    parser.add_argument("--json", default="", help="also write the rates to this JSON file (bench_scale)")
    parser.add_argument(
        "--working-share",
        type=float,
        default=0.0,
        help="fraction of the memories that are working memories (each chunk then fills the working buffer and "
        "the write-time evolve stage queues its consolidation run); default 0",
    )
    add_database_argument(parser)
    args = parser.parse_args()

    db = django_setup("ingest.sqlite3", fresh=True, database=args.database)
    print(f"database {db.label}")
    from django.contrib.auth import get_user_model

    from memories import embedding_service, services
    from memories.embeddings import default_embedder, inline_limit
    from memories.inputs import MemoryInput, SessionInput, TurnInput

    embedder = default_embedder()
    limit = inline_limit(embedder)
    print(
        f"embedder {embedder.name}: "
        + ("every write embedded inline" if limit is None else f"writes of over {limit} memories left to the embed job")
    )

    user = get_user_model().objects.create_user("bench")
    workspace = services.workspace_create(owner=user, slug="bench", name="Bench")
    rng = random.Random(7)
    base = datetime(2026, 1, 1, tzinfo=UTC)
    types = ["episodic", "semantic", "fact", "event", "decision", "observation"]
    items = [
        MemoryInput(
            content=sentence(rng),
            memory_type="working" if rng.random() < args.working_share else rng.choice(types),
            created_at=base + timedelta(minutes=i),
            tags=(rng.choice(WORDS),),
        )
        for i in range(args.count)
    ]
    started = time.perf_counter()
    lap = started
    for start in range(0, len(items), args.chunk):
        services.memories_create(workspace=workspace, actor=user, items=items[start : start + args.chunk])
        done = start + args.chunk
        if done % 20_000 == 0:
            now = time.perf_counter()
            print(f"  {done:>7,} memories, last 20k at {20_000 / (now - lap):,.0f}/s", flush=True)
            lap = now
    elapsed = time.perf_counter() - started
    rate = args.count / elapsed
    if args.working_share > 0:
        from evolution.models import EvolutionRun

        # The stage queues; the process's worker (EVOLUTION_WORKER, thread by default) consolidates beside the
        # ingestion, which waits for neither. One applied run at a time: a buffer filled meanwhile waits.
        runs = EvolutionRun.objects.filter(workspace=workspace)
        print(
            f"  working share {args.working_share:g}: the evolve stage queued {runs.count()} consolidation "
            f"run(s), {runs.filter(status='completed').count()} completed by the end of the bulk ingestion"
        )

    sessions = []
    per_session = 50
    for s in range(args.turns // per_session):
        turns = tuple(
            TurnInput(speaker=rng.choice(["Dana", "Lee"]), text=sentence(rng) + " We use JWT and Redis.")
            for _ in range(per_session)
        )
        sessions.append(SessionInput(started_at=base + timedelta(days=s), turns=turns))
    started = time.perf_counter()
    for start in range(0, len(sessions), 20):
        services.conversation_ingest(workspace=workspace, actor=user, sessions=sessions[start : start + 20])
    turn_elapsed = time.perf_counter() - started
    turn_rate = args.turns / turn_elapsed

    print(
        f"bulk ingestion: {args.count:,} memories in {elapsed:.2f} s = {rate:,.0f} memories/s "
        f"(target >= {TARGET_PER_SECOND:,.0f}/s, ratio {rate / TARGET_PER_SECOND:.2f}x)"
    )
    print(
        f"conversation ingestion: {args.turns:,} turns (+session, entity memories and edges) in "
        f"{turn_elapsed:.2f} s = {turn_rate:,.0f} turns/s"
    )
    figures = {
        "database": db.label,
        "embedder": embedder.name,
        "memories_per_s": rate,
        "turns_per_s": turn_rate,
        "count": args.count,
    }
    backlog = embedding_service.pending_vectors(workspace=workspace).count()
    if backlog and args.embed_seconds > 0:
        job = embedding_service.embed_pending(workspace=workspace, budget_seconds=args.embed_seconds)
        embed_rate = job.embedded / job.seconds if job.seconds > 0 else 0.0
        figures["embed_job_per_s"] = embed_rate
        print(
            f"embed job: {job.embedded:,} of {backlog:,} waiting memories embedded in {job.seconds:.1f} s = "
            f"{embed_rate:,.0f}/s; the whole backlog takes ~{backlog / max(embed_rate, 1e-9) / 60:,.1f} min"
        )
    elif backlog:
        print(f"embed job: not run; {backlog:,} memories wait for a vector")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
