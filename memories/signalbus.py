"""Queue activation boosts and retrieval events, and write them to the database in batches.

Reads must stay fast, so a retrieval only enqueues what happened; a flusher applies the boosts
(`stored = clamp01(stored + delta)`, last boost now, boost_count + 1), stores the retrieval events
and publishes the new activation values to live pages. The local bus is an in-process queue flushed
by a background thread every SIGNAL_FLUSH_SECONDS; the Redis bus (memories.signalbus_redis) puts
the same signals on a Redis Stream read by `manage.py run_workers` consumers.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from django.conf import settings
from django.db import close_old_connections, transaction
from django.utils import timezone

from memories.algorithms.sortkey import activation_sort_key
from memories.models import Memory, RetrievalEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Boost:
    workspace_id: int
    memory_id: uuid.UUID
    delta: float
    at: datetime


@dataclass(frozen=True)
class Retrieval:
    workspace_id: int
    memory_id: uuid.UUID
    result_set: uuid.UUID
    rank: int
    source: str
    query: str
    session_id: str
    at: datetime


Signal = Boost | Retrieval


@dataclass(frozen=True)
class FlushResult:
    boosted: int
    events: int
    changed: dict[int, list[tuple[str, float]]]  # workspace id -> [(memory id, stored score)]


class SignalBus(Protocol):
    def publish(self, signals: Sequence[Signal]) -> None: ...

    def flush(self) -> FlushResult: ...

    def pending(self) -> int: ...


def apply_signals(signals: Sequence[Signal]) -> FlushResult:
    """Write a batch of signals: one read and one bulk update for boosts, one insert for events."""
    boosts: dict[uuid.UUID, list[Boost]] = defaultdict(list)
    events: list[RetrievalEvent] = []
    for signal in signals:
        if isinstance(signal, Boost):
            boosts[signal.memory_id].append(signal)
        else:
            events.append(
                RetrievalEvent(
                    workspace_id=signal.workspace_id,
                    memory_id=signal.memory_id,
                    result_set=signal.result_set,
                    rank=min(signal.rank, 32767),
                    source=signal.source,
                    query=signal.query[:500],
                    session_id=signal.session_id[:128],
                    created_at=signal.at,
                )
            )
    changed: dict[int, list[tuple[str, float]]] = defaultdict(list)
    with transaction.atomic():
        if boosts:
            ids = list(boosts)
            rows: list[Memory] = []
            for start in range(0, len(ids), 900):
                rows.extend(
                    Memory.objects.filter(id__in=ids[start : start + 900]).only(
                        "id",
                        "workspace_id",
                        "activation_score",
                        "activation_last_boost_at",
                        "activation_half_life_hours",
                        "activation_boost_count",
                        "access_count",
                        "last_accessed",
                    )
                )
            for memory in rows:
                batch = boosts[memory.id]
                # clamp01(clamp01(s + d1) + d2) == clamp01(s + d1 + d2) for non-negative deltas.
                total = sum(b.delta for b in batch)
                latest = max(b.at for b in batch)
                # A boost flushed late (a re-queued batch, another writer boosting meanwhile) must not
                # move the decay clock backwards: that would age the memory instead of warming it.
                if memory.activation_last_boost_at is not None:
                    latest = max(latest, memory.activation_last_boost_at)
                memory.activation_score = min(1.0, max(0.0, memory.activation_score + total))
                memory.activation_last_boost_at = latest
                memory.activation_boost_count += len(batch)
                memory.access_count += len(batch)
                memory.last_accessed = latest if memory.last_accessed is None else max(latest, memory.last_accessed)
                memory.activation_sort_key = activation_sort_key(
                    memory.activation_score, latest, memory.activation_half_life_hours
                )
                changed[memory.workspace_id].append((str(memory.id), memory.activation_score))
            Memory.objects.bulk_update(
                rows,
                [
                    "activation_score",
                    "activation_last_boost_at",
                    "activation_boost_count",
                    "access_count",
                    "last_accessed",
                    "activation_sort_key",
                ],
                batch_size=500,
            )
        if events:
            existing = set(
                Memory.objects.filter(id__in=list({e.memory_id for e in events})).values_list("id", flat=True)
            )
            # A memory hard-deleted between retrieval and flush has no events to keep.
            RetrievalEvent.objects.bulk_create([e for e in events if e.memory_id in existing], batch_size=1000)
        if changed:
            snapshot = {ws: list(items) for ws, items in changed.items()}
            transaction.on_commit(lambda: _publish_activation(snapshot))
    return FlushResult(boosted=sum(len(v) for v in changed.values()), events=len(events), changed=dict(changed))


def _publish_activation(changed: dict[int, list[tuple[str, float]]]) -> None:
    from memories.live import activation_changed

    try:
        activation_changed(changed)
    except Exception:  # a dead channel layer must never lose the database write
        log.exception("publishing activation changes failed")


class LocalSignalBus:
    """In-process queue; a daemon thread flushes it every `interval` seconds while the server runs."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._queue: list[Signal] = []
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

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
            except Exception:
                log.exception("signal flush failed; retrying in %ss", self.interval)
            finally:
                close_old_connections()


_bus: SignalBus | None = None
_bus_lock = threading.Lock()


def signal_bus() -> SignalBus:
    """Return the process's bus: Redis Streams when REDIS_URL is set, else the local queue."""
    global _bus
    if _bus is None:
        with _bus_lock:
            if _bus is None:
                if settings.REDIS_URL:
                    from memories.signalbus_redis import RedisSignalBus

                    _bus = RedisSignalBus(settings.REDIS_URL)
                else:
                    _bus = LocalSignalBus(float(settings.SIGNAL_FLUSH_SECONDS))
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
