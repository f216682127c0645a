"""What every signal bus backend shares: the signals, the bus protocol and the batched database write.

Reads must stay fast, so a retrieval only enqueues what happened; a flusher applies the boosts
(`stored = clamp01(stored + delta)`, last boost now, boost_count + 1), stores the retrieval events
and publishes the new activation values to live pages. Every backend (memories.signalbus.local,
memories.signalbus.redis) hands its batches to `apply_signals`; this module imports none of them.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.db import connection, transaction

from memories.algorithms.sortkey import activation_sort_key
from memories.bulk import bulk_insert, db_datetime, new_instance
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


_BOOST_COLUMNS = (
    "activation_score",
    "activation_last_boost_at",
    "activation_boost_count",
    "access_count",
    "last_accessed",
    "activation_sort_key",
)


def apply_signals(signals: Sequence[Signal]) -> FlushResult:
    """Write a batch of signals: one locked read and one executemany for boosts, one insert for events.

    Rows are locked in id order (SELECT ... FOR UPDATE on PostgreSQL; SQLite serialises writers
    anyway) so concurrent flushers never lose each other's boosts. A boost applies only to a memory
    of the workspace it was queued for.
    """
    boosts: dict[uuid.UUID, list[Boost]] = defaultdict(list)
    events: list[RetrievalEvent] = []
    for signal in signals:
        if isinstance(signal, Boost):
            boosts[signal.memory_id].append(signal)
        else:
            events.append(
                new_instance(
                    RetrievalEvent,
                    {
                        "workspace_id": signal.workspace_id,
                        "memory_id": signal.memory_id,
                        "result_set": signal.result_set,
                        "rank": min(signal.rank, 32767),
                        "source": signal.source,
                        "query": signal.query[:500],
                        "session_id": signal.session_id[:128],
                        "created_at": signal.at,
                    },
                )
            )
    changed: dict[int, list[tuple[str, float]]] = defaultdict(list)
    with transaction.atomic():
        if boosts:
            ids = sorted(boosts)
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(ids), 900):
                rows.extend(
                    Memory.objects.filter(id__in=ids[start : start + 900])
                    .select_for_update()
                    .order_by("id")
                    .values_list("id", "workspace_id", "activation_half_life_hours", *_BOOST_COLUMNS[:-1])
                )
            updates: list[tuple[Any, ...]] = []
            for mid, workspace_id, half_life, score, last_boost, boost_count, access_count, last_accessed in rows:
                batch = [b for b in boosts[mid] if b.workspace_id == workspace_id]
                if not batch:
                    continue
                # clamp01(clamp01(s + d1) + d2) == clamp01(s + d1 + d2) for non-negative deltas.
                total = sum(b.delta for b in batch)
                latest = max(b.at for b in batch)
                # A boost flushed late (a re-queued batch, another writer boosting meanwhile) must not
                # move the decay clock backwards: that would age the memory instead of warming it.
                if last_boost is not None:
                    latest = max(latest, last_boost)
                score = min(1.0, max(0.0, score + total))
                accessed = latest if last_accessed is None else max(latest, last_accessed)
                updates.append(
                    (
                        score,
                        db_datetime(latest),
                        boost_count + len(batch),
                        access_count + len(batch),
                        db_datetime(accessed),
                        activation_sort_key(score, latest, half_life),
                        _memory_id(mid),
                    )
                )
                changed[workspace_id].append((str(mid), score))
            if updates:
                assignments = ", ".join(f"{connection.ops.quote_name(c)} = %s" for c in _BOOST_COLUMNS)
                with connection.cursor() as cursor:
                    cursor.executemany(f"UPDATE memories_memory SET {assignments} WHERE id = %s", updates)
        if events:
            existing = set(
                Memory.objects.filter(id__in=list({e.memory_id for e in events})).values_list("id", flat=True)
            )
            # A memory hard-deleted between retrieval and flush has no events to keep.
            bulk_insert(RetrievalEvent, [e for e in events if e.memory_id in existing])
        if changed:
            snapshot = {ws: list(items) for ws, items in changed.items()}
            transaction.on_commit(lambda: _publish_activation(snapshot))
    return FlushResult(boosted=sum(len(v) for v in changed.values()), events=len(events), changed=dict(changed))


def _memory_id(value: uuid.UUID) -> Any:
    return value if connection.features.has_native_uuid_field else value.hex


def _publish_activation(changed: dict[int, list[tuple[str, float]]]) -> None:
    from memories.live import activation_changed

    try:
        activation_changed(changed)
    except Exception:  # a dead channel layer must never lose the database write
        log.exception("publishing activation changes failed")
