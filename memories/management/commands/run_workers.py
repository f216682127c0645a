"""Flush the Redis Streams signal bus: apply queued boosts and retrieval events to the database.

Run one or more of these next to the web processes when REDIS_URL is set; each is a consumer of the
``flushers`` group, so they share the stream without applying an entry twice, and a survivor takes over
what a killed worker had read but not acknowledged. SIGTERM/SIGINT finish the current flush and exit.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from types import FrameType
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from memories.signalbus.redis import DEFAULT_GROUP, DEFAULT_STREAM, RedisSignalBus

log = logging.getLogger(__name__)

HOUSEKEEPING_SECONDS = 3600.0
"""How often a worker deletes consumer names left behind by stopped workers."""


class Command(BaseCommand):
    help = "Apply signals queued on the Redis stream every --interval seconds until SIGTERM/SIGINT."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--interval", type=float, default=float(settings.SIGNAL_FLUSH_SECONDS))
        parser.add_argument("--consumer", default=None, help="consumer name (default: host-pid)")
        parser.add_argument("--once", action="store_true", help="drain the stream once and exit")
        parser.add_argument("--stream", default=DEFAULT_STREAM, help=f"stream key (default {DEFAULT_STREAM})")
        parser.add_argument("--group", default=DEFAULT_GROUP)
        parser.add_argument(
            "--claim-idle-ms",
            type=int,
            default=60_000,
            help="take over another consumer's entries unacknowledged for this long",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if not settings.REDIS_URL:
            raise CommandError("REDIS_URL is not set: the in-process bus is flushed by the server itself")
        interval = float(options["interval"])
        if interval <= 0:
            raise CommandError("--interval must be positive")
        bus = RedisSignalBus(
            settings.REDIS_URL,
            stream=options["stream"],
            group=options["group"],
            consumer=options["consumer"],
            claim_idle_ms=options["claim_idle_ms"],
        )
        stop = threading.Event()
        previous = self._install_handlers(stop)
        try:
            self._loop(bus, interval, stop, once=bool(options["once"]))
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            bus.close()

    def _install_handlers(self, stop: threading.Event) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            return {}  # signal handlers can only be set from the main thread

        def request_stop(signum: int, frame: FrameType | None) -> None:
            self.stdout.write(f"{signal.Signals(signum).name}: finishing the current flush, then exiting")
            stop.set()

        return {signum: signal.signal(signum, request_stop) for signum in (signal.SIGTERM, signal.SIGINT)}

    def _loop(self, bus: RedisSignalBus, interval: float, stop: threading.Event, *, once: bool) -> None:
        self.stdout.write(f"worker {bus.consumer}: flushing {bus.stream} (group {bus.group}) every {interval:g}s")
        started = time.monotonic()
        last_housekeeping = 0.0
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
            except Exception:
                log.exception("signal flush failed; retrying in %ss", interval)
                if once:
                    raise
            finally:
                close_old_connections()
            done = bus.stats.signals - before
            if done:
                seconds = time.monotonic() - round_started
                rate = done / seconds if seconds > 0 else 0.0
                self.stdout.write(f"applied {done} signals in {seconds * 1000:.0f} ms ({rate:,.0f} signals/s)")
            if time.monotonic() - last_housekeeping >= HOUSEKEEPING_SECONDS:
                last_housekeeping = time.monotonic()
                removed = bus.forget_idle_consumers()
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
