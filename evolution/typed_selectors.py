"""Reads for typed memory: contradiction clusters, drift flags, goals and evidence, summary and
compression candidates, lifecycle inputs, proposals.

Whole-workspace evolver inputs are `values_list` loads (one query each) with ids as canonical text and
times as epoch seconds computed by the database (core.sql.IdText / EpochSeconds): building a
UUID and a datetime per row costs more than the arithmetic at 100k memories.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from django.db.models import QuerySet

from core.errors import InvalidInput, NotFound
from core.sql import EpochSeconds, IdText
from evolution.algorithms.compression import FULL_MIN_ACTIVATION, PROTECTED_ORIGIN_TIER
from evolution.algorithms.typed import contradiction_clusters as cluster_algorithm
from evolution.models import Proposal, ProposalKind, ProposalStatus
from memories.algorithms.activation import decayed_activation_array
from memories.algorithms.embedding import BLOB_DTYPE, Embedder, FloatMatrix
from memories.models import CompressionTier, Memory, MemoryType, Status, Workspace
from memories.selectors import compressed_originals, embedding_of

_IN_CHUNK = 900


# -- contradictions and drift ---------------------------------------------------------------------


def conflict_edges(*, workspace: Workspace) -> list[tuple[str, str]]:
    """conflicts_with links between active memories (a retired or archived end is no live contradiction)."""
    rows = list(
        Memory.objects.filter(workspace=workspace, status=Status.ACTIVE)
        .exclude(conflicts_with=[])
        .values_list("id", "conflicts_with")
    )
    active = {str(mid) for mid, _ in rows}
    return [(str(mid), str(other)) for mid, links in rows for other in links or () if str(other) in active]


@dataclass(frozen=True)
class ContradictionCluster:
    ids: list[str]
    memories: list[Memory]


def contradiction_id_clusters(*, workspace: Workspace) -> list[list[str]]:
    """Connected components (>= 2 memories) of the conflicts_with graph, largest first (ids only)."""
    return cluster_algorithm(conflict_edges(workspace=workspace))


@dataclass(frozen=True)
class ContradictionPage:
    clusters: list[ContradictionCluster]
    total: int


def contradiction_clusters(*, workspace: Workspace, limit: int = 100) -> ContradictionPage:
    """The `limit` largest clusters with their memory rows, and how many clusters there are in all."""
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit: expected an integer between 1 and 1000", field="limit")
    every = contradiction_id_clusters(workspace=workspace)
    clusters = every[:limit]
    rows = memories_in(workspace=workspace, ids=[uuid.UUID(i) for c in clusters for i in c])
    return ContradictionPage(
        clusters=[ContradictionCluster(ids=c, memories=[rows[uuid.UUID(i)] for i in c]) for c in clusters],
        total=len(every),
    )


def slots_of(*, workspace: Workspace, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(memory_type, subject) of the given memories, fetched in chunks of ids."""
    found: dict[str, tuple[str, str]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        for mid, memory_type, subject in Memory.objects.filter(workspace=workspace, id__in=chunk).values_list(
            IdText("id"), "memory_type", "subject"
        ):
            found[mid] = (memory_type, subject)
    return found


def memories_in(*, workspace: Workspace, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    found: dict[uuid.UUID, Memory] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        found.update(
            (m.id, m) for m in Memory.objects.filter(workspace=workspace, id__in=list(ids[start : start + _IN_CHUNK]))
        )
    return found


def drift_inputs(
    *, workspace: Workspace, memory_types: Sequence[str] | None
) -> list[tuple[str, str, str, list[str], list[dict[str, Any]]]]:
    """Active memories that were ever replaced: (id, memory_type, subject, replace_log, drift_flags)."""
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, replace_count__gt=0)
    if memory_types:
        rows = rows.filter(memory_type__in=list(memory_types))
    return list(rows.values_list(IdText("id"), "memory_type", "subject", "replace_log", "drift_flags"))


@dataclass(frozen=True)
class DriftFlagRow:
    memory_id: uuid.UUID
    memory_type: str
    subject: str
    content: str
    flag: dict[str, Any]


def drift_flag_rows(*, workspace: Workspace, limit: int = 200) -> list[DriftFlagRow]:
    """Every drift flag of the workspace's active memories, newest flag first (at most `limit`)."""
    if not 1 <= limit <= 1000:
        raise InvalidInput("limit: expected an integer between 1 and 1000", field="limit")
    rows = (
        Memory.objects.filter(workspace=workspace, status=Status.ACTIVE)
        .exclude(drift_flags=[])
        .values_list("id", "memory_type", "subject", "content", "drift_flags")
    )
    out = [
        DriftFlagRow(mid, memory_type, subject, content, flag)
        for mid, memory_type, subject, content, flags in rows
        for flag in flags or ()
        if isinstance(flag, dict)
    ]
    out.sort(key=lambda r: (str(r.flag.get("flagged_at", "")), str(r.memory_id)), reverse=True)
    return out[:limit]


# -- goals ----------------------------------------------------------------------------------------


def vectors_of(rows: Sequence[tuple[str, str, bytes | memoryview | None]], embedder: Embedder) -> FloatMatrix:
    """(n, dim) float32 matrix of stored embeddings; rows without a usable vector (none stored, one of another
    model, which the selectors below read as None, or of another size) are embedded from their content now
    (not written back)."""
    dim = embedder.dim
    width = dim * BLOB_DTYPE.itemsize
    out = np.zeros((len(rows), dim), dtype=np.float32)
    missing: list[int] = []
    for k, (_, _, blob) in enumerate(rows):
        if blob is not None and len(blob) == width:
            out[k] = np.frombuffer(bytes(blob), dtype=BLOB_DTYPE)
        else:
            missing.append(k)
    if missing:
        out[missing] = embedder.embed([rows[k][1] for k in missing])
    return out


def active_goals(*, workspace: Workspace, model: str) -> list[tuple[str, str, bytes | memoryview | None, Any]]:
    """Active goals: (id, content, embedding if `model` made it else None, metadata), oldest first."""
    rows = (
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.GOAL, status=Status.ACTIVE)
        .order_by("created_at", "id")
        .values_list(IdText("id"), "content", embedding_of(model), "metadata")
    )
    return list(rows)


def evidence_rows(
    *, workspace: Workspace, memory_types: Sequence[str], model: str
) -> list[tuple[str, str, bytes | memoryview | None]]:
    """Active memories that could resolve a goal: (id, content, embedding if `model` made it else None),
    oldest first."""
    rows = (
        Memory.objects.filter(workspace=workspace, memory_type__in=list(memory_types), status=Status.ACTIVE)
        .order_by("created_at", "id")
        .values_list(IdText("id"), "content", embedding_of(model))
    )
    return list(rows)


# -- summaries and compression --------------------------------------------------------------------


def summary_rows(
    *, workspace: Workspace, memory_types: Sequence[str]
) -> list[tuple[str, str, str, float, float, list[str], uuid.UUID | None]]:
    """Active memories of `memory_types` with a subject: (id, type, subject, confidence, created_at epoch
    seconds, summarizes, summarized_by), oldest first."""
    rows = (
        Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, memory_type__in=list(memory_types))
        .exclude(subject="")
        .order_by("created_at", "id")
        .values_list(
            IdText("id"),
            "memory_type",
            "subject",
            "confidence",
            EpochSeconds("created_at"),
            "summarizes",
            "summarized_by",
        )
    )
    return list(rows)


def contents_of(*, workspace: Workspace, ids: Sequence[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        found.update(Memory.objects.filter(workspace=workspace, id__in=chunk).values_list(IdText("id"), "content"))
    return found


def pending_summary_sources(*, workspace: Workspace) -> set[str]:
    """Memory ids already in a pending summary proposal (they wait for a person, not for a second one)."""
    rows = Proposal.objects.filter(
        workspace=workspace, kind=ProposalKind.SUMMARY, status=ProposalStatus.PENDING
    ).values_list("source_ids", flat=True)
    return {str(i) for ids in rows for i in ids or ()}


def proposal_keys(*, workspace: Workspace, keys: Sequence[str]) -> set[str]:
    """Which of `keys` already name a proposal of the workspace (in any state)."""
    found: set[str] = set()
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = list(keys[start : start + _IN_CHUNK])
        found.update(
            Proposal.objects.filter(workspace=workspace, dedupe_key__in=chunk).values_list("dedupe_key", flat=True)
        )
    return found


def compression_rows(*, workspace: Workspace, now: datetime) -> list[tuple[str, float, float, int, int]]:
    """Memories that may still move down the ladder: (id, activation decayed to ``now``, created_at epoch
    seconds, origin_tier, compression_tier).

    Only active or archived, unpinned memories above TOMBSTONE, not of origin tier 1, whose activation at
    ``now`` is below the FULL threshold. The activation is the stored one decayed since its last boost (a
    memory boosted once a hundred days ago is cold now, whatever value that boost left), so the stored
    value cannot filter in the database; the decay is one vectorised pass over the candidates.
    """
    rows = _ladder_candidates(workspace).filter(compression_tier__lt=CompressionTier.TOMBSTONE)
    return [row for row in _ladder_rows(rows, now) if row[1] < FULL_MIN_ACTIVATION]


def _ladder_candidates(workspace: Workspace) -> QuerySet[Memory]:
    """The memories the ladder and the forgetting policy may touch: active or archived, unpinned, not of
    origin tier 1 (what people write)."""
    return Memory.objects.filter(
        workspace=workspace, status__in=[Status.ACTIVE, Status.ARCHIVED], pinned=False
    ).exclude(origin_tier=PROTECTED_ORIGIN_TIER)


def _ladder_rows(memories: QuerySet[Memory], now: datetime) -> list[tuple[str, float, float, int, int]]:
    """(id, activation decayed to ``now``, created_at epoch seconds, origin_tier, compression_tier) of
    ``memories``: one read, the decay one vectorised pass."""
    rows = list(
        memories.values_list(
            IdText("id"),
            "activation_score",
            EpochSeconds("activation_last_boost_at"),
            "activation_half_life_hours",
            EpochSeconds("created_at"),
            "origin_tier",
            "compression_tier",
        )
    )
    if not rows:
        return []
    n = len(rows)
    boosted = np.array([np.nan if r[2] is None else float(r[2]) for r in rows], dtype=np.float64)
    activation = decayed_activation_array(
        np.fromiter((r[1] for r in rows), np.float64, n),
        (now.timestamp() - boosted) / 3600.0,
        np.fromiter((r[3] for r in rows), np.float64, n),
    )
    return [(r[0], float(a), float(r[4]), int(r[5]), int(r[6])) for r, a in zip(rows, activation.tolist(), strict=True)]


def tombstone_rows(*, workspace: Workspace, now: datetime) -> list[tuple[str, float, float, int, int]]:
    """TOMBSTONE memories the forgetting policy may consider, in the shape of ``compression_rows``: (id,
    activation decayed to ``now``, created_at epoch seconds, origin_tier, compression_tier).

    Active or archived, unpinned, not of origin tier 1, and in no forget proposal yet (one pending waits for
    a person; a rejected one was a person's "keep it"; an approved one that was reverted, too).
    """
    asked = forget_proposed_ids(workspace=workspace)
    rows = _ladder_candidates(workspace).filter(compression_tier=CompressionTier.TOMBSTONE)
    return [row for row in _ladder_rows(rows, now) if row[0] not in asked]


def forget_proposed_ids(*, workspace: Workspace) -> set[str]:
    """Memory ids named by any forget proposal of the workspace, whatever its state."""
    found: set[str] = set()
    for ids in Proposal.objects.filter(workspace=workspace, kind=ProposalKind.FORGET).values_list(
        "source_ids", flat=True
    ):
        found.update(str(i) for i in ids or ())
    return found


def compression_contents(*, workspace: Workspace, ids: Sequence[str]) -> dict[str, tuple[str, str]]:
    """(current content, FULL text) of each memory of ``ids``: the FULL text is the content of a FULL memory,
    else the one ``compressed_originals`` finds, else (nothing kept) the current content."""
    found: dict[str, tuple[str, str]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        rows = list(
            Memory.objects.filter(workspace=workspace, id__in=chunk).only(
                "id", "content", "compression_tier", "snapshots"
            )
        )
        originals = compressed_originals(workspace=workspace, memories=rows)
        for memory in rows:
            original = originals.get(memory.id)
            found[str(memory.id)] = (memory.content, original.content if original is not None else memory.content)
    return found


# -- proposals ------------------------------------------------------------------------------------


def proposal_list(
    *, workspace: Workspace, status: str = "", kind: str = "", after_id: int = 0, limit: int = 100
) -> tuple[list[Proposal], int | None]:
    """Proposals oldest first (the review queue), filtered by status and kind; (page, next cursor)."""
    if status and status not in ProposalStatus.values:
        raise InvalidInput(f"status: {status!r} is not one of {', '.join(ProposalStatus.values)}", field="status")
    if kind and kind not in ProposalKind.values:
        raise InvalidInput(f"kind: {kind!r} is not one of {', '.join(ProposalKind.values)}", field="kind")
    if not 1 <= limit <= 500:
        raise InvalidInput("limit: expected an integer between 1 and 500", field="limit")
    rows = Proposal.objects.filter(workspace=workspace, id__gt=after_id)
    if status:
        rows = rows.filter(status=status)
    if kind:
        rows = rows.filter(kind=kind)
    page = list(rows.order_by("id")[: limit + 1])
    if len(page) > limit:
        return page[:limit], page[limit - 1].pk
    return page, None


def proposal_get(*, workspace: Workspace, proposal_id: object) -> Proposal:
    try:
        pk = int(str(proposal_id))
    except ValueError:
        raise NotFound(f"proposal {proposal_id!r} not found", field="proposal_id") from None
    proposal = Proposal.objects.filter(workspace=workspace, pk=pk).first()
    if proposal is None:
        raise NotFound(f"proposal {pk} not found in workspace {workspace.slug!r}", field="proposal_id")
    return proposal


# -- lifecycle evolvers ---------------------------------------------------------------------------


def active_rows(
    *, workspace: Workspace, memory_types: Sequence[str], fields: Sequence[str], exclude_key: str = ""
) -> list[tuple[Any, ...]]:
    """`fields` of active memories of `memory_types`, oldest first ("id" as text, "created_at" as epoch
    seconds); exclude_key drops memories whose metadata has that key (already processed by a lifecycle
    evolver)."""
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, memory_type__in=list(memory_types))
    if exclude_key:
        rows = rows.exclude(metadata__has_key=exclude_key)
    columns: list[Any] = [
        IdText("id") if f == "id" else EpochSeconds("created_at") if f == "created_at" else f for f in fields
    ]
    return list(rows.order_by("created_at", "id").values_list(*columns))


def details_of(*, workspace: Workspace, ids: Sequence[str]) -> dict[str, tuple[str, str, list[str], dict[str, Any]]]:
    """(content, subject, tags, metadata) of the given memories, fetched in chunks of ids."""
    found: dict[str, tuple[str, str, list[str], dict[str, Any]]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        for mid, content, subject, tags, metadata in Memory.objects.filter(
            workspace=workspace, id__in=chunk
        ).values_list(IdText("id"), "content", "subject", "tags", "metadata"):
            found[mid] = (content, subject, list(tags or []), dict(metadata or {}))
    return found


def derived_by(
    *, workspace: Workspace, memory_type: str, evolver: str
) -> list[tuple[str, str, str, float, dict[str, Any]]]:
    """Active memories of `memory_type` that `evolver` made: (id, subject, content, confidence, metadata)."""
    rows = Memory.objects.filter(
        workspace=workspace, status=Status.ACTIVE, memory_type=memory_type, origin=f"evolver:{evolver}"
    ).order_by("created_at", "id")
    return list(rows.values_list(IdText("id"), "subject", "content", "confidence", "metadata"))
