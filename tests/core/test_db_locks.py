"""Which database errors are "busy, try again": SQLite's lock messages and PostgreSQL's lock, serialization
and deadlock SQLSTATEs, whatever else is a fault."""

from __future__ import annotations

import sqlite3

import pytest
from django.db import IntegrityError, OperationalError

from core.db_locks import BUSY_SQLSTATES, is_database_busy


class _DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"SQLSTATE {sqlstate}")
        self.sqlstate = sqlstate


def _wrapped(cause: BaseException, message: str) -> OperationalError:
    """As Django raises driver errors: its own class, the driver's error as the cause."""
    error = OperationalError(message)
    error.__cause__ = cause
    return error


@pytest.mark.parametrize("message", ["database is locked", "database table is locked", "Database is busy"])
def test_sqlite_lock_messages_are_busy(message: str) -> None:
    assert is_database_busy(_wrapped(sqlite3.OperationalError(message), message))


@pytest.mark.parametrize("sqlstate", sorted(BUSY_SQLSTATES))
def test_postgresql_lock_timeout_serialization_failure_and_deadlock_are_busy(sqlstate: str) -> None:
    assert is_database_busy(_wrapped(_DriverError(sqlstate), "canceling statement due to lock timeout"))


def test_other_operational_errors_and_other_errors_are_not_busy() -> None:
    assert not is_database_busy(_wrapped(sqlite3.OperationalError("no such table: x"), "no such table: x"))
    # A PostgreSQL error that merely mentions a lock in its text is judged by its SQLSTATE.
    assert not is_database_busy(_wrapped(_DriverError("57014"), "canceling statement: database is locked?"))
    assert not is_database_busy(IntegrityError("database is locked"))
    assert not is_database_busy(RuntimeError("database is locked"))
