"""Build and insert the memories and edges that evolvers and approved proposals derive.

Derived memories skip the write-time slot policies on purpose: they are the evolution engine's own
output (origin `evolver:<Name>`, origin tier 2), audited by the record of the action that made them,
and their types (semantic, zettel, opinion, observation, procedural, fact) keep both values anyway.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from graph.writes import graph_mirror, graph_touch
from history import audit
from memories.algorithms.embedding import Embedder, FloatMatrix
from memories.algorithms.sortkey import activation_sort_key
from memories.bulk import bulk_insert
from memories.embedding_service import memories_embed
from memories.inputs import MAX_TAGS, origin_tier
from memories.models import Edge, Memory, Workspace

# A derived memory lists at most this many sources in metadata and edges: an opinion backed by
# thousands of memories stays one row of bounded size, and the count is kept in full beside it.
MAX_LINKED_SOURCES = 100


def derived_memory(
    *,
    workspace: Workspace,
    memory_type: str,
    content: str,
    evolver: str,
    now: datetime,
    subject: str = "",
    tags: Sequence[str] = (),
    confidence: float = 1.0,
    metadata: Mapping[str, Any] | None = None,
    summarizes: Sequence[uuid.UUID | str] = (),
) -> Memory:
    """An unsaved memory made by `evolver` at `now` (new activation, id assigned, not embedded yet)."""
    origin = f"evolver:{evolver}"
    memory = Memory(
        id=uuid.uuid4(),
        workspace=workspace,
        memory_type=memory_type,
        content=content,
        subject=subject,
        tags=list(dict.fromkeys(tags))[:MAX_TAGS],
        origin=origin,
        origin_tier=origin_tier(origin),
        confidence=float(min(1.0, max(0.0, confidence))),
        activation_last_boost_at=now,
        created_at=now,
        updated_at=now,
        metadata=dict(metadata or {}),
        summarizes=[str(s) for s in summarizes],
    )
    memory.activation_sort_key = activation_sort_key(memory.activation_score, now, memory.activation_half_life_hours)
    return memory


def insert_derived(
    *,
    workspace: Workspace,
    memories: Sequence[Memory],
    edges: Sequence[tuple[uuid.UUID | str, uuid.UUID | str, str]],
    now: datetime,
    vectors: tuple[Embedder, FloatMatrix] | None = None,
) -> list[int]:
    """Embed and insert `memories`, then insert `edges` (source, target, type); returns the edge ids in order.

    Embeddings are computed in one batch (or given: `memories_vectors` of the memories, computed before the
    caller's transaction); the graph generation is bumped once when edges were added.
    """
    if memories:
        memories_embed(workspace=workspace, memories=memories, vectors=vectors)
        bulk_insert(Memory, list(memories))
    if not edges:
        return []
    graph_touch(workspace=workspace)  # before the insert: see graph.writes.graph_touch
    created = Edge.objects.bulk_create(
        [Edge(workspace=workspace, source_id=s, target_id=t, edge_type=kind, created_at=now) for s, t, kind in edges],
        batch_size=1000,
    )
    graph_mirror(workspace=workspace, added=((e.source_id, e.target_id, e.edge_type, e.weight) for e in created))
    return [int(e.pk) for e in created]


def created_after(
    after: dict[str, Any], memories: Sequence[Memory], edge_ids: Sequence[int], *, dry_run: bool
) -> dict[str, Any]:
    """Add the creation keys revert reads (created memories and edges) and the new contents to `after`.

    A dry run has nothing to revert: it lists the planned contents under "planned" instead.
    """
    contents = {str(m.id): m.content for m in memories}
    if dry_run:
        after["planned"] = contents
        return after
    after[audit.CREATED_MEMORIES] = list(contents)
    after["contents"] = contents
    if edge_ids:
        after[audit.CREATED_EDGES] = list(edge_ids)
    return after
