"""Background work that lives inside the server process (embedded mode only)."""

from __future__ import annotations

import atexit
import logging

from django.conf import settings

from evolution import jobs
from memories.signalbus import LocalSignalBus, signal_bus

log = logging.getLogger(__name__)


def start_background_workers() -> None:
    """Start the in-process boost flusher (with REDIS_URL the run_workers processes do this work) and,
    with EVOLUTION_WORKER=thread (the embedded default), the thread that works queued evolution runs and
    runs the scheduled jobs (evolution.scheduler: retrieval statistics, decay sweep, scheduled cycles and
    dreams)."""
    if settings.SIGNAL_BACKGROUND_FLUSH:
        _start_signal_flusher()
    if jobs.start_thread_worker():
        atexit.register(jobs.stop_thread_worker, 30.0)
        log.info("evolution worker thread started")


def _start_signal_flusher() -> None:
    bus = signal_bus()
    if isinstance(bus, LocalSignalBus):
        bus.start()
        atexit.register(bus.stop)
        log.info("signal flusher started (every %ss)", bus.interval)
