"""Session pins: memories a caller asked to keep on top of every working context of one session.

Rules: session ids belong to a workspace. The same id in two workspaces names two separate sessions,
so a reused or guessed id cannot bridge tenants, reveal that another workspace uses it, or be claimed
ahead of it. The session and its pins live ``SESSION_PIN_TTL_SECONDS`` (24 h) from the last pin: every
pin refreshes it.

Two stores behind one protocol: ``DbPinStore`` (PinnedSession / SessionPin rows, one session per
workspace and id; expired sessions are deleted lazily, on the next pin) and ``RedisPinStore`` (a hash
per workspace and session with the TTL), chosen by settings.REDIS_URL. Callers check that the
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

from core.sql import db_datetime
from memories.models import Workspace
from surfacing.models import PinnedSession, SessionPin

__all__ = [
    "DbPinStore",
    "Pin",
    "PinStore",
    "RedisPinStore",
    "pin_store",
    "set_pin_store",
]


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


def _ttl() -> timedelta:
    return timedelta(seconds=int(settings.SESSION_PIN_TTL_SECONDS))


class DbPinStore:
    """Pins as database rows; one PinnedSession per workspace and session id, its pins cascade with it."""

    def pin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, weight: float, now: datetime) -> Pin:
        expires_at = now + _ttl()
        with transaction.atomic():
            # Lazy cleanup: the table only holds live sessions plus those expired since the last pin.
            PinnedSession.objects.filter(expires_at__lte=now).delete()
            own = PinnedSession.objects.select_for_update().filter(workspace=workspace, session_id=session_id)
            session = own.first()
            if session is None:
                try:
                    with transaction.atomic():
                        session = PinnedSession.objects.create(
                            session_id=session_id, workspace=workspace, expires_at=expires_at
                        )
                except IntegrityError:
                    # Another request of this workspace made the session between our read and insert.
                    session = own.get()
            if session.expires_at != expires_at:
                session.expires_at = expires_at
                session.save(update_fields=["expires_at"])
            SessionPin.objects.update_or_create(
                session=session, memory_id=memory_id, defaults={"weight": weight, "created_at": now}
            )
        return Pin(memory_id=memory_id, weight=weight, expires_at=expires_at)

    def unpin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, now: datetime) -> bool:
        with transaction.atomic():
            session = PinnedSession.objects.filter(
                workspace=workspace, session_id=session_id, expires_at__gt=now
            ).first()
            if session is None:
                return False
            deleted, _ = SessionPin.objects.filter(session=session, memory_id=memory_id).delete()
        return deleted > 0

    def pins(self, *, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]:
        """One query: pins of the workspace's live session of that id (else nothing)."""
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


class RedisPinStore:
    """Pins in Redis: ``<prefix><workspace id>:<session>`` maps memory id -> weight and carries the TTL."""

    def __init__(self, url: str, *, prefix: str = "smartmemory:pins:") -> None:
        import redis

        self._client: Any = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        self._prefix = prefix

    def _key(self, workspace: Workspace, session_id: str) -> str:
        return f"{self._prefix}{workspace.pk}:{session_id}"

    def pin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, weight: float, now: datetime) -> Pin:
        ttl = int(settings.SESSION_PIN_TTL_SECONDS)
        key = self._key(workspace, session_id)
        pipe = self._client.pipeline(transaction=True)
        pipe.hset(key, str(memory_id), repr(weight))
        pipe.expire(key, ttl)
        pipe.execute()
        return Pin(memory_id=memory_id, weight=weight, expires_at=now + timedelta(seconds=ttl))

    def unpin(self, *, workspace: Workspace, session_id: str, memory_id: uuid.UUID, now: datetime) -> bool:
        return int(self._client.hdel(self._key(workspace, session_id), str(memory_id))) > 0

    def pins(self, *, workspace: Workspace, session_id: str, now: datetime) -> dict[uuid.UUID, float]:
        if not session_id:
            return {}
        pins: dict[uuid.UUID, float] = {}
        for key, value in self._client.hgetall(self._key(workspace, session_id)).items():
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
