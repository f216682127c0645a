"""Embedder throughput: texts/s of hashing, model2vec (if installed) and minilm on 2,000 sentences.

The sentences are 10 to 40 words of agent-memory prose (conversation turns, decisions, preferences,
incidents) drawn from a seeded grammar, so every run embeds the same texts. Each embedder is loaded
(its load time is printed), warmed on the first 64 texts, then timed embedding all 2,000 in one call,
as a bulk write embeds a chunk; the best of --runs runs counts. CPU-seconds per 1,000 texts are printed
beside wall time because on a shared 2-core machine the wall figure moves with whatever else runs.

Reference: bulk ingestion targets >= 2,000 memories/s end to end (bench_ingest.py), so an embedder
slower than that on its own cannot be the default.

    make bench-embedders          # or: .venv/bin/python bench/bench_embedders.py [--runs 3] [--threads 1 2]
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from memories.algorithms.embedding import Embedder, EmbedderUnavailable, HashingEmbedder, Model2VecEmbedder
from memories.algorithms.embedding_minilm import MiniLMEmbedder

COUNT = 2_000
WARM = 64
INGEST_TARGET_PER_SECOND = 2_000.0

PEOPLE = ["Maya", "Jonas", "Dana", "Lee", "Priya", "Omar", "Caroline", "the customer", "the on-call engineer"]
OPENERS = [
    "{p} said that",
    "Yesterday {p} mentioned that",
    "Remember that",
    "During the retro {p} pointed out that",
    "In the support call {p} explained that",
    "Last weekend {p} told me that",
    "According to the incident report,",
    "{p} prefers that",
]
CLAUSES = [
    "the nightly backup job copies the production database to cold storage at two",
    "the load balancer drops sticky sessions so we moved to signed JWT tokens",
    "she started a new job as head pastry chef at the bakery on Monday",
    "the checkout page times out whenever the payment gateway is slow to answer",
    "he wants short answers without filler and code samples in Python",
    "the team decided to migrate the billing service from MySQL to Postgres next quarter",
    "her sister adopted a rescue dog named Biscuit from the shelter downtown",
    "the Redis cache hit rate fell below sixty percent after the last deploy",
    "they went camping by the lake and painted the sunrise together",
    "the invoice for March is overdue by two weeks and finance has been told",
    "latency on the search endpoint doubled once the index passed ten million rows",
    "he is training for a half marathon in October and runs before work",
    "the roadmap review moved to Thursday because the director is travelling",
    "the flaky integration test in the payment service fails about once a day",
    "she joined a pottery class and wants to make mugs for the whole family",
    "the alert fires when disk usage on the Kafka brokers passes eighty percent",
]
LINKS = ["and", "because", "but", "so", "while", "after", "although", "since"]
TAILS = [
    "which nobody expected.",
    "according to the notes from the meeting.",
    "so we should follow up next week.",
    "and it has been like that for a while.",
    "as far as anyone can tell.",
]


def sentences(count: int, seed: int = 7) -> list[str]:
    """`count` sentences of 10 to 40 words: maybe an opener, whole clauses joined by links, maybe a tail.

    Clauses are added until the sentence reaches a length drawn from 10..40; one that would pass 40 words
    is left out, so sentences end on a clause boundary.
    """
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        target = rng.randint(10, 40)
        words = rng.choice(OPENERS).format(p=rng.choice(PEOPLE)).split() if rng.random() < 0.6 else []
        words += rng.choice(CLAUSES).split()
        while len(words) < target:
            clause = [rng.choice(LINKS), *rng.choice(CLAUSES).split()]
            if len(words) + len(clause) > 40:
                break
            words += clause
        tail = rng.choice(TAILS).split()
        if rng.random() < 0.3 and len(words) + len(tail) <= 40:
            words += tail
        text = " ".join(words).rstrip(".,")
        out.append(text[0].upper() + text[1:] + ".")
    return out


def measure(label: str, build: Callable[[], Embedder], texts: list[str], runs: int) -> None:
    started = time.perf_counter()
    try:
        embedder = build()
    except EmbedderUnavailable as exc:
        print(f"  {label:<22} not installed: {exc}")
        return
    load = time.perf_counter() - started
    embedder.embed(texts[:WARM])
    best_wall = best_cpu = float("inf")
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        embedder.embed(texts)
        best_wall = min(best_wall, time.perf_counter() - wall)
        best_cpu = min(best_cpu, time.process_time() - cpu)
    rate = len(texts) / best_wall
    verdict = "meets" if rate >= INGEST_TARGET_PER_SECOND else "below"
    print(
        f"  {label:<22} {embedder.dim:>4}-d  load {load:6.2f} s  {rate:>9,.0f} texts/s  "
        f"{1000 * best_cpu / len(texts):7.3f} CPU-s per 1k texts  ({verdict} the 2,000/s ingest target)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=COUNT)
    parser.add_argument("--runs", type=int, default=2, help="timed runs per embedder; the best counts")
    parser.add_argument(
        "--threads", type=int, nargs="*", default=[], help="minilm thread counts (default: EMBEDDER_THREADS or 2)"
    )
    args = parser.parse_args()

    texts = sentences(args.count)
    words = [len(t.split()) for t in texts]
    print(f"{len(texts):,} sentences, {min(words)}-{max(words)} words (mean {sum(words) / len(words):.1f}), warm")

    measure("hashing:256", HashingEmbedder, texts, max(args.runs, 5))
    measure("model2vec", Model2VecEmbedder, texts, max(args.runs, 5))

    for threads in args.threads or [None]:
        label = "minilm" if threads is None else f"minilm ({threads} thread{'s' * (threads > 1)})"
        measure(label, lambda threads=threads: MiniLMEmbedder(threads=threads), texts, args.runs)


if __name__ == "__main__":
    main()
