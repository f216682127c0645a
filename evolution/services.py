"""Evolution writes: run evolvers, revert a run (one record: memories.services.record_revert).

`evolution_run` is the one service that is not a single transaction: each evolver commits on its own
(see evolution.runner), so a failing evolver never takes the work of the others down with it. A run's
revert is all or nothing for what it finds, and commits in bounded transactions (`run_revert`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict
from evolution import jobs, runner
from evolution.evolvers import resolve_names
from evolution.evolvers.base import save_records
from evolution.models import OPEN_STATUSES, EvolutionRun, RunStatus
from history import audit
from history.models import EvolutionRecord
from history.revert import check_revertible_together, revert_records
from memories import live
from memories.models import Workspace
from memories.services import REVERT_EVENT

User = AbstractBaseUser | AnonymousUser


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


def run_revert(*, workspace: Workspace, run: EvolutionRun, actor: User | None) -> list[EvolutionRecord]:
    """Undo every not-yet-reverted record of an applied run, newest first, all or nothing, in write
    transactions of about ``EVOLUTION_TRANSACTION_MS`` (at least one record each), so that reverting a large
    cycle never holds the database for long (a 100k-memory cycle: 510 records, 13.5 s of work).

    All or nothing: the records are first checked together by reading only
    (``history.revert.check_revertible_together``), so a revert that would be refused writes nothing. Each
    record is then checked again as it is undone: should a write that came in between make one of them not
    exactly undoable, the newer ones stay undone (each record whole), the run stays as it was, its summary
    says how far the revert came, and the Conflict says so; reverting again undoes the rest. While a revert
    works, no applied run of the workspace is queued (409 ``run_in_progress``), and a second revert of the same
    run is refused (409 ``revert_in_progress``) unless the first stopped answering for a lease.

    The run becomes `reverted` in the last transaction, which also forgets the cursors its evolvers left (the
    next run starts from the previous applied run's cursors). Returns the revert records.
    """
    _refuse_revert(workspace, run)
    records = list(
        EvolutionRecord.objects.select_related("workspace").filter(run=run, reverted_at__isnull=True).order_by("-id")
    )
    check_revertible_together(records)
    now = timezone.now()
    progress: dict[str, Any] = {"state": "reverting", "records": len(records), "reverted": 0, "transactions": 0}
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        run.refresh_from_db()
        _refuse_revert(workspace, run)
        busy = jobs.reverting_run(workspace)
        if busy is not None:
            raise Conflict(f"run {busy.id} is being reverted; wait for it to finish", code="revert_in_progress")
        _note_revert(run, progress)
    pending = deque(records)
    reverts: list[EvolutionRecord] = []
    try:
        # SQLite: no automatic checkpoint at each of its commits, one passive checkpoint in the background after.
        with runner.sqlite_bulk_writes():
            _revert_in_transactions(workspace, pending, reverts, progress, run, actor, now)
    except Conflict as exc:
        progress.update(state="stopped", error=exc.detail, reverted=len(reverts))
        with transaction.atomic():
            _note_revert(run, progress)
        raise Conflict(
            f"reverted {len(reverts)} of {len(records)} records of run {run.id}, newest first, then: {exc.detail}. "
            "The run stays as it was; revert that change, then revert the run again to undo the rest",
            code=exc.code,
            field=exc.field,
        ).blocked_by(exc.blocking_record_id, exc.blocking_memory_id) from exc
    payload = {"run_id": str(run.id), "records": len(records)}
    live.workspace_event_on_commit(workspace.pk, REVERT_EVENT, payload)
    return reverts


def _revert_in_transactions(
    workspace: Workspace,
    pending: deque[EvolutionRecord],
    reverts: list[EvolutionRecord],
    progress: dict[str, Any],
    run: EvolutionRun,
    actor: User | None,
    now: datetime,
) -> None:
    """Undo ``pending`` (newest first) in transactions of about the runner's budget, appending the revert records
    to ``reverts`` and the progress to the run's summary; the run becomes reverted in the last one."""
    budget = runner.transaction_seconds()
    longest = 0.0
    while True:
        with transaction.atomic():
            # On SQLite the transaction began IMMEDIATE; on PostgreSQL the workspace row orders the writers.
            began = time.perf_counter()
            Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
            longest_one = 0.0
            # One read a transaction: a revert of this run that was taken over may have undone some meanwhile.
            left = set(EvolutionRecord.objects.filter(run=run, reverted_at__isnull=True).values_list("pk", flat=True))
            while pending:
                record = pending.popleft()
                if record.pk not in left:
                    continue
                one = time.perf_counter()
                reverts.extend(revert_records([record], actor, now, save=save_records))
                longest_one = max(longest_one, time.perf_counter() - one)
                # Another record only if one as long as the longest so far still ends within the budget.
                if time.perf_counter() - began + longest_one > budget:
                    break
            held = time.perf_counter() - began
            longest = max(longest, held)
            progress.update(reverted=len(reverts), transactions=progress["transactions"] + 1)
            progress["longest_transaction_ms"] = round(longest * 1000, 1)
            if not pending:
                progress["state"] = "reverted"
                run.status = RunStatus.REVERTED
            _note_revert(run, progress)
        if not pending:
            break
        runner.let_others_in(held)


def _refuse_revert(workspace: Workspace, run: EvolutionRun) -> None:
    """Conflict when ``run`` cannot be reverted as it stands (another workspace's, a dry run, reverted, open)."""
    if run.workspace_id != workspace.pk:
        raise Conflict("run belongs to another workspace", code="not_found")
    if run.dry_run:
        raise Conflict(f"run {run.id} is a dry run; there is nothing to revert", code="dry_run")
    if run.status == RunStatus.REVERTED:
        raise Conflict(f"run {run.id} was already reverted", code="already_reverted")
    if run.status in OPEN_STATUSES:
        raise Conflict(f"run {run.id} is still {run.status}", code="run_in_progress")


def _note_revert(run: EvolutionRun, progress: dict[str, Any]) -> None:
    """Store the revert's progress in the run's summary (with a fresh heartbeat) and its status, in the caller's
    transaction."""
    run.summary = {**run.summary, jobs.REVERT_SUMMARY: {**progress, "heartbeat": timezone.now().isoformat()}}
    run.save(update_fields=["summary", "status"])
