"""The cycle runner: evolvers in cycle order, each in its own transaction, each failure contained.

For every evolver the runner opens one transaction holding the evolver's writes, its records and its
summary entry (so the cursor an evolver leaves for the next run commits with the changes it describes).
An exception rolls that transaction back, is written to the run summary as a failed entry, and the
next evolver runs. Progress goes to `run.progress` between evolvers and to the page over the workspace
event group once each evolver's transaction has committed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from evolution.evolvers import evolver_instance
from evolution.evolvers.base import save_records
from evolution.models import EvolutionRun, RunStatus
from memories import live
from memories.models import Workspace

log = logging.getLogger(__name__)

ProgressCallback = Callable[[dict[str, Any]], None]
PROGRESS_EVENT = "evolution.progress"


def _publish(workspace_id: int, payload: dict[str, Any]) -> None:
    snapshot = dict(payload)
    # robust: a channel layer that is down must not fail a run whose writes already committed.
    transaction.on_commit(lambda: live.workspace_event(workspace_id, PROGRESS_EVENT, snapshot), robust=True)


def _set_progress(run: EvolutionRun, progress: dict[str, Any], on_progress: ProgressCallback | None) -> None:
    run.progress = progress
    run.save(update_fields=["progress"])
    _publish(run.workspace_id, {"run_id": str(run.id), **progress})
    if on_progress is not None:
        on_progress(progress)


def cycle_run(
    *,
    run: EvolutionRun,
    names: Sequence[str],
    now: datetime,
    on_progress: ProgressCallback | None = None,
) -> EvolutionRun:
    """Run `names` (already resolved, in cycle order) for `run`; returns the finished run.

    run.summary = {"evolvers": [{name, status: ok|failed, error, records, seconds, stats, state}],
    "counts": {"records", "ok", "failed"}}. Status: completed when at least one evolver succeeded (or
    none was asked for), failed when every evolver failed.
    """
    workspace = run.workspace
    entries: list[dict[str, Any]] = []
    run.summary = {"evolvers": entries, "counts": {}}
    total = len(names)
    for index, name in enumerate(names):
        _set_progress(run, {"evolver": name, "index": index, "done": index, "total": total}, on_progress)
        started = time.perf_counter()
        entry: dict[str, Any]
        try:
            with transaction.atomic():
                # Serialises concurrent runs of one workspace on PostgreSQL (SQLite holds its write lock).
                Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
                result = evolver_instance(name).evolve(workspace, dry_run=run.dry_run, run=run, now=now)
                for record in result.records:
                    record.run = run
                    record.dry_run = run.dry_run
                    record.workspace = workspace
                saved = save_records(result.records)
                entry = {
                    "name": name,
                    "status": "ok",
                    "error": "",
                    "records": len(saved),
                    "seconds": round(time.perf_counter() - started, 3),
                    "stats": result.stats,
                    "state": result.state,
                }
                entries.append(entry)
                run.save(update_fields=["summary"])
        except Exception as exc:
            log.exception("evolver %s failed in run %s", name, run.id)
            entry = {
                "name": name,
                "status": "failed",
                "error": f"{type(exc).__name__}: {exc}",
                "records": 0,
                "seconds": round(time.perf_counter() - started, 3),
                "stats": {},
                "state": {},
            }
            if entries and entries[-1]["name"] == name:
                entries[-1] = entry
            else:
                entries.append(entry)
            run.save(update_fields=["summary"])
        _publish(workspace.pk, {"run_id": str(run.id), "evolver": name, "outcome": entry["status"]})
        if on_progress is not None:
            on_progress({"evolver": name, "index": index, "done": index + 1, "total": total, "result": entry})
    failed = sum(1 for e in entries if e["status"] == "failed")
    run.summary["counts"] = {
        "records": sum(e["records"] for e in entries),
        "ok": len(entries) - failed,
        "failed": failed,
    }
    run.status = RunStatus.FAILED if entries and failed == len(entries) else RunStatus.COMPLETED
    run.finished_at = timezone.now()
    run.progress = {"evolver": "", "index": total, "done": total, "total": total}
    run.save(update_fields=["summary", "status", "finished_at", "progress"])
    _publish(workspace.pk, {"run_id": str(run.id), "status": run.status, "done": total, "total": total})
    return run
