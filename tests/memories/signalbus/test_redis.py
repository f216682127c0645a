"""RedisSignalBus against the real redis-server that pytest starts (tests/services.py)."""

from __future__ import annotations

import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from django.core.management import call_command

from memories.models import Memory, RetrievalEvent
from memories.signalbus import Boost, Retrieval, Signal, retrieval_signals, set_signal_bus, signal_bus
from memories.signalbus import redis as redis_backend
from memories.signalbus.redis import RedisSignalBus, decode_entry, encode_entry

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    conn = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    conn.ping()
    yield conn
    conn.close()


@pytest.fixture
def stream(client: redis.Redis) -> Iterator[str]:
    """A stream key of this test only; its counter and dead-letter keys are removed afterwards."""
    key = f"test:signals:{uuid.uuid4().hex}"
    yield key
    client.delete(key, f"{key}:pending", f"{key}:dead")


@pytest.fixture
def make_bus(stream: str) -> Iterator[Callable[..., RedisSignalBus]]:
    made: list[RedisSignalBus] = []

    def make(consumer: str = "worker-a", **kwargs: Any) -> RedisSignalBus:
        bus = RedisSignalBus(REDIS_URL, stream=stream, consumer=consumer, **kwargs)
        made.append(bus)
        return bus

    yield make
    for bus in made:
        bus.close()


def boosts(memories: list[Memory], delta: float, at: datetime) -> list[Signal]:
    return [Boost(m.workspace_id, m.id, delta, at) for m in memories]


def result_set(memories: list[Memory], at: datetime, query: str = "jwt") -> list[Signal]:
    """What retrieval_signals publishes for one result set: a boost and an event per item."""
    rs = uuid.uuid4()
    out: list[Signal] = []
    for rank, m in enumerate(memories, start=1):
        out.append(Boost(m.workspace_id, m.id, 0.02, at))
        out.append(Retrieval(m.workspace_id, m.id, rs, rank, "context", query, "s-1", at))
    return out


def stored(memory: Memory) -> Memory:
    return Memory.objects.get(pk=memory.pk)


def test_entry_encoding_round_trips_every_field_exactly() -> None:
    at = datetime(2025, 3, 1, 12, 30, 45, 123457, tzinfo=UTC)
    rs = uuid.uuid4()
    query = 'it\'s "quoted" — ünïcode'
    signals: list[Signal] = [
        Boost(7, uuid.uuid4(), 0.1234567890123, at),
        Retrieval(7, uuid.uuid4(), rs, 1, "search", query, "sess'1", at),
        Retrieval(7, uuid.uuid4(), rs, 2, "search", query, "sess'1", at + timedelta(microseconds=1)),
    ]
    fields = encode_entry(signals)
    assert fields["n"] == "3"
    assert fields["d"].count("ünïcode") == 1  # the query is stored once in the string table
    decoded = decode_entry(fields)
    assert sorted(decoded, key=repr) == sorted(signals, key=repr)


def test_publish_then_flush_applies_each_boost_exactly_once(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory]
) -> None:
    bus = make_bus()
    memories = [make_memory(f"memory {i}") for i in range(3)]
    before = [stored(m) for m in memories]
    at = datetime.now(UTC)
    bus.publish(boosts(memories, 0.05, at))
    bus.publish(result_set(memories[:2], at))
    assert bus.pending() == 3 + 4

    result = bus.flush()

    assert bus.pending() == 0
    assert result.events == 2
    after = [stored(m) for m in memories]
    for i, (old, new) in enumerate(zip(before, after, strict=True)):
        expected = old.activation_score + 0.05 + (0.02 if i < 2 else 0.0)
        assert new.activation_score == pytest.approx(min(1.0, expected), abs=1e-9)
        assert new.activation_boost_count == old.activation_boost_count + (2 if i < 2 else 1)
        assert new.activation_last_boost_at == at
    assert RetrievalEvent.objects.count() == 2
    assert list(RetrievalEvent.objects.order_by("rank").values_list("rank", "query", "session_id")) == [
        (1, "jwt", "s-1"),
        (2, "jwt", "s-1"),
    ]

    again = bus.flush()
    assert (again.boosted, again.events) == (0, 0)
    assert [stored(m).activation_boost_count for m in memories] == [m.activation_boost_count for m in after]


def test_entries_published_before_any_worker_started_are_flushed(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory()
    make_bus(consumer="web").publish(boosts([memory], 0.1, datetime.now(UTC)))
    make_bus(consumer="worker").flush()
    assert stored(memory).activation_boost_count == memory.activation_boost_count + 1


def test_two_consumers_share_the_stream_without_applying_an_entry_twice(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory]
) -> None:
    memories = [make_memory(f"memory {i}") for i in range(4)]
    publisher = make_bus(consumer="web")
    at = datetime.now(UTC)
    for _ in range(30):
        publisher.publish(boosts(memories, 0.001, at))
    a = make_bus(consumer="worker-a", batch_entries=4, max_batches=1)
    b = make_bus(consumer="worker-b", batch_entries=4, max_batches=1)

    while publisher.pending():
        a.flush()
        b.flush()

    assert a.stats.entries > 0 and b.stats.entries > 0
    assert a.stats.entries + b.stats.entries == 30
    assert a.stats.reclaimed == b.stats.reclaimed == 0
    for old in memories:
        assert stored(old).activation_boost_count == old.activation_boost_count + 30


def test_two_concurrent_workers_apply_every_signal_once(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory]
) -> None:
    memories = [make_memory(f"memory {i}") for i in range(5)]
    publisher = make_bus(consumer="web")
    at = datetime.now(UTC)
    for _ in range(40):
        publisher.publish(result_set(memories, at))
    workers = [make_bus(consumer=f"worker-{i}", batch_entries=3) for i in range(2)]
    errors: list[BaseException] = []

    def run(bus: RedisSignalBus) -> None:
        from django.db import OperationalError, connection

        try:
            while publisher.pending():
                try:
                    bus.flush()
                except OperationalError:  # SQLite "database is locked": the entries stay pending
                    continue
        except BaseException as exc:  # surfaced to the test thread below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors
    assert publisher.pending() == 0
    assert sum(w.stats.entries for w in workers) == 40
    assert RetrievalEvent.objects.count() == 40 * 5
    for old in memories:
        assert stored(old).activation_boost_count == old.activation_boost_count + 40


def test_entries_of_a_worker_that_died_before_acknowledging_are_applied_by_another(
    make_bus: Callable[..., RedisSignalBus],
    make_memory: Callable[..., Memory],
    monkeypatch: pytest.MonkeyPatch,
    client: redis.Redis,
    stream: str,
) -> None:
    memories = [make_memory(f"memory {i}") for i in range(3)]
    make_bus(consumer="web").publish(result_set(memories, datetime.now(UTC)))
    crashed = make_bus(consumer="worker-a")

    def die(signals: list[Signal]) -> Any:
        raise KeyboardInterrupt("worker killed mid-batch")

    monkeypatch.setattr(redis_backend, "apply_signals", die)
    with pytest.raises(KeyboardInterrupt):
        crashed.flush()
    monkeypatch.undo()
    assert client.xpending(stream, "flushers")["pending"] == 1
    assert [stored(m).activation_boost_count for m in memories] == [m.activation_boost_count for m in memories]

    survivor = make_bus(consumer="worker-b", claim_idle_ms=0)
    survivor.flush()

    assert survivor.stats.reclaimed == 1
    assert client.xpending(stream, "flushers")["pending"] == 0
    assert survivor.pending() == 0
    for old in memories:
        assert stored(old).activation_boost_count == old.activation_boost_count + 1
    assert RetrievalEvent.objects.count() == 3
    crashed.flush()  # the old owner comes back: its list is empty now
    assert [stored(m).activation_boost_count for m in memories] == [m.activation_boost_count + 1 for m in memories]


def test_stale_entries_of_a_live_worker_are_not_taken_before_the_idle_time(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory], client: redis.Redis, stream: str
) -> None:
    memory = make_memory()
    make_bus(consumer="web").publish(boosts([memory], 0.1, datetime.now(UTC)))
    slow = make_bus(consumer="worker-a")
    slow._ensure_group()
    client.xreadgroup("flushers", "worker-a", {stream: ">"})  # read, not yet written

    make_bus(consumer="worker-b", claim_idle_ms=60_000).flush()
    assert stored(memory).activation_boost_count == memory.activation_boost_count

    slow.flush()  # its own history is retried first
    assert stored(memory).activation_boost_count == memory.activation_boost_count + 1
    assert slow.pending() == 0


def test_an_entry_written_before_a_crash_between_commit_and_ack_is_not_applied_again(
    make_bus: Callable[..., RedisSignalBus],
    make_memory: Callable[..., Memory],
    monkeypatch: pytest.MonkeyPatch,
    client: redis.Redis,
    stream: str,
) -> None:
    memories = [make_memory(f"memory {i}") for i in range(2)]
    make_bus(consumer="web").publish(result_set(memories, datetime.now(UTC)))
    crashed = make_bus(consumer="worker-a")
    monkeypatch.setattr(crashed, "_ack", lambda acks: None)  # the process died right after COMMIT
    crashed.flush()
    assert client.xpending(stream, "flushers")["pending"] == 1
    written = [stored(m).activation_boost_count for m in memories]
    assert written == [m.activation_boost_count + 1 for m in memories]

    survivor = make_bus(consumer="worker-b", claim_idle_ms=0)
    survivor.flush()

    assert survivor.stats.duplicates == 1
    assert [stored(m).activation_boost_count for m in memories] == written
    assert RetrievalEvent.objects.count() == 2
    assert client.xpending(stream, "flushers")["pending"] == 0
    assert survivor.pending() == 0


def test_a_failed_database_write_leaves_the_entries_pending_for_the_next_flush(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.db import OperationalError

    memory = make_memory()
    bus = make_bus()
    bus.publish(boosts([memory], 0.1, datetime.now(UTC)))

    def locked(signals: list[Signal]) -> Any:
        raise OperationalError("database is locked")

    monkeypatch.setattr(redis_backend, "apply_signals", locked)
    with pytest.raises(OperationalError):
        bus.flush()
    monkeypatch.undo()
    assert bus.pending() == 1

    bus.flush()
    assert bus.pending() == 0
    assert stored(memory).activation_boost_count == memory.activation_boost_count + 1


def test_an_undecodable_entry_is_dead_lettered_and_does_not_block_the_stream(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory], client: redis.Redis, stream: str
) -> None:
    memory = make_memory()
    bus = make_bus()
    client.xadd(stream, {"v": "1", "n": "1", "d": "{not json"})
    bus.publish(boosts([memory], 0.1, datetime.now(UTC)))

    bus.flush()

    assert stored(memory).activation_boost_count == memory.activation_boost_count + 1
    assert bus.stats.dead == 1
    dead = client.xrange(f"{stream}:dead")
    assert len(dead) == 1 and dead[0][1]["d"] == "{not json"
    assert client.xpending(stream, "flushers")["pending"] == 0


def test_an_entry_failing_on_its_own_is_dead_lettered_while_its_batch_neighbours_are_written(
    make_bus: Callable[..., RedisSignalBus],
    make_memory: Callable[..., Memory],
    monkeypatch: pytest.MonkeyPatch,
    client: redis.Redis,
    stream: str,
) -> None:
    good, bad = make_memory("good"), make_memory("bad")
    bus = make_bus()
    at = datetime.now(UTC)
    bus.publish(boosts([good], 0.1, at))
    bus.publish(boosts([bad], 0.1, at))
    real = redis_backend.apply_signals

    def reject_bad(signals: list[Signal]) -> Any:
        if any(s.memory_id == bad.id for s in signals):
            raise ValueError("value out of range")
        return real(signals)

    monkeypatch.setattr(redis_backend, "apply_signals", reject_bad)
    bus.flush()

    assert stored(good).activation_boost_count == good.activation_boost_count + 1
    assert stored(bad).activation_boost_count == bad.activation_boost_count
    assert len(client.xrange(f"{stream}:dead")) == 1
    assert bus.pending() == 0


def test_signals_published_while_redis_is_unreachable_are_sent_later(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = make_memory()
    bus = make_bus()
    real_send = bus._send
    calls = {"n": 0}

    def flaky(signals: list[Signal]) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise redis.ConnectionError("connection refused")
        real_send(signals)

    monkeypatch.setattr(bus, "_send", flaky)
    at = datetime.now(UTC)
    bus.publish(boosts([memory], 0.1, at))  # must not raise into the read request
    assert bus.pending() == 1
    bus.publish(boosts([memory], 0.1, at))
    assert bus.pending() == 2

    bus.flush()
    assert stored(memory).activation_boost_count == memory.activation_boost_count + 2


def test_signal_bus_is_the_redis_bus_when_redis_url_is_set(settings: Any) -> None:
    settings.REDIS_URL = REDIS_URL
    set_signal_bus(None)
    bus = signal_bus()
    assert isinstance(bus, RedisSignalBus)
    assert bus.stream == "smartmemory:signals"
    bus.close()


def test_retrieval_signals_reach_the_database_through_the_redis_bus(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory]
) -> None:
    memories = [make_memory(f"memory {i}") for i in range(3)]
    bus = make_bus()
    set_signal_bus(bus)
    rs = retrieval_signals(
        workspace_id=memories[0].workspace_id,
        memory_ids=[m.id for m in memories[:2]],
        source="search",
        delta=0.05,
        query="what's the plan",
        session_id="s'1",
        partner_ids=[memories[2].id],
        partner_delta=0.01,
    )
    assert bus.pending() == 5
    bus.flush()
    events = list(RetrievalEvent.objects.order_by("rank"))
    assert [(e.result_set, e.memory_id, e.rank, e.query) for e in events] == [
        (rs, memories[0].id, 1, "what's the plan"),
        (rs, memories[1].id, 2, "what's the plan"),
    ]
    assert stored(memories[2]).activation_score == pytest.approx(memories[2].activation_score + 0.01, abs=1e-9)


def test_run_workers_once_drains_the_stream(
    make_bus: Callable[..., RedisSignalBus],
    make_memory: Callable[..., Memory],
    stream: str,
    settings: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings.REDIS_URL = REDIS_URL
    memories = [make_memory(f"memory {i}") for i in range(3)]
    publisher = make_bus(consumer="web")
    at = datetime.now(UTC)
    for _ in range(250):
        publisher.publish(boosts(memories, 0.0001, at))

    call_command("run_workers", "--once", "--stream", stream, "--consumer", "cmd-worker")

    assert publisher.pending() == 0
    for old in memories:
        assert stored(old).activation_boost_count == old.activation_boost_count + 250
    out = capsys.readouterr().out
    assert "applied 750 signals" in out
    assert "signals/s" in out


def test_run_workers_stops_gracefully_on_sigterm(
    make_bus: Callable[..., RedisSignalBus], make_memory: Callable[..., Memory], stream: str, settings: Any
) -> None:
    settings.REDIS_URL = REDIS_URL
    memory = make_memory()
    make_bus(consumer="web").publish(boosts([memory], 0.1, datetime.now(UTC)))
    previous = signal.getsignal(signal.SIGTERM)
    timer = threading.Timer(0.5, os.kill, args=(os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        call_command("run_workers", "--interval", "0.1", "--stream", stream)
    finally:
        timer.cancel()
    assert signal.getsignal(signal.SIGTERM) is previous
    assert stored(memory).activation_boost_count == memory.activation_boost_count + 1
