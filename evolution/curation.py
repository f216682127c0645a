"""Curation a person does from the evolution pages: resolve contradictions, acknowledge drift, decide
proposals in bulk.

Every change to memories is one audited EvolutionRecord (evolver ``Curation``, actor = the person) that
holds the exact before/after values of the fields it changed, so ``services.record_revert`` undoes it like
any evolver's record, and it shows in each touched memory's history.

* **Keep one** of a contradiction cluster: the kept memory stays active; every other member becomes
  ``superseded`` with ``superseded_by`` = the kept one. The conflicts_with links among the members are
  removed (links to memories outside the cluster stay). Action ``supersede``.
* **Keep both** (mark reviewed): every member stays active; the links among the members are removed and
  ``metadata["contradiction_reviews"]`` gets ``{reviewed_at, reviewed_by, kept_with, note}``. Action
  ``resolve``. Removing the links is what takes the cluster off the page (clusters are components of
  conflicts_with); a later conflicting write links them again, which is a new contradiction.
* **Acknowledge drift**: every open flag of the memory gets ``acknowledged_at``, ``acknowledged_by`` and
  ``resolution`` (acknowledged | pinned); with ``pin`` the memory is also pinned. Flags are kept, not
  removed: the drift detector skips a window an existing flag covers, so a removed flag would come back on
  the next run. Action ``annotate``.

Why these live here: ``memories.services.memory_update`` refuses ``superseded`` as a hand-set status
(people archive, evolvers supersede) and knows nothing of clusters, so resolving a contradiction needs its
own service that checks the cluster is still what the person looked at.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from evolution import proposals
from evolution.models import Proposal
from history import audit
from history.models import Action, EvolutionRecord
from memories import live
from memories.models import Memory, Status, Workspace

log = logging.getLogger(__name__)

User = AbstractBaseUser | AnonymousUser
CURATION_EVOLVER: Final = "Curation"
CURATED_EVENT: Final = "evolution.curated"
MAX_NOTE_CHARS: Final = 2000
# Reviews kept per memory in metadata; older ones stay in the audit records.
MAX_REVIEWS: Final = 20
RESOLUTION_ACKNOWLEDGED: Final = "acknowledged"
RESOLUTION_PINNED: Final = "pinned"


def _note(note: str) -> str:
    if len(note) > MAX_NOTE_CHARS:
        raise InvalidInput(f"note: longer than {MAX_NOTE_CHARS} characters", field="note")
    return " ".join(note.split())


def _announce(workspace: Workspace, record: EvolutionRecord) -> None:
    payload = {"record_id": record.pk, "action": record.action}
    live.workspace_event_on_commit(workspace.pk, CURATED_EVENT, payload)


def _save_changes(
    workspace: Workspace,
    rows: Sequence[Memory],
    changes: dict[uuid.UUID, dict[str, Any]],
    *,
    action: str,
    reason: str,
    input_ids: Sequence[uuid.UUID],
    output_ids: Sequence[uuid.UUID],
    actor: User | None,
    now: datetime,
) -> EvolutionRecord:
    """Write `changes` ({memory id: {field: new value}}) and the one record that undoes them exactly."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    by_fields: dict[tuple[str, ...], list[Memory]] = {}
    for memory in rows:
        values = changes.get(memory.id)
        if not values:
            continue
        old, new = audit.memory_changes(memory, values)
        if not new:
            continue
        before[str(memory.id)] = old
        after[str(memory.id)] = new
        for name in new:
            setattr(memory, name, values[name])
        by_fields.setdefault(tuple(sorted(new)), []).append(memory)
    if not after:
        raise Conflict("nothing to change: the memories already are in that state", code="no_change")
    for names, group in by_fields.items():
        Memory.objects.bulk_update(group, list(names), batch_size=500)
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=CURATION_EVOLVER,
            action=action,
            reason=reason[:2000],
            input_ids=input_ids,
            output_ids=output_ids,
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )
    _announce(workspace, record)
    return record


# -- contradictions -------------------------------------------------------------------------------


def _parse_ids(ids: Sequence[uuid.UUID | str]) -> list[uuid.UUID]:
    parsed: list[uuid.UUID] = []
    for raw in ids:
        try:
            value = raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw))
        except ValueError:
            raise InvalidInput(f"ids: {raw!r} is not a memory id", field="ids") from None
        if value not in parsed:
            parsed.append(value)
    return parsed


def _cluster(workspace: Workspace, ids: Sequence[uuid.UUID | str]) -> list[Memory]:
    """Lock the members and check they still form one contradiction of active memories (else Conflict).

    The page showed a cluster some time ago: a member may have been superseded or resolved since, and
    acting on a stale picture would supersede the wrong memory.
    """
    wanted = _parse_ids(ids)
    if len(wanted) < 2:
        raise InvalidInput("ids: a contradiction has at least two memories", field="ids")
    rows = {m.id: m for m in Memory.objects.select_for_update().filter(workspace=workspace, id__in=wanted)}
    missing = [str(i) for i in wanted if i not in rows]
    if missing:
        raise NotFound(f"ids: no memory {missing[0]} in workspace {workspace.slug!r}", field="ids")
    inactive = [m for m in rows.values() if m.status != Status.ACTIVE]
    if inactive:
        raise Conflict(
            f"memory {inactive[0].id} is {inactive[0].status} now; reload the page to see the current contradictions",
            code="stale_cluster",
        )
    members = {str(i) for i in wanted}
    links: dict[str, set[str]] = {key: set() for key in members}
    for memory in rows.values():
        for other in memory.conflicts_with or ():
            if str(other) in members and str(other) != str(memory.id):
                links[str(memory.id)].add(str(other))
                links[str(other)].add(str(memory.id))
    start = str(wanted[0])
    seen = {start}
    frontier = [start]
    while frontier:
        for other in links[frontier.pop()]:
            if other not in seen:
                seen.add(other)
                frontier.append(other)
    if seen != members:
        raise Conflict(
            "these memories are no longer one contradiction; reload the page to see the current clusters",
            code="stale_cluster",
        )
    return [rows[i] for i in wanted]


def _without(links: Sequence[Any], members: set[str]) -> list[str]:
    return [str(link) for link in links or () if str(link) not in members]


@transaction.atomic
def contradiction_keep_one(
    *,
    workspace: Workspace,
    ids: Sequence[uuid.UUID | str],
    keep_id: uuid.UUID | str,
    actor: User | None,
    note: str = "",
    now: datetime | None = None,
) -> EvolutionRecord:
    """Keep `keep_id` and supersede every other member of the contradiction `ids`; returns the record."""
    now = now or timezone.now()
    rows = _cluster(workspace, ids)
    (keep,) = _parse_ids([keep_id])
    if keep not in {m.id for m in rows}:
        raise InvalidInput("keep: choose one of the memories of this contradiction", field="keep")
    members = {str(m.id) for m in rows}
    changes: dict[uuid.UUID, dict[str, Any]] = {}
    for memory in rows:
        values: dict[str, Any] = {"conflicts_with": _without(memory.conflicts_with, members), "updated_at": now}
        if memory.id != keep:
            values.update(status=Status.SUPERSEDED, superseded_by=keep)
        changes[memory.id] = values
    others = [m.id for m in rows if m.id != keep]
    who = audit.actor_name(actor)
    text = _note(note)
    reason = (
        f"contradiction of {len(rows)} memories resolved{' by ' + who if who else ''}: kept {keep}, "
        f"superseded {len(others)}" + (f"; note: {text}" if text else "")
    )
    return _save_changes(
        workspace,
        rows,
        changes,
        action=Action.SUPERSEDE,
        reason=reason,
        input_ids=[m.id for m in rows],
        output_ids=[keep],
        actor=actor,
        now=now,
    )


@transaction.atomic
def contradiction_keep_both(
    *,
    workspace: Workspace,
    ids: Sequence[uuid.UUID | str],
    actor: User | None,
    note: str = "",
    now: datetime | None = None,
) -> EvolutionRecord:
    """Keep every member of the contradiction `ids` active and mark it reviewed; returns the record."""
    now = now or timezone.now()
    rows = _cluster(workspace, ids)
    members = {str(m.id) for m in rows}
    who = audit.actor_name(actor)
    text = _note(note)
    changes: dict[uuid.UUID, dict[str, Any]] = {}
    for memory in rows:
        metadata = dict(memory.metadata or {})
        reviews = metadata.get("contradiction_reviews")
        history = list(reviews) if isinstance(reviews, list) else []
        review = {
            "reviewed_at": now.isoformat(),
            "reviewed_by": who,
            "kept_with": sorted(members - {str(memory.id)}),
            "note": text,
        }
        metadata["contradiction_reviews"] = [*history, review][-MAX_REVIEWS:]
        changes[memory.id] = {
            "conflicts_with": _without(memory.conflicts_with, members),
            "metadata": metadata,
            "updated_at": now,
        }
    reason = f"contradiction of {len(rows)} memories reviewed{' by ' + who if who else ''}: all kept" + (
        f"; note: {text}" if text else ""
    )
    return _save_changes(
        workspace,
        rows,
        changes,
        action=Action.RESOLVE,
        reason=reason,
        input_ids=[m.id for m in rows],
        output_ids=[m.id for m in rows],
        actor=actor,
        now=now,
    )


# -- drift ----------------------------------------------------------------------------------------


def open_flags(flags: Sequence[Any]) -> list[dict[str, Any]]:
    """The drift flags nobody acknowledged yet."""
    return [f for f in flags or () if isinstance(f, dict) and not f.get("acknowledged_at")]


@transaction.atomic
def drift_acknowledge(
    *,
    workspace: Workspace,
    memory_id: uuid.UUID | str,
    actor: User | None,
    pin: bool = False,
    now: datetime | None = None,
) -> EvolutionRecord:
    """Acknowledge the open drift flags of a memory (and pin it when `pin`); returns the record.

    Conflict when there is nothing left to do (no open flag, and already pinned or no pin asked for).
    """
    now = now or timezone.now()
    (mid,) = _parse_ids([memory_id])
    memory = Memory.objects.select_for_update().filter(workspace=workspace, id=mid).first()
    if memory is None:
        raise NotFound(f"no memory {mid} in workspace {workspace.slug!r}", field="memory_id")
    pending = open_flags(memory.drift_flags)
    if not pending and (not pin or memory.pinned):
        raise Conflict("every drift flag of this memory was already acknowledged", code="already_acknowledged")
    who = audit.actor_name(actor)
    resolution = RESOLUTION_PINNED if pin else RESOLUTION_ACKNOWLEDGED
    stamp = {"acknowledged_at": now.isoformat(), "acknowledged_by": who, "resolution": resolution}
    flags = [
        {**flag, **stamp} if isinstance(flag, dict) and not flag.get("acknowledged_at") else flag
        for flag in memory.drift_flags or ()
    ]
    values: dict[str, Any] = {"drift_flags": flags, "updated_at": now}
    if pin:
        values["pinned"] = True
    label = f"{memory.memory_type}[{memory.subject}]" if memory.subject else memory.memory_type
    reason = (
        f"drift of {label} {'pinned at its current value' if pin else 'acknowledged'}"
        f"{' by ' + who if who else ''} ({len(pending)} flag{'s' if len(pending) != 1 else ''})"
    )
    return _save_changes(
        workspace,
        [memory],
        {memory.id: values},
        action=Action.ANNOTATE,
        reason=reason,
        input_ids=[memory.id],
        output_ids=[memory.id],
        actor=actor,
        now=now,
    )


# -- proposals in bulk ----------------------------------------------------------------------------


@dataclass
class BulkDecision:
    """What a bulk approve or reject did: decided proposals, ones decided before (409), failures."""

    decided: list[Proposal] = field(default_factory=list)
    already: list[tuple[int, str]] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)


def proposals_decide(
    *,
    workspace: Workspace,
    ids: Sequence[int],
    approve: bool,
    actor: User | None,
    reason: str = "",
) -> BulkDecision:
    """Approve or reject each proposal of `ids` through the one-proposal services, oldest id first.

    Each decision is its own transaction on purpose: one stale proposal (its sources summarized since,
    or decided in another tab) must not undo the decisions on the others. Those are reported instead.
    """
    outcome = BulkDecision()
    for pk in sorted(set(ids)):
        try:
            if approve:
                decided = proposals.proposal_approve(workspace=workspace, proposal_id=pk, actor=actor, reason=reason)
            else:
                decided = proposals.proposal_reject(workspace=workspace, proposal_id=pk, actor=actor, reason=reason)
        except Conflict as exc:
            target = outcome.already if exc.code == "already_decided" else outcome.failed
            target.append((pk, exc.detail))
        except (InvalidInput, NotFound) as exc:
            outcome.failed.append((pk, exc.detail))
        else:
            outcome.decided.append(decided)
    return outcome
