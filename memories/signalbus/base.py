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
from datetime import UTC, datetime
from typing import Any, Protocol

from django.db import connection, transaction

from core.outages import RetryLog
from core.sql import (
    datetime_converter,
    no_key_update_lock,
    updates_by_column_arrays,
    uuid_converter,
    uuid_params,
    values_stored_as_text,
)
from memories.algorithms.sortkey import activation_sort_key
from memories.bulk import insert_rows, write_rows
from memories.models import Memory, RetrievalEvent

log = logging.getLogger(__name__)
_publish_failures = RetryLog(log, "publishing activation changes")


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


_READ_CHUNK = 900
"""Ids per locking read: below SQLite's 999 bound parameters."""

# The boost read, in id order; FOR NO KEY UPDATE on PostgreSQL (SQLite serialises writers anyway).
_READ_COLUMNS = (
    "id",
    "workspace_id",
    "activation_half_life_hours",
    "activation_score",
    "activation_last_boost_at",
    "activation_boost_count",
    "access_count",
    "last_accessed",
)


def _read_boosted(ids: Sequence[uuid.UUID]) -> list[tuple[Any, ...]]:
    """`_READ_COLUMNS` of the memories `ids` (sorted), locked in id order, with ids as UUIDs and datetimes
    aware (UTC).

    Read with the cursor rather than the ORM: Django's per-value converters (a datetime parsed through
    regular expressions and made aware, twice a row) cost more than the query (measured: 0.6 of 1.5 s
    for 7,500 boosts over 5,300 memories).
    """
    as_text = values_stored_as_text()
    # NO KEY UPDATE: the flush changes no key, so it must not wait for (nor make wait) the KEY SHARE locks
    # that inserting a row referencing a memory takes (retrieval events, CO_RETRIEVED edges of the
    # retrieval job and HebbianCoRetrieval): with FOR UPDATE a flush and such an insert deadlocked
    # (measured beside the scheduled cycle on 100k memories: the retrieval job and HebbianCoRetrieval
    # failed with "deadlock detected"). Two flushes still serialise: NO KEY UPDATE conflicts with itself.
    lock = no_key_update_lock()
    columns = ", ".join(connection.ops.quote_name(c) for c in _READ_COLUMNS)
    rows: list[tuple[Any, ...]] = []
    with connection.cursor() as cursor:
        for start in range(0, len(ids), _READ_CHUNK):
            chunk = ids[start : start + _READ_CHUNK]
            marks = ", ".join(["%s"] * len(chunk))
            cursor.execute(
                f"SELECT {columns} FROM memories_memory WHERE id IN ({marks}) ORDER BY id{lock}",
                uuid_params(chunk),
            )
            found = cursor.fetchall()
            if not as_text:
                rows.extend(found)
                continue
            # SQLite: 32-digit hex ids and naive UTC text, as Django stores them.
            by_hex = {m.hex: m for m in chunk}
            rows.extend(
                (by_hex[mid], ws, half, score, _aware(last_boost), boosts, accesses, _aware(accessed))
                for mid, ws, half, score, last_boost, boosts, accesses, accessed in found
            )
    return rows


def _aware(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo is not None else value.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(value)).replace(tzinfo=UTC)


def apply_signals(signals: Sequence[Signal]) -> FlushResult:
    """Write a batch of signals: one locked read and one executemany for boosts, one insert for events.

    Rows are locked in id order (SELECT ... FOR NO KEY UPDATE on PostgreSQL; SQLite serialises writers
    anyway) so concurrent flushers never lose each other's boosts. A boost applies only to a memory
    of the workspace it was queued for.
    """
    boosts: dict[uuid.UUID, list[Boost]] = defaultdict(list)
    retrievals: list[Retrieval] = []
    for signal in signals:
        if isinstance(signal, Boost):
            boosts[signal.memory_id].append(signal)
        else:
            retrievals.append(signal)
    changed: dict[int, list[tuple[str, float]]] = defaultdict(list)
    found: set[uuid.UUID] = set()
    with transaction.atomic():
        if boosts:
            rows = _read_boosted(sorted(boosts))
            # Resolved once: `connection` is a proxy whose every attribute read is a lookup (~2 us).
            to_db = datetime_converter()
            key = uuid_converter()
            updates: list[tuple[Any, ...]] = []
            for mid, workspace_id, half_life, score, last_boost, boost_count, access_count, last_accessed in rows:
                found.add(mid)
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
                        to_db(latest),
                        boost_count + len(batch),
                        access_count + len(batch),
                        to_db(accessed),
                        activation_sort_key(score, latest, half_life),
                        key(mid),
                    )
                )
                changed[workspace_id].append((str(mid), score))
            if updates:
                _write_boosts(updates)
        if retrievals:
            # Every retrieved memory is boosted too (retrieval_signals), so the boost read usually found them.
            unknown = list({r.memory_id for r in retrievals} - found)
            if unknown:
                found.update(Memory.objects.filter(id__in=unknown).values_list("id", flat=True))
            # A memory hard-deleted between retrieval and flush has no events to keep.
            insert_rows(
                RetrievalEvent,
                ("workspace_id", "memory_id", "result_set", "rank", "source", "query", "session_id", "created_at"),
                (
                    (
                        r.workspace_id,
                        r.memory_id,
                        r.result_set,
                        min(r.rank, 32767),
                        r.source,
                        r.query[:500],
                        r.session_id[:128],
                        r.at,
                    )
                    for r in retrievals
                    if r.memory_id in found
                ),
            )
        if changed:
            snapshot = {ws: list(items) for ws, items in changed.items()}
            transaction.on_commit(lambda: _publish_activation(snapshot))
    return FlushResult(boosted=sum(len(v) for v in changed.values()), events=len(retrievals), changed=dict(changed))


def _write_boosts(updates: list[tuple[Any, ...]]) -> None:
    """Write (*_BOOST_COLUMNS values, id) rows, values as the database stores them: on SQLite one prepared
    UPDATE run by executemany (the rows are converted for it above, in apply_signals' one pass); on
    PostgreSQL the values are the Python ones and the fast-write module sends them as one UPDATE ... FROM
    unnest() of column arrays per batch (memories.bulk.write_rows)."""
    if updates_by_column_arrays():
        write_rows(Memory, _BOOST_COLUMNS, updates)
        return
    qn = connection.ops.quote_name
    assignments = ", ".join(f"{qn(c)} = %s" for c in _BOOST_COLUMNS)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE memories_memory SET {assignments} WHERE id = %s", updates)


def _publish_activation(changed: dict[int, list[tuple[str, float]]]) -> None:
    from memories.live import activation_changed

    try:
        activation_changed(changed)
    except Exception as exc:  # a dead channel layer must never lose the database write
        _publish_failures.failed(exc, "the browsers miss these changes")
    else:
        _publish_failures.succeeded()
