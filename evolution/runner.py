"""The cycle runner: evolvers in cycle order, each in its own transaction, each failure contained.

A run asked to stop (``cancel_requested``) stops before its next evolver; a run that already has summary
entries (taken over from a worker that died, see evolution.jobs) skips the evolvers they name; a worker
whose run another worker took over stops before its next evolver.

For every evolver the runner opens one transaction holding the evolver's writes, its records and its
summary entry (so the cursor an evolver leaves for the next run commits with the changes it describes).
An exception rolls that transaction back, is written to the run summary as a failed entry, and the
next evolver runs. Progress goes to `run.progress` between evolvers and to the page over the workspace
event group once each evolver's transaction has committed.

On SQLite in WAL mode the cycle runs with a larger page cache and automatic checkpoints off
(`sqlite_bulk_writes`): every evolver rewrites tens of thousands of rows, and checkpointing at each
evolver's commit on the cycle's own connection copied the same pages back into the database file once per
evolver while nothing else ran. Instead each commit starts a checkpoint on a thread of its own, which
copies and syncs while the next evolver computes, and a last one starts when the cycle has committed:
the run returns without waiting for it (`wait_for_checkpoints` does, for a process about to exit).
"""

from __future__ import annotations

import gc
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from evolution import selectors
from evolution.evolvers import evolver_instance
from evolution.evolvers.base import save_records
from evolution.models import EvolutionRun, RunStatus
from memories import live
from memories.models import Workspace

log = logging.getLogger(__name__)

# Page cache (KiB) while a cycle runs on SQLite: the memory table of a 100k-memory workspace (~200 MB)
# plus its indexes and the edges fit, so no page is looked up in a long WAL twice.
CYCLE_CACHE_KIB = 512 * 1024
ProgressCallback = Callable[[dict[str, Any]], None]
PROGRESS_EVENT = "evolution.progress"


def _publish(workspace_id: int, payload: dict[str, Any]) -> None:
    snapshot = dict(payload)
    # robust: a channel layer that is down must not fail a run whose writes already committed.
    live.workspace_event_on_commit(workspace_id, PROGRESS_EVENT, snapshot)


def _set_progress(run: EvolutionRun, progress: dict[str, Any], on_progress: ProgressCallback | None) -> None:
    run.progress = progress
    run.heartbeat_at = timezone.now()
    run.save(update_fields=["progress", "heartbeat_at"])
    _publish(run.workspace_id, {"run_id": str(run.id), **progress})
    if on_progress is not None:
        on_progress(progress)


# Checkpoint threads still running after their cycle returned (see `Checkpoints.finish`).
_FINISHING: set[threading.Thread] = set()
_FINISHING_LOCK = threading.Lock()


def wait_for_checkpoints(timeout: float | None = None) -> bool:
    """Wait for the checkpoints cycles left running in the background; True when none is left.

    For a process about to exit (the `evolve` command, a benchmark): a checkpoint cut short loses nothing
    (every change is committed in the WAL, and SQLite resumes copying on the next checkpoint), but the
    next process to write would then do the copying itself.
    """
    with _FINISHING_LOCK:
        threads = list(_FINISHING)
    deadline = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    with _FINISHING_LOCK:
        return not any(thread.is_alive() for thread in _FINISHING)


class Checkpoints:
    """PASSIVE checkpoints of a SQLite file on a thread and connection of their own (path None: none).

    `after_commit` starts one unless one is still running; it copies the committed pages into the database
    file and syncs while the next evolver computes (sqlite3 releases the GIL while SQLite works, and a
    passive checkpoint never blocks the writer), so the final checkpoint finds little left: on the bench
    workspace (~700 MB of WAL per cycle) it went from ~2.7 s to ~0.6-1.0 s and the cycle from 22.8 s to
    21.7 s on average (3 runs each). A failure is logged and left to the final checkpoint.
    """

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.thread: threading.Thread | None = None

    def after_commit(self) -> None:
        if self.path is not None and (self.thread is None or not self.thread.is_alive()):
            self.thread = threading.Thread(target=self._checkpoint, args=(self.path,), daemon=True)
            self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()

    def finish(self) -> None:
        """Start the cycle's last checkpoint on a thread of its own (after the one still running, if any)
        and return at once.

        That checkpoint copies the last evolver's pages and syncs the database file: ~1 s on the bench
        workspace, plus ~0.7 s waiting for the previous background checkpoint, which the run no longer
        spends. It changes no data: every change of the run is committed in the WAL by then (as durable
        as any commit under synchronous=NORMAL), and readers see it there.
        """
        if self.path is None:
            return
        previous = self.thread

        def last(path: str) -> None:
            try:
                if previous is not None:
                    previous.join()
                self._checkpoint(path)
            finally:
                with _FINISHING_LOCK:
                    _FINISHING.discard(threading.current_thread())

        thread = threading.Thread(target=last, args=(self.path,), daemon=True, name="sqlite-final-checkpoint")
        with _FINISHING_LOCK:
            _FINISHING.add(thread)
        self.thread = thread
        thread.start()

    @staticmethod
    def _checkpoint(path: str) -> None:
        try:
            # mode=rw: a database removed meanwhile (a test's temporary file) is an error, not a new file.
            db = sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=rw", uri=True)
            try:
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            finally:
                db.close()
        except sqlite3.Error:
            log.exception("background checkpoint of %s failed", path)


@contextmanager
def sqlite_bulk_writes() -> Iterator[Checkpoints]:
    """SQLite in WAL mode, outside a transaction: a page cache of CYCLE_CACHE_KIB and no automatic
    checkpoint inside the block, one passive checkpoint when it ends, then the previous settings again.
    Elsewhere (PostgreSQL, an in-memory test database, a caller's open transaction) it does nothing.
    The last checkpoint runs in the background (`Checkpoints.finish`): the block ends without waiting for it.

    Every evolver rewrites tens of thousands of rows (scores rows, and memory rows of ~1.4 KB before
    MemoryScore took the scores out of them): a checkpoint at each evolver's commit copied the same pages
    back into the database file once per evolver, and a 64 MB cache spilled dirty pages mid-transaction
    and re-read them. Without automatic checkpoints the WAL grows, and a page that is not in the cache has
    to be found in it, hence the larger cache (measured on 100k memories: the deferred checkpoint alone
    cost more CPU than it saved). With mmap on, clean pages cost the cache only a header; its memory is
    bounded by one transaction's dirty pages and is given back when the block ends. PASSIVE never waits
    for readers: whatever a reader still holds is copied by a later automatic checkpoint. The WAL file
    grows to the block's writes.
    The block yields `Checkpoints` for checkpoints between transactions (inactive where the block is).
    """
    active = False
    checkpoints = Checkpoints(None)
    previous: tuple[int, int] = (0, 0)
    if connection.vendor == "sqlite" and not connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            (mode,) = cursor.fetchone()
            if str(mode).lower() == "wal":
                cursor.execute("PRAGMA wal_autocheckpoint")
                (autocheckpoint,) = cursor.fetchone()
                cursor.execute("PRAGMA cache_size")
                (cache,) = cursor.fetchone()
                previous = (int(autocheckpoint), int(cache))
                cursor.execute("PRAGMA wal_autocheckpoint = 0")
                cursor.execute(f"PRAGMA cache_size = {-max(CYCLE_CACHE_KIB, -cache if cache < 0 else 0)}")
                active = True
                checkpoints = Checkpoints(str(connection.settings_dict["NAME"]))
    try:
        yield checkpoints
    finally:
        if active:
            with connection.cursor() as cursor:
                cursor.execute(f"PRAGMA wal_autocheckpoint = {previous[0]}")
                cursor.execute(f"PRAGMA cache_size = {previous[1]}")
            # A commit on this connection meanwhile finds the checkpoint busy and leaves it to that thread.
            checkpoints.finish()


@contextmanager
def no_collections() -> Iterator[Callable[[], None]]:
    """Switch the cyclic garbage collector off while the block runs; yields a function that collects the
    young generations (the runner calls it between evolvers). The collector's previous state is restored
    when the block ends, also when it raises.

    A cycle builds millions of short-lived tuples, lists and dicts next to long-lived whole-workspace
    arrays, and all of them are freed by reference counting. With Python's default threshold the
    collector ran ~3,200 times during the bench cycle, 9 of them full collections over every live object
    (1.38 s of a 19 s cycle, measured with gc.callbacks); at a threshold of 50,000 it still ran 40 times
    for 0.6-0.8 s, and found nothing to free: the peak resident size of the bench cycle is the same with
    the collector off (1,002 MB). Collecting the young generations between evolvers (5 collections, 0.07 s
    in all) bounds what a reference cycle left by one evolver can hold to that evolver's run.
    """
    enabled = gc.isenabled()
    gc.disable()

    def between() -> None:
        gc.collect(1)

    try:
        yield between
    finally:
        if enabled:
            gc.enable()


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
    with sqlite_bulk_writes() as checkpoints, no_collections() as collect, selectors.cycle_handoff() as handoff:
        return _cycle(
            run=run,
            names=names,
            now=now,
            on_progress=on_progress,
            checkpoints=checkpoints,
            collect=collect,
            handoff=handoff,
        )


def _cycle(
    *,
    run: EvolutionRun,
    names: Sequence[str],
    now: datetime,
    on_progress: ProgressCallback | None,
    checkpoints: Checkpoints,
    collect: Callable[[], None],
    handoff: selectors.CycleHandoff,
) -> EvolutionRun:
    workspace = run.workspace
    # A run taken over from a worker that died resumes after the evolvers whose entries committed.
    entries: list[dict[str, Any]] = list((run.summary or {}).get("evolvers", []))
    finished = {entry["name"] for entry in entries}
    run.summary = {"evolvers": entries, "counts": {}}
    total = len(names)
    cancelled = False
    for index, name in enumerate(names):
        if name in finished:
            continue
        current = EvolutionRun.objects.filter(pk=run.pk).values_list("cancel_requested", "worker").first()
        if current is not None and current[1] != run.worker:
            # Another worker took the run over (this one was taken for dead): it goes on from here.
            log.warning("run %s was taken over by %s; %s stops", run.pk, current[1], run.worker)
            return run
        if current is not None and current[0]:
            cancelled = True
            break
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
        handoff.advance(succeeded=entry["status"] == "ok")
        checkpoints.after_commit()
        collect()
        _publish(workspace.pk, {"run_id": str(run.id), "evolver": name, "outcome": entry["status"]})
        if on_progress is not None:
            on_progress({"evolver": name, "index": index, "done": index + 1, "total": total, "result": entry})
    failed = sum(1 for e in entries if e["status"] == "failed")
    run.summary["counts"] = {
        "records": sum(e["records"] for e in entries),
        "ok": len(entries) - failed,
        "failed": failed,
    }
    if cancelled:
        run.status = RunStatus.CANCELLED
    else:
        run.status = RunStatus.FAILED if entries and failed == len(entries) else RunStatus.COMPLETED
    run.finished_at = timezone.now()
    done = len(entries)
    run.progress = {"evolver": "", "index": done, "done": done, "total": total}
    run.save(update_fields=["summary", "status", "finished_at", "progress"])
    _publish(workspace.pk, {"run_id": str(run.id), "status": run.status, "done": done, "total": total})
    return run
