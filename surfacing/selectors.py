"""Reads for surfacing: candidate rows as arrays, anchors, pins and settings, scoped to one workspace.

Candidate rows are read with one raw query per batch because this is the hot path of every working
context: ages and hours since the last boost are computed by the database (julianday / epoch
arithmetic), so Python never parses a datetime per row, and only the columns the scoring needs come
back. Content is read later, for the rows actually returned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from django.db import connection
from django.db.models import Max

from core.sql import hours_between, timestamp_param, unindexed, uuid_params
from memories.algorithms.activation import decayed_activation_array
from memories.embeddings import embedder_for
from memories.models import Memory, MemoryScore, MemoryType, Status, Workspace
from memories.selectors import as_uuid
from surfacing.algorithms.anchors import AnchorInfo
from surfacing.pins import pin_store
from surfacing.settings import SurfacingSettings, effective_evolution, effective_settings

__all__ = [
    "MAX_ANCHORS",
    "CandidateRows",
    "anchor_rows",
    "anchors_info",
    "candidate_rows",
    "entity_memories",
    "memories_in_workspace",
    "memory_details",
    "most_recent",
    "session_pins",
    "workspace_settings",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MAX_ANCHORS = 100
"""Anchors considered per context (newest first): k is at most 100, so more could never be returned."""


@dataclass(frozen=True, eq=False)
class CandidateRows:
    """Scoring inputs of active memories, aligned by row; ``position`` maps memory id -> row.

    ``activation``: stored score decayed to now; ``age_hours``: hours since updated_at (else
    created_at); ``chars``: content length; ``subject``: what the memory is about (a conversation turn:
    its speaker).
    """

    ids: list[uuid.UUID]
    memory_type: list[str]
    subject: list[str]
    activation: FloatArray
    age_hours: FloatArray
    chars: IntArray
    position: dict[uuid.UUID, int]

    def __len__(self) -> int:
        return len(self.ids)

    def concat(self, other: CandidateRows) -> CandidateRows:
        """These rows followed by ``other``'s."""
        if not len(other):
            return self
        offset = len(self)
        return CandidateRows(
            ids=[*self.ids, *other.ids],
            memory_type=[*self.memory_type, *other.memory_type],
            subject=[*self.subject, *other.subject],
            activation=np.concatenate([self.activation, other.activation]),
            age_hours=np.concatenate([self.age_hours, other.age_hours]),
            chars=np.concatenate([self.chars, other.chars]),
            position={**self.position, **{mid: offset + i for mid, i in other.position.items()}},
        )


def _empty_rows() -> CandidateRows:
    return CandidateRows(
        ids=[],
        memory_type=[],
        subject=[],
        activation=np.empty(0),
        age_hours=np.empty(0),
        chars=np.empty(0, np.int64),
        position={},
    )


def candidate_rows(
    *,
    workspace: Workspace,
    ids: Sequence[uuid.UUID] = (),
    anchors: bool = False,
    now: datetime,
) -> CandidateRows:
    """Active memories of ``workspace`` among ``ids``, plus (``anchors``) up to MAX_ANCHORS anchors
    (``memory_type`` tells them apart). One query (see the comment on its parts)."""
    unique = list(dict.fromkeys(ids))
    if not unique and not anchors:
        return _empty_rows()
    table = Memory._meta.db_table
    now_param = timestamp_param(now)
    since_boost = hours_between("%s", "activation_last_boost_at")
    age = hours_between("%s", "COALESCE(updated_at, created_at)")
    columns = (
        f"id, memory_type, activation_score, {since_boost}, activation_half_life_hours, {age}, length(content), subject"
    )
    # One statement of up to two parts, the same memory possibly in both (the first copy is kept): the
    # requested ids by primary key and the anchors from the (workspace, memory_type, subject) index. A
    # UNION ALL of plain index reads measured ~30% faster than one WHERE with ORed IN-subqueries.
    parts: list[str] = []
    params: list[Any] = []
    # SQLite without ANALYZE statistics prefers the workspace index and scans the whole workspace for an
    # id list; the unary plus (`unindexed`) keeps the outer filters off the index so the id primary key is used.
    stored_ids = uuid_params(unique)
    if unique:
        marks = ",".join(["%s"] * len(unique))
        parts.append(
            f"SELECT {columns} FROM {table} WHERE id IN ({marks}) "
            f"AND {unindexed('workspace_id')} = %s AND {unindexed('status')} = %s"
        )
        params.extend([now_param, now_param, *stored_ids, workspace.pk, Status.ACTIVE])
    if anchors:
        parts.append(
            f"SELECT * FROM (SELECT {columns} FROM {table} WHERE workspace_id = %s AND memory_type = %s "
            "AND status = %s LIMIT %s) anchors"
        )
        params.extend([now_param, now_param, workspace.pk, MemoryType.ANCHOR, Status.ACTIVE, MAX_ANCHORS])
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        fetched = cursor.fetchall()
    first: dict[Any, tuple[Any, ...]] = {}
    for row in fetched:
        first.setdefault(row[0], row)
    rows = list(first.values())
    if not rows:
        return _empty_rows()
    cols = list(zip(*rows, strict=True))
    # Requested ids are known already: look them up by their stored form instead of parsing each UUID.
    known: dict[Any, uuid.UUID] = dict(zip(stored_ids, unique, strict=True))
    row_ids = [known.get(raw) or as_uuid(raw) for raw in cols[0]]
    # NULL (never boosted, no timestamp) becomes NaN, which the decay and recency functions expect.
    stored = np.asarray(cols[2], dtype=np.float64)
    since = np.asarray(cols[3], dtype=np.float64)
    half_life = np.asarray(cols[4], dtype=np.float64)
    ages = np.asarray(cols[5], dtype=np.float64)
    return CandidateRows(
        ids=row_ids,
        memory_type=list(cols[1]),
        subject=[subject or "" for subject in cols[7]],
        activation=decayed_activation_array(stored, since, half_life),
        age_hours=ages,
        chars=np.nan_to_num(np.asarray(cols[6], dtype=np.float64)).astype(np.int64),
        position={mid: i for i, mid in enumerate(row_ids)},
    )


def entity_memories(*, workspace: Workspace, keys: Sequence[str]) -> list[uuid.UUID]:
    """Active entity memories of ``workspace`` whose subject (the entity key) is one of ``keys``, in the
    order of ``keys`` (one read of the (workspace, memory_type, subject) index)."""
    if not keys:
        return []
    # Plain SQL: it runs on every point query, and the ORM's query building costs ten times the lookup.
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, subject FROM {Memory._meta.db_table} WHERE workspace_id = %s AND memory_type = %s "
            f"AND subject IN ({','.join(['%s'] * len(keys))}) AND status = %s",
            [workspace.pk, MemoryType.ENTITY, *keys, Status.ACTIVE],
        )
        rows = [(as_uuid(raw), subject) for raw, subject in cursor.fetchall()]
    rank = {key: i for i, key in enumerate(keys)}
    return [mid for mid, _ in sorted(rows, key=lambda row: (rank[row[1]], row[0].int))]


MOST_RECENT_CHUNK = 5_000
"""Ids per query of ``most_recent``: well inside SQLite's 32,766 bound variables."""


def most_recent(*, workspace: Workspace, ids: Sequence[uuid.UUID], limit: int) -> list[uuid.UUID]:
    """The ``limit`` most recently updated active memories of ``workspace`` among ``ids``, newest first
    (ties by id). One query per ``MOST_RECENT_CHUNK`` ids, each already cut to ``limit`` rows."""
    unique = list(dict.fromkeys(ids))
    if not unique or limit <= 0:
        return []
    table = Memory._meta.db_table
    # Keep SQLite on the primary key, see candidate_rows.
    in_workspace, active = unindexed("workspace_id"), unindexed("status")
    found: list[tuple[Any, Any]] = []
    with connection.cursor() as cursor:
        for start in range(0, len(unique), MOST_RECENT_CHUNK):
            chunk = unique[start : start + MOST_RECENT_CHUNK]
            cursor.execute(
                f"SELECT id, updated_at FROM {table} WHERE id IN ({','.join(['%s'] * len(chunk))}) "
                f"AND {in_workspace} = %s AND {active} = %s ORDER BY updated_at DESC, id LIMIT %s",
                [*uuid_params(chunk), workspace.pk, Status.ACTIVE, limit],
            )
            found.extend(cursor.fetchall())
    found.sort(key=lambda row: (str(row[0]),))
    found.sort(key=lambda row: row[1], reverse=True)
    return [as_uuid(raw) for raw, _ in found[:limit]]


@dataclass(frozen=True)
class AnchorRow:
    id: uuid.UUID
    subject: str
    updated_at: datetime
    conflicts_with: tuple[str, ...]
    drift_flags: tuple[str, ...]
    superseded_by: uuid.UUID | None


def anchor_rows(*, workspace: Workspace, ids: Sequence[uuid.UUID]) -> list[AnchorRow]:
    """What drift warnings need to know about these anchors (the returned ones), newest first."""
    if not ids:
        return []
    rows = sorted(
        Memory.objects.filter(id__in=list(ids), workspace=workspace).values_list(
            "id", "subject", "updated_at", "conflicts_with", "drift_flags", "superseded_by"
        ),
        key=lambda row: row[2],
        reverse=True,
    )
    return [
        AnchorRow(
            id=mid,
            subject=subject or "",
            updated_at=updated_at,
            conflicts_with=tuple(str(c) for c in (conflicts or [])),
            drift_flags=tuple(_flag_text(f) for f in (flags or [])),
            superseded_by=superseded_by,
        )
        for mid, subject, updated_at, conflicts, flags, superseded_by in rows
    ]


def _flag_text(flag: Any) -> str:
    if isinstance(flag, dict):
        return str(flag.get("reason") or flag.get("message") or flag)
    return str(flag)


def anchors_info(*, workspace: Workspace, anchors: Sequence[AnchorRow]) -> list[AnchorInfo]:
    """Drift inputs of ``anchors``: the newest other memory about each anchor's subject (one aggregate
    query, plus one for the ids of those newer memories only when some anchor is stale)."""
    subjects = sorted({a.subject for a in anchors if a.subject})
    anchor_ids = [a.id for a in anchors]
    newest: dict[str, datetime] = {}
    if subjects:
        # memory_type IN (every type) lets the (workspace, memory_type, subject) index serve the subject
        # lookup as a skip scan; without it the database walks every memory of the workspace.
        newest = dict(
            Memory.objects.filter(workspace=workspace, memory_type__in=MemoryType.values, subject__in=subjects)
            .exclude(id__in=anchor_ids)
            .exclude(status__in=[Status.ARCHIVED, Status.FORGOTTEN])
            .values("subject")
            .annotate(latest=Max("updated_at"))
            .values_list("subject", "latest")
        )
    stale = {a.subject for a in anchors if a.subject in newest and newest[a.subject] > a.updated_at}
    newest_ids: dict[str, str] = {}
    if stale:
        for subject, mid, updated_at in (
            Memory.objects.filter(workspace=workspace, memory_type__in=MemoryType.values, subject__in=sorted(stale))
            .exclude(id__in=anchor_ids)
            .values_list("subject", "id", "updated_at")
            .order_by("subject", "-updated_at")
        ):
            if updated_at == newest.get(subject) and subject not in newest_ids:
                newest_ids[subject] = str(mid)
    return [
        AnchorInfo(
            id=str(a.id),
            updated_at=a.updated_at,
            subject=a.subject or None,
            conflicts_with=a.conflicts_with,
            drift_flags=a.drift_flags,
            superseded_by=str(a.superseded_by) if a.superseded_by else None,
            newest_same_subject_at=newest.get(a.subject) if a.subject in stale else None,
            newest_same_subject_id=newest_ids.get(a.subject),
        )
        for a in anchors
    ]


@dataclass(frozen=True)
class MemoryDetail:
    id: uuid.UUID
    content: str
    memory_type: str
    retention_score: float
    raw_metadata: Any

    @property
    def metadata(self) -> dict[str, Any]:
        """Parsed on demand: only explanations of declined candidates look at it."""
        value = json.loads(self.raw_metadata) if isinstance(self.raw_metadata, str) else self.raw_metadata
        return value if isinstance(value, dict) else {}


def memory_details(*, workspace: Workspace, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, MemoryDetail]:
    """Content and the fields the response shows, for the rows being returned (one primary-key query;
    the workspace is checked here, see memories_in_workspace)."""
    unique = list(dict.fromkeys(ids))
    if not unique:
        return {}
    table = Memory._meta.db_table
    scores = MemoryScore._meta.db_table
    placeholders = ",".join(["%s"] * len(unique))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT m.id, m.workspace_id, m.content, m.memory_type, s.retention_score, m.metadata FROM {table} m "
            f"LEFT JOIN {scores} s ON s.memory_id = m.id WHERE m.id IN ({placeholders})",
            uuid_params(unique),
        )
        rows = cursor.fetchall()
    return {
        as_uuid(raw_id): MemoryDetail(as_uuid(raw_id), content, memory_type, float(retention), metadata)
        for raw_id, workspace_id, content, memory_type, retention, metadata in rows
        if workspace_id == workspace.pk
    }


def memories_in_workspace(*, workspace: Workspace, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    """Full memories (without embedding and snapshots) of ``workspace`` among ``ids``.

    A primary-key lookup with the workspace checked in Python: a ``workspace_id = ... AND id IN (...)``
    filter makes SQLite without statistics scan the workspace index instead (0.5 s at 100k memories).
    """
    if not ids:
        return {}
    rows = Memory.objects.filter(id__in=list(ids)).defer("embedding", "snapshots")
    return {m.id: m for m in rows if m.workspace_id == workspace.pk}


def session_pins(*, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]:
    """Pinned memory ids -> weight of a live session bound to ``workspace`` (else none)."""
    return pin_store().pins(workspace=workspace, session_id=session_id, now=now)


@dataclass(frozen=True)
class WorkspaceSettings:
    surfacing: SurfacingSettings
    evolution: dict[str, Any]


def workspace_settings(*, workspace: Workspace) -> WorkspaceSettings:
    """Effective surfacing and evolution settings of the workspace (defaults + stored overrides)."""
    return WorkspaceSettings(
        surfacing=effective_settings(workspace.surfacing_settings, embedder=embedder_for(workspace).name),
        evolution=effective_evolution(workspace.evolution_settings),
    )
