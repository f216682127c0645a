"""Nearest stored vectors of a workspace: an in-process index per (workspace, model), kept current by catch-up.

``vector_search(workspace=, vector=, model=, limit=)`` returns ``(memory id, cosine)`` pairs, best first, over
the workspace's vectors whose ``embedding_model`` is ``model``. It may name memories archived or deleted
since they were indexed: callers read the rows and filter by status.

Keeping current. Writers bump ``Workspace.vector_generation`` in the transaction that writes vectors and
stamp them (``embedded_at``) from the workspace row, strictly increasing in commit order
(memories.embedding_service). An index remembers the generation it is current to and the latest stamp it
has read (its watermark); the request's ``Workspace`` carries the counter, so an index that is current costs
no query. When the counter moved, one read of the (workspace, embedded_at) index takes the rows stamped
after the watermark: vectors of ``model`` are added or replaced, rows whose vector is now of another model
(re-embedded) or gone are dropped. Nothing committed later can carry a stamp at or before the watermark, so
no row is read twice and none is missed; the whole workspace is read only to build an index.

Two engines, chosen by size (bench/bench_vectorindex.py, `make bench-vectors`; 2-vCPU VM shared with
other jobs, 2026-12-02, 384-d vectors, limit 200):

- exact (memories.algorithms.vectorindex.FlatEngine): one matrix-vector product plus ``argpartition``.
  10k: p50 0.61 ms, p95 0.91 ms (p50 0.94-1.03 in busier runs). 100k: p50 10-34 ms (it reads 154 MB
  per query), far over the 2 ms target.
- HNSW (usearch, half-precision vectors, inner product) above ``VECTOR_INDEX_EXACT_MAX`` vectors (default
  20k). 100k: p50 2.08 ms (1.86-2.01 timing the search alone), p95 3.9 ms, recall@10 1.00 and @200 0.79
  against exact search (clustered vectors). Its build takes 53 s at 100k (170 s with the machine busier), so
  it never runs in a request: a build or a catch-up puts vectors into a flat buffer beside the graph (searched
  exactly, merged by score) and a background thread moves them into the graph, then writes the index under
  ``VECTOR_INDEX_DIR`` (one file per workspace and model, written to a temporary file and renamed, holding the
  generation and watermark it is current to). A restarted process loads the file (1.0 s at 100k, against
  2.2-2.7 s to read the vectors from SQLite) and catches up like the in-memory index. The database stays the
  source of truth: a missing, unreadable or mismatched file is rebuilt from it, with a log line.

Costs at 100k x 384: the first search of a process 2.2-2.7 s without a file (the read of the vectors);
searches while the graph is built are exact (p50 ~20 ms); a catch-up of 1k new vectors 20-33 ms in the next
search (the graph takes them in the background, 1.3 s).

Memory: exact 10k x 384 = 15 MB, 100k x 384 = 154 MB (float32); HNSW 100k x 384 = 152 MB (f16 vectors and
the graph), plus the flat buffer while a graph is being built (154 MB more at 100k, then released). Each
process keeps the ``VECTOR_INDEX_CACHE`` (default 4) most recently used indexes.

Threads: one lock per index serialises its catch-up, its searches and the background merges (64 vectors,
~10-15 ms, per hold); other workspaces are not blocked. One thread builds while the others asking for that
index wait for it.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings

from memories.algorithms.vectorindex import IndexFileError, VectorIndex, write_index_file
from memories.models import Memory, Workspace
from memories.selectors import embedding_of

log = logging.getLogger(__name__)

__all__ = ["cached_indexes", "vector_index", "vector_index_clear", "vector_index_settle", "vector_search"]

DEFAULT_CACHE = 4
"""Indexes kept per process (setting VECTOR_INDEX_CACHE): ~150 MB each at 100k x 384."""

DEFAULT_EXACT_MAX = 20_000
"""Vectors up to which search is exact (setting VECTOR_INDEX_EXACT_MAX): ~1 ms at 384 dims."""

# A persisted index is rewritten once this share of its vectors changed since it was written (and at
# least SAVE_MIN): a restarted process then reads only the vectors stamped after the file.
SAVE_SHARE = 0.05
SAVE_MIN = 1000
MERGE_CHUNK = 64
"""Vectors merged into a graph per hold of its lock: ~10-15 ms of inserts, what a search may wait."""
_READ_CHUNK = 4096


def _exact_max() -> int:
    return int(getattr(settings, "VECTOR_INDEX_EXACT_MAX", DEFAULT_EXACT_MAX))


def _cache_size() -> int:
    return max(1, int(getattr(settings, "VECTOR_INDEX_CACHE", DEFAULT_CACHE)))


def _index_dir() -> Path:
    return Path(getattr(settings, "VECTOR_INDEX_DIR", Path(settings.BASE_DIR) / "var" / "vectors"))


# -- reads ----------------------------------------------------------------------------------------


def _build(workspace: Workspace, model: str, dim: int) -> VectorIndex:
    """The index from the database: every vector of `model` in the workspace, read in chunks.

    The watermark starts at the workspace's last stamp as the request read it (every vector stamped up to
    it had committed then, so the read below sees it) and moves up to the latest stamp read; an index of a
    model with no vector yet then does not read the workspace's other vectors at its first catch-up.
    """
    index = VectorIndex(workspace_id=workspace.pk, created_at=workspace.created_at, model=model, dim=dim)
    index.generation = workspace.vector_generation
    index.watermark = workspace.vector_stamped_at
    rows = (
        Memory.objects.filter(workspace_id=workspace.pk, embedding_model=model, embedding__isnull=False)
        .order_by()
        .values_list("id", "embedded_at", "embedding")
    )
    chunk: list[tuple[uuid.UUID, datetime | None, Any]] = []
    for row in rows.iterator(chunk_size=_READ_CHUNK):
        chunk.append(row)
        if len(chunk) >= _READ_CHUNK:
            index.apply(chunk)
            chunk = []
    index.apply(chunk)
    if len(index) > _exact_max():
        index.switch_to_hnsw()
    return index


def _catch_up(index: VectorIndex, workspace: Workspace) -> int:
    """Read the rows stamped after the watermark and apply them; returns the changes."""
    rows = Memory.objects.filter(workspace_id=workspace.pk)
    if index.watermark is None:
        rows = rows.filter(embedded_at__isnull=False)
    else:
        rows = rows.filter(embedded_at__gt=index.watermark)
    changes = index.apply(rows.order_by().values_list("id", "embedded_at", embedding_of(index.model)))
    index.generation = max(index.generation, workspace.vector_generation)
    if not index.is_hnsw and len(index) > _exact_max():
        index.switch_to_hnsw()
    return changes


def _file_path(workspace_id: int, model: str, dim: int) -> Path:
    digest = hashlib.sha256(f"{model}\n{dim}".encode()).hexdigest()[:16]
    return _index_dir() / f"ws{workspace_id}-{digest}.vecindex"


def _load_or_build(workspace: Workspace, model: str, dim: int) -> VectorIndex:
    """The persisted index caught up, else a fresh build (a graph one is written once merged)."""
    path = _file_path(workspace.pk, model, dim)
    started = time.perf_counter()
    if path.exists():
        try:
            index = VectorIndex.from_file(
                path, workspace_id=workspace.pk, created_at=workspace.created_at, model=model, dim=dim
            )
        except IndexFileError as exc:
            log.warning("vector index file %s rebuilt from the database: %s", path, exc)
        else:
            changes = _catch_up(index, workspace)
            # Deleted memories leave no row to catch up from: their vectors go here, once per process, by a
            # read of the ids alone (~50 ms at 100k), and the next file written has none of them.
            deleted = index.keep_only(
                Memory.objects.filter(workspace_id=workspace.pk, embedding_model=model)
                .order_by()
                .values_list("id", flat=True)
                .iterator(chunk_size=_READ_CHUNK)
            )
            log.info(
                "vector index of workspace %s (%s) loaded from %s: %d vectors, %d changes caught up and %d deleted "
                "memories dropped in %.3f s",
                workspace.pk,
                model,
                path,
                len(index),
                changes,
                deleted,
                time.perf_counter() - started,
            )
            return index
    index = _build(workspace, model, dim)
    log.info(
        "vector index of workspace %s (%s) built: %d vectors (%s) in %.3f s",
        workspace.pk,
        model,
        len(index),
        "hnsw, merging in the background" if index.is_hnsw else "exact",
        time.perf_counter() - started,
    )
    return index


def _save_due(index: VectorIndex) -> bool:
    """A graph with nothing pending is written when it has no file yet or enough changed since."""
    if not index.is_hnsw or index.pending:
        return False
    return not index.persisted or index.unsaved >= max(SAVE_MIN, int(SAVE_SHARE * len(index)))


@dataclass
class _Slot:
    """One cache entry: ``index`` is None until built; ``lock`` guards building, catching up, searching
    and merging (one chunk per hold)."""

    index: VectorIndex | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


_Key = tuple[int, str, int]


class _Cache:
    """The process's indexes, least recently used evicted beyond VECTOR_INDEX_CACHE (never one in use)."""

    def __init__(self) -> None:
        self._slots: OrderedDict[_Key, _Slot] = OrderedDict()
        self._lock = threading.Lock()

    def slot(self, key: _Key) -> _Slot:
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = _Slot()
            self._slots.move_to_end(key)
            excess = len(self._slots) - _cache_size()
            if excess > 0:
                victims = [k for k, s in self._slots.items() if k != key and not s.lock.locked()][:excess]
                for k in victims:
                    del self._slots[k]
            return slot

    def holds(self, key: _Key, slot: _Slot) -> bool:
        with self._lock:
            return self._slots.get(key) is slot

    def keys(self) -> list[_Key]:
        with self._lock:
            return list(self._slots)

    def clear(self) -> None:
        with self._lock:
            self._slots.clear()


_cache = _Cache()


class _Merger:
    """One daemon thread per process that moves pending vectors into their graphs, MERGE_CHUNK per hold of
    the index's lock (searches of that workspace wait at most one chunk), and writes an index's file once
    nothing is pending and enough changed since the last one: the graph is serialised under the lock, the
    file written after it is released. Nothing is lost if the process stops: the file is a cache, and an
    index is rebuilt or caught up from the database."""

    def __init__(self) -> None:
        self._queue: OrderedDict[_Key, tuple[_Slot, Path]] = OrderedDict()
        self._cond = threading.Condition()
        self._busy = False
        self._stopping = False
        self._thread: threading.Thread | None = None

    def schedule(self, key: _Key, slot: _Slot, path: Path) -> None:
        """Merge the index of `slot` and write it to `path` (taken now: settings may change meanwhile)."""
        with self._cond:
            if self._stopping:
                return
            self._queue[key] = (slot, path)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="vector-index-merger", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def forget(self) -> None:
        with self._cond:
            self._queue.clear()

    def settle(self, timeout: float) -> bool:
        """Wait until nothing is queued or being merged; False when `timeout` seconds passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queue and not self._busy, timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the chunk being merged (at interpreter exit). A daemon thread still inside the index's
        native code when the process exits makes the C++ runtime abort it (exit status 134); what was not
        merged stays pending in the database's vectors, and the next process catches up."""
        with self._cond:
            self._stopping = True
            self._queue.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread.is_alive():
            thread.join(timeout)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue:
                    self._busy = False
                    self._cond.notify_all()
                    if self._stopping:
                        return
                    self._cond.wait()
                key, (slot, path) = self._queue.popitem(last=False)
                self._busy = True
            try:
                self._drain(key, slot, path)
            except Exception:
                # The vectors stay pending (merge drops them only once inserted) and searchable; the next
                # write of the workspace schedules the index again.
                log.exception("merging the vector index of workspace %s (%s) failed", key[0], key[1])

    def _drain(self, key: _Key, slot: _Slot, path: Path) -> None:
        started = time.perf_counter()
        merged = 0
        while _cache.holds(key, slot) and not self._stopping:
            with slot.lock:
                index = slot.index
                if index is None:
                    return
                merged += index.merge(MERGE_CHUNK)
                if index.pending:
                    continue
                arrays = index.file_arrays() if _save_due(index) else None
                if arrays is not None:
                    index.persisted, index.unsaved = True, 0
                size = len(index)
            log.info(
                "vector index of workspace %s (%s): %d vectors merged into the graph in %.2f s",
                key[0],
                key[1],
                merged,
                time.perf_counter() - started,
            )
            # An index forgotten meanwhile (vector_index_clear) is not written.
            if arrays is not None and _cache.holds(key, slot):
                _write(path, arrays, size)
            return


def _write(path: Path, arrays: dict[str, npt.NDArray[Any]], size: int) -> None:
    started = time.perf_counter()
    try:
        write_index_file(path, arrays)
    except OSError as exc:
        # The database is the source of truth: an unwritable directory costs a rebuild per process, no data.
        log.warning("vector index file %s not written: %s", path, exc)
        return
    log.info("vector index file %s written: %d vectors in %.3f s", path, size, time.perf_counter() - started)


_merger = _Merger()
atexit.register(_merger.stop)


def vector_index_clear() -> None:
    """Forget every cached index of this process (tests, benchmarks); files stay."""
    _merger.forget()
    _cache.clear()


def vector_index_settle(timeout: float = 600.0) -> bool:
    """Wait for the background merges of this process (tests, benchmarks); False on timeout."""
    return _merger.settle(timeout)


def cached_indexes() -> list[tuple[int, str, int]]:
    """(workspace id, model, dim) of the cached indexes, least recently used first."""
    return _cache.keys()


def vector_index(*, workspace: Workspace, model: str, dim: int) -> VectorIndex:
    """The workspace's index of `model` vectors of length `dim`, current as of ``workspace.vector_generation``.

    For inspection (tests, the benchmark); searches go through ``vector_search``, which holds the lock.
    """
    key = (workspace.pk, model, dim)
    slot = _cache.slot(key)
    with slot.lock:
        return _current(key, slot, workspace)


def _current(key: _Key, slot: _Slot, workspace: Workspace) -> VectorIndex:
    _, model, dim = key
    index = slot.index
    if index is not None and index.created_at != workspace.created_at:
        # A workspace recreated under the id of a deleted one.
        index = None
    if index is None:
        index = slot.index = _load_or_build(workspace, model, dim)
    elif index.generation < workspace.vector_generation:
        started = time.perf_counter()
        changes = _catch_up(index, workspace)
        log.debug(
            "vector index of workspace %s (%s) caught up to generation %d: %d changes in %.4f s",
            workspace.pk,
            model,
            index.generation,
            changes,
            time.perf_counter() - started,
        )
    if index.pending:
        _merger.schedule(key, slot, _file_path(workspace.pk, model, dim))
    return index


def vector_search(
    *, workspace: Workspace, vector: npt.ArrayLike, model: str, limit: int = 200
) -> list[tuple[uuid.UUID, float]]:
    """The `limit` memories of `workspace` whose stored `model` vector has the highest cosine with `vector`,
    best first, as (memory id, cosine). Memories may have been archived or deleted since they were indexed:
    callers filter. A zero query vector finds nothing."""
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    key = (workspace.pk, model, int(query.shape[0]))
    slot = _cache.slot(key)
    with slot.lock:
        return _current(key, slot, workspace).search(query, limit)
