"""RetryLog: an outage is one line when it starts, a reminder a minute while it lasts, a line when it ends;
any other failure keeps its traceback every time."""

from __future__ import annotations

import logging
import sqlite3

import pytest
import redis

from core.outages import RetryLog, is_outage


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    "exc",
    [
        redis.ConnectionError("Error 111 connecting to 127.0.0.1:6390. Connection refused."),
        redis.TimeoutError("Timeout reading from socket"),
        redis.BusyLoadingError("Redis is loading the dataset in memory"),
        sqlite3.OperationalError("database is locked"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("timed out"),
    ],
)
def test_services_that_are_down_or_busy_are_outages(exc: BaseException) -> None:
    assert is_outage(exc)


@pytest.mark.parametrize(
    "exc", [ValueError("bad"), KeyError("x"), redis.ResponseError("WRONGTYPE"), ZeroDivisionError()]
)
def test_errors_of_the_work_itself_are_not(exc: BaseException) -> None:
    assert not is_outage(exc)


def test_an_outage_is_one_warning_a_reminder_a_minute_and_a_line_when_it_ends(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    retry = RetryLog(logging.getLogger("test.outages"), "signal flush", clock=clock)
    caplog.set_level(logging.INFO, logger="test.outages")
    down = redis.ConnectionError("Connection refused")
    for second in range(0, 125, 5):  # every 5 s for two minutes
        clock.now = float(second)
        retry.failed(down, "retrying in 5 s")
    assert retry.down
    clock.now = 130.0
    retry.succeeded()
    retry.succeeded()  # nothing more: the outage was already reported over
    lines = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert lines == [
        ("WARNING", "signal flush failed: ConnectionError: Connection refused; retrying in 5 s", None),
        ("WARNING", "signal flush still failing after 60 s (13 attempts): ConnectionError: Connection refused", None),
        ("WARNING", "signal flush still failing after 120 s (25 attempts): ConnectionError: Connection refused", None),
        ("INFO", "signal flush works again after 130 s (25 failed attempts)", None),
    ]
    assert not retry.down


def test_a_failure_of_the_work_keeps_its_traceback_every_time(caplog: pytest.LogCaptureFixture) -> None:
    retry = RetryLog(logging.getLogger("test.outages"), "signal flush", clock=Clock())
    caplog.set_level(logging.INFO, logger="test.outages")
    for _ in range(2):
        try:
            raise ValueError("a malformed entry")
        except ValueError as exc:
            retry.failed(exc)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [("ERROR", "signal flush failed")] * 2
    assert all(r.exc_info is not None and r.exc_info[0] is ValueError for r in caplog.records)
    assert not retry.down
