from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from memories.models import Memory, Workspace
from surfacing.models import PinnedSession, SessionPin
from surfacing.pins import DbPinStore, PinStore, RedisPinStore

TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
DAY = timedelta(hours=24)


@pytest.fixture
def redis_store() -> Iterator[RedisPinStore]:
    # A fresh key prefix per test: tests never see each other's sessions and leave nothing behind.
    prefix = f"test:{uuid.uuid4().hex}:"
    store = RedisPinStore(TEST_REDIS_URL, prefix=prefix)
    yield store
    client = store._client
    keys = list(client.scan_iter(match=f"{prefix}*"))
    if keys:
        client.delete(*keys)
    store.close()


@pytest.fixture(
    params=[
        pytest.param("db", marks=[pytest.mark.django_db, pytest.mark.api]),
        pytest.param("redis", marks=[pytest.mark.django_db, pytest.mark.services]),
    ]
)
def store(request: pytest.FixtureRequest) -> PinStore:
    if request.param == "db":
        return DbPinStore()
    redis_store: RedisPinStore = request.getfixturevalue("redis_store")
    return redis_store


def test_pins_are_read_back_with_their_weights(
    store: PinStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    now = timezone.now()
    pin = store.pin(workspace=workspace, session_id="s1", memory_id=a.id, weight=1.0, now=now)
    store.pin(workspace=workspace, session_id="s1", memory_id=b.id, weight=2.5, now=now)
    assert pin.memory_id == a.id and pin.expires_at == now + DAY
    assert store.pins(workspace=workspace, session_id="s1", now=now) == {a.id: 1.0, b.id: 2.5}
    assert store.pins(workspace=workspace, session_id="other", now=now) == {}
    assert store.pins(workspace=workspace, session_id="", now=now) == {}


def test_pinning_again_updates_the_weight(
    store: PinStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a = make_memory("a")
    now = timezone.now()
    store.pin(workspace=workspace, session_id="s1", memory_id=a.id, weight=1.0, now=now)
    store.pin(workspace=workspace, session_id="s1", memory_id=a.id, weight=3.0, now=now)
    assert store.pins(workspace=workspace, session_id="s1", now=now) == {a.id: 3.0}


def test_the_same_session_id_in_two_workspaces_names_two_separate_sessions(
    store: PinStore,
    workspace: Workspace,
    other_workspace: Workspace,
    make_memory: Callable[..., Memory],
) -> None:
    # Neither workspace can learn that the other uses the id, claim it first, or touch the other's pins.
    mine, theirs = make_memory("mine"), make_memory("theirs", ws=other_workspace)
    now = timezone.now()
    store.pin(workspace=workspace, session_id="shared", memory_id=mine.id, weight=1.0, now=now)
    assert store.pins(workspace=other_workspace, session_id="shared", now=now) == {}
    store.pin(workspace=other_workspace, session_id="shared", memory_id=theirs.id, weight=2.0, now=now)
    assert store.unpin(workspace=other_workspace, session_id="shared", memory_id=mine.id, now=now) is False
    assert store.pins(workspace=workspace, session_id="shared", now=now) == {mine.id: 1.0}
    assert store.pins(workspace=other_workspace, session_id="shared", now=now) == {theirs.id: 2.0}


def test_unpin_removes_one_pin_and_reports_whether_it_existed(
    store: PinStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b = make_memory("a"), make_memory("b")
    now = timezone.now()
    store.pin(workspace=workspace, session_id="s1", memory_id=a.id, weight=1.0, now=now)
    store.pin(workspace=workspace, session_id="s1", memory_id=b.id, weight=1.0, now=now)
    assert store.unpin(workspace=workspace, session_id="s1", memory_id=a.id, now=now) is True
    assert store.unpin(workspace=workspace, session_id="s1", memory_id=a.id, now=now) is False
    assert store.unpin(workspace=workspace, session_id="never", memory_id=a.id, now=now) is False
    assert store.pins(workspace=workspace, session_id="s1", now=now) == {b.id: 1.0}


# -- expiry: the database store is driven by `now`, Redis by real time ---------------------------------


@pytest.mark.django_db
@pytest.mark.api
def test_db_session_expires_after_24h_and_each_pin_refreshes_it(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    store = DbPinStore()
    a, b = make_memory("a"), make_memory("b")
    t0 = timezone.now()
    store.pin(workspace=workspace, session_id="s", memory_id=a.id, weight=1.0, now=t0)
    t1 = t0 + timedelta(hours=20)
    store.pin(workspace=workspace, session_id="s", memory_id=b.id, weight=1.0, now=t1)
    assert PinnedSession.objects.get(session_id="s").expires_at == t1 + DAY
    assert set(store.pins(workspace=workspace, session_id="s", now=t0 + timedelta(hours=30))) == {a.id, b.id}
    after = t1 + DAY + timedelta(seconds=1)
    assert store.pins(workspace=workspace, session_id="s", now=after) == {}
    # Expired: the session may be bound anew by anyone, and the old rows are cleaned on that pin.
    theirs = make_memory("theirs", ws=other_workspace)
    store.pin(workspace=other_workspace, session_id="s", memory_id=theirs.id, weight=1.0, now=after)
    assert store.pins(workspace=other_workspace, session_id="s", now=after) == {theirs.id: 1.0}
    assert set(SessionPin.objects.values_list("memory_id", flat=True)) == {theirs.id}


@pytest.mark.django_db
@pytest.mark.api
def test_db_pins_cleaned_lazily_when_any_session_pins(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    store = DbPinStore()
    a = make_memory("a")
    t0 = timezone.now()
    store.pin(workspace=workspace, session_id="old", memory_id=a.id, weight=1.0, now=t0)
    store.pin(workspace=workspace, session_id="new", memory_id=a.id, weight=1.0, now=t0 + 2 * DAY)
    assert list(PinnedSession.objects.values_list("session_id", flat=True)) == ["new"]


@pytest.mark.django_db
@pytest.mark.services
def test_redis_pins_carry_the_ttl_and_expire(
    redis_store: RedisPinStore, workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory],
    settings: Any,
) -> None:  # fmt: skip
    a, theirs = make_memory("a"), make_memory("theirs", ws=other_workspace)
    now = timezone.now()
    redis_store.pin(workspace=workspace, session_id="s", memory_id=a.id, weight=1.0, now=now)
    key = redis_store._key(workspace, "s")
    client = redis_store._client
    assert 86_390 <= client.ttl(key) <= 86_400

    settings.SESSION_PIN_TTL_SECONDS = 1
    redis_store.pin(workspace=workspace, session_id="s", memory_id=a.id, weight=1.0, now=now)
    assert client.ttl(key) <= 1
    time.sleep(1.3)
    later: datetime = timezone.now()
    assert redis_store.pins(workspace=workspace, session_id="s", now=later) == {}
    redis_store.pin(workspace=other_workspace, session_id="s", memory_id=theirs.id, weight=1.0, now=later)
    assert redis_store.pins(workspace=other_workspace, session_id="s", now=later) == {theirs.id: 1.0}


@pytest.mark.django_db
@pytest.mark.services
def test_redis_skips_a_corrupt_field_instead_of_failing_the_context_call(
    redis_store: RedisPinStore, workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a = make_memory("a")
    redis_store._client.hset(redis_store._key(workspace, "s"), "not-a-uuid", "1.0")
    redis_store.pin(workspace=workspace, session_id="s", memory_id=a.id, weight=1.0, now=timezone.now())
    assert redis_store.pins(workspace=workspace, session_id="s", now=timezone.now()) == {a.id: 1.0}


@pytest.mark.services
def test_redis_url_selects_the_redis_store(settings: Any) -> None:
    from surfacing.pins import pin_store, set_pin_store

    set_pin_store(None)
    settings.REDIS_URL = TEST_REDIS_URL
    try:
        store = pin_store()
        assert isinstance(store, RedisPinStore)
        store.ping()
    finally:
        set_pin_store(None)
    settings.REDIS_URL = ""
    try:
        assert isinstance(pin_store(), DbPinStore)
    finally:
        set_pin_store(None)
