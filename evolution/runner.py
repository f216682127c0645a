"""The cycle runner: evolvers in cycle order, their writes in short transactions, each failure contained.

A run asked to stop (``cancel_requested``) stops before its next evolver, or inside a chunked evolver before
its next write transaction (what committed stays: each record is whole and revertible, and the evolver's
entry says ``cancelled`` with the records it wrote); a run that already has summary
entries (taken over from a worker that died, see evolution.jobs) skips the evolvers they name; a worker
whose run another worker took over stops before its next evolver, and before its next transaction.

An evolver that declares ``writes_in_chunks`` (every evolver of the project) is called outside any
transaction, so its reads and its arithmetic hold no lock; its writes come back as units
(evolution.writes), which the runner commits in transactions of at most about ``EVOLUTION_TRANSACTION_MS``
(100 ms): a transaction takes another unit only while one as long as its longest so far would still end
within that time (so one unit longer than that is a transaction of its own), and a unit's records always
commit with its rows. The evolver's summary entry (with the cursor it leaves for the next run) commits in
its last transaction. Meanwhile requests of this and every other workspace get the database between two
transactions: on SQLite, where one writer holds the whole file, no request waits longer than one
transaction. An evolver whose plan or unit raises is taken back: the records it committed are undone,
newest first, each in its own short transaction (`undo_evolver`), and a failed entry is written; the next
evolver runs. A run taken over from a dead worker undoes the same way what its interrupted evolver had
committed before running that evolver again, so nothing is applied twice. An evolver without
``writes_in_chunks`` (an older one, or a test's stand-in) runs in one transaction with its records and
summary entry, as before. Progress goes to `run.progress` between evolvers and to the page over the
workspace event group once each evolver's entry has committed.

On SQLite in WAL mode the cycle runs with a larger page cache and automatic checkpoints off
(`sqlite_bulk_writes`): every evolver rewrites tens of thousands of rows, and checkpointing at each
evolver's commit on the cycle's own connection copied the same pages back into the database file once per
evolver while nothing else ran. Instead each evolver's end starts a checkpoint on a thread of its own,
which copies and syncs while the next evolver computes, and a last one starts when the cycle has
committed: the run returns without waiting for it (`wait_for_checkpoints` does, for a process about to
exit). The cycle's connection waits up to ``EVOLUTION_LOCK_TIMEOUT_SECONDS`` for the database
(`worker_lock_wait`), where a request gives up after ``DATABASE_LOCK_TIMEOUT_SECONDS``.
"""

from __future__ import annotations

import bisect
import gc
import logging
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import Conflict
from core.sql import lock_wait, single_writer
from evolution import selectors
from evolution.evolvers import EvolutionResult, Evolver, evolver_instance
from evolution.evolvers.base import save_records
from evolution.models import EvolutionRun, Proposal, ProposalStatus, RunStatus
from evolution.writes import WriteUnit, deferred_writes
from history.models import EvolutionRecord
from history.revert import record_undo
from memories import live
from memories.models import Workspace

log = logging.getLogger(__name__)

# Page cache (KiB) while a cycle runs on SQLite: the memory table of a 100k-memory workspace (~200 MB)
# plus its indexes and the edges fit, so no page is looked up in a long WAL twice.
CYCLE_CACHE_KIB = 512 * 1024
ProgressCallback = Callable[[dict[str, Any]], None]
PROGRESS_EVENT = "evolution.progress"
# How long one write transaction of a chunked evolver may last (setting EVOLUTION_TRANSACTION_MS): it takes
# another unit (a few ms to a few tens) only while one as long as the longest so far still fits.
DEFAULT_TRANSACTION_MS: Final = 100
# How long the cycle's connection waits for the database (setting EVOLUTION_LOCK_TIMEOUT_SECONDS).
DEFAULT_LOCK_TIMEOUT_SECONDS: Final = 60
# Records saved per transaction when an evolver's records come without writes (a dry run, flags).
LOOSE_RECORDS_PER_UNIT: Final = 200


class RunTakenOver(Exception):
    """The run's worker changed while this worker was writing: another worker took the run over."""


def transaction_seconds() -> float:
    return max(0.0, float(getattr(settings, "EVOLUTION_TRANSACTION_MS", DEFAULT_TRANSACTION_MS))) / 1000.0


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
    if single_writer(connection) and not connection.in_atomic_block:
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
def worker_lock_wait() -> Iterator[None]:
    """The cycle's connection waits up to EVOLUTION_LOCK_TIMEOUT_SECONDS for a lock (SQLite's busy timeout,
    PostgreSQL's lock_timeout), then its previous wait again.

    Every connection waits DATABASE_LOCK_TIMEOUT_SECONDS (5) by default, short so that a request that cannot
    get the database answers 503 soon. A cycle's transactions are short but many, and a worker has nobody
    waiting for an answer: it waits behind whatever request holds the database instead of failing an evolver.
    """
    seconds = float(getattr(settings, "EVOLUTION_LOCK_TIMEOUT_SECONDS", DEFAULT_LOCK_TIMEOUT_SECONDS))
    with lock_wait(max(1, round(seconds * 1000)), connection):
        yield


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

    run.summary = {"evolvers": [{name, status: ok|failed|cancelled, error, records, seconds, stats, state}],
    "counts": {"records", "ok", "failed"}}. Status: cancelled when asked to stop before its last evolver
    finished, else completed when at least one evolver succeeded (or none was asked for), failed when every
    evolver failed.
    """
    with (
        worker_lock_wait(),
        sqlite_bulk_writes() as checkpoints,
        no_collections() as collect,
        selectors.cycle_handoff() as handoff,
    ):
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
        try:
            entry = _evolver_entry(run, name, entries, now, handoff)
        except RunTakenOver:
            log.warning("run %s was taken over while %s wrote %s; it stops", run.pk, run.worker, name)
            return run
        handoff.advance(succeeded=entry["status"] == "ok")
        checkpoints.after_commit()
        collect()
        _publish(workspace.pk, {"run_id": str(run.id), "evolver": name, "outcome": entry["status"]})
        if on_progress is not None:
            on_progress({"evolver": name, "index": index, "done": index + 1, "total": total, "result": entry})
        if entry["status"] == "cancelled":
            cancelled = True
            break
    failed = sum(1 for e in entries if e["status"] == "failed")
    run.summary["counts"] = {
        "records": sum(e["records"] for e in entries),
        "ok": sum(1 for e in entries if e["status"] == "ok"),
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


def _evolver_entry(
    run: EvolutionRun, name: str, entries: list[dict[str, Any]], now: datetime, handoff: selectors.CycleHandoff
) -> dict[str, Any]:
    """Run one evolver of `run` and commit its summary entry (appended to `entries`); returns the entry."""
    started = time.perf_counter()
    evolver = evolver_instance(name)
    error = ""
    kept = 0
    if EvolutionRecord.objects.filter(run=run, evolver=name, reverted_at__isnull=True).exists():
        # Taken over in the middle of this evolver: what its units committed goes before it runs again.
        kept = undo_evolver(run, name)
        if kept:
            error = (
                f"{kept} records an earlier attempt committed could not be taken back (changed since) and stay; "
                "not run again, so nothing is applied twice"
            )
    if not error:
        try:
            if getattr(evolver, "writes_in_chunks", False):
                return _chunked(run, name, evolver, entries, now, handoff, started)
            return _in_one_transaction(run, name, evolver, entries, now, started)
        except RunTakenOver:
            raise
        except Exception as exc:
            log.exception("evolver %s failed in run %s", name, run.id)
            kept = undo_evolver(run, name)
            error = f"{type(exc).__name__}: {exc}"
            if kept:
                error += f"; {kept} records it committed could not be taken back (changed since) and stay"
    entry = {
        "name": name,
        "status": "failed",
        "error": error,
        "records": kept,
        "seconds": round(time.perf_counter() - started, 3),
        "stats": {},
        "state": {},
    }
    if entries and entries[-1]["name"] == name:
        entries[-1] = entry
    else:
        entries.append(entry)
    run.save(update_fields=["summary"])
    return entry


def _entry(name: str, result: EvolutionResult, records: int, started: float) -> dict[str, Any]:
    return {
        "name": name,
        "status": "ok",
        "error": "",
        "records": records,
        "seconds": round(time.perf_counter() - started, 3),
        "stats": result.stats,
        "state": result.state,
    }


def _in_one_transaction(
    run: EvolutionRun, name: str, evolver: Evolver, entries: list[dict[str, Any]], now: datetime, started: float
) -> dict[str, Any]:
    """An evolver that writes as it goes: its writes, records and summary entry in one transaction."""
    workspace = run.workspace
    with transaction.atomic():
        # Serialises concurrent runs of one workspace on PostgreSQL (SQLite holds its write lock).
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        result = evolver.evolve(workspace, dry_run=run.dry_run, run=run, now=now)
        _attach(result.records, run)
        saved = save_records(result.records)
        entry = _entry(name, result, len(saved), started)
        entry.update(transactions=1, longest_transaction_ms=round((time.perf_counter() - started) * 1000, 1))
        entries.append(entry)
        run.save(update_fields=["summary"])
    return entry


def _attach(records: Sequence[EvolutionRecord], run: EvolutionRun) -> None:
    for record in records:
        record.run = run
        record.dry_run = run.dry_run
        record.workspace = run.workspace


@contextmanager
def _planning(handoff: selectors.CycleHandoff) -> Iterator[None]:
    """While a chunked evolver reads and computes: the handoff accepts offers made outside a transaction, and
    inside a caller's transaction (a test's) the plan runs in a savepoint, so that a failing statement fails
    the evolver and not the caller's transaction."""
    handoff.planning = True
    try:
        with transaction.atomic() if connection.in_atomic_block else nullcontext():
            yield
    finally:
        handoff.planning = False


@dataclass
class _Held:
    """The write transactions of one chunked evolver: how many, and the longest (seconds, lock held)."""

    count: int = 0
    longest: float = 0.0

    def note(self, seconds: float) -> None:
        self.count += 1
        self.longest = max(self.longest, seconds)


# SQLite's default busy handler (sqlite3_busy_timeout): the sleeps between a waiting writer's tries, and
# how long it has waited when each begins (ms).
_BUSY_SLEEPS: Final = (1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50, 100)
_BUSY_WAITED: Final = (0, 1, 3, 8, 18, 33, 53, 78, 103, 128, 178, 228)


def busy_retry_gap(waited: float) -> float:
    """Seconds between the tries of a writer that has waited `waited` seconds for SQLite's lock."""
    return _BUSY_SLEEPS[bisect.bisect_right(_BUSY_WAITED, waited * 1000.0) - 1] / 1000.0


def pause_after(held: float) -> float:
    """How long a run leaves SQLite free after holding it `held` seconds: the gap between the tries of a
    writer that began waiting when the transaction did, as it stands by the end of the pause (a writer
    that came later tries more often), or the transaction's length when shorter, and never less than 5 ms."""
    waited = held + 0.001
    gap = busy_retry_gap(waited)
    # As long as the transaction does as well (every waiter has tried by then), when that is shorter.
    return max(0.005, min(busy_retry_gap(waited + gap), held))


def let_others_in(held: float) -> None:
    """After a write transaction on SQLite, leave the database free long enough for every writer that
    waited for it to try again (`pause_after`: as long as the transaction up to 20 ms, 25 ms after one of
    up to ~100 ms, 50 ms up to ~175 ms, 100 ms after longer ones).

    SQLite keeps no queue of waiting writers: each retries on its own, its busy handler sleeping 1, 2, 5,
    10, 15, 20, 25, 25, 25, 50, 50, then 100 ms between tries, so a writer that starts its next transaction
    at once takes the lock back before any waiting request tries again, and the requests wait out their
    timeout (measured: a request waited 0.8 s and failed while units of 0.25 s followed each other without
    a pause). A writer waiting since the transaction began tries at least once within a pause as long as
    its current sleep, so none waits past the first pause after it arrived. A pause as long as the
    transaction (up to 100 ms) did the same at a higher cost: a 100k-memory cycle slept 6.4 s of its 23 s.
    PostgreSQL queues lock waiters, so nothing waits there; nor inside a caller's transaction, which
    releases nothing.
    """
    if single_writer(connection) and not connection.in_atomic_block:
        time.sleep(pause_after(held))


def _hold(run: EvolutionRun) -> bool:
    """The first statements of every write transaction of a run: the run must still be this worker's (a run
    taken over by another worker raises RunTakenOver; on PostgreSQL the row lock orders this transaction
    and the takeover), and the workspace row serialises writers of the workspace on PostgreSQL. Returns
    whether someone has asked the run to stop (read from the same row, at no extra query)."""
    owner, cancel = EvolutionRun.objects.select_for_update().filter(pk=run.pk).values_list(
        "worker", "cancel_requested"
    ).first() or (None, False)
    if owner is not None and owner != run.worker:
        raise RunTakenOver(f"run {run.pk} now belongs to {owner}")
    Workspace.objects.select_for_update().filter(pk=run.workspace_id).values_list("pk").first()
    return bool(cancel)


def _chunked(
    run: EvolutionRun,
    name: str,
    evolver: Evolver,
    entries: list[dict[str, Any]],
    now: datetime,
    handoff: selectors.CycleHandoff,
    started: float,
) -> dict[str, Any]:
    """Plan outside any transaction, then commit the units in transactions of at most about
    `transaction_seconds` (at least one unit each), the summary entry in the last one.

    A run asked to stop commits no further unit: the transaction that sees the request writes the entry
    as ``cancelled`` (records written so far, ``units_left``), so a stop takes effect within one
    transaction instead of at the end of an evolver that may write for minutes."""
    with deferred_writes() as session, _planning(handoff):
        result = evolver.evolve(run.workspace, dry_run=run.dry_run, run=run, now=now)
    queued = {id(record) for unit in session.units for record in unit.records}
    loose = [record for record in result.records if id(record) not in queued]
    units = deque(session.units)
    units.extend(WriteUnit(loose[k : k + LOOSE_RECORDS_PER_UNIT]) for k in range(0, len(loose), LOOSE_RECORDS_PER_UNIT))
    budget = transaction_seconds()
    held = _Held()
    saved = skipped = 0
    longest_unit = 0.0
    entry: dict[str, Any] | None = None
    while entry is None:
        with transaction.atomic():
            # On SQLite the transaction began IMMEDIATE: from here the database is this worker's.
            began = time.perf_counter()
            stop = _hold(run) and bool(units)
            while units and not stop:
                unit_began = time.perf_counter()
                unit = units.popleft()
                records, stale = unit.apply() if unit.apply is not None else (unit.records, 0)
                _attach(records, run)
                saved += len(save_records(records))
                skipped += stale
                done = time.perf_counter()
                longest_unit = max(longest_unit, done - unit_began)
                # Another unit only if one as long as the longest so far still ends within the budget.
                if done - began + longest_unit > budget:
                    break
            if stop or not units:
                entry = _entry(name, result, saved, started)
                entry.update(
                    transactions=held.count + 1,
                    longest_transaction_ms=round(max(held.longest, time.perf_counter() - began) * 1000, 1),
                )
                if stop:
                    entry.update(status="cancelled", error="stopped on request", units_left=len(units))
                if skipped:
                    entry["skipped_changed"] = skipped
                entries.append(entry)
                run.save(update_fields=["summary"])
        held.note(time.perf_counter() - began)
        if entry is None:
            let_others_in(time.perf_counter() - began)
    if skipped:
        log.info("%s in run %s left %d rows alone: they changed after it read them", name, run.pk, skipped)
    return entry


def undo_evolver(run: EvolutionRun, name: str) -> int:
    """Take back what evolver `name` of `run` committed (an evolver that failed midway, or was interrupted
    with its worker): every record, newest first, has its rows put back (`history.revert.record_undo`), the
    proposals it created withdrawn, and is deleted, one record a transaction. A record whose rows changed
    since is left as it is; returns how many were left."""
    ids = list(
        EvolutionRecord.objects.filter(run=run, evolver=name, reverted_at__isnull=True)
        .order_by("-id")
        .values_list("id", flat=True)
    )
    kept = 0
    for pk in ids:
        with transaction.atomic():
            began = time.perf_counter()
            _hold(run)
            record = EvolutionRecord.objects.select_related("workspace").filter(pk=pk).first()
            if record is None:
                continue
            try:
                with transaction.atomic():
                    record_undo(record)
                    _withdraw_proposal(record)
                    record.delete()
            except Conflict as exc:
                log.warning("record %s of run %s stays: %s", pk, run.pk, exc.detail)
                kept += 1
        let_others_in(time.perf_counter() - began)
    if ids:
        log.info("took back %d of %d records %s committed in run %s", len(ids) - kept, len(ids), name, run.pk)
    return kept


def _withdraw_proposal(record: EvolutionRecord) -> None:
    proposal_id = record.after.get("proposal_id") if isinstance(record.after, dict) else None
    if proposal_id is None or record.dry_run:
        return
    proposal = Proposal.objects.filter(workspace=record.workspace, pk=proposal_id).first()
    if proposal is None:
        return
    if proposal.status != ProposalStatus.PENDING:
        raise Conflict(f"proposal {proposal_id} was decided ({proposal.status})", code="revert_conflict")
    proposal.delete()
