"""Which database errors mean "busy, try again" rather than a fault, and what a request answers then.

A connection waits for a lock at most ``DATABASE_LOCK_TIMEOUT_SECONDS`` (SQLite's busy timeout,
PostgreSQL's lock_timeout). When the wait runs out, SQLite raises OperationalError "database is locked"
(or "database table is locked", "database is busy"); PostgreSQL raises lock_not_available (SQLSTATE 55P03),
and a transaction it had to abort for another's sake raises serialization_failure (40001) or
deadlock_detected (40P01). None of them is the request's fault or the server's: the same request succeeds
a moment later. So the API answers them with 503 ``database_busy`` and ``Retry-After`` (memories.api_errors),
and pages with a short 503 page (smartmemory_site.db_busy), never with a 500.
"""

from __future__ import annotations

from typing import Any, Final

from django.conf import settings
from django.db import OperationalError
from django.db.backends.base.base import BaseDatabaseWrapper

from core.sql import set_session_lock_timeout

# Seconds a client is told to wait: an evolution run holds the database for at most a transaction of about
# EVOLUTION_TRANSACTION_MS (100 ms), so a second is ample for the usual cause.
RETRY_AFTER_SECONDS: Final = 1
BUSY_CODE: Final = "database_busy"
BUSY_DETAIL: Final = (
    "the database is busy with other writes and did not get free in time; nothing was changed, "
    f"try again in {RETRY_AFTER_SECONDS} s"
)
# lock_not_available, serialization_failure, deadlock_detected.
BUSY_SQLSTATES: Final = frozenset({"55P03", "40001", "40P01"})
_SQLITE_BUSY_TEXTS: Final = ("database is locked", "database table is locked", "database is busy")


def is_database_busy(exc: BaseException) -> bool:
    """Whether `exc` (or the driver error it wraps) is a lock wait that ran out or a transaction the
    database aborted to resolve a conflict with another one."""
    if not isinstance(exc, OperationalError):
        return False
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if sqlstate is not None:
        return str(sqlstate) in BUSY_SQLSTATES
    text = str(exc).lower()
    return any(marker in text for marker in _SQLITE_BUSY_TEXTS)


# Seconds a connection waits for a lock when DATABASE_LOCK_TIMEOUT_SECONDS is not set.
DEFAULT_LOCK_TIMEOUT_SECONDS: Final = 5.0


def lock_timeout_on_connect(sender: Any, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    """connection_created: a new PostgreSQL connection waits DATABASE_LOCK_TIMEOUT_SECONDS for a lock (its
    lock_timeout; SQLite's busy timeout comes with the connection's OPTIONS). A session setting, so it holds
    until the connection closes or a caller sets another (an evolution run's longer wait)."""
    seconds = float(getattr(settings, "DATABASE_LOCK_TIMEOUT_SECONDS", DEFAULT_LOCK_TIMEOUT_SECONDS))
    set_session_lock_timeout(connection, max(1, round(seconds * 1000)))
