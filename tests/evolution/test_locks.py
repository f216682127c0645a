"""Scheduled-job locks, in the database and in the real redis-server that pytest starts (tests/services.py): one
holder at a time, released or prolonged only by its own token, and taken over once its lease has run out."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from evolution.locks import DatabaseJobLocks, JobLocks, RedisJobLocks, job_locks
from evolution.models import ScheduledJob
from memories.models import Workspace

REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)

pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.fixture
def redis_locks(redis_server: object) -> Iterator[RedisJobLocks]:
    """Locks under a prefix of their own, removed afterwards."""
    prefix = f"test-joblock-{uuid.uuid4().hex[:12]}"
    locks = RedisJobLocks(REDIS_URL, prefix=prefix)
    yield locks
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()
    locks.close()


@pytest.fixture(params=["database", "redis"])
def locks(request: pytest.FixtureRequest, workspace: Workspace) -> JobLocks:
    if request.param == "redis":
        found: JobLocks = request.getfixturevalue("redis_locks")
        return found
    return DatabaseJobLocks()


def test_one_holder_at_a_time_and_only_the_holder_releases(locks: JobLocks, workspace: Workspace) -> None:
    first = locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW)
    assert first is not None
    assert locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW) is None
    # Another job of the workspace, and the same job of another workspace id, are other locks.
    assert locks.acquire(workspace.pk, "retrieval", lease=LEASE, now=NOW) is not None
    assert not locks.release(workspace.pk, "decay", "not-the-token")
    assert locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW) is None
    assert locks.release(workspace.pk, "decay", first)
    assert not locks.release(workspace.pk, "decay", first)
    assert locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW) is not None


def test_only_the_holder_prolongs_its_lease(locks: JobLocks, workspace: Workspace) -> None:
    token = locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW)
    assert token is not None
    assert locks.extend(workspace.pk, "decay", token, lease=LEASE, now=NOW)
    assert not locks.extend(workspace.pk, "decay", "not-the-token", lease=LEASE, now=NOW)


def test_a_database_lock_is_taken_over_once_its_lease_ran_out_and_the_old_holder_cannot_free_it(
    workspace: Workspace,
) -> None:
    locks = DatabaseJobLocks()
    dead = locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW)
    assert dead is not None
    assert locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW + LEASE - timedelta(seconds=1)) is None
    taker = locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW + LEASE)
    assert taker is not None and taker != dead
    # The holder that was taken for dead neither frees nor prolongs the new holder's lock.
    assert not locks.release(workspace.pk, "decay", dead)
    assert not locks.extend(workspace.pk, "decay", dead, lease=LEASE, now=NOW + LEASE)
    assert ScheduledJob.objects.get(workspace=workspace, job="decay").lock_token == taker


def test_a_redis_lock_is_taken_over_once_its_lease_ran_out(redis_locks: RedisJobLocks, workspace: Workspace) -> None:
    lease = timedelta(milliseconds=300)
    dead = redis_locks.acquire(workspace.pk, "decay", lease=lease, now=NOW)
    assert dead is not None
    assert redis_locks.acquire(workspace.pk, "decay", lease=lease, now=NOW) is None
    time.sleep(0.4)
    taker = redis_locks.acquire(workspace.pk, "decay", lease=LEASE, now=NOW)
    assert taker is not None
    assert not redis_locks.release(workspace.pk, "decay", dead)
    assert not redis_locks.extend(workspace.pk, "decay", dead, lease=LEASE, now=NOW)
    assert redis_locks.release(workspace.pk, "decay", taker)


def test_redis_is_used_when_redis_url_is_set(settings: Any, redis_server: object) -> None:
    settings.REDIS_URL = ""
    assert isinstance(job_locks(), DatabaseJobLocks)
    settings.REDIS_URL = REDIS_URL
    chosen = job_locks()
    assert isinstance(chosen, RedisJobLocks)
    chosen.close()
