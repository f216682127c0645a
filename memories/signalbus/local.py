"""Signal bus in the server process: the boost queue when REDIS_URL is unset.

Signals are queued in memory and written with `apply_signals` by a background thread every
SIGNAL_FLUSH_SECONDS (started by the ASGI server, see smartmemory_site.runtime). A failed write puts the
batch back at the head of the queue, so a transient "database is locked" loses no boost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from django.conf import settings
from django.db import close_old_connections

from core.outages import RetryLog
from memories.signalbus.base import FlushResult, Signal, apply_signals

log = logging.getLogger(__name__)


class LocalSignalBus:
    """In-process queue; a daemon thread flushes it every `interval` seconds while the server runs."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._queue: list[Signal] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._failures = RetryLog(log, "signal flush")

    @classmethod
    def from_settings(cls) -> LocalSignalBus:
        """The bus `signal_bus()` makes: flushed every settings.SIGNAL_FLUSH_SECONDS seconds."""
        return cls(float(settings.SIGNAL_FLUSH_SECONDS))

    def publish(self, signals: Sequence[Signal]) -> None:
        with self._lock:
            self._queue.extend(signals)

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def flush(self) -> FlushResult:
        with self._lock:
            batch, self._queue = self._queue, []
        if not batch:
            return FlushResult(boosted=0, events=0, changed={})
        try:
            return apply_signals(batch)
        except Exception:
            # Put the batch back so a transient "database is locked" does not lose boosts.
            with self._lock:
                self._queue[:0] = batch
            raise

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="signal-flush", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 5)
        self.flush()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.flush()
            except Exception as exc:
                self._failures.failed(exc, f"retrying in {self.interval:g} s")
            else:
                self._failures.succeeded()
            finally:
                close_old_connections()
