"""Write audited records of changes and undo them.

A record stores, per touched memory, the exact prior and new values of the fields it changed
(`before`/`after`), plus the rows it created. Reverting puts `before` back only when every field
still holds its `after` value; otherwise a later change depends on it and the revert is refused.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from evolution.models import EvolutionRun
from history.models import EvolutionRecord, RecordLink
from memories.errors import Conflict
from memories.models import Edge, Memory, Workspace

_DATETIME_FIELDS = {f.name for f in Memory._meta.concrete_fields if isinstance(f, models.DateTimeField)} | {
    f.name for f in Edge._meta.concrete_fields if isinstance(f, models.DateTimeField)
}
_UUID_FIELDS = {"summarized_by", "superseded_by"}
_BYTES_FIELDS = {"embedding"}
VECTOR_FIELDS = frozenset({"embedding", "embedding_model"})
"""Memory fields that make a restore a vector write (see record_apply_revert)."""


def encode_value(field: str, value: Any) -> Any:
    """Make a model field value JSON-safe without losing precision (iso datetimes, base64 bytes)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return value


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


def snapshot(obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    return {f: encode_value(f, getattr(obj, f)) for f in fields}


def actor_or_none(actor: AbstractBaseUser | AnonymousUser | None) -> Any:
    return actor if actor is not None and actor.is_authenticated else None


def actor_name(actor: AbstractBaseUser | AnonymousUser | None) -> str:
    """The username a record's reason names ("" for the engine or an anonymous caller)."""
    return actor.get_username() if actor is not None and actor.is_authenticated else ""


def approval(kind: str, proposal_pk: object, actor: AbstractBaseUser | AnonymousUser | None) -> str:
    """How an applied proposal's record reason starts: "merge proposal 12 approved by alice"."""
    who = actor_name(actor)
    return f"{kind} proposal {proposal_pk} approved" + (f" by {who}" if who else "")


def record_build(
    *,
    workspace: Workspace,
    evolver: str,
    action: str,
    reason: str,
    input_ids: Sequence[Any] = (),
    output_ids: Sequence[Any] = (),
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    run: EvolutionRun | None = None,
    dry_run: bool = False,
    actor: AbstractBaseUser | AnonymousUser | None = None,
    now: datetime | None = None,
) -> EvolutionRecord:
    """Build (not save) a record; pair with records_save to write many in two queries."""
    return EvolutionRecord(
        workspace=workspace,
        run=run,
        evolver=evolver,
        action=action,
        reason=reason,
        input_ids=[str(i) for i in input_ids],
        output_ids=[str(i) for i in output_ids],
        before=dict(before or {}),
        after=dict(after or {}),
        dry_run=dry_run,
        actor=actor_or_none(actor),
        timestamp=now or timezone.now(),
    )


def record_save(record: EvolutionRecord) -> EvolutionRecord:
    """Insert one built record and its memory links (records_save of one)."""
    (saved,) = records_save([record])
    return saved


def records_save(records: Sequence[EvolutionRecord], *, batch_size: int = 500) -> list[EvolutionRecord]:
    """Insert records and their memory links in batches (ids are needed for the links)."""
    if not records:
        return []
    saved = EvolutionRecord.objects.bulk_create(records, batch_size=batch_size)
    if any(r.pk is None for r in saved):
        # Backends without RETURNING on bulk insert: fall back to one insert per record.
        saved = []
        for r in records:
            r.save()
            saved.append(r)
    links: list[RecordLink] = []
    for record in saved:
        ids = {str(i) for i in record.input_ids} | {str(i) for i in record.output_ids}
        for key in record.before:
            if _is_uuid(key):
                ids.add(key)
        for mid in ids:
            if _is_uuid(mid):
                links.append(RecordLink(record=record, memory_id=uuid.UUID(mid)))
    RecordLink.objects.bulk_create(links, batch_size=2000)
    return saved


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def memory_changes(memory: Memory, changes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (before, after) JSON snapshots of just the fields that `changes` alters."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for name, value in changes.items():
        old = getattr(memory, name)
        if old != value:
            before[name] = encode_value(name, old)
            after[name] = encode_value(name, value)
    return before, after


# Keys of before/after that are not memory ids.
CREATED_MEMORIES = "created_memories"
CREATED_EDGES = "created_edges"
EDGE_CHANGES = "edges"
SNAPSHOT_EDGE_FIELDS = frozenset({"source", "source_id", "target", "target_id", "edge_type", "weight"})
"""Edge fields a graph snapshot holds; restoring one of them is a graph rewrite."""
DELETED = "deleted"


def record_revert_plan(record: EvolutionRecord) -> None:
    """Raise Conflict when the record cannot be reverted exactly; otherwise return quietly."""
    if record.dry_run:
        raise Conflict(f"record {record.pk} is a dry run; there is nothing to revert", code="dry_run")
    if record.reverted_at is not None:
        raise Conflict(f"record {record.pk} was already reverted", code="already_reverted")
    if record.action == "delete":
        raise Conflict(
            f"record {record.pk} is a hard delete; the deleted content is kept in this record for "
            "reference but deleted rows are not recreated",
            code="not_revertible",
        )
    memory_fields = {k: v for k, v in record.after.items() if _is_uuid(k)}
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
                    raise Conflict(
                        f"memory {mid} field {name} changed after record {record.pk}; revert the later change first",
                        code="revert_conflict",
                    )
    created = record.after.get(CREATED_MEMORIES, [])
    if created:
        later = (
            RecordLink.objects.filter(memory_id__in=created, record__gt=record.pk)
            .exclude(record__reverted_at__isnull=False)
            .exclude(record__dry_run=True)
            .values_list("record_id", flat=True)
            .first()
        )
        if later is not None:
            raise Conflict(
                f"record {later} changed a memory this record created; revert it first",
                code="revert_conflict",
            )
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


def memory_fields(record: EvolutionRecord, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (before, after) field values a record holds for the memory whose id text is `key` ({} when none)."""
    before, after = record.before.get(key), record.after.get(key)
    return (before if isinstance(before, dict) else {}), (after if isinstance(after, dict) else {})


def _edge_row(edge: Edge) -> tuple[uuid.UUID, uuid.UUID, str, float]:
    return (edge.source_id, edge.target_id, edge.edge_type, edge.weight)


def record_apply_revert(record: EvolutionRecord) -> dict[str, Any]:
    """Put the record's `before` values back. Caller holds the transaction and checked the plan."""
    from memories.embedding_service import vectors_touch
    from memories.services import graph_mirror  # memories.services imports this module at load time

    now = timezone.now()
    restored: dict[str, Any] = {}
    memory_fields = {k: v for k, v in record.before.items() if _is_uuid(k)}
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
            restored[mid] = record.after.get(mid, {})
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
    record.reverted_at = now
    return restored
