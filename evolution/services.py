"""Evolution writes: run evolvers, revert a run (one record: memories.services.record_revert).

`evolution_run` is the one service that is not a single transaction: each evolver commits on its own
(see evolution.runner), so a failing evolver never takes the work of the others down with it. Reverts
are all-or-nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import Conflict
from evolution import runner
from evolution.evolvers import resolve_names
from evolution.evolvers.base import save_records
from evolution.models import EvolutionRun, RunStatus
from history import audit
from history.models import EvolutionRecord
from history.revert import revert_records
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
    reverts = revert_records(records, actor, now, save=save_records)
    run.status = RunStatus.REVERTED
    run.save(update_fields=["status"])
    payload = {"run_id": str(run.id), "records": len(records)}
    live.workspace_event_on_commit(workspace.pk, REVERT_EVENT, payload)
    return reverts
