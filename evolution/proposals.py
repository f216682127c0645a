"""Proposals awaiting a person: create, approve (optionally with a modified payload), reject.

A proposal is a change the evolution engine will not make on its own (a summary of stale memories, a
strategy of the engine, a merge). Approving applies it through the applier registered for its kind,
inside the same transaction as the decision, and keeps who decided, when, and the record of the applied
change. A proposal is decided once: a second approve or reject is a Conflict (409), whoever sends it.

Appliers: `register_proposal_applier(kind, fn)`; `fn(workspace, proposal, actor, now)` applies
`proposal.payload` and returns the saved EvolutionRecord of the change (or None when approving records
a decision only). A kind without an applier is approved as a decision only, so other apps (the
strategy engine) decide for themselves what approval means for their kinds.

Rejecters: `register_proposal_rejecter(kind, fn)`; `fn(workspace, proposal, actor, now)` runs inside the
rejecting transaction after the decision is stored (the engine records a failure and lowers the weight of
similar strategies), so a reject through any entry point has the same consequences.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.schemas import check_value
from evolution.derived import created_after, derived_memory, insert_derived
from evolution.inputs import Reason
from evolution.models import Proposal, ProposalKind, ProposalStatus
from evolution.writes import Applied, submit
from history import audit
from history.models import Action, EvolutionRecord
from memories import live
from memories.inputs import (
    MAX_CONTENT_CHARS,
    validate_confidence,
    validate_content,
    validate_metadata,
)
from memories.models import EdgeType, Memory, MemoryType, Workspace

User = AbstractBaseUser | AnonymousUser
Applier = Callable[[Workspace, Proposal, User | None, datetime], EvolutionRecord | None]
DECIDED_EVENT = "evolution.proposal_decided"
SUMMARY_EVOLVER = "SummaryEvolver"
# Fields of a summary payload a reviewer may change before approving; the sources are what was
# reviewed and stay fixed.
SUMMARY_EDITABLE = frozenset({"content", "subject", "confidence", "memory_type"})

Rejecter = Callable[[Workspace, Proposal, User | None, datetime], None]

_APPLIERS: dict[str, Applier] = {}
_REJECTERS: dict[str, Rejecter] = {}


def register_proposal_applier(kind: str, applier: Applier) -> None:
    """Make `applier` the way approved proposals of `kind` take effect (one applier per kind)."""
    if kind not in ProposalKind.values:
        raise ValueError(f"{kind!r} is not a proposal kind")
    existing = _APPLIERS.get(kind)
    if existing is not None and existing is not applier:
        raise ValueError(f"proposals of kind {kind!r} already have an applier")
    _APPLIERS[kind] = applier


def register_proposal_rejecter(kind: str, rejecter: Rejecter) -> None:
    """Make `rejecter` what follows a rejection of a proposal of `kind` (one rejecter per kind)."""
    if kind not in ProposalKind.values:
        raise ValueError(f"{kind!r} is not a proposal kind")
    existing = _REJECTERS.get(kind)
    if existing is not None and existing is not rejecter:
        raise ValueError(f"proposals of kind {kind!r} already have a rejecter")
    _REJECTERS[kind] = rejecter


def proposal_create(
    *,
    workspace: Workspace,
    kind: str,
    title: str,
    payload: Mapping[str, Any],
    rationale: str = "",
    source_ids: Sequence[uuid.UUID | str] = (),
    dedupe_key: str = "",
    created_by: str = "engine",
    now: datetime | None = None,
) -> tuple[Proposal, bool]:
    """Create a pending proposal; returns (proposal, created).

    With a dedupe_key, a proposal of the same key in any state is returned instead (created False): a
    rejected proposal is not proposed again, an approved one not applied twice.
    """
    if kind not in ProposalKind.values:
        raise InvalidInput(f"kind: {kind!r} is not one of {', '.join(ProposalKind.values)}", field="kind")
    if dedupe_key:
        existing = Proposal.objects.filter(workspace=workspace, dedupe_key=dedupe_key).order_by("id").first()
        if existing is not None:
            return existing, False
    proposal = Proposal.objects.create(
        workspace=workspace,
        kind=kind,
        title=title[:300],
        rationale=rationale,
        payload=dict(payload),
        source_ids=[str(s) for s in source_ids],
        dedupe_key=dedupe_key[:200],
        created_by=created_by[:64],
        created_at=now or timezone.now(),
    )
    return proposal, True


@dataclass(frozen=True)
class ProposalDraft:
    """A proposal to create (see proposals_create)."""

    kind: str
    title: str
    payload: dict[str, Any]
    rationale: str = ""
    source_ids: Sequence[str] = ()
    dedupe_key: str = ""
    created_by: str = "engine"


def proposals_create(*, workspace: Workspace, drafts: Sequence[ProposalDraft], now: datetime) -> list[Proposal]:
    """Create many pending proposals with one lookup and one bulk insert; returns the ones created.

    Drafts whose dedupe_key already names a proposal of the workspace (any state), or repeat one of an
    earlier draft, are skipped, as proposal_create would.
    """
    keys = [d.dedupe_key for d in drafts if d.dedupe_key]
    known: set[str] = set()
    for start in range(0, len(keys), 900):
        known.update(
            Proposal.objects.filter(workspace=workspace, dedupe_key__in=keys[start : start + 900]).values_list(
                "dedupe_key", flat=True
            )
        )
    rows: list[Proposal] = []
    for draft in drafts:
        if draft.kind not in ProposalKind.values:
            raise InvalidInput(f"kind: {draft.kind!r} is not one of {', '.join(ProposalKind.values)}", field="kind")
        if draft.dedupe_key:
            if draft.dedupe_key in known:
                continue
            known.add(draft.dedupe_key)
        rows.append(
            Proposal(
                workspace=workspace,
                kind=draft.kind,
                title=draft.title[:300],
                rationale=draft.rationale,
                payload=dict(draft.payload),
                source_ids=[str(s) for s in draft.source_ids],
                dedupe_key=draft.dedupe_key[:200],
                created_by=draft.created_by[:64],
                created_at=now,
            )
        )
    return Proposal.objects.bulk_create(rows, batch_size=500)


# Proposals per write unit of `proposals_recorded` (each holds its payload twice: in the row and the record).
PROPOSALS_PER_UNIT = 100


def proposals_recorded(
    *,
    workspace: Workspace,
    drafts: Sequence[ProposalDraft],
    dry_run: bool,
    now: datetime,
    record_for: Callable[[ProposalDraft, dict[str, Any]], EvolutionRecord],
) -> list[EvolutionRecord]:
    """What an evolver that proposes rather than applies returns: the drafts' proposals are created
    (nothing on a dry run) and `record_for(draft, after)` builds one record per proposal created, with
    after = {"payload", "proposal_id"}; a dry run records every draft (no proposal_id). Drafts skipped
    as duplicates get no record, so re-running an evolver records nothing new.

    The proposals are written in units of PROPOSALS_PER_UNIT (evolution.writes.submit): inside a cycle the
    records returned are the planned ones, and each unit saves the records of the proposals it created.
    """
    records: list[EvolutionRecord] = []
    for start in range(0, len(drafts), PROPOSALS_PER_UNIT):
        part = list(drafts[start : start + PROPOSALS_PER_UNIT])
        planned = [record_for(draft, {"payload": draft.payload}) for draft in part]
        apply = None if dry_run else partial(_proposals_unit, workspace, part, now, record_for)
        records.extend(submit(planned, apply))
    return records


def _proposals_unit(
    workspace: Workspace,
    drafts: Sequence[ProposalDraft],
    now: datetime,
    record_for: Callable[[ProposalDraft, dict[str, Any]], EvolutionRecord],
) -> Applied:
    created = {p.dedupe_key: p.pk for p in proposals_create(workspace=workspace, drafts=drafts, now=now)}
    records = [
        record_for(draft, {"payload": draft.payload, "proposal_id": created[draft.dedupe_key]})
        for draft in drafts
        if draft.dedupe_key in created
    ]
    return records, 0


def _locked(workspace: Workspace, proposal_id: object) -> Proposal:
    try:
        pk = int(str(proposal_id))
    except ValueError:
        raise NotFound(f"proposal {proposal_id!r} not found", field="proposal_id") from None
    proposal = Proposal.objects.select_for_update().filter(workspace=workspace, pk=pk).first()
    if proposal is None:
        raise NotFound(f"proposal {pk} not found in workspace {workspace.slug!r}", field="proposal_id")
    if proposal.status != ProposalStatus.PENDING:
        by = f" by user {proposal.decided_by_id}" if proposal.decided_by_id else ""
        when = f" at {proposal.decided_at.isoformat()}" if proposal.decided_at else ""
        raise Conflict(f"proposal {pk} was already decided: {proposal.status}{by}{when}", code="already_decided")
    return proposal


def _reason(reason: str) -> str:
    """A decision's reason, checked as the ``reason`` of the REST bodies is (the pages and curation decide here
    too)."""
    return str(check_value(Reason, reason, "reason"))


def reviewer_changed(payload: Mapping[str, Any], editable: frozenset[str]) -> bool:
    """Whether a reviewer changed the payload (its "proposed" object); InvalidInput naming the first key they
    changed outside ``editable``."""
    proposed = payload.get("proposed")
    if not isinstance(proposed, Mapping) or not proposed:
        return False
    fixed = sorted(k for k in proposed if k not in editable)
    if fixed:
        raise InvalidInput(
            f"payload.{fixed[0]}: cannot be changed; editable: {', '.join(sorted(editable))}",
            field=f"payload.{fixed[0]}",
        )
    return True


def _modified_payload(proposal: Proposal, changes: Mapping[str, Any]) -> dict[str, Any]:
    """The payload with a reviewer's changes applied; for summaries only SUMMARY_EDITABLE may change."""
    if not isinstance(changes, Mapping):
        raise InvalidInput("payload: expected a JSON object", field="payload")
    # The payload is stored (jsonb on PostgreSQL, which cannot hold U+0000) and applied: plain JSON only.
    validate_metadata(dict(changes), "payload")
    current = dict(proposal.payload)
    if proposal.kind == ProposalKind.SUMMARY:
        fixed = sorted(k for k in changes if k not in SUMMARY_EDITABLE and changes[k] != current.get(k))
        if fixed:
            raise InvalidInput(
                f"payload.{fixed[0]}: cannot be changed; editable: {', '.join(sorted(SUMMARY_EDITABLE))}",
                field=f"payload.{fixed[0]}",
            )
    return {**current, **changes}


@transaction.atomic
def proposal_approve(
    *,
    workspace: Workspace,
    proposal_id: object,
    actor: User | None,
    payload: Mapping[str, Any] | None = None,
    reason: str = "",
    now: datetime | None = None,
) -> Proposal:
    """Approve a pending proposal and apply it; with `payload`, approve the reviewer's modified version.

    A payload that differs from the proposed one makes the status `modified` (applied all the same) and
    keeps the proposed values of the changed keys under payload["proposed"]. Conflict when the proposal
    was already decided or the change no longer applies (e.g. its sources were summarized since).
    """
    proposal = _locked(workspace, proposal_id)
    reason = _reason(reason)  # before the change is applied: a bad reason changes nothing
    now = now or timezone.now()
    status = ProposalStatus.APPROVED
    if payload is not None:
        changed = _modified_payload(proposal, payload)
        if changed != proposal.payload:
            proposed = {k: proposal.payload.get(k) for k in payload if changed.get(k) != proposal.payload.get(k)}
            proposal.payload = {**changed, "proposed": proposed}
            status = ProposalStatus.MODIFIED
    applier = _APPLIERS.get(proposal.kind)
    record = applier(workspace, proposal, actor, now) if applier is not None else None
    proposal.status = status
    proposal.decided_by = audit.actor_or_none(actor)
    proposal.decided_at = now
    proposal.decision_reason = reason
    proposal.applied_record = record
    proposal.save(update_fields=["status", "payload", "decided_by", "decided_at", "decision_reason", "applied_record"])
    _announce(workspace, proposal)
    return proposal


@transaction.atomic
def proposal_reject(
    *, workspace: Workspace, proposal_id: object, actor: User | None, reason: str = "", now: datetime | None = None
) -> Proposal:
    """Reject a pending proposal: nothing is applied; who, when and why are kept."""
    proposal = _locked(workspace, proposal_id)
    proposal.status = ProposalStatus.REJECTED
    proposal.decided_by = audit.actor_or_none(actor)
    decided_at = now or timezone.now()
    proposal.decided_at = decided_at
    proposal.decision_reason = _reason(reason)
    proposal.save(update_fields=["status", "decided_by", "decided_at", "decision_reason"])
    rejecter = _REJECTERS.get(proposal.kind)
    if rejecter is not None:
        rejecter(workspace, proposal, actor, decided_at)
    _announce(workspace, proposal)
    return proposal


def _announce(workspace: Workspace, proposal: Proposal) -> None:
    payload = {"proposal_id": proposal.pk, "kind": proposal.kind, "status": proposal.status}
    live.workspace_event_on_commit(workspace.pk, DECIDED_EVENT, payload)


# -- summary proposals ----------------------------------------------------------------------------


def _summary_fields(payload: Mapping[str, Any]) -> tuple[str, str, str, float, list[uuid.UUID]]:
    content = validate_content(payload.get("content"), "payload.content")
    if len(content) > MAX_CONTENT_CHARS:
        raise InvalidInput("payload.content: too long", field="payload.content")
    memory_type = payload.get("memory_type", MemoryType.FACT)
    if memory_type not in MemoryType.values:
        raise InvalidInput(f"payload.memory_type: {memory_type!r} is not a memory type", field="payload.memory_type")
    subject = payload.get("subject", "")
    if not isinstance(subject, str) or len(subject) > 200:
        raise InvalidInput("payload.subject: expected a string of at most 200 characters", field="payload.subject")
    confidence = validate_confidence(payload.get("confidence", 0.7), "payload.confidence")
    raw_ids = payload.get("summarizes")
    if not isinstance(raw_ids, list) or not raw_ids:
        raise InvalidInput("payload.summarizes: expected a list of memory ids", field="payload.summarizes")
    try:
        ids = [uuid.UUID(str(i)) for i in raw_ids]
    except ValueError:
        raise InvalidInput("payload.summarizes: expected memory ids (UUIDs)", field="payload.summarizes") from None
    return content, str(memory_type), subject, confidence, ids


def proposal_apply_summary(
    workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime
) -> EvolutionRecord:
    """Create the summary memory of an approved summary proposal; the originals get summarized_by.

    The new memory has summarizes = the sources and a SUMMARIZES edge to each; the originals are not
    otherwise changed. One record (evolver SummaryEvolver, action create, actor = the approver) holds
    the created rows and the originals' summarized_by before/after, so a revert undoes it exactly.
    Conflict when a source is gone or was summarized since the proposal was made.
    """
    content, memory_type, subject, confidence, ids = _summary_fields(proposal.payload)
    rows = dict(
        Memory.objects.select_for_update().filter(workspace=workspace, id__in=ids).values_list("id", "summarized_by")
    )
    missing = [str(i) for i in ids if i not in rows]
    if missing:
        raise Conflict(f"memory {missing[0]} of this summary no longer exists", code="stale_proposal")
    taken = [str(i) for i in ids if rows[i] is not None]
    if taken:
        raise Conflict(
            f"memory {taken[0]} was summarized by {rows[uuid.UUID(taken[0])]} since this proposal was made",
            code="stale_proposal",
        )
    summary = derived_memory(
        workspace=workspace,
        memory_type=memory_type,
        content=content,
        evolver=SUMMARY_EVOLVER,
        now=now,
        subject=subject,
        confidence=confidence,
        metadata={"proposal_id": proposal.pk},
        summarizes=ids,
    )
    edge_ids = insert_derived(
        workspace=workspace,
        memories=[summary],
        edges=[(summary.id, mid, EdgeType.SUMMARIZES) for mid in ids],
        now=now,
    )
    Memory.objects.filter(workspace=workspace, id__in=ids).update(summarized_by=summary.id)
    before = {str(mid): {"summarized_by": None} for mid in ids}
    after: dict[str, Any] = {str(mid): {"summarized_by": str(summary.id)} for mid in ids}
    created_after(after, [summary], edge_ids, dry_run=False)
    who = audit.actor_name(actor)
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=SUMMARY_EVOLVER,
            action=Action.CREATE,
            reason=f"summary of {len(ids)} memories created: proposal {proposal.pk} approved"
            + (f" by {who}" if who else ""),
            input_ids=ids,
            output_ids=[summary.id],
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )
    return record


register_proposal_applier(ProposalKind.SUMMARY, proposal_apply_summary)
