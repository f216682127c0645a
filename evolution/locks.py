"""Locks that keep each scheduled job of a workspace to one worker at a time, with a lease.

A lock is named by (workspace id, job name) and held under a random token for a lease: whoever holds it
works the job and may extend the lease while it does; only the holder's token releases or extends it; a
holder that dies (SIGKILL, a lost machine) leaves the lock to be taken once its lease has run out.

- ``RedisJobLocks`` (REDIS_URL set): ``SET key token NX PX lease``; release and extend are Lua scripts that
  compare the token first, so a worker whose lease ran out can never free or prolong the next holder's
  lock. Leases are timed by the Redis server's clock. A Redis restarted without persistence (as the
  tests run it, and any Redis that lost its data) forgets every lock: extend finds the key
  missing and sets it again under the holder's token, so the holder has its lock back at its next prolong
  (every third of the lease, evolution.scheduler); until then another worker may take the same job, the
  one window in which a job can be worked twice at once, bounded by a third of SCHEDULER_LOCK_SECONDS
  after the restart. While Redis is unreachable nobody gets a lock (acquire answers None, extend and
  release False, each logged), so workers skip the jobs instead of failing their loop.
- ``DatabaseJobLocks`` (otherwise): the lock columns of the job's ``ScheduledJob`` row, taken by one
  conditional UPDATE (free, or its lease ended before ``now``) whose row count says who won, after the
  row is inserted if it is missing (the unique (workspace, job) constraint makes two inserts one row).
  Leases are timed by the caller's clock (``now``), which the scheduler injects.

``job_locks()`` picks the backend the settings ask for; callers use the ``JobLocks`` protocol only.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import Any, Final, Protocol

import redis
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q

from evolution.models import ScheduledJob

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "smartmemory:joblock"

# KEYS[1] lock, ARGV[1] token: delete only the holder's lock.
_RELEASE: Final = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"
# KEYS[1] lock, ARGV[1] token, ARGV[2] lease in ms: prolong only the holder's lock; a lock that is gone (a
# restarted Redis forgot it, or its lease ran out and nobody took it) is the holder's again.
_EXTEND: Final = (
    "local held = redis.call('get', KEYS[1]) "
    "if held == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end "
    "if not held then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end "
    "return 0"
)


class JobLocks(Protocol):
    def acquire(self, workspace_id: int, job: str, *, lease: timedelta, now: datetime) -> str | None:
        """Take the lock for ``lease``; the token that holds it, or None when another holder has it."""
        ...

    def extend(self, workspace_id: int, job: str, token: str, *, lease: timedelta, now: datetime) -> bool:
        """Prolong the lease to ``lease`` from now; False when ``token`` no longer holds the lock."""
        ...

    def release(self, workspace_id: int, job: str, token: str) -> bool:
        """Free the lock if ``token`` holds it; False when it did not (its lease ran out and it was taken)."""
        ...


def _token() -> str:
    return uuid.uuid4().hex


class DatabaseJobLocks:
    """Locks in the ``ScheduledJob`` table (see the module docstring)."""

    name: Final = "database"

    def _row(self, workspace_id: int, job: str) -> int:
        found = ScheduledJob.objects.filter(workspace_id=workspace_id, job=job).values_list("pk", flat=True).first()
        if found is not None:
            return int(found)
        try:
            with transaction.atomic():
                return int(ScheduledJob.objects.create(workspace_id=workspace_id, job=job).pk)
        except IntegrityError:
            # Another worker inserted it first: the constraint kept it to one row.
            return int(ScheduledJob.objects.values_list("pk", flat=True).get(workspace_id=workspace_id, job=job))

    def acquire(self, workspace_id: int, job: str, *, lease: timedelta, now: datetime) -> str | None:
        pk = self._row(workspace_id, job)
        token = _token()
        free = Q(lock_token="") | Q(lock_expires_at__isnull=True) | Q(lock_expires_at__lte=now)
        won = ScheduledJob.objects.filter(free, pk=pk).update(lock_token=token, lock_expires_at=now + lease)
        return token if won else None

    def extend(self, workspace_id: int, job: str, token: str, *, lease: timedelta, now: datetime) -> bool:
        held = ScheduledJob.objects.filter(workspace_id=workspace_id, job=job, lock_token=token)
        return bool(held.update(lock_expires_at=now + lease))

    def release(self, workspace_id: int, job: str, token: str) -> bool:
        held = ScheduledJob.objects.filter(workspace_id=workspace_id, job=job, lock_token=token)
        return bool(held.update(lock_token="", lock_expires_at=None))


class RedisJobLocks:
    """Locks as Redis keys (see the module docstring)."""

    name: Final = "redis"

    def __init__(self, url: str, *, prefix: str = KEY_PREFIX, client: Any = None) -> None:
        self.prefix = prefix
        self._client: Any = client or redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)
        self._release = self._client.register_script(_RELEASE)
        self._extend = self._client.register_script(_EXTEND)

    def key(self, workspace_id: int, job: str) -> str:
        return f"{self.prefix}:{workspace_id}:{job}"

    @staticmethod
    def _ms(lease: timedelta) -> int:
        return max(1, int(lease.total_seconds() * 1000))

    def acquire(self, workspace_id: int, job: str, *, lease: timedelta, now: datetime) -> str | None:
        token = _token()
        try:
            won = self._client.set(self.key(workspace_id, job), token, nx=True, px=self._ms(lease))
        except redis.RedisError as exc:
            log.warning("lock %s not taken, Redis is unreachable: %s", self.key(workspace_id, job), exc)
            return None
        return token if won else None

    def extend(self, workspace_id: int, job: str, token: str, *, lease: timedelta, now: datetime) -> bool:
        try:
            return bool(self._extend(keys=[self.key(workspace_id, job)], args=[token, self._ms(lease)]))
        except redis.RedisError as exc:
            log.warning("lock %s not prolonged, Redis is unreachable: %s", self.key(workspace_id, job), exc)
            return False

    def release(self, workspace_id: int, job: str, token: str) -> bool:
        try:
            return bool(self._release(keys=[self.key(workspace_id, job)], args=[token]))
        except redis.RedisError as exc:
            # Its lease frees it (or a restarted Redis already forgot it).
            log.warning("lock %s not released, Redis is unreachable: %s", self.key(workspace_id, job), exc)
            return False

    def close(self) -> None:
        self._client.close()


def job_locks() -> JobLocks:
    """Redis locks when REDIS_URL is set (workers on several machines share them; keys under
    SCHEDULER_LOCK_PREFIX, so two sites may share one Redis), else database locks."""
    url = str(getattr(settings, "REDIS_URL", "") or "")
    if not url:
        return DatabaseJobLocks()
    return RedisJobLocks(url, prefix=str(getattr(settings, "SCHEDULER_LOCK_PREFIX", "") or KEY_PREFIX))
