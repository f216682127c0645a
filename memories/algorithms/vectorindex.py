"""In-memory nearest-neighbour index of one workspace's vectors of one model, keyed by memory id.

Pure (numpy and usearch, no Django): memories.vectorindex feeds it rows read from the database and keeps
it current. Results are cosine similarities, best first. Two engines:

- ``ExactEngine``: a float32 matrix, one matrix-vector product and an ``argpartition``. Exact; its cost
  is one read of the matrix per query (4 * n * dim bytes: 154 MB at 100k x 384).
- ``HnswEngine``: a usearch HNSW graph over half-precision vectors, inner product. Approximate (recall
  depends on the data; the search list is at least the number of results asked for); its cost grows with
  log n, its build with n log n.

Every stored vector is scaled to unit length, so inner product is cosine; a zero vector (an empty text)
has no direction and is not indexed. A memory keeps its slot for the life of the index (a removed one is
masked or taken out of the graph), so replacing a vector never moves another.
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

__all__ = ["ExactEngine", "HnswEngine", "IndexFileError", "VectorIndex"]

FloatMatrix = npt.NDArray[np.float32]
SlotArray = npt.NDArray[np.int64]

# HNSW: 16 links per node and a candidate list of 128 while adding (usearch's defaults); the search list
# is at least 128 and at least the number of results asked for.
CONNECTIVITY = 16
EXPANSION_ADD = 128
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


class ExactEngine:
    """Rows of a float32 matrix by slot; a removed slot is zeroed and masked out of results."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.matrix: FloatMatrix = np.zeros((0, dim), np.float32)
        self.live = np.zeros(0, np.bool_)
        self.used = 0

    def __len__(self) -> int:
        return int(self.live[: self.used].sum())

    def put(self, slots: SlotArray, vectors: FloatMatrix) -> None:
        top = int(slots.max()) + 1 if slots.size else 0
        if top > self.matrix.shape[0]:
            # Doubling keeps appends amortised O(1) per vector.
            capacity = max(top, 2 * self.matrix.shape[0], 1024)
            grown = np.zeros((capacity, self.dim), np.float32)
            grown[: self.used] = self.matrix[: self.used]
            live = np.zeros(capacity, np.bool_)
            live[: self.used] = self.live[: self.used]
            self.matrix, self.live = grown, live
        self.matrix[slots] = vectors
        self.live[slots] = True
        self.used = max(self.used, top)

    def remove(self, slots: SlotArray) -> None:
        # Slots past the matrix never held a vector here (a new memory whose first vector is unusable).
        slots = slots[slots < self.used]
        self.matrix[slots] = 0.0
        self.live[slots] = False

    def vectors(self) -> tuple[SlotArray, FloatMatrix]:
        slots = np.flatnonzero(self.live[: self.used]).astype(np.int64)
        return slots, self.matrix[slots]

    def search(self, query: FloatMatrix, k: int) -> tuple[SlotArray, FloatMatrix]:
        n = self.used
        scores = self.matrix[:n] @ query
        dead = ~self.live[:n]
        if dead.any():
            scores[dead] = -np.inf
        k = min(k, n - int(dead.sum()))
        if k <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        top = np.argpartition(-scores, k - 1)[:k] if k < n else np.arange(n)
        top = top[np.argsort(-scores[top], kind="stable")]
        return top.astype(np.int64), scores[top]


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

    def put(self, slots: SlotArray, vectors: FloatMatrix) -> None:
        present = [int(s) for s in slots.tolist() if int(s) in self.index]
        if present:
            self.index.remove(np.asarray(present, np.uint64))
        if slots.size:
            self.index.add(slots.astype(np.uint64), vectors)

    def remove(self, slots: SlotArray) -> None:
        present = [int(s) for s in slots.tolist() if int(s) in self.index]
        if present:
            self.index.remove(np.asarray(present, np.uint64))

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

    ``stamps[slot]``: the write time of the vector (or removal) last applied there. ``watermark``: the
    latest write time applied; ``generation``: the workspace's vector generation it is current to (both
    kept by the caller's catch-up, memories.vectorindex). ``unsaved``: changes since it was last written to
    a file; ``rows_read``: rows applied so far (what a catch-up cost).
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
    engine: ExactEngine | HnswEngine | None = None
    unsaved: int = 0
    rows_read: int = 0

    def __post_init__(self) -> None:
        if self.engine is None:
            self.engine = ExactEngine(self.dim)

    def __len__(self) -> int:
        assert self.engine is not None
        return len(self.engine)

    @property
    def is_hnsw(self) -> bool:
        return isinstance(self.engine, HnswEngine)

    def apply(self, rows: Iterable[tuple[uuid.UUID, datetime | None, Any]]) -> int:
        """Take (memory id, embedded_at, blob or None) rows: a blob of this index's width is (re)placed,
        anything else removes the memory. A row with the stamp already held is skipped. Returns the number
        of changes."""
        assert self.engine is not None
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
            put_slots.append(slot)
            put_blobs.append(bytes(blob))
        changes = len(gone)
        if gone:
            self.engine.remove(np.asarray(gone, np.int64))
        if put_slots:
            raw = np.frombuffer(b"".join(put_blobs), dtype=BLOB_DTYPE).reshape(len(put_blobs), self.dim)
            vectors, usable = _unit_rows(raw.astype(np.float32))
            slots = np.asarray(put_slots, np.int64)
            # A zero vector (empty text) has no direction: cosine 0 with everything, so it is not indexed.
            if not usable.all():
                self.engine.remove(slots[~usable])
            self.engine.put(slots[usable], vectors[usable])
            changes += len(put_slots)
        self.unsaved += changes
        return changes

    def switch_to_hnsw(self) -> None:
        """Move the vectors of the exact engine into an HNSW graph (once the index outgrew exact search)."""
        assert isinstance(self.engine, ExactEngine)
        slots, vectors = self.engine.vectors()
        hnsw = HnswEngine(self.dim)
        if slots.size:
            hnsw.index.add(slots.astype(np.uint64), vectors)
        self.engine = hnsw
        # None of it is on disk yet.
        self.unsaved += len(hnsw)

    def search(self, vector: npt.ArrayLike, limit: int) -> list[tuple[uuid.UUID, float]]:
        assert self.engine is not None
        query = np.asarray(vector, dtype=np.float32).reshape(-1)
        norm = float(np.linalg.norm(query))
        if limit <= 0 or norm == 0.0 or not np.isfinite(norm):
            return []
        slots, sims = self.engine.search(query / norm, limit)
        ids = self.ids
        return [(ids[s], float(v)) for s, v in zip(slots.tolist(), sims.tolist(), strict=True)]

    # -- files ------------------------------------------------------------------------------------

    def to_file(self, path: Path) -> None:
        """Write this HNSW index to `path` atomically: a temporary file in the same directory, renamed."""
        assert isinstance(self.engine, HnswEngine)
        meta = {
            "format": FILE_FORMAT,
            "workspace_id": self.workspace_id,
            "created_at": self.created_at.isoformat(),
            "model": self.model,
            "dim": self.dim,
            "generation": self.generation,
            "watermark": None if self.watermark is None else self.watermark.isoformat(),
        }
        # Microseconds since the epoch, exact (a float of seconds is not); -1 = no stamp (written before
        # embedded_at existed). Which slots hold a vector is the graph's to say.
        stamps = np.asarray([_micros(s) for s in self.stamps], np.int64)
        id_bytes = np.frombuffer(b"".join(m.bytes for m in self.ids), dtype=np.uint8)
        saved = self.engine.index.save()  # to memory: the bytes go into the one file renamed below
        assert saved is not None
        graph = np.frombuffer(bytes(saved), dtype=np.uint8)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(
                    out,
                    meta=np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
                    ids=id_bytes,
                    stamps=stamps,
                    graph=graph,
                )
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self.unsaved = 0

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
            engine=HnswEngine(dim, restored),
        )


def _micros(stamp: datetime | None) -> int:
    return -1 if stamp is None else (stamp - _EPOCH) // timedelta(microseconds=1)


def _from_micros(value: int) -> datetime | None:
    return None if value < 0 else _EPOCH + timedelta(microseconds=value)
