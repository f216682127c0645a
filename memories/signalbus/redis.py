"""Signal bus on a Redis Stream read by a consumer group: the boost queue when REDIS_URL is set.

Publishers (web processes) XADD one stream entry per ``publish`` call (split every
``ENTRY_MAX_SIGNALS`` signals); ``manage.py run_workers`` processes call ``flush``, which reads entries
through the consumer group ``flushers``, writes them with ``apply_signals`` and XACKs them only after the
database transaction committed. Delivery is at least once, narrowed to effectively once:

- An entry read but never acknowledged (a worker died, or its transaction failed) stays in the group's
  pending entries list. The same consumer re-reads its own list at the next flush; other consumers take
  over entries idle for ``claim_idle_ms`` with XAUTOCLAIM, so a dead worker's batch is not lost.
- A redelivered entry may have been written already (the worker died between COMMIT and XACK). Each
  entry of ``retrieval_signals`` carries retrieval events whose (result set, memory) pair is unique in
  practice, so a redelivered entry whose events are already in the database is acknowledged without
  being applied again. An entry holding boosts only has no such witness and may be applied twice in
  that window.
- An entry that cannot be decoded, or that fails on its own with a non-transient database error, is
  copied to ``<stream>:dead`` and acknowledged so that one bad entry cannot block the stream.

Entry layout (all fields strings): ``v`` format version, ``n`` signal count, ``d`` compact JSON
``{"s": [strings], "b": [[ws, memory_hex, delta, at_us], ...], "r": [[ws, memory_hex, result_set_hex,
rank, source_i, query_i, session_i, at_us], ...]}`` where ``*_i`` index the string table (a result set
repeats one query and session for every rank) and ``at_us`` is microseconds since the Unix epoch (UTC).

A Redis restarted without persistence loses the entries it held: published and not yet read (about one
flush interval's worth), or read and being written (those commit and, their stream gone, are never
redelivered: applied once; the acknowledgement that fails on the dead server fails that flush, which the
worker retries). After the restart the first read finds no group and makes it again (``NOGROUP``), and a
publisher sends what it kept while the server was down. Nothing else is lost.

``pending()`` counts signals published but not yet acknowledged, kept in a counter key next to the stream
(INCRBY in the XADD transaction, DECRBY in the acknowledging script), plus signals held in this process
while Redis was unreachable.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any, cast

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction

from core.outages import RetryLog
from memories.models import RetrievalEvent
from memories.signalbus.base import Boost, FlushResult, Retrieval, Signal, apply_signals

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_GROUP",
    "DEFAULT_STREAM",
    "BusStats",
    "RedisSignalBus",
    "decode_entry",
    "encode_entry",
]

DEFAULT_STREAM = "smartmemory:signals"
DEFAULT_GROUP = "flushers"
FORMAT_VERSION = "1"
ENTRY_MAX_SIGNALS = 500
"""Signals per stream entry: a result set of k=100 is 200 signals plus partners, so one entry."""

MAX_STREAM_LENGTH = 1_000_000
"""XADD MAXLEN ~ cap (entries): a safety net against a stream nobody reads, never reached in service."""

MAX_LOCAL_SIGNALS = 100_000
"""Signals held in process while Redis is unreachable; beyond that the oldest are dropped and logged."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)

# Acknowledge entries and lower the pending-signal counter by the signal counts of the entries that this
# call actually removed from the pending list, so a double ack (two consumers, a retry) counts once.
# KEYS[1] stream, KEYS[2] counter; ARGV[1] group, then pairs of (entry id, signal count).
_ACK_SCRIPT = """
local removed = 0
for i = 2, #ARGV, 2 do
    if redis.call('XACK', KEYS[1], ARGV[1], ARGV[i]) == 1 then
        removed = removed + tonumber(ARGV[i + 1])
    end
end
if removed > 0 then
    local left = redis.call('DECRBY', KEYS[2], removed)
    if left < 0 then redis.call('SET', KEYS[2], 0) end
end
return removed
"""


def _micros(at: datetime) -> int:
    aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
    # Integer timedelta division is exact; float timestamps can be off by a microsecond.
    return (aware - _EPOCH) // _MICROSECOND


def _datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def encode_entry(signals: Sequence[Signal]) -> dict[str, str]:
    """Stream entry fields for a batch of signals (see the module docstring for the layout)."""
    strings: list[str] = []
    string_index: dict[str, int] = {}

    def intern(text: str) -> int:
        found = string_index.get(text)
        if found is None:
            found = string_index[text] = len(strings)
            strings.append(text)
        return found

    boosts: list[list[Any]] = []
    retrievals: list[list[Any]] = []
    for signal in signals:
        if isinstance(signal, Boost):
            boosts.append([signal.workspace_id, signal.memory_id.hex, signal.delta, _micros(signal.at)])
        else:
            retrievals.append(
                [
                    signal.workspace_id,
                    signal.memory_id.hex,
                    signal.result_set.hex,
                    signal.rank,
                    intern(signal.source),
                    intern(signal.query),
                    intern(signal.session_id),
                    _micros(signal.at),
                ]
            )
    payload: dict[str, Any] = {}
    if strings:
        payload["s"] = strings
    if boosts:
        payload["b"] = boosts
    if retrievals:
        payload["r"] = retrievals
    return {
        "v": FORMAT_VERSION,
        "n": str(len(signals)),
        "d": json.dumps(payload, separators=(",", ":"), ensure_ascii=False),
    }


def decode_entry(fields: dict[str, str]) -> list[Signal]:
    """Signals of one stream entry; raises ValueError (or KeyError/TypeError) on a malformed entry."""
    if fields.get("v") != FORMAT_VERSION:
        raise ValueError(f"unknown signal entry version {fields.get('v')!r}")
    payload = json.loads(fields["d"])
    strings: list[str] = payload.get("s", [])
    signals: list[Signal] = [
        Boost(int(ws), uuid.UUID(hex=str(mid)), float(delta), _datetime(int(at)))
        for ws, mid, delta, at in payload.get("b", [])
    ]
    signals.extend(
        Retrieval(
            int(ws),
            uuid.UUID(hex=str(mid)),
            uuid.UUID(hex=str(rs)),
            int(rank),
            strings[int(src)],
            strings[int(query)],
            strings[int(session)],
            _datetime(int(at)),
        )
        for ws, mid, rs, rank, src, query, session, at in payload.get("r", [])
    )
    return signals


@dataclass
class BusStats:
    """Counters since the bus was created (the worker command logs them)."""

    signals: int = 0
    entries: int = 0
    reclaimed: int = 0
    duplicates: int = 0
    dead: int = 0


@dataclass(frozen=True)
class _Entry:
    id: str
    signals: list[Signal]
    redelivered: bool


def _empty() -> FlushResult:
    return FlushResult(boosted=0, events=0, changed={})


def _merge(a: FlushResult, b: FlushResult) -> FlushResult:
    changed = {ws: list(items) for ws, items in a.changed.items()}
    for ws, items in b.changed.items():
        changed.setdefault(ws, []).extend(items)
    return FlushResult(boosted=a.boosted + b.boosted, events=a.events + b.events, changed=changed)


class RedisSignalBus:
    """Signals on a Redis Stream (``stream``), flushed by consumer ``consumer`` of group ``group``.

    ``batch_entries`` entries are applied per database transaction; ``max_batches`` bounds one ``flush``
    so a worker checks for shutdown between rounds even under a steady publish rate. ``claim_idle_ms``
    is how long an entry must sit unacknowledged in another consumer's list before this one takes it
    over: longer than any batch takes to write, or a slow live worker's batch is applied twice.
    """

    def __init__(
        self,
        url: str,
        *,
        stream: str = DEFAULT_STREAM,
        group: str = DEFAULT_GROUP,
        consumer: str | None = None,
        batch_entries: int = 100,
        max_batches: int = 50,
        claim_idle_ms: int = 60_000,
        max_length: int = MAX_STREAM_LENGTH,
        client: redis.Redis | None = None,
    ) -> None:
        self.stream = stream
        self.group = group
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}"
        self.counter_key = f"{stream}:pending"
        self.dead_key = f"{stream}:dead"
        self.batch_entries = batch_entries
        self.max_batches = max_batches
        self.claim_idle_ms = claim_idle_ms
        self.max_length = max_length
        self.stats = BusStats()
        self._redis = client or redis.Redis.from_url(
            url, decode_responses=True, socket_connect_timeout=2, socket_timeout=10, health_check_interval=30
        )
        self._ack_script = self._redis.register_script(_ACK_SCRIPT)
        self._group_ready = False
        self._lock = threading.Lock()
        self._unsent: list[Signal] = []
        self._publish_failures = RetryLog(log, f"publishing signals to {stream}")

    @classmethod
    def from_settings(cls) -> RedisSignalBus:
        """The bus `signal_bus()` makes: the default stream and group on settings.REDIS_URL."""
        return cls(settings.REDIS_URL)

    # -- publishing -----------------------------------------------------------------------------------

    def publish(self, signals: Sequence[Signal]) -> None:
        """XADD the signals (and any held back while Redis was down) in one MULTI pipeline.

        A Redis outage must not fail the read request that produced the signals, so they are kept in
        process and sent with the next publish or flush.
        """
        with self._lock:
            batch = [*self._unsent, *signals]
            self._unsent = []
        if not batch:
            return
        try:
            self._send(batch)
        except redis.RedisError as exc:
            self._publish_failures.failed(exc, f"{len(batch)} signals kept for the next attempt")
            with self._lock:
                self._unsent[:0] = batch
                overflow = len(self._unsent) - MAX_LOCAL_SIGNALS
                if overflow > 0:
                    del self._unsent[:overflow]
                    log.error("dropped %d signals held while Redis was unreachable", overflow)
        else:
            self._publish_failures.succeeded()

    def _send(self, signals: Sequence[Signal]) -> None:
        pipe = self._redis.pipeline(transaction=True)
        for start in range(0, len(signals), ENTRY_MAX_SIGNALS):
            chunk = signals[start : start + ENTRY_MAX_SIGNALS]
            pipe.xadd(self.stream, cast(Any, encode_entry(chunk)), maxlen=self.max_length, approximate=True)
        pipe.incrby(self.counter_key, len(signals))
        pipe.execute()

    def pending(self) -> int:
        """Signals published and not yet acknowledged by a flusher (plus those held in this process)."""
        raw = self._redis.get(self.counter_key)
        with self._lock:
            local = len(self._unsent)
        return max(0, int(cast(str | None, raw) or 0)) + local

    # -- flushing -------------------------------------------------------------------------------------

    def flush(self) -> FlushResult:
        """Apply this consumer's unacknowledged entries, stale ones of dead consumers, then new ones."""
        with self._lock:
            held, self._unsent = self._unsent, []
        if held:
            try:
                self._send(held)
            except redis.RedisError:
                with self._lock:
                    self._unsent[:0] = held
                raise
        self._ensure_group()
        # Own history first (entries a failed transaction left behind are retried at once), then entries
        # of dead consumers, then new ones. Each source is read through a cursor, never from its start
        # again: acknowledgements wait for the commit, so a re-read could return an applied entry.
        result = self._drain(self._read_history, "0")
        result = _merge(result, self._drain(self._reclaim, "0-0"))
        return _merge(result, self._drain(self._read_new, ">"))

    def _drain(self, read: Callable[[str], tuple[list[_Entry], str | None]], cursor: str) -> FlushResult:
        result = _empty()
        for _ in range(self.max_batches):
            entries, next_cursor = read(cursor)
            if entries:
                result = _merge(result, self._apply(entries))
            if next_cursor is None:
                break
            cursor = next_cursor
        return result

    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            # Id 0: entries published before the first worker started are processed too.
            self._redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._group_ready = True

    def _read_history(self, cursor: str) -> tuple[list[_Entry], str | None]:
        rows = self._read(cursor)
        entries = self._decode(rows, redelivered=True)
        return entries, (rows[-1][0] if len(rows) == self.batch_entries else None)

    def _read_new(self, cursor: str) -> tuple[list[_Entry], str | None]:
        rows = self._read(">")
        return self._decode(rows, redelivered=False), (">" if len(rows) == self.batch_entries else None)

    def _read(self, start: str) -> list[tuple[str, dict[str, str]]]:
        try:
            reply = self._redis.xreadgroup(self.group, self.consumer, {self.stream: start}, count=self.batch_entries)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The stream was deleted under the worker (FLUSHDB, a test): recreate the group and go on.
            self._group_ready = False
            self._ensure_group()
            return []
        rows: list[tuple[str, dict[str, str]]] = []
        for _stream, messages in cast(list[tuple[str, list[tuple[str, dict[str, str]]]]], reply or []):
            rows.extend(messages)
        return rows

    def _reclaim(self, cursor: str) -> tuple[list[_Entry], str | None]:
        reply = cast(
            list[Any],
            self._redis.xautoclaim(
                self.stream, self.group, self.consumer, self.claim_idle_ms, start_id=cursor, count=self.batch_entries
            ),
        )
        # Entries trimmed from the stream (MAXLEN) come back in reply[2] and are already dropped by Redis.
        if len(reply) > 2 and reply[2]:
            log.warning("%d pending signal entries were trimmed from %s before a flush", len(reply[2]), self.stream)
        entries = self._decode(cast(list[tuple[str, dict[str, str]]], reply[1]), redelivered=True)
        if entries:
            self.stats.reclaimed += len(entries)
            log.info("consumer %s took over %d stale entries of %s", self.consumer, len(entries), self.stream)
        next_cursor = str(reply[0])
        return entries, (None if next_cursor == "0-0" else next_cursor)

    def _decode(self, rows: list[tuple[str, dict[str, str]]], *, redelivered: bool) -> list[_Entry]:
        entries: list[_Entry] = []
        for entry_id, fields in rows:
            if not fields:
                # Trimmed out of the stream while pending: nothing left to apply.
                self._ack([(entry_id, 0)])
                continue
            try:
                signals = decode_entry(fields)
            except (ValueError, KeyError, TypeError, IndexError):
                log.exception("undecodable signal entry %s moved to %s", entry_id, self.dead_key)
                self._dead_letter(entry_id, fields)
                continue
            entries.append(_Entry(entry_id, signals, redelivered))
        return entries

    def _apply(self, entries: list[_Entry]) -> FlushResult:
        done = self._already_applied([e for e in entries if e.redelivered])
        if done:
            self.stats.duplicates += len(done)
            log.info("%d redelivered entries were written before; acknowledging them only", len(done))
            self._ack([(e.id, len(e.signals)) for e in entries if e.id in done])
            entries = [e for e in entries if e.id not in done]
        if not entries:
            return _empty()
        try:
            return self._commit(entries)
        except (OperationalError, InterfaceError):
            raise  # transient (locked, disconnected): the entries stay pending and are retried
        except Exception:
            if len(entries) == 1:
                log.exception("signal entry %s fails on its own; moved to %s", entries[0].id, self.dead_key)
                self._dead_letter(entries[0].id, encode_entry(entries[0].signals))
                return _empty()
            log.exception("a batch of %d signal entries failed; writing them one by one", len(entries))
            result = _empty()
            for entry in entries:
                result = _merge(result, self._apply([entry]))
            return result

    def _commit(self, entries: list[_Entry]) -> FlushResult:
        signals = [s for e in entries for s in e.signals]
        acks = [(e.id, len(e.signals)) for e in entries]
        with transaction.atomic():
            # apply_signals locks the boosted rows in id order first (FOR NO KEY UPDATE on PostgreSQL), so two
            # workers flushing at once wait for each other instead of losing a boost (measured before it
            # did: 22 of 40 boosts kept); a separate locking read here cost a third of a Redis flush.
            result = apply_signals(signals)
            # Acknowledge only once the write is durable; inside an outer transaction that is its commit.
            transaction.on_commit(partial(self._ack, acks))
        self.stats.signals += len(signals)
        self.stats.entries += len(entries)
        return result

    def _already_applied(self, entries: list[_Entry]) -> set[str]:
        """Ids of redelivered entries whose retrieval events are already stored (written before the crash)."""
        witnesses: dict[tuple[uuid.UUID, uuid.UUID], str] = {}
        for entry in entries:
            for signal in entry.signals:
                if isinstance(signal, Retrieval):
                    witnesses[(signal.result_set, signal.memory_id)] = entry.id
        if not witnesses:
            return set()
        found = RetrievalEvent.objects.filter(
            memory_id__in={memory for _, memory in witnesses},
            result_set__in={result_set for result_set, _ in witnesses},
        ).values_list("result_set", "memory_id")
        return {witnesses[pair] for pair in found if pair in witnesses}

    def _ack(self, acks: Sequence[tuple[str, int]]) -> None:
        if not acks:
            return
        args: list[str | int] = [self.group]
        for entry_id, count in acks:
            args.extend((entry_id, count))
        self._ack_script(keys=[self.stream, self.counter_key], args=args)

    def _dead_letter(self, entry_id: str, fields: dict[str, str]) -> None:
        self.stats.dead += 1
        pipe = self._redis.pipeline(transaction=True)
        pipe.xadd(self.dead_key, cast(Any, {**fields, "origin": entry_id}), maxlen=self.max_length, approximate=True)
        pipe.execute()
        count = int(fields.get("n", "0")) if str(fields.get("n", "0")).isdigit() else 0
        self._ack([(entry_id, count)])

    # -- housekeeping ---------------------------------------------------------------------------------

    def forget_idle_consumers(self, idle_ms: int = 86_400_000) -> int:
        """Delete group consumers with nothing pending and idle for ``idle_ms``; return how many.

        Every worker process has its own consumer name, so restarts leave names behind; their pending
        entries are taken over by XAUTOCLAIM first, then the empty names can go.
        """
        removed = 0
        try:
            consumers = cast(list[dict[str, Any]], self._redis.xinfo_consumers(self.stream, self.group))
        except redis.ResponseError:
            return 0
        for info in consumers:
            if int(info["pending"]) == 0 and int(info["idle"]) >= idle_ms and info["name"] != self.consumer:
                self._redis.xgroup_delconsumer(self.stream, self.group, str(info["name"]))
                removed += 1
        return removed

    def close(self) -> None:
        self._redis.close()
