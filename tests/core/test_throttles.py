"""Fixed-window rate limits in Django's cache: counts, waits, scopes turned off, and the Redis backend."""

from __future__ import annotations

import os
import uuid
from typing import Any

import pytest
from django.core.cache import cache

from core.throttles import Rate, rate_of, throttle_hit, throttle_wait

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
START = 1_700_000_040.0  # a multiple of 60: the start of a one-minute window


@pytest.fixture
def rates(settings: Any) -> dict[str, Any]:
    settings.THROTTLE_RATES = {"login": (3, 60), "write": None}
    return settings.THROTTLE_RATES  # type: ignore[no-any-return]


def test_a_rate_reads_the_setting_at_each_call(rates: dict[str, Any]) -> None:
    assert rate_of("login") == Rate(3, 60)
    assert rate_of("write") is None
    assert rate_of("unknown") is None


def test_the_count_passes_then_the_rest_of_the_window_is_refused(rates: dict[str, Any]) -> None:
    assert [throttle_hit("login", "1.2.3.4", now=START + i) for i in range(3)] == [None, None, None]
    assert throttle_hit("login", "1.2.3.4", now=START + 15.2) == 45
    assert throttle_hit("login", "1.2.3.4", now=START + 59.5) == 1  # never "retry in 0 s"


def test_a_new_window_starts_from_zero(rates: dict[str, Any]) -> None:
    for i in range(4):
        throttle_hit("login", "1.2.3.4", now=START + i)
    assert throttle_hit("login", "1.2.3.4", now=START + 60) is None


def test_identities_and_scopes_count_apart(rates: dict[str, Any], settings: Any) -> None:
    settings.THROTTLE_RATES = {**rates, "login_user": (3, 60)}
    for i in range(3):
        throttle_hit("login", "1.2.3.4", now=START + i)
    assert throttle_hit("login", "5.6.7.8", now=START + 4) is None
    assert throttle_wait("login_user", "1.2.3.4", now=START + 4) is None


def test_wait_reads_without_counting(rates: dict[str, Any]) -> None:
    for _ in range(5):
        assert throttle_wait("login", "alice", now=START) is None
    for i in range(3):
        throttle_hit("login", "alice", now=START + i)
    assert throttle_wait("login", "alice", now=START + 10) == 50


def test_a_scope_turned_off_never_counts(rates: dict[str, Any]) -> None:
    for _ in range(100):
        assert throttle_hit("write", "user:1", now=START) is None
    assert not any(str(k).startswith(":1:throttle:write") for k in getattr(cache, "_cache", {}))


def test_the_cache_holds_no_identity_in_plain_text(rates: dict[str, Any]) -> None:
    throttle_hit("login", "alice@example.org", now=START)
    keys = list(getattr(cache, "_cache", {}))
    assert keys and not any("alice" in str(k) for k in keys)


@pytest.mark.services
def test_counters_live_in_redis_where_every_process_reads_them(settings: Any) -> None:
    import redis

    prefix = f"test-{uuid.uuid4().hex}"
    backend = "django.core.cache.backends.redis.RedisCache"
    settings.CACHES = {"default": {"BACKEND": backend, "LOCATION": REDIS_URL, "KEY_PREFIX": prefix}}
    settings.THROTTLE_RATES = {"login": (2, 60)}
    assert throttle_hit("login", "1.2.3.4", now=START) is None
    assert throttle_hit("login", "1.2.3.4", now=START + 1) is None
    assert throttle_wait("login", "1.2.3.4", now=START + 2) == 58
    assert throttle_hit("login", "1.2.3.4", now=START + 2) == 58
    conn = redis.Redis.from_url(REDIS_URL)
    try:
        (key,) = conn.keys(f"{prefix}:*")
        assert int(conn.get(key) or 0) == 3
        assert 0 < conn.ttl(key) <= 61  # the counter outlives its window by a second, no more
        conn.delete(key)
    finally:
        conn.close()


# -- the API: writes per user -----------------------------------------------------------------------


@pytest.mark.django_db
def test_api_writes_past_the_rate_are_a_429_in_the_error_shape(
    settings: Any, api: Any, workspace: Any, client_for: Any, member: Any
) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "write": (3, 60)}
    url = f"/api/v1/workspaces/{workspace.slug}/memories/"
    statuses = [api.post(url, {"content": f"m{i}"}, format="json").status_code for i in range(3)]
    assert statuses == [201, 201, 201]
    refused = api.post(url, {"content": "one too many"}, format="json")
    assert refused.status_code == 429
    body = refused.json()
    assert body["error"] == "throttled" and "seconds" in body["detail"]
    assert 1 <= int(refused["Retry-After"]) <= 60
    assert workspace.memories.count() == 3
    # Reads, search and context stay open; another user has a count of their own.
    assert api.get(url).status_code == 200
    assert api.post(f"/api/v1/workspaces/{workspace.slug}/search/", {"query": "m"}, format="json").status_code == 200
    context = api.post(f"/api/v1/workspaces/{workspace.slug}/context/", {"query": "m"}, format="json")
    assert context.status_code == 200
    editor = client_for(member("editor"))
    assert editor.post(url, {"content": "mine"}, format="json").status_code == 201


@pytest.mark.django_db
def test_writes_are_unlimited_when_the_rate_is_off(settings: Any, api: Any, workspace: Any) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "write": None}
    url = f"/api/v1/workspaces/{workspace.slug}/memories/"
    assert all(api.post(url, {"content": f"m{i}"}, format="json").status_code == 201 for i in range(30))
