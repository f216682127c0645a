"""The process-wide Embedder chosen by the EMBEDDER setting, and where memories' vectors are stored.

Vectors live in their own table (MemoryEmbedding, one row per memory; see its docstring for why). Every
write of a vector goes through the functions here, so a memory row never carries one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from django.conf import settings

from memories.algorithms.embedding import Embedder, get_embedder, to_bytes
from memories.bulk import bulk_insert, new_instance
from memories.models import Memory, MemoryEmbedding

# Ids per IN (...) list: SQLite's default limit on host parameters is 999 on old builds.
_IN_CHUNK = 900


@lru_cache(maxsize=4)
def _embedder_for(spec: str) -> Embedder:
    return get_embedder(spec)


def default_embedder() -> Embedder:
    return _embedder_for(settings.EMBEDDER)


def embed_new(memories: Sequence[Memory]) -> None:
    """Embed freshly inserted `memories` in one batch and insert their vectors.

    Each row is also cached on its memory, so ``memory.embedding.vector`` reads no row afterwards.
    """
    if not memories:
        return
    rows = []
    for memory, vector in zip(memories, default_embedder().embed([m.content for m in memories]), strict=True):
        row = new_instance(MemoryEmbedding, {"memory_id": memory.pk, "vector": to_bytes(vector)})
        memory.embedding = row
        rows.append(row)
    bulk_insert(MemoryEmbedding, rows)


def embed_content(memory_id: uuid.UUID, content: str) -> bytes:
    """Embed `content` as the vector of `memory_id` (replacing the stored one); returns the blob."""
    blob = to_bytes(default_embedder().embed([content])[0])
    embeddings_put({memory_id: blob})
    return blob


def embeddings_put(vectors: Mapping[uuid.UUID, bytes | None]) -> None:
    """Store each memory's vector, replacing the one it has; None removes it. The memories must exist."""
    gone = [mid for mid, blob in vectors.items() if blob is None]
    for start in range(0, len(gone), _IN_CHUNK):
        MemoryEmbedding.objects.filter(memory_id__in=gone[start : start + _IN_CHUNK]).delete()
    rows = [MemoryEmbedding(memory_id=mid, vector=bytes(blob)) for mid, blob in vectors.items() if blob is not None]
    if rows:
        MemoryEmbedding.objects.bulk_create(
            rows, batch_size=500, update_conflicts=True, unique_fields=["memory"], update_fields=["vector"]
        )


def embeddings_of(ids: Iterable[uuid.UUID | str]) -> dict[uuid.UUID, bytes]:
    """Stored vectors of `ids` (memories without one are absent), keyed by memory id."""
    wanted = [i if isinstance(i, uuid.UUID) else uuid.UUID(str(i)) for i in ids]
    out: dict[uuid.UUID, bytes] = {}
    for start in range(0, len(wanted), _IN_CHUNK):
        chunk = MemoryEmbedding.objects.filter(memory_id__in=wanted[start : start + _IN_CHUNK])
        out.update((mid, bytes(blob)) for mid, blob in chunk.values_list("memory_id", "vector"))
    return out
