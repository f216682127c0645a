"""The local signal bus: queued boosts and retrieval events written in batches, never lost on failure."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from memories.algorithms.sortkey import activation_sort_key
from memories.models import Memory, RetrievalEvent, Workspace
from memories.signalbus import Boost, LocalSignalBus, Retrieval, retrieval_signals, set_signal_bus, signal_bus
from memories.signalbus import local as local_backend

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def boost(memory: Memory, delta: float, at: Any = None) -> Boost:
    return Boost(memory.workspace_id, memory.id, delta, at or timezone.now())


def retrieval(memory: Memory, rank: int, result_set: uuid.UUID, **extra: Any) -> Retrieval:
    values: dict[str, Any] = {"source": "search", "query": "", "session_id": "", "at": timezone.now(), **extra}
    return Retrieval(memory.workspace_id, memory.id, result_set, rank, **values)


def stored(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def test_a_boost_adds_to_the_stored_score_and_restarts_the_decay_clock(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("x")
    at = timezone.now()
    fresh_signal_bus.publish([boost(memory, 0.05, at)])
    assert fresh_signal_bus.pending() == 1
    result = fresh_signal_bus.flush()
    assert (result.boosted, fresh_signal_bus.pending()) == (1, 0)
    after = stored(memory)
    assert after.activation_score == pytest.approx(0.55)
    assert after.activation_last_boost_at == at
    assert after.activation_boost_count == 1
    assert (after.access_count, after.last_accessed) == (1, at)
    assert after.activation_sort_key == pytest.approx(activation_sort_key(0.55, at, 720.0))


def test_boosts_clamp_at_one_and_count_every_use(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("x")
    Memory.objects.filter(id=memory.id).update(activation_score=0.98)
    fresh_signal_bus.publish([boost(memory, 0.05) for _ in range(3)])
    fresh_signal_bus.flush()
    after = stored(memory)
    assert after.activation_score == 1.0
    assert after.activation_boost_count == 3


def test_boosts_of_one_batch_add_up_and_keep_the_latest_time(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("x")
    now = timezone.now()
    fresh_signal_bus.publish([boost(memory, 0.05, now), boost(memory, 0.02, now - timedelta(seconds=3))])
    fresh_signal_bus.flush()
    after = stored(memory)
    assert after.activation_score == pytest.approx(0.57)
    assert after.activation_last_boost_at == now


def test_a_late_flushed_boost_never_moves_the_last_boost_backwards(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("x")
    newer = timezone.now() + timedelta(minutes=5)
    Memory.objects.filter(id=memory.id).update(activation_last_boost_at=newer)
    fresh_signal_bus.publish([boost(memory, 0.05, newer - timedelta(minutes=10))])
    fresh_signal_bus.flush()
    assert stored(memory).activation_last_boost_at == newer


def test_retrieval_events_are_written_with_their_rank_and_query(
    fresh_signal_bus: LocalSignalBus, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    first, second = make_memory("a"), make_memory("b")
    result_set = retrieval_signals(
        workspace_id=workspace.pk,
        memory_ids=[first.id, second.id],
        source="search",
        delta=0.05,
        query="why jwt",
        session_id="s-1",
    )
    assert fresh_signal_bus.pending() == 4
    result = fresh_signal_bus.flush()
    assert (result.boosted, result.events) == (2, 2)
    events = list(
        RetrievalEvent.objects.order_by("rank").values_list("memory_id", "rank", "source", "query", "session_id")
    )
    assert events == [(first.id, 1, "search", "why jwt", "s-1"), (second.id, 2, "search", "why jwt", "s-1")]
    assert set(RetrievalEvent.objects.values_list("result_set", flat=True)) == {result_set}
    assert stored(first).activation_score == pytest.approx(0.55)


def test_co_retrieved_partners_get_their_own_smaller_boost(
    fresh_signal_bus: LocalSignalBus, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    hit, partner = make_memory("hit"), make_memory("partner")
    retrieval_signals(
        workspace_id=workspace.pk,
        memory_ids=[hit.id],
        source="context",
        delta=0.02,
        partner_ids=[partner.id],
        partner_delta=0.01,
    )
    fresh_signal_bus.flush()
    assert stored(hit).activation_score == pytest.approx(0.52)
    assert stored(partner).activation_score == pytest.approx(0.51)
    assert list(RetrievalEvent.objects.values_list("memory_id", flat=True)) == [hit.id]


def test_signals_of_a_memory_deleted_before_the_flush_are_dropped(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory]
) -> None:
    kept, gone = make_memory("kept"), make_memory("gone")
    result_set = uuid.uuid4()
    fresh_signal_bus.publish(
        [boost(kept, 0.05), boost(gone, 0.05), retrieval(kept, 1, result_set), retrieval(gone, 2, result_set)]
    )
    Memory.objects.filter(id=gone.id).delete()
    fresh_signal_bus.flush()
    assert list(RetrievalEvent.objects.values_list("memory_id", flat=True)) == [kept.id]
    assert stored(kept).activation_boost_count == 1


def test_a_failed_flush_puts_the_batch_back_in_order(
    fresh_signal_bus: LocalSignalBus, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    memory = make_memory("x")
    batch = [boost(memory, 0.05), boost(memory, 0.02)]
    fresh_signal_bus.publish(batch)

    def locked(signals: Any) -> Any:
        fresh_signal_bus.publish([boost(memory, 0.01)])  # arrives while the write is failing
        raise RuntimeError("database is locked")

    monkeypatch.setattr(local_backend, "apply_signals", locked)
    with pytest.raises(RuntimeError):
        fresh_signal_bus.flush()
    assert fresh_signal_bus.pending() == 3
    assert fresh_signal_bus._queue[:2] == batch
    monkeypatch.undo()
    fresh_signal_bus.flush()
    after = stored(memory)
    assert after.activation_score == pytest.approx(0.58)
    assert after.activation_boost_count == 3


def test_an_empty_flush_writes_nothing(fresh_signal_bus: LocalSignalBus, django_assert_num_queries: Any) -> None:
    with django_assert_num_queries(0):
        result = fresh_signal_bus.flush()
    assert (result.boosted, result.events, result.changed) == (0, 0, {})


def test_changed_activations_are_published_after_commit(
    fresh_signal_bus: LocalSignalBus,
    make_memory: Callable[..., Memory],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    import memories.live

    memory = make_memory("x")
    published: list[dict[int, list[tuple[str, float]]]] = []
    monkeypatch.setattr(memories.live, "activation_changed", published.append)
    with django_capture_on_commit_callbacks(execute=True):
        fresh_signal_bus.publish([boost(memory, 0.05)])
        fresh_signal_bus.flush()
        assert published == []
    assert published == [{memory.workspace_id: [(str(memory.id), pytest.approx(0.55))]}]


def test_a_dead_channel_layer_does_not_lose_the_write(
    fresh_signal_bus: LocalSignalBus,
    make_memory: Callable[..., Memory],
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    import memories.live

    def dead(changed: Any) -> None:
        raise ConnectionError("channel layer down")

    memory = make_memory("x")
    monkeypatch.setattr(memories.live, "activation_changed", dead)
    with django_capture_on_commit_callbacks(execute=True):
        fresh_signal_bus.publish([boost(memory, 0.05)])
        fresh_signal_bus.flush()
    assert stored(memory).activation_boost_count == 1


def test_reading_a_memory_through_the_api_warms_it_at_the_next_flush(
    fresh_signal_bus: LocalSignalBus, api: APIClient, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("x")
    api.get(f"/api/v1/workspaces/acme/memories/{memory.id}/")
    assert stored(memory).activation_boost_count == 0
    fresh_signal_bus.flush()
    after = stored(memory)
    assert after.activation_boost_count == 1
    assert after.activation_score == pytest.approx(0.55)
    assert RetrievalEvent.objects.get().source == "get"


def test_the_flusher_thread_starts_and_stops_cleanly(make_memory: Callable[..., Memory]) -> None:
    bus = LocalSignalBus(interval=0.05)
    bus.start()
    bus.start()  # a second start is a no-op
    assert bus._thread is not None and bus._thread.is_alive()
    bus.stop()
    assert not bus._thread.is_alive()


def test_signal_bus_is_the_local_bus_flushed_every_signal_flush_seconds_without_redis(settings: Any) -> None:
    settings.REDIS_URL = ""
    settings.SIGNAL_FLUSH_SECONDS = 7
    set_signal_bus(None)
    bus = signal_bus()
    assert isinstance(bus, LocalSignalBus)
    assert bus.interval == 7.0
    assert signal_bus() is bus


def test_the_local_bus_is_made_without_importing_the_redis_backend() -> None:
    probe = (
        "import sys, django; django.setup()\n"
        "from memories.signalbus import LocalSignalBus, signal_bus\n"
        "assert isinstance(signal_bus(), LocalSignalBus)\n"
        "print(sorted(m for m in sys.modules if m.startswith('memories.signalbus')))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "smartmemory_site.settings"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=Path(__file__).parents[3], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == str(
        ["memories.signalbus", "memories.signalbus.base", "memories.signalbus.local"]
    )
