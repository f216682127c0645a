"""Evolution writes: run evolvers, revert a run (one record: memories.services.record_revert).

`evolution_run` is the one service that is not a single transaction: each evolver commits on its own
(see evolution.runner), so a failing evolver never takes the work of the others down with it. A run's
revert is all or nothing for what it finds, and commits in bounded transactions (`run_revert`); a large one
is worked by a background worker rather than in the request that asked for it (`run_revert_request`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict
from evolution import jobs, runner
from evolution.evolvers import resolve_names
from evolution.evolvers.base import save_records
from evolution.models import OPEN_STATUSES, EvolutionRun, RevertState, RunStatus
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


# A run with at most this many records still to undo is reverted in the request that asks (setting
# EVOLUTION_REVERT_INLINE_RECORDS); a larger one by a background worker. 50 records undo in well under a second;
# the 510 of a 100k-memory cycle took ~13 s of work, too long to hold a request (and its client) for.
DEFAULT_REVERT_INLINE_RECORDS: Final = 50
# Progress of a background revert reaches the run page at most this often (a revert may commit 200 times).
REVERT_ANNOUNCE_SECONDS: Final = 1.0


def revert_inline_records() -> int:
    return max(0, int(getattr(settings, "EVOLUTION_REVERT_INLINE_RECORDS", DEFAULT_REVERT_INLINE_RECORDS)))


class RevertTakenOver(Exception):
    """This process's revert of a run was taken over by a worker (its heartbeat had grown older than the lease):
    it stops before its next transaction and leaves the rest to the new owner."""


@dataclass(frozen=True)
class RunRevertAnswer:
    """What a revert request did: reverted the run before answering (``reverts``, the revert records), or
    queued it for a worker (``queued``; the run's summary["revert"] says how far it has come)."""

    run: EvolutionRun
    reverts: list[EvolutionRecord]
    queued: bool


def run_revert_request(*, workspace: Workspace, run: EvolutionRun, actor: User | None) -> RunRevertAnswer:
    """Revert an applied run as a request should: in the request when few of its records are still to undo
    (at most ``EVOLUTION_REVERT_INLINE_RECORDS``: `run_revert`), else in the background.

    In the background: the request still refuses what `run_revert` refuses (a dry run, a run reverted or
    still open, a revert already under way: 409) and checks every record together by reading only, so a
    revert that would be refused is refused here and nothing is queued. It then marks the revert ``queued``
    (with who asked) and returns; a worker claims it (evolution.jobs.claim_revert), checks the records again
    (the workspace may have changed meanwhile) and undoes them as `run_revert` does, as the person who asked.
    While it is queued or under way no applied run of the workspace starts and a second revert is refused.
    """
    _refuse_revert(workspace, run)
    records = _records_to_undo(run)
    if len(records) <= revert_inline_records():
        return RunRevertAnswer(run=run, reverts=_run_revert(workspace, run, actor, records), queued=False)
    check_revertible_together(records)
    progress = _asked(actor, state=RevertState.QUEUED.value, records=len(records))
    # No owner until a worker claims it.
    _mark(workspace, run, progress, owner="")
    jobs.revert_queued(run)
    run.refresh_from_db()
    return RunRevertAnswer(run=run, reverts=[], queued=True)


def run_revert(*, workspace: Workspace, run: EvolutionRun, actor: User | None) -> list[EvolutionRecord]:
    """Undo every not-yet-reverted record of an applied run, newest first, all or nothing, in write
    transactions of about ``EVOLUTION_TRANSACTION_MS`` (at least one record each), so that reverting a large
    cycle never holds the database for long (a 100k-memory cycle: 510 records, 13.5 s of work), in the calling
    process (a request reverts a large run in the background instead: `run_revert_request`).

    All or nothing: the records are first checked together by reading only
    (``history.revert.check_revertible_together``), so a revert that would be refused writes nothing. Each
    record is then checked again as it is undone: should a write that came in between make one of them not
    exactly undoable, the newer ones stay undone (each record whole), the run stays as it was, its summary
    says how far the revert came, and the Conflict says so; reverting again undoes the rest. While a revert
    works, no applied run of the workspace is queued (409 ``run_in_progress``), and a second revert of the same
    run is refused (409 ``revert_in_progress``) unless the first stopped answering for a lease (a worker then
    takes it over too, as the person who asked).

    The run becomes `reverted` in the last transaction, which also forgets the cursors its evolvers left (the
    next run starts from the previous applied run's cursors). Returns the revert records.
    """
    _refuse_revert(workspace, run)
    return _run_revert(workspace, run, actor, _records_to_undo(run))


def run_revert_claimed(run: EvolutionRun) -> list[EvolutionRecord]:
    """Work the revert a worker claimed (evolution.jobs.claim_revert; ``run.worker`` is that worker): the
    records still to undo (one that was taken over: those its first owner left), checked together again, then
    undone as `run_revert` does, as the user who asked. A refusal or an error stops it (state ``stopped`` and
    the reason in summary["revert"]) and is raised; a revert another worker took over meanwhile raises
    RevertTakenOver before its next transaction, writing nothing more."""
    workspace = run.workspace
    asked = run.summary.get(jobs.REVERT_SUMMARY) or {}
    actor = _asker(asked.get("requested_by"))
    records = _records_to_undo(run)
    progress = {
        **{key: asked[key] for key in ("requested_by", "requested_at") if key in asked},
        "state": RevertState.REVERTING.value,
        "records": len(records),
        "reverted": 0,
        "transactions": 0,
    }
    try:
        try:
            with transaction.atomic():
                _hold_revert(workspace, run, run.worker)
                _refuse_revert(workspace, run)
                _note_revert(run, progress, announce=True)
            check_revertible_together(records)
        except Conflict as exc:
            _stopped(run, progress, exc.detail, run.worker)
            raise
        return _revert(workspace, run, actor, records, progress, run.worker)
    except (Conflict, RevertTakenOver):
        raise
    except Exception as exc:
        # Stopped rather than left to be taken over again after each lease: an error that recurs would recur.
        _stopped(run, progress, f"{type(exc).__name__}: {exc}", run.worker)
        raise


def _records_to_undo(run: EvolutionRun) -> list[EvolutionRecord]:
    """The run's records not reverted yet, newest first (the order they are undone in)."""
    return list(
        EvolutionRecord.objects.select_related("workspace").filter(run=run, reverted_at__isnull=True).order_by("-id")
    )


def _asked(actor: User | None, **progress: Any) -> dict[str, Any]:
    """A revert's first progress entry, saying who asked and when (a worker that takes it over reverts as them)."""
    who = audit.actor_or_none(actor)
    return {
        **progress,
        "reverted": 0,
        "transactions": 0,
        "requested_by": who.pk if who is not None else None,
        "requested_at": timezone.now().isoformat(),
    }


def _asker(user_id: object) -> User | None:
    """The user who asked for a revert (None: a command, or a user deleted since)."""
    if not isinstance(user_id, int) or isinstance(user_id, bool):
        return None
    user: User | None = get_user_model().objects.filter(pk=user_id).first()
    return user


def _run_revert(
    workspace: Workspace, run: EvolutionRun, actor: User | None, records: list[EvolutionRecord]
) -> list[EvolutionRecord]:
    """`run_revert` once the run was looked at: check ``records`` together, mark the revert under way as this
    process's (a worker may take it over once it stops saying so), undo them."""
    check_revertible_together(records)
    owner = f"{jobs.worker_name()}:revert"
    progress = _asked(actor, state=RevertState.REVERTING.value, records=len(records))
    _mark(workspace, run, progress, owner)
    try:
        return _revert(workspace, run, actor, records, progress, owner)
    except RevertTakenOver as exc:
        raise Conflict(f"{exc}; it goes on there", code="revert_in_progress") from exc


def _mark(workspace: Workspace, run: EvolutionRun, progress: dict[str, Any], owner: str) -> None:
    """Mark the run's revert as ``progress`` says (queued, or reverting by ``owner``) in one transaction under
    the workspace's lock, refusing it when the run changed since it was looked at or a revert of the workspace
    is under way (409 ``revert_in_progress``): two requests never both queue or start one."""
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        run.refresh_from_db()
        _refuse_revert(workspace, run)
        busy = jobs.reverting_run(workspace)
        if busy is not None:
            raise Conflict(f"run {busy.id} is being reverted; wait for it to finish", code="revert_in_progress")
        run.worker = owner
        _note_revert(run, progress, announce=True)


def _revert(
    workspace: Workspace,
    run: EvolutionRun,
    actor: User | None,
    records: list[EvolutionRecord],
    progress: dict[str, Any],
    owner: str,
) -> list[EvolutionRecord]:
    """Undo ``records`` (newest first, already checked together) as ``owner``, noting the progress; a Conflict
    on the way stops the revert there (state ``stopped``) and is raised saying how far it came."""
    pending = deque(records)
    reverts: list[EvolutionRecord] = []
    now = timezone.now()
    try:
        # SQLite: no automatic checkpoint at each of its commits, one passive checkpoint in the background after.
        with runner.sqlite_bulk_writes():
            _revert_in_transactions(workspace, pending, reverts, progress, run, actor, now, owner)
    except Conflict as exc:
        progress["reverted"] = len(reverts)
        _stopped(run, progress, exc.detail, owner)
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
    owner: str,
) -> None:
    """Undo ``pending`` (newest first) in transactions of about the runner's budget, appending the revert records
    to ``reverts`` and the progress to the run's summary; the run becomes reverted in the last one. Each
    transaction first checks that the revert is still ``owner``'s (RevertTakenOver otherwise)."""
    budget = runner.transaction_seconds()
    longest = 0.0
    announced = time.monotonic()
    while True:
        with transaction.atomic():
            # On SQLite the transaction began IMMEDIATE; on PostgreSQL the workspace row orders the writers.
            began = time.perf_counter()
            _hold_revert(workspace, run, owner)
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
                progress["state"] = RevertState.REVERTED.value
                run.status = RunStatus.REVERTED
            announce = not pending or time.monotonic() - announced >= REVERT_ANNOUNCE_SECONDS
            _note_revert(run, progress, announce=announce)
        if announce:
            announced = time.monotonic()
        if not pending:
            break
        runner.let_others_in(held)


def _hold_revert(workspace: Workspace, run: EvolutionRun, owner: str) -> None:
    """The first statements of every write transaction of a revert: the workspace row (it orders the writers of
    the workspace on PostgreSQL, and is taken before the run row, as when a revert is marked), then the run
    row, which must still name ``owner`` (a revert a worker took over raises RevertTakenOver)."""
    Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
    now_owner = EvolutionRun.objects.select_for_update().filter(pk=run.pk).values_list("worker", flat=True).first()
    if now_owner != owner:
        raise RevertTakenOver(f"the revert of run {run.pk} was taken over by {now_owner or 'another process'}")


def _stopped(run: EvolutionRun, progress: dict[str, Any], error: str, owner: str) -> None:
    """Note that the revert stopped, with why, unless another worker took it over meanwhile. The run keeps the
    status it has in the database (a last transaction that failed may have marked it reverted in memory)."""
    progress.update(state=RevertState.STOPPED.value, error=error)
    try:
        with transaction.atomic():
            _hold_revert(run.workspace, run, owner)
            run.status = EvolutionRun.objects.values_list("status", flat=True).get(pk=run.pk)
            _note_revert(run, progress, announce=True)
    except RevertTakenOver:
        pass


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


def _note_revert(run: EvolutionRun, progress: dict[str, Any], *, announce: bool) -> None:
    """Store the revert's progress in the run's summary and its state column (with a fresh heartbeat in both)
    and the run's status and owner, in the caller's transaction; with ``announce``, tell the run's page once
    it has committed."""
    now = timezone.now()
    run.summary = {**run.summary, jobs.REVERT_SUMMARY: {**progress, "heartbeat": now.isoformat()}}
    run.revert_state = progress["state"]
    run.heartbeat_at = now
    run.save(update_fields=["summary", "status", "revert_state", "heartbeat_at", "worker"])
    if announce:
        live.workspace_event_on_commit(
            run.workspace_id,
            runner.PROGRESS_EVENT,
            {"run_id": str(run.id), "status": run.status, jobs.REVERT_SUMMARY: dict(progress)},
        )
