"""Evolution writes: run evolvers, revert a record, revert a run.

`evolution_run` is the one service that is not a single transaction: each evolver commits on its own
(see evolution.runner), so a failing evolver never takes the work of the others down with it. Reverts
are all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from evolution import audit, runner
from evolution.evolvers import resolve_names
from evolution.models import EvolutionRun, RunStatus
from history.models import Action, EvolutionRecord
from memories import live
from memories.errors import Conflict, NotFound
from memories.models import Workspace

User = AbstractBaseUser | AnonymousUser
REVERT_EVENT = "evolution.reverted"
# Informational keys of a revert record's `after` (not read back by audit: a revert is undone by a
# revert of the revert only when no row had to be deleted).
REVERTED_RECORD = "reverted_record"
DELETED_MEMORIES = "deleted_memories"
DELETED_EDGES = "deleted_edges"


def evolution_run(
    *,
    workspace: Workspace,
    actor: User | None,
    evolvers: Sequence[str] | None = None,
    dry_run: bool = True,
    now: datetime | None = None,
    on_progress: runner.ProgressCallback | None = None,
) -> EvolutionRun:
    """Run the named evolvers (default: the enhanced cycle) in cycle order; dry_run previews only.

    Unknown names raise InvalidInput before anything is written. The run row is created first so that
    progress is visible while it works.
    """
    names = resolve_names(evolvers)
    run = EvolutionRun.objects.create(
        workspace=workspace,
        evolvers=names,
        dry_run=dry_run,
        started_by=audit.actor_or_none(actor),
        started_at=now or timezone.now(),
        progress={"evolver": "", "index": 0, "done": 0, "total": len(names)},
    )
    return runner.cycle_run(run=run, names=names, now=run.started_at, on_progress=on_progress)


def _revert_record_for(record: EvolutionRecord, actor: User | None, now: datetime) -> EvolutionRecord:
    """The audit record of undoing `record`: its before/after swapped (memory fields and edge fields)."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {REVERTED_RECORD: record.pk}
    for key, fields in record.after.items():
        if audit._is_uuid(key):
            before[key] = fields
    for key, fields in record.before.items():
        if audit._is_uuid(key):
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


def _check_revertible(record: EvolutionRecord) -> None:
    if record.action == Action.REVERT and (record.after.get(DELETED_MEMORIES) or record.after.get(DELETED_EDGES)):
        raise Conflict(
            f"record {record.pk} reverted a change by deleting the rows it had created; they cannot be "
            "recreated exactly. Run the evolver again instead.",
            code="not_revertible",
        )
    audit.record_revert_plan(record)


def _revert(records: Sequence[EvolutionRecord], actor: User | None, now: datetime) -> list[EvolutionRecord]:
    """Check and undo each record in the given order (newest first); the caller holds the transaction."""
    reverts: list[EvolutionRecord] = []
    for record in records:
        _check_revertible(record)
        audit.record_apply_revert(record)
        # Saved at once: the dependency check of the next (older) record must see this one as undone.
        record.reverted_at = now
        record.save(update_fields=["reverted_at"])
        reverts.append(_revert_record_for(record, actor, now))
    saved = audit.records_save(reverts)
    for record, revert in zip(records, saved, strict=True):
        record.reverted_by = revert
    EvolutionRecord.objects.bulk_update(list(records), ["reverted_by"], batch_size=500)
    return saved


@transaction.atomic
def record_revert(*, workspace: Workspace, record_id: int, actor: User | None) -> EvolutionRecord:
    """Undo one record exactly and return the revert record; Conflict (409) when it cannot be.

    Refused when the record is a dry run, was already reverted, is a hard delete, or a later change
    touched the same fields, memories or edges (revert that one first).
    """
    record = (
        EvolutionRecord.objects.select_for_update()
        .select_related("workspace")
        .filter(workspace=workspace, pk=record_id)
        .first()
    )
    if record is None:
        raise NotFound(f"record {record_id} not found in workspace {workspace.slug!r}", field="record_id")
    now = timezone.now()
    (revert,) = _revert([record], actor, now)
    payload = {"record_id": record.pk, "revert_record_id": revert.pk}
    live.workspace_event_on_commit(workspace.pk, REVERT_EVENT, payload)
    return revert


@transaction.atomic
def run_revert(*, workspace: Workspace, run: EvolutionRun, actor: User | None) -> list[EvolutionRecord]:
    """Undo every not-yet-reverted record of an applied run, newest first, all or nothing.

    The run becomes `reverted`, which also forgets the cursors its evolvers left (the next run starts
    from the previous applied run's cursors). Returns the revert records.
    """
    if run.workspace_id != workspace.pk:
        raise Conflict("run belongs to another workspace", code="not_found")
    if run.dry_run:
        raise Conflict(f"run {run.id} is a dry run; there is nothing to revert", code="dry_run")
    if run.status == RunStatus.REVERTED:
        raise Conflict(f"run {run.id} was already reverted", code="already_reverted")
    if run.status == RunStatus.RUNNING:
        raise Conflict(f"run {run.id} is still running", code="run_in_progress")
    records = list(
        EvolutionRecord.objects.select_for_update()
        .select_related("workspace")
        .filter(run=run, reverted_at__isnull=True)
        .order_by("-id")
    )
    now = timezone.now()
    reverts = _revert(records, actor, now)
    run.status = RunStatus.REVERTED
    run.save(update_fields=["status"])
    payload = {"run_id": str(run.id), "records": len(records)}
    live.workspace_event_on_commit(workspace.pk, REVERT_EVENT, payload)
    return reverts
