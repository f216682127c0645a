"""Undo audited records exactly, or refuse.

The rules that hold for every record live here: a dry run, a record already reverted, a hard delete and
a revert that deleted the rows its record had created cannot be undone. What undoing means for the rows a
record touched belongs to the app that owns them: each app registers a handler (a check that raises
Conflict when a later change depends on the record, and an apply that puts ``before`` back) with
``register_revert_handler``; memories registers the one for memories and edges when it is ready.

A revert writes a record of its own (``action`` revert, before/after swapped), so the audit trail shows
who undid what, and a revert can itself be reverted while no row had to be deleted.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import Conflict, NotFound
from history import audit
from history.models import AUDIT_ONLY_ACTIONS, Action, EvolutionRecord

if TYPE_CHECKING:
    from memories.models import Workspace

User = AbstractBaseUser | AnonymousUser
Check = Callable[[EvolutionRecord], None]
Apply = Callable[[EvolutionRecord], None]
CheckMany = Callable[[Sequence[EvolutionRecord]], None]

# Informational keys of a revert record's `after` (a revert is undone by a revert of the revert only when no
# row had to be deleted).
REVERTED_RECORD = "reverted_record"
DELETED_MEMORIES = "deleted_memories"
DELETED_EDGES = "deleted_edges"

_handlers: list[tuple[Check, Apply]] = []
_many_checks: list[CheckMany] = []


def register_revert_handler(check: Check, apply: Apply, check_many: CheckMany | None = None) -> None:
    """Add an app's check and apply for the rows it owns (registering the same pair twice is a no-op).

    ``check_many(records)`` raises what ``check`` would raise for the first of ``records`` (newest first)
    that could not be undone once the ones before it in the list were: the rows as those reverts would
    leave them, read without writing anything (see ``check_revertible_together``)."""
    if (check, apply) not in _handlers:
        _handlers.append((check, apply))
    if check_many is not None and check_many not in _many_checks:
        _many_checks.append(check_many)


def _revert_record_for(record: EvolutionRecord, actor: User | None, now: datetime) -> EvolutionRecord:
    """The audit record of undoing `record`: its before/after swapped (memory fields and edge fields)."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {REVERTED_RECORD: record.pk}
    for key, fields in record.after.items():
        if audit.is_uuid(key):
            before[key] = fields
    for key, fields in record.before.items():
        if audit.is_uuid(key):
            after[key] = fields
    if record.after.get(audit.EDGE_CHANGES):
        before[audit.EDGE_CHANGES] = record.after[audit.EDGE_CHANGES]
    if record.before.get(audit.EDGE_CHANGES):
        after[audit.EDGE_CHANGES] = record.before[audit.EDGE_CHANGES]
    if record.after.get(audit.CREATED_MEMORIES):
        after[DELETED_MEMORIES] = record.after[audit.CREATED_MEMORIES]
    if record.after.get(audit.CREATED_EDGES):
        after[DELETED_EDGES] = record.after[audit.CREATED_EDGES]
    return audit.record_build(
        workspace=record.workspace,
        evolver=record.evolver,
        action=Action.REVERT,
        reason=f"revert of record {record.pk} ({record.evolver} {record.action}): {record.reason}"[:2000],
        input_ids=record.output_ids,
        output_ids=record.input_ids,
        before=before,
        after=after,
        actor=actor,
        now=now,
    )


def check_revertible(record: EvolutionRecord) -> None:
    """Raise Conflict (with the code the API answers) when `record` cannot be undone exactly."""
    _check_kind(record)
    for check, _ in _handlers:
        check(record)


def check_revertible_together(records: Sequence[EvolutionRecord]) -> None:
    """Raise Conflict when `records`, undone one after another in the given order (newest first), would not
    all be undone: what ``revert_records`` would refuse in one transaction, found by reading only. A caller
    may then undo them in several transactions (evolution.services.run_revert), each record checked again
    as it is undone, so a write that came in between is still refused and nothing is undone inexactly."""
    for record in records:
        _check_kind(record)
    if len(_many_checks) != len(_handlers):
        raise RuntimeError("every revert handler needs a check_many to check records together")
    for check_many in _many_checks:
        check_many(records)


def _check_kind(record: EvolutionRecord) -> None:
    """The rules of every record, whatever rows it touched."""
    if record.dry_run:
        raise Conflict(f"record {record.pk} is a dry run; there is nothing to revert", code="dry_run")
    if record.reverted_at is not None:
        raise Conflict(f"record {record.pk} was already reverted", code="already_reverted")
    if record.action == Action.DELETE:
        raise Conflict(
            f"record {record.pk} is a hard delete; the deleted content is kept in this record for "
            "reference but deleted rows are not recreated",
            code="not_revertible",
        )
    if record.action in AUDIT_ONLY_ACTIONS:
        raise Conflict(
            f"record {record.pk} documents a {record.action} ({record.evolver}); there is nothing to revert",
            code="not_revertible",
        )
    if record.action == Action.REVERT and (record.after.get(DELETED_MEMORIES) or record.after.get(DELETED_EDGES)):
        raise Conflict(
            f"record {record.pk} reverted a change by deleting the rows it had created; they cannot be "
            "recreated exactly. Run the evolver again instead.",
            code="not_revertible",
        )


def revertible(record: EvolutionRecord) -> bool:
    """Whether a page should offer to revert `record`: applied, not reverted yet, and a change (not an
    audit entry). The checks that need the rows (a later change in the way) run when it is asked for."""
    return not record.dry_run and record.reverted_at is None and record.action not in AUDIT_ONLY_ACTIONS


def revert_records(
    records: Sequence[EvolutionRecord],
    actor: User | None,
    now: datetime,
    *,
    save: Callable[[Sequence[EvolutionRecord]], list[EvolutionRecord]] = audit.records_save,
) -> list[EvolutionRecord]:
    """Check and undo each record in the given order (newest first) and return the revert records; the
    caller holds the transaction, so a refusal of any one undoes them all. ``save`` inserts the revert
    records and their memory links (an upper app may pass a faster writer of the same rows)."""
    reverts: list[EvolutionRecord] = []
    for record in records:
        check_revertible(record)
        for _, apply in _handlers:
            apply(record)
        # Saved at once: the dependency check of the next (older) record must see this one as undone.
        record.reverted_at = now
        record.save(update_fields=["reverted_at"])
        reverts.append(_revert_record_for(record, actor, now))
    saved = save(reverts)
    for record, revert in zip(records, saved, strict=True):
        record.reverted_by = revert
    EvolutionRecord.objects.bulk_update(list(records), ["reverted_by"], batch_size=500)
    return saved


def record_undo(record: EvolutionRecord) -> None:
    """Put back what `record` changed, writing no revert record: for the writer of an unfinished step that
    takes the step back and deletes its records (evolution.runner.undo_evolver), as a rollback would have.

    Dry runs and audit-only records change no row: nothing to do. Conflict (from the owning app's check) when
    a later change is in the way; the caller's transaction holds the rows.
    """
    if record.dry_run or record.action in AUDIT_ONLY_ACTIONS:
        return
    for check, _ in _handlers:
        check(record)
    for _, apply in _handlers:
        apply(record)


def record_for_revert(*, workspace: Workspace, record_id: int) -> EvolutionRecord:
    """The record `record_id` of `workspace`, locked for the caller's transaction; NotFound otherwise."""
    record = (
        EvolutionRecord.objects.select_for_update()
        .select_related("workspace")
        .filter(workspace=workspace, pk=record_id)
        .first()
    )
    if record is None:
        raise NotFound(f"record {record_id} not found in workspace {workspace.slug!r}", field="record_id")
    return record
