"""The background worker: queued evolution runs, the scheduled jobs and, when REDIS_URL is set, the Redis
signal stream.

Run one or more of these next to the web processes (with EVOLUTION_WORKER=external on those, so that only
workers work runs):

- evolution runs (evolution.jobs): ``--threads`` threads claim queued runs and reverts, each by exactly one
  worker; a run or revert whose worker died is taken over once its lease ran out and resumes after what
  committed;
- the scheduled jobs (evolution.scheduler: retrieval statistics, decay sweep, scheduled cycles and dreams),
  on the first of those threads, each (workspace, job) worked once across all workers by its lock;
- the signal stream (REDIS_URL set): every worker is a consumer of the ``flushers`` group, so they share
  the stream without applying an entry twice, and a survivor takes over what a killed worker had read but
  not acknowledged. Without Redis the web process flushes its own in-process bus.

SIGTERM/SIGINT finish the current flush and the runs being worked, then exit.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

import redis
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from core.outages import RetryLog
from evolution import jobs, runner
from evolution.models import EvolutionRun
from evolution.scheduler import Scheduler
from memories.signalbus.redis import DEFAULT_GROUP, DEFAULT_STREAM, RedisSignalBus

log = logging.getLogger(__name__)

HOUSEKEEPING_SECONDS = 3600.0
"""How often a worker deletes consumer names left behind by stopped workers."""


class Command(BaseCommand):
    help = (
        "Work queued evolution runs and the due scheduled jobs and, when REDIS_URL is set, apply the signals "
        "queued on the Redis stream every --interval seconds, until SIGTERM/SIGINT (--once: what is there now, "
        "then exit)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=float(settings.SIGNAL_FLUSH_SECONDS))
        parser.add_argument("--consumer", default=None, help="consumer name (default: host-pid)")
        parser.add_argument("--once", action="store_true", help="drain the stream and the run queue once and exit")
        parser.add_argument("--threads", type=int, default=1, help="evolution runs worked at once (default 1)")
        parser.add_argument("--poll", type=float, default=jobs.POLL_SECONDS, help="seconds between looks for runs")
        parser.add_argument("--stream", default=DEFAULT_STREAM, help=f"stream key (default {DEFAULT_STREAM})")
        parser.add_argument("--group", default=DEFAULT_GROUP)
        parser.add_argument(
            "--claim-idle-ms",
            type=int,
            default=60_000,
            help="take over another consumer's entries unacknowledged for this long",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        interval = float(options["interval"])
        if interval <= 0:
            raise CommandError("--interval must be positive")
        threads = int(options["threads"])
        if threads < 1:
            raise CommandError("--threads must be at least 1")
        poll = max(0.05, float(options["poll"]))
        once = bool(options["once"])
        stop = threading.Event()
        previous = self._install_handlers(stop)
        workers = [] if once else self._start_run_workers(stop, threads, poll)
        try:
            if settings.REDIS_URL:
                bus = RedisSignalBus(
                    settings.REDIS_URL,
                    stream=options["stream"],
                    group=options["group"],
                    consumer=options["consumer"],
                    claim_idle_ms=options["claim_idle_ms"],
                )
                try:
                    self._loop(bus, interval, stop, once=once)
                finally:
                    bus.close()
            elif not once:
                self.stdout.write("REDIS_URL is not set: signals are flushed by the web process itself")
                while not stop.wait(1.0):
                    pass
            if once:
                name = jobs.worker_name()
                if jobs.scheduler_enabled():
                    worked = Scheduler(worker=name).tick()
                    self.stdout.write(f"worked {len(worked)} scheduled job(s)")
                self.stdout.write(f"worked {jobs.work_available(name)} evolution run(s) and revert(s)")
        finally:
            stop.set()
            for worker in workers:
                worker.join()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            runner.wait_for_checkpoints(timeout=60)

    def _start_run_workers(self, stop: threading.Event, threads: int, poll: float) -> list[threading.Thread]:
        scheduled = " and the scheduled jobs" if jobs.scheduler_enabled() else ""
        self.stdout.write(f"evolution runs{scheduled}: {threads} worker thread(s), looking for runs every {poll:g}s")
        workers = [
            # One scheduler per process is enough (the job locks keep each job to one worker anyway): the first
            # thread's, so the others only ever wait for runs.
            threading.Thread(target=self._work_runs, args=(stop, poll, i == 0), name=f"run-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        for worker in workers:
            worker.start()
        return workers

    def _work_runs(self, stop: threading.Event, poll: float, schedules: bool) -> None:
        name = jobs.worker_name()

        def report(run: EvolutionRun, seconds: float) -> None:
            self.stdout.write(f"run {run.id} ({run.workspace.slug}): {run.status} in {seconds:.1f} s")

        jobs.worker_loop(
            stop=stop,
            name=name,
            poll=poll,
            scheduler=jobs.new_scheduler(name) if schedules else None,
            on_done=report,
        )

    def _install_handlers(self, stop: threading.Event) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # signal handlers can only be set from the main thread

        def request_stop(signum: int, frame: FrameType | None) -> None:
            self.stdout.write(f"{signal.Signals(signum).name}: finishing the current flush and runs, then exiting")
            stop.set()

        return {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}

    def _loop(self, bus: RedisSignalBus, interval: float, stop: threading.Event, *, once: bool) -> None:
        self.stdout.write(f"worker {bus.consumer}: flushing {bus.stream} (group {bus.group}) every {interval:g}s")
        started = time.monotonic()
        last_housekeeping = 0.0
        flush_failures = RetryLog(log, "signal flush")
        housekeeping_failures = RetryLog(log, "forgetting idle consumers")
        while True:
            round_started = time.monotonic()
            before = bus.stats.signals
            try:
                while True:
                    seen = _progress(bus)
                    bus.flush()
                    # A flush is bounded (max_batches); go on while it keeps finding work.
                    if stop.is_set() or _progress(bus) == seen:
                        break
            except Exception as exc:
                if once:
                    raise
                flush_failures.failed(exc, f"retrying in {interval:g} s")
            else:
                flush_failures.succeeded()
            finally:
                close_old_connections()
            done = bus.stats.signals - before
            if done:
                seconds = time.monotonic() - round_started
                rate = done / seconds if seconds > 0 else 0.0
                self.stdout.write(f"applied {done} signals in {seconds * 1000:.0f} ms ({rate:,.0f} signals/s)")
            if time.monotonic() - last_housekeeping >= HOUSEKEEPING_SECONDS:
                last_housekeeping = time.monotonic()
                try:
                    removed = bus.forget_idle_consumers()
                except redis.RedisError as exc:
                    # Redis down at that moment (restarting): housekeeping waits for the next hour, the loop
                    # goes on (it ended the worker before).
                    housekeeping_failures.failed(exc, "trying again in an hour")
                    removed = 0
                if removed:
                    self.stdout.write(f"removed {removed} idle consumer names")
            if once or stop.wait(interval):
                break
        total = time.monotonic() - started
        stats = bus.stats
        self.stdout.write(
            f"worker {bus.consumer} stopping: {stats.signals} signals in {stats.entries} entries over {total:.1f} s"
            f" ({stats.signals / total if total > 0 else 0.0:,.0f} signals/s), {stats.reclaimed} entries taken over,"
            f" {stats.duplicates} duplicates skipped, {stats.dead} dead-lettered"
        )


def _progress(bus: RedisSignalBus) -> tuple[int, int, int]:
    stats = bus.stats
    return stats.entries, stats.duplicates, stats.dead
