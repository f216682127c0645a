"""Logging for loops that retry: a service that is down is news once, not a traceback every few seconds.

A worker's flush loop retries every 5 s and a publisher on every request, so while Redis restarts or the
database is locked, ``log.exception`` in those loops wrote the same traceback hundreds of times and buried
whatever else went wrong. ``RetryLog`` tells an outage (the connection refused, reset or timed out, the
database busy) from a failure: an outage is one warning line without a traceback when it starts, a reminder
with the count every ``remind_every`` seconds while it lasts and an info line when the loop succeeds again;
any other exception is logged with its traceback every time, as before.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["RetryLog", "is_outage"]

# Exception class names (by module prefix) that mean "the service is not reachable right now"; matched by
# name so this module needs neither redis nor a database driver.
_OUTAGE_CLASSES = {
    "redis.exceptions": {"ConnectionError", "TimeoutError", "BusyLoadingError", "TryAgainError"},
    "django.db.utils": {"OperationalError", "InterfaceError"},
    "sqlite3": {"OperationalError"},
    "psycopg.errors": {"OperationalError", "ConnectionTimeout", "AdminShutdown", "CannotConnectNow"},
    "psycopg": {"OperationalError"},
    "neo4j.exceptions": {"ServiceUnavailable", "SessionExpired"},
}


def is_outage(exc: BaseException) -> bool:
    """Whether `exc` says a service is unreachable or busy (retrying later is the cure), not that the work
    itself is wrong."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    for cls in type(exc).__mro__:
        names = _OUTAGE_CLASSES.get(cls.__module__)
        if names is not None and cls.__name__ in names:
            return True
    return False


class RetryLog:
    """What one retrying loop logs; `what` names the work in every line ("signal flush")."""

    def __init__(
        self,
        log: logging.Logger,
        what: str,
        *,
        remind_every: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._what = what
        self._remind_every = remind_every
        self._clock = clock
        self._lock = threading.Lock()
        self._down_since: float | None = None
        self._failures = 0
        self._reminded_at = 0.0

    @property
    def down(self) -> bool:
        return self._down_since is not None

    def failed(self, exc: BaseException, retry: str = "") -> None:
        """Log a failed attempt (call it from the ``except`` block); `retry` says when the loop tries again."""
        then = f"; {retry}" if retry else ""
        if not is_outage(exc):
            self._log.error("%s failed%s", self._what, then, exc_info=exc)
            return
        now = self._clock()
        with self._lock:
            self._failures += 1
            first = self._down_since is None
            if first:
                self._down_since = self._reminded_at = now
            remind = not first and now - self._reminded_at >= self._remind_every
            if remind:
                self._reminded_at = now
            failures, since = self._failures, (now if self._down_since is None else self._down_since)
        if first:
            self._log.warning("%s failed: %s: %s%s", self._what, type(exc).__name__, exc, then)
        elif remind:
            self._log.warning(
                "%s still failing after %.0f s (%d attempts): %s: %s",
                self._what,
                now - since,
                failures,
                type(exc).__name__,
                exc,
            )

    def succeeded(self) -> None:
        """Log the end of an outage, if there was one (call it after each attempt that worked)."""
        if self._down_since is None:
            return
        with self._lock:
            since, failures = self._down_since, self._failures
            self._down_since, self._failures = None, 0
        if since is not None:
            seconds = self._clock() - since
            self._log.info("%s works again after %.0f s (%d failed attempts)", self._what, seconds, failures)
