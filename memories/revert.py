"""How a record's changes to memories and edges are checked and undone (the memories app's revert handler,
registered with ``history.revert`` when the app is ready).

Reverting puts ``before`` back only when every field still holds its ``after`` value; otherwise a later
change depends on it and the revert is refused.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import models
from django.db.models import F, Q

from core.errors import Conflict
from graph.writes import graph_mirror
from history.audit import CREATED_EDGES, CREATED_MEMORIES, EDGE_CHANGES, encode_value, is_uuid
from history.models import Action, EvolutionRecord, RecordLink
from history.revert import REVERTED_RECORD
from memories.bulk import write_rows
from memories.embedding_service import vectors_touch
from memories.models import Edge, Memory, MemoryScore, Workspace

_DATETIME_FIELDS = {f.name for f in Memory._meta.concrete_fields if isinstance(f, models.DateTimeField)} | {
    f.name for f in Edge._meta.concrete_fields if isinstance(f, models.DateTimeField)
}
_UUID_FIELDS = {"summarized_by", "superseded_by"}
_BYTES_FIELDS = {"embedding"}
VECTOR_FIELDS = frozenset({"embedding", "embedding_model"})
"""Memory fields that make a restore a vector write (see record_apply_revert)."""
SNAPSHOT_EDGE_FIELDS = frozenset({"source", "source_id", "target", "target_id", "edge_type", "weight"})
"""Edge fields a graph snapshot holds; restoring one of them is a graph rewrite."""


def _latest_later_record(record: EvolutionRecord, memory_id: str, undone: Set[int] = frozenset()) -> int | None:
    """The newest applied record after ``record`` that touched ``memory_id`` (what a revert must undo first),
    the records of ``undone`` aside."""
    later = (
        RecordLink.objects.filter(memory_id=memory_id, record__gt=record.pk)
        .exclude(record__reverted_at__isnull=False)
        .exclude(record__dry_run=True)
        .exclude(record__in=list(undone))
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


def _memory_values(workspace_id: int, wanted: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The current values of the memory fields ``wanted`` names ({memory id text: {field: ...}}), encoded as
    records hold them; a memory that no longer exists is missing. Two narrow reads (the memory's own fields,
    then its scores row), not a model instance per memory: a cycle's record names up to 500 memories."""
    names = sorted({name for fields in wanted.values() for name in fields})
    own = [n for n in names if n not in Memory.SCORE_FIELDS]
    scores = [n for n in names if n in Memory.SCORE_FIELDS]
    ids = [uuid.UUID(mid) for mid in wanted]
    found: dict[str, dict[str, Any]] = {}
    for row in Memory.objects.filter(workspace_id=workspace_id, id__in=ids).values_list("id", *own):
        found[str(row[0])] = {name: encode_value(name, value) for name, value in zip(own, row[1:], strict=True)}
    if scores:
        for row in MemoryScore.objects.filter(memory_id__in=ids).values_list("memory_id", *scores):
            fields = found.get(str(row[0]))
            if fields is not None:
                fields.update({name: encode_value(name, value) for name, value in zip(scores, row[1:], strict=True)})
    return found


def _edge_attnames(names: set[str]) -> list[tuple[str, str]]:
    """(record field name, column attribute) pairs: a record may name a foreign key by either."""
    return [(name, Edge._meta.get_field(name).attname) for name in sorted(names)]  # type: ignore[union-attr]


def _edge_values(workspace_id: int, wanted: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """As `_memory_values`, for edges ({edge id text: {field: ...}})."""
    pairs = _edge_attnames({name for fields in wanted.values() for name in fields})
    rows = Edge.objects.filter(workspace_id=workspace_id, id__in=[int(k) for k in wanted]).values_list(
        "id", *(attname for _, attname in pairs)
    )
    return {
        str(row[0]): {name: encode_value(name, value) for (name, _), value in zip(pairs, row[1:], strict=True)}
        for row in rows
    }


@dataclass
class _Rows:
    """The rows a revert check compares, encoded as records hold them, and the applied records that link the
    memories some record created. ``undone``: records taken as undone already (the newer ones of a list
    being checked together); ``reverts_of``: revert record id -> the record it undid."""

    memories: dict[str, dict[str, Any]]
    edges: dict[str, dict[str, Any]]
    links: dict[str, list[tuple[int, str]]]
    reverts_of: dict[int, int]
    undone: set[int] = field(default_factory=set)


_READ_CHUNK = 2000
"""Ids per read of the rows a check compares (well under every backend's bound-parameter limit)."""


def _read_rows(records: Sequence[EvolutionRecord]) -> _Rows:
    """The current values of every field ``records`` changed (after and before), and the links of applied
    records to the memories they created."""
    workspace_id = records[0].workspace_id
    wanted: dict[str, dict[str, Any]] = {}
    edges_wanted: dict[str, dict[str, Any]] = {}
    created: list[str] = []
    for record in records:
        for side in (record.after, record.before):
            for key, fields in side.items():
                if is_uuid(key):
                    wanted.setdefault(key, {}).update(dict.fromkeys(fields))
            for eid, fields in side.get(EDGE_CHANGES, {}).items():
                edges_wanted.setdefault(str(int(eid)), {}).update(dict.fromkeys(fields))
        created.extend(record.after.get(CREATED_MEMORIES, []))
    memories: dict[str, dict[str, Any]] = {}
    keys = list(wanted)
    for at in range(0, len(keys), _READ_CHUNK):
        memories.update(_memory_values(workspace_id, {k: wanted[k] for k in keys[at : at + _READ_CHUNK]}))
    edges: dict[str, dict[str, Any]] = {}
    keys = list(edges_wanted)
    for at in range(0, len(keys), _READ_CHUNK):
        edges.update(_edge_values(workspace_id, {k: edges_wanted[k] for k in keys[at : at + _READ_CHUNK]}))
    links: dict[str, list[tuple[int, str]]] = {}
    oldest = min(record.pk for record in records)
    for at in range(0, len(created), _READ_CHUNK):
        rows = (
            RecordLink.objects.filter(memory_id__in=created[at : at + _READ_CHUNK], record__gt=oldest)
            .exclude(record__reverted_at__isnull=False)
            .exclude(record__dry_run=True)
            .values_list("memory_id", "record_id", "record__action")
        )
        for memory_id, record_id, action in rows:
            links.setdefault(str(memory_id), []).append((record_id, action))
    revert_ids = sorted({rid for pairs in links.values() for rid, action in pairs if action == Action.REVERT})
    reverts_of: dict[int, int] = {}
    for at in range(0, len(revert_ids), _READ_CHUNK):
        reverts = EvolutionRecord.objects.filter(pk__in=revert_ids[at : at + _READ_CHUNK]).values_list(
            "pk", f"after__{REVERTED_RECORD}"
        )
        reverts_of.update({pk: int(undid) for pk, undid in reverts if isinstance(undid, int)})
    return _Rows(memories, edges, links, reverts_of)


def _check(record: EvolutionRecord, rows: _Rows) -> None:
    """Raise Conflict when ``record``'s memory and edge changes cannot be undone exactly from ``rows``."""
    for mid, fields in record.after.items():
        if not is_uuid(mid):
            continue
        now = rows.memories.get(mid)
        if now is None:
            raise Conflict(f"memory {mid} no longer exists", code="revert_conflict")
        for name, value in fields.items():
            if now[name] != value:
                later = _latest_later_record(record, mid, rows.undone)
                by = f" by record {later}" if later is not None else ""
                raise Conflict(
                    f"memory {mid} field {name} changed after record {record.pk}{by}; revert the later change first",
                    code="revert_conflict",
                ).blocked_by(later, mid)
    for mid in record.after.get(CREATED_MEMORIES, []):
        for record_id, action in sorted(rows.links.get(str(mid), [])):
            # A later record that is undone (or undoes a change made after this record) leaves the memory as
            # this record created it.
            if (
                record_id <= record.pk
                or record_id in rows.undone
                or (action == Action.REVERT and rows.reverts_of.get(record_id, 0) > record.pk)
            ):
                continue
            raise Conflict(
                f"record {record_id} changed a memory this record created; revert it first",
                code="revert_conflict",
            ).blocked_by(record_id, str(mid))
    for eid, fields in record.after.get(EDGE_CHANGES, {}).items():
        edge = rows.edges.get(str(int(eid)))
        if edge is None:
            raise Conflict(f"edge {eid} no longer exists", code="revert_conflict")
        for name, value in fields.items():
            if edge[name] != value:
                raise Conflict(f"edge {eid} field {name} changed later", code="revert_conflict")


def _undo(record: EvolutionRecord, rows: _Rows) -> None:
    """``rows`` as undoing ``record`` leaves them (its before values back, what it created gone)."""
    for mid, fields in record.before.items():
        if is_uuid(mid) and mid in rows.memories:
            rows.memories[mid].update(fields)
    for eid, fields in record.before.get(EDGE_CHANGES, {}).items():
        if str(int(eid)) in rows.edges:
            rows.edges[str(int(eid))].update(fields)
    for mid in record.after.get(CREATED_MEMORIES, []):
        rows.memories.pop(str(mid), None)
    for eid in record.after.get(CREATED_EDGES, []):
        rows.edges.pop(str(int(eid)), None)
    rows.undone.add(record.pk)


def record_revert_plan(record: EvolutionRecord) -> None:
    """Raise Conflict when the record's memory and edge changes cannot be undone exactly; otherwise return
    quietly."""
    _check(record, _read_rows([record]))


def records_revert_plan(records: Sequence[EvolutionRecord]) -> None:
    """Raise Conflict as ``record_revert_plan`` would for the first of ``records`` (newest first) that could not
    be undone once the ones before it were; reads the rows once and undoes nothing."""
    if not records:
        return
    rows = _read_rows(records)
    for record in records:
        _check(record, rows)
        _undo(record, rows)


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
        # Grouped by the fields they restore, each group one prepared UPDATE by key (memories.bulk); the
        # scores fields go to the scores rows there.
        by_fields: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for mid, fields in memory_fields.items():
            names = sorted(fields)
            values = [decode_value(name, fields[name]) for name in names]
            if VECTOR_FIELDS & set(fields):
                names.append("embedded_at")
                values.append(stamp)
            by_fields.setdefault(tuple(names), []).append((*values, uuid.UUID(mid)))
        for group, rows in by_fields.items():
            write_rows(Memory, list(group), rows)
    edge_before = record.before.get(EDGE_CHANGES, {})
    # Restoring a field the graph snapshot holds is a rewrite: appending newer edges cannot express it.
    rewritten = any(set(fields) & SNAPSHOT_EDGE_FIELDS for fields in edge_before.values())
    if edge_before:
        moved_ids = [int(eid) for eid, fields in edge_before.items() if set(fields) & SNAPSHOT_EDGE_FIELDS]
        moved_from = list(
            Edge.objects.filter(workspace=record.workspace, id__in=moved_ids).values_list(
                "source_id", "target_id", "edge_type", "weight"
            )
        )
        edge_groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for eid, fields in edge_before.items():
            pairs = _edge_attnames(set(fields))
            edge_groups.setdefault(tuple(attname for _, attname in pairs), []).append(
                (*(decode_value(name, fields[name]) for name, _ in pairs), int(eid))
            )
        for attnames, rows in edge_groups.items():
            write_rows(Edge, list(attnames), rows)
        if moved_ids:
            moved_to = Edge.objects.filter(workspace=record.workspace, id__in=moved_ids).values_list(
                "source_id", "target_id", "edge_type", "weight"
            )
            graph_mirror(workspace=record.workspace, removed=moved_from, added=list(moved_to))
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

    register_revert_handler(record_revert_plan, record_apply_revert, records_revert_plan)
