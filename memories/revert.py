"""How a record's changes to memories and edges are checked and undone (the memories app's revert handler,
registered with ``history.revert`` when the app is ready).

Reverting puts ``before`` back only when every field still holds its ``after`` value; otherwise a later
change depends on it and the revert is refused.
"""

from __future__ import annotations

import base64
import uuid
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, Q

from core.errors import Conflict
from graph.writes import graph_mirror
from history.audit import CREATED_EDGES, CREATED_MEMORIES, EDGE_CHANGES, encode_value, is_uuid
from history.models import EvolutionRecord, RecordLink
from memories.embedding_service import vectors_touch
from memories.models import Edge, Memory, Workspace

_DATETIME_FIELDS = {f.name for f in Memory._meta.concrete_fields if isinstance(f, models.DateTimeField)} | {
    f.name for f in Edge._meta.concrete_fields if isinstance(f, models.DateTimeField)
}
_UUID_FIELDS = {"summarized_by", "superseded_by"}
_BYTES_FIELDS = {"embedding"}
VECTOR_FIELDS = frozenset({"embedding", "embedding_model"})
"""Memory fields that make a restore a vector write (see record_apply_revert)."""
SNAPSHOT_EDGE_FIELDS = frozenset({"source", "source_id", "target", "target_id", "edge_type", "weight"})
"""Edge fields a graph snapshot holds; restoring one of them is a graph rewrite."""


def _latest_later_record(record: EvolutionRecord, memory_id: str) -> int | None:
    """The newest applied record after ``record`` that touched ``memory_id`` (what a revert must undo first)."""
    later: int | None = (
        RecordLink.objects.filter(memory_id=memory_id, record__gt=record.pk)
        .exclude(record__reverted_at__isnull=False)
        .exclude(record__dry_run=True)
        .order_by("-record_id")
        .values_list("record_id", flat=True)
        .first()
    )
    return later


def decode_value(field: str, value: Any) -> Any:
    if value is None:
        return None
    if field in _DATETIME_FIELDS:
        return datetime.fromisoformat(value)
    if field in _UUID_FIELDS:
        return uuid.UUID(value)
    if field in _BYTES_FIELDS:
        return base64.b64decode(value)
    return value


def record_revert_plan(record: EvolutionRecord) -> None:
    """Raise Conflict when the record's memory and edge changes cannot be undone exactly; otherwise return
    quietly."""
    memory_fields = {k: v for k, v in record.after.items() if is_uuid(k)}
    if memory_fields:
        current = (
            Memory.objects.select_related("score")
            .filter(workspace=record.workspace, id__in=list(memory_fields))
            .in_bulk()
        )
        for mid, fields in memory_fields.items():
            memory = current.get(uuid.UUID(mid))
            if memory is None:
                raise Conflict(f"memory {mid} no longer exists", code="revert_conflict")
            for name, value in fields.items():
                if encode_value(name, getattr(memory, name)) != value:
                    later = _latest_later_record(record, mid)
                    by = f" by record {later}" if later is not None else ""
                    raise Conflict(
                        f"memory {mid} field {name} changed after record {record.pk}{by}; revert the later change "
                        "first",
                        code="revert_conflict",
                    ).blocked_by(later, mid)
    created = record.after.get(CREATED_MEMORIES, [])
    if created:
        blocking = (
            RecordLink.objects.filter(memory_id__in=created, record__gt=record.pk)
            .exclude(record__reverted_at__isnull=False)
            .exclude(record__dry_run=True)
            .values_list("record_id", "memory_id")
            .first()
        )
        if blocking is not None:
            raise Conflict(
                f"record {blocking[0]} changed a memory this record created; revert it first",
                code="revert_conflict",
            ).blocked_by(blocking[0], str(blocking[1]))
    edge_changes = record.after.get(EDGE_CHANGES, {})
    if edge_changes:
        edges = Edge.objects.filter(workspace=record.workspace, id__in=[int(k) for k in edge_changes]).in_bulk()
        for eid, fields in edge_changes.items():
            edge = edges.get(int(eid))
            if edge is None:
                raise Conflict(f"edge {eid} no longer exists", code="revert_conflict")
            for name, value in fields.items():
                if encode_value(name, getattr(edge, name)) != value:
                    raise Conflict(f"edge {eid} field {name} changed later", code="revert_conflict")


def _edge_row(edge: Edge) -> tuple[uuid.UUID, uuid.UUID, str, float]:
    return (edge.source_id, edge.target_id, edge.edge_type, edge.weight)


def record_apply_revert(record: EvolutionRecord) -> None:
    """Put the record's memory and edge `before` values back. The caller holds the transaction and ran
    ``record_revert_plan``."""
    memory_fields = {k: v for k, v in record.before.items() if is_uuid(k)}
    # A restored vector is a vector write: stamped anew (its old time would be behind the vector indexes'
    # watermark) after the workspace's vectors are touched.
    stamp = (
        vectors_touch(workspace=record.workspace)[0]
        if any(VECTOR_FIELDS & set(fields) for fields in memory_fields.values())
        else None
    )
    if memory_fields:
        memories = (
            Memory.objects.select_related("score")
            .filter(workspace=record.workspace, id__in=list(memory_fields))
            .in_bulk()
        )
        by_fields: dict[tuple[str, ...], list[Memory]] = {}
        for mid, fields in memory_fields.items():
            memory = memories[uuid.UUID(mid)]
            for name, value in fields.items():
                setattr(memory, name, decode_value(name, value))
            written = set(fields)
            if VECTOR_FIELDS & written:
                memory.embedded_at = stamp
                written.add("embedded_at")
            by_fields.setdefault(tuple(sorted(written)), []).append(memory)
        for names, group in by_fields.items():
            Memory.objects.bulk_update(group, list(names), batch_size=500)
    edge_before = record.before.get(EDGE_CHANGES, {})
    # Restoring a field the graph snapshot holds is a rewrite: appending newer edges cannot express it.
    rewritten = any(set(fields) & SNAPSHOT_EDGE_FIELDS for fields in edge_before.values())
    if edge_before:
        edges = Edge.objects.filter(workspace=record.workspace, id__in=[int(k) for k in edge_before]).in_bulk()
        moved = [edges[int(eid)] for eid, fields in edge_before.items() if set(fields) & SNAPSHOT_EDGE_FIELDS]
        moved_from = [_edge_row(edge) for edge in moved]
        for eid, fields in edge_before.items():
            edge = edges[int(eid)]
            for name, value in fields.items():
                setattr(edge, name, decode_value(name, value))
            edge.save(update_fields=list(fields))
        if moved:
            graph_mirror(workspace=record.workspace, removed=moved_from, added=[_edge_row(edge) for edge in moved])
    created_edges = record.after.get(CREATED_EDGES, [])
    created = record.after.get(CREATED_MEMORIES, [])
    if created_edges or created:
        # A Bolt graph loses the created edges and every edge of the created memories (read only when the
        # store is not the SQL one: graph_mirror consumes the queryset lazily).
        doomed = Edge.objects.filter(
            Q(id__in=created_edges) | Q(source_id__in=created) | Q(target_id__in=created), workspace=record.workspace
        ).values_list("source_id", "target_id", "edge_type", "weight")
        graph_mirror(workspace=record.workspace, removed=doomed)
    if created_edges:
        Edge.objects.filter(workspace=record.workspace, id__in=created_edges).delete()
    if created:
        Memory.objects.filter(workspace=record.workspace, id__in=created).delete()
    if created_edges or created or rewritten:
        # Cached graph snapshots key on these counters: deleted edges (and the edges of deleted memories)
        # or restored weights make the next read rebuild rather than extend.
        Workspace.objects.filter(pk=record.workspace_id).update(
            graph_generation=F("graph_generation") + 1, graph_rewrites=F("graph_rewrites") + 1
        )


def register() -> None:
    """Make ``history.revert`` check and undo memory and edge changes (called by MemoriesConfig.ready)."""
    from history.revert import register_revert_handler

    register_revert_handler(record_revert_plan, record_apply_revert)
