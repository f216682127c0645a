"""Vector index benchmark: build, catch-up and search of memories.vectorindex at 10k and 100k x 384.

Workspaces of 10k and 100k memories whose vectors are 384-d unit vectors (2000 random centres plus
noise, so that nearest neighbours mean something, as with text embeddings; --uniform draws plain random
unit vectors, the worst case for HNSW) are generated once into var/bench/vectors.sqlite3 and reused. For
each size and each engine (exact numpy; HNSW through usearch) this prints:

- first use: the read from the database that the first search pays; for HNSW then the searches while
  the graph is built in the background, the time until it is built and written, and the load time of
  its file (what a restarted process pays instead);
- catch-up time for 1k vectors written after the index was built (in the first search after the write;
  for HNSW also their merge into the graph, in the background);
- search p50/p95 for limit 200 (the surfacing candidate list), and HNSW's recall@10 and @200 against
  exact search on the same queries;
- the index's memory (float32 matrix; usearch's own count for HNSW).

Targets (the vector index brief): search < 1 ms at 10k and < 2 ms at 100k; an index that takes more
than ~2 s to build is persisted.

    make bench-vectors            # or: .venv/bin/python bench/bench_vectorindex.py [--fresh] [--runs 200]
"""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import numpy as np
from _setup import BENCH_DIR, django_setup, percentile

DB_NAME = "vectors.sqlite3"
DIM = 384
MODEL = "bench:384"
SIZES = (10_000, 100_000)
CATCH_UP = 1_000
LIMIT = 200


def _vectors(n: int, rng: np.random.Generator, centres: np.ndarray | None) -> np.ndarray:
    if centres is None:
        rows = rng.standard_normal((n, DIM)).astype(np.float32)
    else:
        rows = centres[rng.integers(0, len(centres), n)] + 0.6 * rng.standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _insert(workspace: Any, vectors: np.ndarray, tag: str) -> None:
    """Memories holding `vectors` (model MODEL), stamped as the write services stamp them."""
    from django.db import transaction

    from memories.algorithms.embedding import rows_to_bytes
    from memories.bulk import bulk_insert, new_instance
    from memories.embedding_service import vectors_touch
    from memories.models import Memory

    blobs = rows_to_bytes(vectors)
    for start in range(0, len(blobs), 20_000):
        with transaction.atomic():
            stamp, _ = vectors_touch(workspace=workspace)
            rows = [
                new_instance(
                    Memory,
                    {
                        "id": uuid.uuid4(),
                        "workspace_id": workspace.pk,
                        "content": f"{tag} {start + k}",
                        "embedding": blob,
                        "embedding_model": MODEL,
                        "embedded_at": stamp,
                        "created_at": stamp,
                        "updated_at": stamp,
                    },
                    {"workspace": workspace},
                )
                for k, blob in enumerate(blobs[start : start + 20_000])
            ]
            bulk_insert(Memory, rows)


def _ensure(n: int, args: argparse.Namespace, centres: np.ndarray | None) -> Any:
    from memories.models import Memory, Workspace

    slug = f"vec{n // 1000}k{'-uniform' if centres is None else ''}"
    workspace, _ = Workspace.objects.get_or_create(slug=slug, defaults={"name": slug})
    if Memory.objects.filter(workspace=workspace).count() == n and not args.fresh:
        print(f"reusing workspace {slug!r}: {n:,} vectors x {DIM} ({DB_NAME})")
        return workspace
    Memory.objects.filter(workspace=workspace).delete()
    started = time.perf_counter()
    _insert(workspace, _vectors(n, np.random.default_rng(n), centres), "bench")
    print(f"generated workspace {slug!r}: {n:,} vectors x {DIM} in {time.perf_counter() - started:.1f} s")
    return workspace


def _fresh(workspace: Any) -> Any:
    from memories.models import Workspace

    return Workspace.objects.get(pk=workspace.pk)


def _engine_run(workspace: Any, engine: str, queries: np.ndarray) -> dict[str, Any]:
    from django.conf import settings

    from memories.models import Memory
    from memories.vectorindex import vector_index, vector_index_clear, vector_index_settle, vector_search

    settings.VECTOR_INDEX_EXACT_MAX = 10**9 if engine == "exact" else 0
    for old in settings.VECTOR_INDEX_DIR.glob(f"ws{workspace.pk}-*"):
        old.unlink()
    vector_index_clear()
    out: dict[str, Any] = {}
    ws = _fresh(workspace)
    started = time.perf_counter()
    index = vector_index(workspace=ws, model=MODEL, dim=DIM)
    out["build_s"] = time.perf_counter() - started
    if engine == "hnsw":
        merging_since = time.perf_counter()
        # What a search costs while the graph is built in the background (the vectors still pending).
        waiting = []
        for q in queries[:20]:
            started = time.perf_counter()
            vector_search(workspace=ws, vector=q, model=MODEL, limit=LIMIT)
            waiting.append(time.perf_counter() - started)
        out["merging_p50_ms"] = percentile(waiting, 50) * 1e3
        vector_index_settle(3600)
        out["graph_s"] = time.perf_counter() - merging_since
        vector_index_clear()
        started = time.perf_counter()
        index = vector_index(workspace=ws, model=MODEL, dim=DIM)
        out["load_s"] = time.perf_counter() - started
        assert index.graph is not None and not index.pending
        out["memory_mb"] = index.graph.index.memory_usage / 1e6
    else:
        out["memory_mb"] = len(index) * DIM * 4 / 1e6
    timings: list[float] = []
    tops: list[list[uuid.UUID]] = []
    for q in queries:
        started = time.perf_counter()
        hits = vector_search(workspace=ws, vector=q, model=MODEL, limit=LIMIT)
        timings.append(time.perf_counter() - started)
        tops.append([h[0] for h in hits])
    out["p50_ms"] = percentile(timings, 50) * 1e3
    out["p95_ms"] = percentile(timings, 95) * 1e3
    out["top"] = tops
    read = index.rows_read
    _insert(ws, _vectors(CATCH_UP, np.random.default_rng(7), None), "late")
    ws = _fresh(workspace)
    started = time.perf_counter()
    vector_search(workspace=ws, vector=queries[0], model=MODEL, limit=LIMIT)
    out["catch_up_s"] = time.perf_counter() - started
    out["catch_up_rows"] = index.rows_read - read
    if engine == "hnsw":
        started = time.perf_counter()
        vector_index_settle(3600)
        out["catch_up_merge_s"] = time.perf_counter() - started
    Memory.objects.filter(workspace=workspace, content__startswith="late ").delete()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fresh", action="store_true", help="regenerate the workspaces")
    parser.add_argument("--runs", type=int, default=200, help="queries per engine and size")
    parser.add_argument("--uniform", action="store_true", help="plain random unit vectors (no clusters)")
    parser.add_argument("--sizes", type=int, nargs="*", default=list(SIZES))
    args = parser.parse_args()
    django_setup(DB_NAME, fresh=args.fresh)
    from django.conf import settings

    settings.VECTOR_INDEX_DIR = BENCH_DIR / "vectors"
    centres = None if args.uniform else np.random.default_rng(1).standard_normal((2000, DIM)).astype(np.float32)
    for n in args.sizes:
        workspace = _ensure(n, args, centres)
        rng = np.random.default_rng(3)
        # Queries near stored vectors, as a query about something the workspace holds.
        queries = _vectors(args.runs, rng, centres)
        exact_top: list[list[uuid.UUID]] = []
        for engine in ("exact", "hnsw"):
            r = _engine_run(workspace, engine, queries)
            if engine == "exact":
                exact_top = r["top"]
            else:
                pairs = list(zip(r["top"], exact_top, strict=True))
                r["recall10"] = float(np.mean([len(set(f[:10]) & set(t[:10])) / 10 for f, t in pairs]))
                r["recall200"] = float(np.mean([len(set(f) & set(t)) / max(1, len(t)) for f, t in pairs]))
            line = (
                f"{n:>7,} x {DIM} {engine:<5}  first use {r['build_s']:6.2f} s"
                + (
                    f" (searches meanwhile p50 {r['merging_p50_ms']:.1f} ms; graph built and written in"
                    f" {r['graph_s']:.1f} s; loaded from its file {r['load_s']:.2f} s)"
                    if engine == "hnsw"
                    else ""
                )
                + f"\n      search p50 {r['p50_ms']:6.2f} ms  p95 {r['p95_ms']:6.2f} ms"
                + (f"  recall@10 {r['recall10']:.3f} @200 {r['recall200']:.3f}" if "recall10" in r else "")
                + f"  memory {r['memory_mb']:6.1f} MB"
                + f"\n      catch-up of {CATCH_UP} new vectors: {r['catch_up_s'] * 1e3:.1f} ms in the next search"
                + f" ({r['catch_up_rows']:,} rows read)"
                + (f", merged into the graph {r['catch_up_merge_s']:.2f} s later" if engine == "hnsw" else "")
            )
            print(line, flush=True)


if __name__ == "__main__":
    main()
