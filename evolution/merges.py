"""Merge proposals: near-duplicate memories a person may fold into one.

The DuplicateMerger evolver (evolution.evolvers.merge) finds the groups and proposes them; nothing changes
until a person approves. Approving (``merge_apply``, the applier of kind ``merge``) keeps one memory and
supersedes the others: each merged memory gets status ``superseded`` and ``superseded_by`` = the kept one,
with a SUPERSEDES edge from the kept memory to it; the kept memory gets the union of the tags and the
highest retention score of the group. Nothing is deleted. The change is one EvolutionRecord (evolver
DuplicateMerger, action supersede) whose before/after hold exactly the changed fields and whose created
edges revert deletes, so reverting it restores every row as it was.

Payload of a merge proposal: ``memory_type``, ``group`` (every reviewed id, fixed), ``keep`` and ``merge``
(the reviewer may choose another kept memory or leave some out: MERGE_EDITABLE), ``similarity`` {id: cosine
to the proposed kept memory}, ``identical`` [ids whose normalised content equals it], ``threshold``,
``contents`` {id: excerpt} and ``before``/``after`` {id: {field: value}}, the preview made when proposing.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import Conflict, InvalidInput
from core.sql import EpochSeconds, IdText
from evolution.algorithms.merge import merged_tags
from evolution.derived import insert_derived
from evolution.models import Proposal, ProposalKind, ProposalStatus
from evolution.proposals import register_proposal_applier, reviewer_changed
from history import audit
from history.models import Action, EvolutionRecord
from memories.bulk import write_rows
from memories.inputs import MAX_TAGS
from memories.models import Edge, EdgeType, Memory, Status, Workspace
from memories.revert import decode_value
from memories.selectors import embedding_of

User = AbstractBaseUser | AnonymousUser

MERGE_EVOLVER: Final = "DuplicateMerger"
# What a reviewer may change before approving; the group is what was reviewed and stays fixed.
MERGE_EDITABLE: Final = frozenset({"keep", "merge"})
EXCERPT: Final = 200
_IN_CHUNK: Final = 900

CandidateRow = tuple[str, str, str, bytes | memoryview | None, int, str, float, int, float]


# -- reads ----------------------------------------------------------------------------------------


def merge_candidate_rows(*, workspace: Workspace, memory_types: Sequence[str] | None, model: str) -> list[CandidateRow]:
    """Active, unpinned memories that supersede nothing yet, oldest first: (id, memory_type, content,
    embedding if `model` made it else None, origin_tier, origin, confidence, access_count, created_at epoch
    seconds)."""
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, pinned=False)
    if memory_types:
        rows = rows.filter(memory_type__in=list(memory_types))
    return list(
        rows.order_by("created_at", "id").values_list(
            IdText("id"),
            "memory_type",
            "content",
            embedding_of(model),
            "origin_tier",
            "origin",
            "confidence",
            "access_count",
            EpochSeconds("created_at"),
        )
    )


def pending_merge_members(*, workspace: Workspace) -> set[str]:
    """Memory ids in a pending merge proposal: they wait for a person, not for a second proposal."""
    rows = Proposal.objects.filter(
        workspace=workspace, kind=ProposalKind.MERGE, status=ProposalStatus.PENDING
    ).values_list("source_ids", flat=True)
    return {str(i) for ids in rows for i in ids or ()}


SCORES = Memory.SCORE_FIELDS


def merge_fields(*, workspace: Workspace, ids: Sequence[str]) -> dict[str, tuple[list[str], float, str]]:
    """(tags, retention_score, content) of the given memories."""
    found: dict[str, tuple[list[str], float, str]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = list(ids[start : start + _IN_CHUNK])
        for mid, tags, retention, content in Memory.objects.filter(workspace=workspace, id__in=chunk).values_list(
            IdText("id"), "tags", "score__retention_score", "content"
        ):
            found[mid] = (list(tags or []), float(retention), content)
    return found


def merge_dedupe_key(ids: Sequence[str]) -> str:
    """Stable identity of a merge group: the hash of its sorted ids."""
    return "merge:" + hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:40]


# -- the change -----------------------------------------------------------------------------------


def merge_plan(
    keep: str, merge: Sequence[str], fields: Mapping[str, tuple[Sequence[str], float]]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """(before, after) {id: {field: value}} of merging `merge` into `keep`: only fields that change."""
    keep_tags, keep_retention = fields[keep]
    tags = merged_tags(list(keep_tags), [list(fields[m][0]) for m in merge], MAX_TAGS)
    retention = max([keep_retention, *(fields[m][1] for m in merge)])
    before: dict[str, dict[str, Any]] = {}
    after: dict[str, dict[str, Any]] = {}
    for mid in merge:
        before[mid] = {"status": Status.ACTIVE.value, "superseded_by": None}
        after[mid] = {"status": Status.SUPERSEDED.value, "superseded_by": keep}
    kb: dict[str, Any] = {}
    ka: dict[str, Any] = {}
    if tags != list(keep_tags):
        kb["tags"], ka["tags"] = list(keep_tags), tags
    if retention != keep_retention:
        kb["retention_score"], ka["retention_score"] = keep_retention, retention
    if ka:
        before[keep], after[keep] = kb, ka
    return before, after


def _ids(value: Any, name: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidInput(f"payload.{name}: expected a list of memory ids", field=f"payload.{name}")
    try:
        return [str(uuid.UUID(v)) for v in value]
    except ValueError:
        raise InvalidInput(f"payload.{name}: expected memory ids (UUIDs)", field=f"payload.{name}") from None


def merge_choice(payload: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(keep, merge) of a merge payload, checked against its fixed group; InvalidInput naming the field."""
    reviewer_changed(payload, MERGE_EDITABLE)
    group = _ids(payload.get("group"), "group")
    raw_keep = payload.get("keep")
    keep = _ids([raw_keep], "keep")[0] if isinstance(raw_keep, str) else ""
    if keep not in group:
        raise InvalidInput("payload.keep: choose one of the memories of this group", field="payload.keep")
    merge = list(dict.fromkeys(_ids(payload.get("merge"), "merge")))
    if keep in merge:
        raise InvalidInput("payload.merge: the kept memory cannot also be merged", field="payload.merge")
    outside = [m for m in merge if m not in group]
    if outside:
        raise InvalidInput(f"payload.merge: memory {outside[0]} is not in this group", field="payload.merge")
    if not merge:
        raise InvalidInput("payload.merge: choose at least one memory to merge", field="payload.merge")
    return keep, merge


def merge_apply(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> EvolutionRecord:
    """Apply an approved merge (see the module doc); Conflict when a memory is gone, no longer active or
    pinned since the proposal was made (nothing is written then)."""
    keep, merge = merge_choice(proposal.payload if isinstance(proposal.payload, dict) else {})
    ids = [keep, *merge]
    rows = {
        str(m.id): m
        for m in Memory.objects.select_for_update().filter(workspace=workspace, id__in=[uuid.UUID(i) for i in ids])
    }
    for mid in ids:
        memory = rows.get(mid)
        if memory is None:
            raise Conflict(f"memory {mid} of this merge no longer exists", code="stale_proposal")
        if memory.status != Status.ACTIVE:
            raise Conflict(f"memory {mid} is {memory.status} since this merge was proposed", code="stale_proposal")
        if memory.pinned:
            raise Conflict(f"memory {mid} was pinned since this merge was proposed", code="stale_proposal")
    _, planned = merge_plan(
        keep, merge, {mid: (list(m.tags or []), float(m.score.retention_score)) for mid, m in rows.items()}
    )
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    changed: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for mid, values in planned.items():
        memory = rows[mid]
        decoded = {k: decode_value(k, v) for k, v in values.items()}
        # The exact current values (not the preview's) are what revert puts back; a score is the scores row's.
        was, now_values = audit.memory_changes(memory, {k: v for k, v in decoded.items() if k not in SCORES})
        scores_was, scores_now = audit.memory_changes(memory.score, {k: v for k, v in decoded.items() if k in SCORES})
        was.update(scores_was)
        now_values.update(scores_now)
        if not now_values:
            continue
        before[mid], after[mid] = was, now_values
        names = tuple(sorted(now_values))
        changed.setdefault(names, []).append((*(decoded[n] for n in names), mid))
    for names, group in changed.items():
        write_rows(Memory, list(names), group)  # a score goes to the scores row
    existing = set(
        Edge.objects.filter(
            workspace=workspace, source_id=uuid.UUID(keep), target_id__in=merge, edge_type=EdgeType.SUPERSEDES
        ).values_list("target_id", flat=True)
    )
    new_edges = [(keep, mid, EdgeType.SUPERSEDES.value) for mid in merge if uuid.UUID(mid) not in existing]
    edge_ids = insert_derived(workspace=workspace, memories=[], edges=new_edges, now=now)
    record_after: dict[str, Any] = dict(after)
    if edge_ids:
        record_after[audit.CREATED_EDGES] = edge_ids
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=MERGE_EVOLVER,
            action=Action.SUPERSEDE,
            reason=f"{audit.approval('merge', proposal.pk, actor)}: {len(merge)} "
            f"near-duplicate memor{'y' if len(merge) == 1 else 'ies'} superseded by {keep}",
            input_ids=merge,
            output_ids=[keep],
            before=before,
            after=record_after,
            actor=actor,
            now=now,
        )
    )
    return record


register_proposal_applier(ProposalKind.MERGE, merge_apply)
