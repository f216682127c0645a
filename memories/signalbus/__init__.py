"""Queue activation boosts and retrieval events, and write them to the database in batches.

Reads must stay fast, so a retrieval only enqueues what happened (`retrieval_signals`); a flusher
writes it later with `apply_signals` (memories.signalbus.base). Two backends, picked the way Django
picks a cache backend, by the dotted path of a class with a `from_settings()` constructor:

- ``memories.signalbus.local.LocalSignalBus`` (REDIS_URL unset): an in-process queue flushed by a
  background thread every SIGNAL_FLUSH_SECONDS.
- ``memories.signalbus.redis.RedisSignalBus`` (REDIS_URL set): the same signals on a Redis Stream read
  by `manage.py run_workers` consumers.

The backends import only memories.signalbus.base, and this package names the Redis backend only by its
path, loaded when the process first asks for its bus: no import cycle, and no Redis backend without REDIS_URL.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

from django.conf import settings
from django.utils import timezone
from django.utils.module_loading import import_string

from memories.signalbus.base import Boost, FlushResult, Retrieval, Signal, SignalBus, apply_signals
from memories.signalbus.local import LocalSignalBus

__all__ = [
    "LOCAL_BACKEND",
    "REDIS_BACKEND",
    "Boost",
    "FlushResult",
    "LocalSignalBus",
    "Retrieval",
    "Signal",
    "SignalBus",
    "apply_signals",
    "backend_path",
    "retrieval_signals",
    "set_signal_bus",
    "signal_bus",
]

LOCAL_BACKEND = "memories.signalbus.local.LocalSignalBus"
REDIS_BACKEND = "memories.signalbus.redis.RedisSignalBus"

_bus: SignalBus | None = None
_bus_lock = threading.Lock()


def backend_path() -> str:
    """Dotted path of the bus class for the settings: Redis Streams when REDIS_URL is set, else the local queue."""
    return REDIS_BACKEND if settings.REDIS_URL else LOCAL_BACKEND


def signal_bus() -> SignalBus:
    """Return the process's bus, made on first use by the `from_settings()` of the `backend_path()` class."""
    global _bus
    if _bus is None:
        with _bus_lock:
            if _bus is None:
                bus: SignalBus = import_string(backend_path()).from_settings()
                _bus = bus
    return _bus


def set_signal_bus(bus: SignalBus | None) -> None:
    """Replace the process's bus (tests, workers)."""
    global _bus
    with _bus_lock:
        _bus = bus


def retrieval_signals(
    *,
    workspace_id: int,
    memory_ids: Sequence[uuid.UUID],
    source: str,
    delta: float,
    query: str = "",
    session_id: str = "",
    partner_ids: Sequence[uuid.UUID] = (),
    partner_delta: float = 0.0,
) -> uuid.UUID:
    """Queue the boosts and retrieval events of one result set; return the result set id."""
    now = timezone.now()
    result_set = uuid.uuid4()
    signals: list[Signal] = []
    for rank, mid in enumerate(memory_ids, start=1):
        signals.append(Boost(workspace_id, mid, delta, now))
        signals.append(Retrieval(workspace_id, mid, result_set, rank, source, query, session_id, now))
    signals.extend(Boost(workspace_id, mid, partner_delta, now) for mid in partner_ids if partner_delta > 0)
    signal_bus().publish(signals)
    return result_set
