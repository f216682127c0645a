"""Session pins: memories a caller asked to keep on top of every working context of one session.

Rules: a session is bound to the first workspace that pins in it; pinning (or unpinning)
through another workspace is a Conflict (``session_pin_workspace_conflict``), and reading through a
session bound elsewhere returns no pins, so a reused or guessed session id cannot bridge tenants. The
session and its pins live ``SESSION_PIN_TTL_SECONDS`` (24 h) from the last pin: every pin refreshes it.

Two stores behind one protocol: ``DbPinStore`` (PinnedSession / SessionPin rows; expired sessions are
deleted lazily, on the next pin) and ``RedisPinStore`` (a hash per session plus a binding key, both
with the TTL, updated atomically by Lua scripts), chosen by settings.REDIS_URL. Callers check that the
memory belongs to the workspace before pinning; the stores only keep ids.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from core.errors import Conflict
from memories.bulk import db_datetime
from memories.models import Workspace
from surfacing.models import PinnedSession, SessionPin

__all__ = [
    "PIN_CONFLICT_CODE",
    "DbPinStore",
    "Pin",
    "PinStore",
    "RedisPinStore",
    "pin_store",
    "set_pin_store",
]

PIN_CONFLICT_CODE = "session_pin_workspace_conflict"


@dataclass(frozen=True)
class Pin:
    memory_id: uuid.UUID
    weight: float
    expires_at: datetime


class PinStore(Protocol):
    def pin(
        self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, weight: float, now: datetime
    ) -> Pin: ...

    def unpin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, now: datetime) -> bool: ...

    def pins(self, *, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]: ...

    def ping(self) -> None: ...


def _conflict(session_id: str, workspace: Workspace) -> Conflict:
    # The message names neither the other workspace nor its pins.
    return Conflict(
        f"session {session_id!r} is bound to another workspace; use a new session id for workspace {workspace.slug!r}",
        code=PIN_CONFLICT_CODE,
        field="session_id",
    )


def _ttl() -> timedelta:
    return timedelta(seconds=int(settings.SESSION_PIN_TTL_SECONDS))


class DbPinStore:
    """Pins as database rows; one PinnedSession per session id (unique), its pins cascade with it."""

    def pin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, weight: float, now: datetime) -> Pin:
        expires_at = now + _ttl()
        with transaction.atomic():
            # Lazy cleanup: the table only holds live sessions plus those expired since the last pin.
            PinnedSession.objects.filter(expires_at__lte=now).delete()
            session = PinnedSession.objects.select_for_update().filter(session_id=session_id).first()
            if session is None:
                try:
                    with transaction.atomic():
                        session = PinnedSession.objects.create(
                            session_id=session_id, workspace=workspace, expires_at=expires_at
                        )
                except IntegrityError:
                    # Another request bound the session between our read and insert.
                    session = PinnedSession.objects.select_for_update().get(session_id=session_id)
            if session.workspace_id != workspace.pk:
                raise _conflict(session_id, workspace)
            if session.expires_at != expires_at:
                session.expires_at = expires_at
                session.save(update_fields=["expires_at"])
            SessionPin.objects.update_or_create(
                session=session, memory_id=memory_id, defaults={"weight": weight, "created_at": now}
            )
        return Pin(memory_id=memory_id, weight=weight, expires_at=expires_at)

    def unpin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, now: datetime) -> bool:
        with transaction.atomic():
            session = PinnedSession.objects.filter(session_id=session_id, expires_at__gt=now).first()
            if session is None:
                return False
            if session.workspace_id != workspace.pk:
                raise _conflict(session_id, workspace)
            deleted, _ = SessionPin.objects.filter(session=session, memory_id=memory_id).delete()
        return deleted > 0

    def pins(self, *, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]:
        """One query: pins of a live session bound to this workspace (else nothing)."""
        if not session_id:
            return {}
        # Plain SQL: this runs on every router-mode context call, and building the ORM query costs more
        # than running it.
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT p.memory_id, p.weight FROM {SessionPin._meta.db_table} p "
                f"JOIN {PinnedSession._meta.db_table} s ON s.id = p.session_id "
                "WHERE s.session_id = %s AND s.workspace_id = %s AND s.expires_at > %s",
                [session_id, workspace.pk, db_datetime(now)],
            )
            rows = cursor.fetchall()
        return {(m if isinstance(m, uuid.UUID) else uuid.UUID(m)): float(w) for m, w in rows}

    def ping(self) -> None:
        PinnedSession.objects.exists()


# Binding key and pin hash are refreshed together, so they always expire together. Without a binding
# (never pinned, or expired) any leftover hash is dropped before the new binding is written.
_PIN_SCRIPT = """
local bound = redis.call('GET', KEYS[1])
if bound and bound ~= ARGV[1] then return 0 end
if not bound then redis.call('DEL', KEYS[2]) end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""
_UNPIN_SCRIPT = """
local bound = redis.call('GET', KEYS[1])
if not bound then return -1 end
if bound ~= ARGV[1] then return 0 end
return redis.call('HDEL', KEYS[2], ARGV[2]) + 1
"""


class RedisPinStore:
    """Pins in Redis: ``<prefix>bind:<session>`` holds the workspace id, ``<prefix>pins:<session>`` maps
    memory id -> weight; both carry the TTL."""

    def __init__(self, url: str, *, prefix: str = "smartmemory:session:") -> None:
        import redis

        self._client: Any = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        self._prefix = prefix
        self._pin = self._client.register_script(_PIN_SCRIPT)
        self._unpin = self._client.register_script(_UNPIN_SCRIPT)

    def _keys(self, session_id: str) -> list[str]:
        return [f"{self._prefix}bind:{session_id}", f"{self._prefix}pins:{session_id}"]

    def pin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, weight: float, now: datetime) -> Pin:
        ttl = int(settings.SESSION_PIN_TTL_SECONDS)
        ok = self._pin(keys=self._keys(session_id), args=[str(workspace.pk), ttl, str(memory_id), repr(weight)])
        if int(ok) == 0:
            raise _conflict(session_id, workspace)
        return Pin(memory_id=memory_id, weight=weight, expires_at=now + timedelta(seconds=ttl))

    def unpin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, now: datetime) -> bool:
        result = int(self._unpin(keys=self._keys(session_id), args=[str(workspace.pk), str(memory_id)]))
        if result == 0:
            raise _conflict(session_id, workspace)
        return result == 2

    def pins(self, *, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]:
        if not session_id:
            return {}
        bind_key, pins_key = self._keys(session_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.get(bind_key)
        pipe.hgetall(pins_key)
        bound, raw = pipe.execute()
        if bound is None or bound.decode() != str(workspace.pk):
            return {}
        pins: dict[uuid.UUID, float] = {}
        for key, value in raw.items():
            try:
                pins[uuid.UUID(key.decode())] = float(value)
            except ValueError:
                continue  # a foreign or corrupt field must not break every context call
        return pins

    def ping(self) -> None:
        self._client.ping()

    def close(self) -> None:
        self._client.close()


_store: PinStore | None = None
_store_lock = threading.Lock()


def pin_store() -> PinStore:
    """Redis-backed when settings.REDIS_URL is set, else database rows."""
    global _store
    if _store is None:
        with _store_lock:
            if _store is None:
                _store = RedisPinStore(settings.REDIS_URL) if settings.REDIS_URL else DbPinStore()
    return _store


def set_pin_store(store: PinStore | None) -> None:
    """Replace the process's store (tests); None makes the next call choose again from settings."""
    global _store
    with _store_lock:
        _store = store
