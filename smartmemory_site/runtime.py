"""Background work that lives inside the server process (embedded mode only)."""

from __future__ import annotations

import atexit
import logging

from django.conf import settings

from memories.signalbus import LocalSignalBus, signal_bus

log = logging.getLogger(__name__)


def start_background_workers() -> None:
    """Start the in-process boost flusher; with REDIS_URL the run_workers processes do this work."""
    if not settings.SIGNAL_BACKGROUND_FLUSH:
        return
    bus = signal_bus()
    if isinstance(bus, LocalSignalBus):
        bus.start()
        atexit.register(bus.stop)
        log.info("signal flusher started (every %ss)", bus.interval)
