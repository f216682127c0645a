"""Redis Streams signal bus: publish and flush throughput (signals/s) on SQLite.

Publishes what `retrieval_signals` publishes for many result sets (k items: a boost and a retrieval
event each, plus co-retrieved partner boosts) over a workspace of 10k memories, then drains the stream
with one worker the way `manage.py run_workers` does. Uses --redis, or $TEST_REDIS_URL, or else a
redis-server it starts the way the tests do (bench/_setup.py: redis_url); a stream key of its own, deleted
afterwards.

    .venv/bin/python bench/bench_signalbus_redis.py [--result-sets 2000] [--k 20] [--workers 1]
"""

from __future__ import annotations

import argparse
import random
import time
import uuid

from _setup import django_setup, redis_url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis", help="Redis URL (default: $TEST_REDIS_URL, or one started here)")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--result-sets", type=int, default=2_000)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--partners", type=int, default=10)
    args = parser.parse_args()
    args.redis = args.redis or redis_url()

    django_setup("signalbus_redis.sqlite3", fresh=True)
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from memories import services
    from memories.inputs import MemoryInput
    from memories.models import RetrievalEvent
    from memories.signalbus import Boost, Retrieval, Signal
    from memories.signalbus.redis import RedisSignalBus

    user = get_user_model().objects.create_user(username="bench")
    workspace = services.workspace_create(owner=user, slug="bench", name="Bench")
    memories = services.memories_create(
        workspace=workspace, actor=user, items=[MemoryInput(content=f"memory {i}") for i in range(args.memories)]
    )
    ids = [m.id for m in memories]
    rng = random.Random(3)
    stream = f"bench:signals:{uuid.uuid4().hex}"
    publisher = RedisSignalBus(args.redis, stream=stream, consumer="web")
    worker = RedisSignalBus(args.redis, stream=stream, consumer="worker")
    try:
        batches: list[list[Signal]] = []
        for _ in range(args.result_sets):
            now = timezone.now()
            result_set = uuid.uuid4()
            picked = rng.sample(ids, args.k + args.partners)
            signals: list[Signal] = []
            for rank, mid in enumerate(picked[: args.k], start=1):
                signals.append(Boost(workspace.pk, mid, 0.02, now))
                signals.append(Retrieval(workspace.pk, mid, result_set, rank, "context", "why jwt", "s-1", now))
            signals.extend(Boost(workspace.pk, mid, 0.01, now) for mid in picked[args.k :])
            batches.append(signals)
        total = sum(len(b) for b in batches)

        started = time.perf_counter()
        for signals in batches:
            publisher.publish(signals)
        took = time.perf_counter() - started
        print(
            f"published {total} signals in {len(batches)} calls in {took:.2f} s: {total / took:,.0f} signals/s,"
            f" {len(batches) / took:,.0f} publishes/s ({took / len(batches) * 1000:.2f} ms each)"
        )
        size = publisher._redis.memory_usage(stream) or 0
        print(f"stream holds {publisher._redis.xlen(stream)} entries, {size / len(batches):,.0f} bytes per entry")

        started = time.perf_counter()
        while publisher.pending():
            worker.flush()
        took = time.perf_counter() - started
        print(
            f"flushed {worker.stats.signals} signals ({worker.stats.entries} entries) in {took:.2f} s:"
            f" {worker.stats.signals / took:,.0f} signals/s; {RetrievalEvent.objects.count()} retrieval events stored"
        )
    finally:
        publisher._redis.delete(stream, f"{stream}:pending", f"{stream}:dead")
        publisher.close()
        worker.close()


if __name__ == "__main__":
    main()
