"""In-memory nearest-neighbour index of one workspace's vectors of one model, keyed by memory id.

Pure (numpy and usearch, no Django): memories.vectorindex feeds it rows read from the database, keeps it
current and schedules its merges. Results are cosine similarities, best first. Two engines:

- ``FlatEngine``: a dense float32 matrix, one matrix-vector product and an ``argpartition``. Exact; a
  query reads the whole matrix (4 * n * dim bytes: 154 MB at 100k x 384, 15 MB at 10k).
- ``HnswEngine``: a usearch HNSW graph over half-precision vectors, inner product. Approximate (recall
  depends on the data; the search list is at least the number of results asked for); a query visits a
  few thousand vectors whatever n, but every insert is a graph search (~0.1-0.3 ms here).

A ``VectorIndex`` is flat while small and a graph plus a flat buffer of not-yet-merged vectors once large
(see its docstring). Every stored vector is scaled to unit length, so inner product is cosine; a zero
vector (an empty text) has no direction and is not indexed. A memory keeps its slot (its key in the graph)
for the life of the index.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from usearch.index import Index

from memories.algorithms.embedding import BLOB_DTYPE

__all__ = ["FlatEngine", "HnswEngine", "IndexFileError", "VectorIndex", "write_index_file"]

FloatMatrix = npt.NDArray[np.float32]
SlotArray = npt.NDArray[np.int64]

# HNSW: 16 links per node (usearch's default); a candidate list of 64 while adding, half usearch's default,
# halves the build (133 against 217 us a vector at 20k x 384 here) for the same recall on clustered data.
# The search list is at least 128 and at least the number of results asked for.
CONNECTIVITY = 16
EXPANSION_ADD = 64
EXPANSION_SEARCH = 128
FILE_FORMAT = 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class IndexFileError(ValueError):
    """A persisted index that cannot be used: unreadable, or written for another workspace, model or dim."""


def _unit_rows(matrix: FloatMatrix) -> tuple[FloatMatrix, npt.NDArray[np.bool_]]:
    """Rows scaled to unit length and the mask of rows that have a direction (zero rows have none)."""
    norms = np.linalg.norm(matrix, axis=1)
    usable = norms > 0.0
    out = np.zeros_like(matrix)
    np.divide(matrix, norms[:, None], out=out, where=usable[:, None])
    return out, usable


class FlatEngine:
    """Exact search over a compact float32 matrix: row ``r`` holds the vector of slot ``slots[r]``.

    Removal moves the last row into the hole, so the matrix stays dense and a search reads exactly the live
    vectors. ``take`` pops rows from the end (how a graph drains its buffer).
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix: FloatMatrix = np.zeros((0, dim), np.float32)
        self.slots: SlotArray = np.zeros(0, np.int64)
        self.row_of: dict[int, int] = {}
        self.n = 0

    def __len__(self) -> int:
        return self.n

    def _reserve(self, rows: int) -> None:
        if rows <= self.matrix.shape[0]:
            return
        # Doubling keeps appends amortised O(1) per vector.
        capacity = max(rows, 2 * self.matrix.shape[0], 1024)
        matrix = np.zeros((capacity, self.dim), np.float32)
        matrix[: self.n] = self.matrix[: self.n]
        slots = np.zeros(capacity, np.int64)
        slots[: self.n] = self.slots[: self.n]
        self.matrix, self.slots = matrix, slots

    def put(self, slots: SlotArray, vectors: FloatMatrix) -> None:
        row_of = self.row_of
        rows = np.empty(len(slots), np.int64)
        fresh = 0
        for k, slot in enumerate(slots.tolist()):
            row = row_of.get(slot)
            if row is None:
                row = row_of[slot] = self.n + fresh
                fresh += 1
            rows[k] = row
        self._reserve(self.n + fresh)
        self.matrix[rows] = vectors
        self.slots[rows] = slots
        self.n += fresh

    def remove(self, slots: SlotArray) -> None:
        for slot in slots.tolist():
            row = self.row_of.pop(slot, None)
            if row is None:
                continue
            last = self.n - 1
            if row != last:
                moved = int(self.slots[last])
                self.matrix[row] = self.matrix[last]
                self.slots[row] = moved
                self.row_of[moved] = row
            self.n = last

    def tail(self, limit: int) -> tuple[SlotArray, FloatMatrix]:
        """The last (up to `limit`) rows' slots and vectors, as copies (``drop_tail`` removes them)."""
        start = max(0, self.n - limit)
        return self.slots[start : self.n].copy(), self.matrix[start : self.n].copy()

    def drop_tail(self, count: int) -> None:
        start = max(0, self.n - count)
        for slot in self.slots[start : self.n].tolist():
            del self.row_of[slot]
        self.n = start
        if self.n == 0:
            # Drained: give the memory back (a fresh build parks every vector here first).
            self.matrix, self.slots = np.zeros((0, self.dim), np.float32), np.zeros(0, np.int64)

    def search(self, query: FloatMatrix, k: int) -> tuple[SlotArray, FloatMatrix]:
        n = self.n
        k = min(k, n)
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        scores = self.matrix[:n] @ query
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return self.slots[top], scores[top]


class HnswEngine:
    """usearch HNSW over half-precision vectors, inner product; keys are slots."""

    def __init__(self, dim: int, index: Any | None = None) -> None:
        self.dim = dim
        self.index = (
            index
            if index is not None
            else Index(ndim=dim, metric="ip", dtype="f16", connectivity=CONNECTIVITY, expansion_add=EXPANSION_ADD)
        )

    def __len__(self) -> int:
        return len(self.index)

    def add(self, slots: SlotArray, vectors: FloatMatrix, *, threads: int = 1) -> None:
        """Insert vectors of slots not in the graph (one thread by default: the caller's process serves
        requests on the others)."""
        if slots.size:
            self.index.add(slots.astype(np.uint64), vectors, threads=threads)

    def remove(self, slots: SlotArray) -> None:
        if not slots.size:
            return
        keys = slots.astype(np.uint64)
        present = keys[np.asarray(self.index.contains(keys), np.bool_).reshape(-1)]
        if present.size:
            self.index.remove(present)

    def search(self, query: FloatMatrix, k: int) -> tuple[SlotArray, FloatMatrix]:
        k = min(k, len(self.index))
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        # usearch declares the property's setter after the add setter, so its types read it as read-only.
        self.index.expansion_search = max(EXPANSION_SEARCH, k)  # type: ignore[misc]
        matches = self.index.search(query, k)
        # Inner-product distance is 1 - dot.
        return np.asarray(matches.keys, np.int64), (1.0 - np.asarray(matches.distances, np.float32))


@dataclass
class VectorIndex:
    """The vectors of one model in one workspace, by memory id.

    Exact mode: every vector in ``flat``. Graph mode (``graph`` set): vectors in the HNSW graph, plus the
    ones written since that are not merged into it yet in ``flat`` (searched exactly, results merged by
    score), so that neither a first build nor a burst of writes waits for graph inserts: ``merge`` moves
    them in, in chunks, on the caller's schedule. A memory is in at most one of the two.

    ``stamps[slot]``: the write time of the vector (or removal) last applied there. ``watermark``: the
    latest write time applied; ``generation``: the workspace's vector generation it is current to (both
    kept by the caller's catch-up, memories.vectorindex). ``persisted``: it was read from or written to a
    file; ``unsaved``: changes since; ``rows_read``: rows applied so far (what a catch-up cost).
    """

    workspace_id: int
    created_at: datetime
    model: str
    dim: int
    generation: int = 0
    watermark: datetime | None = None
    ids: list[uuid.UUID] = field(default_factory=list)
    slot_of: dict[uuid.UUID, int] = field(default_factory=dict)
    stamps: list[datetime | None] = field(default_factory=list)
    flat: FlatEngine | None = None
    graph: HnswEngine | None = None
    persisted: bool = False
    unsaved: int = 0
    rows_read: int = 0

    def __post_init__(self) -> None:
        if self.flat is None:
            self.flat = FlatEngine(self.dim)

    def __len__(self) -> int:
        assert self.flat is not None
        return len(self.flat) + (len(self.graph) if self.graph is not None else 0)

    @property
    def is_hnsw(self) -> bool:
        return self.graph is not None

    @property
    def pending(self) -> int:
        """Vectors waiting to be merged into the graph (0 in exact mode)."""
        assert self.flat is not None
        return len(self.flat) if self.graph is not None else 0

    def apply(self, rows: Iterable[tuple[uuid.UUID, datetime | None, Any]]) -> int:
        """Take (memory id, embedded_at, blob or None) rows: a blob of this index's width is (re)placed,
        anything else removes the memory. A row with the stamp already held is skipped. Returns the number
        of changes."""
        assert self.flat is not None
        width = self.dim * BLOB_DTYPE.itemsize
        put_slots: list[int] = []
        put_blobs: list[bytes] = []
        gone: list[int] = []
        for memory_id, stamp, blob in rows:
            self.rows_read += 1
            if stamp is not None and (self.watermark is None or stamp > self.watermark):
                self.watermark = stamp
            slot = self.slot_of.get(memory_id)
            if blob is None or len(blob) != width:
                if slot is not None:
                    gone.append(slot)
                    self.stamps[slot] = stamp
                continue
            if slot is not None and stamp is not None and self.stamps[slot] == stamp:
                continue
            if slot is None:
                slot = len(self.ids)
                self.ids.append(memory_id)
                self.stamps.append(stamp)
                self.slot_of[memory_id] = slot
            else:
                self.stamps[slot] = stamp
                gone.append(slot)  # its old vector goes, wherever it is
            put_slots.append(slot)
            put_blobs.append(bytes(blob))
        if gone:
            removed = np.asarray(gone, np.int64)
            self.flat.remove(removed)
            if self.graph is not None:
                self.graph.remove(removed)
        if put_slots:
            raw = np.frombuffer(b"".join(put_blobs), dtype=BLOB_DTYPE).reshape(len(put_blobs), self.dim)
            vectors, usable = _unit_rows(raw.astype(np.float32))
            # A zero vector (empty text) has no direction: cosine 0 with everything, so it is not indexed.
            self.flat.put(np.asarray(put_slots, np.int64)[usable], vectors[usable])
        changes = len(set(gone) | set(put_slots))
        self.unsaved += changes
        return changes

    def keep_only(self, memory_ids: Iterable[uuid.UUID]) -> int:
        """Remove the memories not among `memory_ids` (deleted since they were indexed); returns how many."""
        assert self.flat is not None
        keep = set(memory_ids)
        gone = [slot for memory_id, slot in self.slot_of.items() if memory_id not in keep]
        if gone:
            removed = np.asarray(gone, np.int64)
            self.flat.remove(removed)
            if self.graph is not None:
                self.graph.remove(removed)
            for slot in gone:
                del self.slot_of[self.ids[slot]]
            self.unsaved += len(gone)
        return len(gone)

    def switch_to_hnsw(self) -> None:
        """Enter graph mode: an empty graph, every vector pending (``merge`` moves them in)."""
        if self.graph is None:
            self.graph = HnswEngine(self.dim)

    def merge(self, limit: int) -> int:
        """Move up to `limit` pending vectors into the graph; returns how many moved."""
        assert self.flat is not None
        if self.graph is None or not len(self.flat):
            return 0
        slots, vectors = self.flat.tail(limit)
        # Dropped only once in the graph: a failed insert leaves the vectors pending, not lost.
        self.graph.add(slots, vectors)
        self.flat.drop_tail(int(slots.size))
        return int(slots.size)

    def search(self, vector: npt.ArrayLike, limit: int) -> list[tuple[uuid.UUID, float]]:
        assert self.flat is not None
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(query))
        if limit <= 0 or norm == 0.0 or not np.isfinite(norm):
            return []
        query = query / norm
        slots, sims = self.flat.search(query, limit)
        if self.graph is not None and len(self.graph):
            graph_slots, graph_sims = self.graph.search(query, limit)
            slots, sims = np.concatenate((slots, graph_slots)), np.concatenate((sims, graph_sims))
            order = np.argsort(-sims, kind="stable")[:limit]
            slots, sims = slots[order], sims[order]
        ids = self.ids
        return [(ids[s], float(v)) for s, v in zip(slots.tolist(), sims.tolist(), strict=True)]

    # -- files ------------------------------------------------------------------------------------

    def file_arrays(self) -> dict[str, npt.NDArray[Any]]:
        """What ``write_index_file`` stores of this graph-mode index (every vector merged): copies, so the
        caller may write them without holding the index."""
        if self.graph is None or self.pending:
            raise ValueError("only a graph with nothing pending is written")
        meta = {
            "format": FILE_FORMAT,
            "workspace_id": self.workspace_id,
            "created_at": self.created_at.isoformat(),
            "model": self.model,
            "dim": self.dim,
            "generation": self.generation,
            "watermark": None if self.watermark is None else self.watermark.isoformat(),
        }
        saved = self.graph.index.save()  # to memory: written into the one file renamed into place
        assert saved is not None
        return {
            "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
            "ids": np.frombuffer(b"".join(m.bytes for m in self.ids), dtype=np.uint8),
            # Microseconds since the epoch, exact (a float of seconds is not); -1 = no stamp (written before
            # embedded_at existed). Which slots hold a vector is the graph's to say.
            "stamps": np.asarray([_micros(s) for s in self.stamps], np.int64),
            "graph": np.frombuffer(bytes(saved), dtype=np.uint8),
        }

    def to_file(self, path: Path) -> None:
        write_index_file(path, self.file_arrays())
        self.persisted, self.unsaved = True, 0

    @classmethod
    def from_file(cls, path: Path, *, workspace_id: int, created_at: datetime, model: str, dim: int) -> VectorIndex:
        """Read an index written by ``to_file``. IndexFileError when it cannot be read or was written for
        another workspace (id and creation time: a recreated workspace may reuse an id), model or dim."""
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(bytes(data["meta"]).decode())
                id_bytes = bytes(data["ids"])
                stamps_raw = data["stamps"]
                graph = bytes(data["graph"])
            expected = {
                "format": FILE_FORMAT,
                "workspace_id": workspace_id,
                "created_at": created_at.isoformat(),
                "model": model,
                "dim": dim,
            }
            wrong = sorted(k for k, v in expected.items() if meta.get(k) != v)
            if wrong:
                raise IndexFileError(f"written for another {', '.join(wrong)}")
            if len(id_bytes) % 16 or len(id_bytes) // 16 != len(stamps_raw):
                raise IndexFileError("ids and stamps differ in length")
            restored = Index.restore(graph)
        except IndexFileError:
            raise
        # Whatever fails while reading a file that only caches the database (truncated, another tool's,
        # a usearch version that reads it differently) means the same: it cannot be used.
        except Exception as exc:
            raise IndexFileError(f"unreadable: {exc!r}") from exc
        if restored is None or restored.ndim != dim:
            raise IndexFileError("unreadable graph")
        ids = [uuid.UUID(bytes=id_bytes[k : k + 16]) for k in range(0, len(id_bytes), 16)]
        stamps = [_from_micros(t) for t in stamps_raw.tolist()]
        watermark = meta.get("watermark")
        return cls(
            workspace_id=workspace_id,
            created_at=created_at,
            model=model,
            dim=dim,
            generation=int(meta.get("generation", 0)),
            watermark=None if watermark is None else datetime.fromisoformat(watermark),
            ids=ids,
            slot_of={m: k for k, m in enumerate(ids)},
            stamps=stamps,
            graph=HnswEngine(dim, restored),
            persisted=True,
        )


def write_index_file(path: Path, arrays: dict[str, npt.NDArray[Any]]) -> None:
    """Write ``file_arrays`` to `path` atomically: a temporary file in the same directory, renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            np.savez(out, meta=arrays["meta"], ids=arrays["ids"], stamps=arrays["stamps"], graph=arrays["graph"])
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _micros(stamp: datetime | None) -> int:
    return -1 if stamp is None else (stamp - _EPOCH) // timedelta(microseconds=1)


def _from_micros(value: int) -> datetime | None:
    return None if value < 0 else _EPOCH + timedelta(microseconds=value)
