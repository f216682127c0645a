"""A redis-server restarted under load, the way the tests run it (tests/services.py: apt's redis-server, no
persistence), started here on a port of this test so that stopping it disturbs no other test: it is killed
by its PID and started again on the same port.

- A real `manage.py run_workers` flushes boosts published at a steady rate by this process (as a web
  process publishes them) through the restart: its loop does not stop, and the boosts lost are at most
  those that were queued in Redis and not yet acknowledged at the moment it died (its whole memory);
  what was published while it was down waits in the publisher and arrives afterwards. Its scheduler keeps
  working the retrieval job every second under Redis locks, before and after.
- A job lock held across the restart is its holder's again at the holder's next prolong, so a second
  worker cannot take the job it is still working.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from pytest_redis.executor import RedisExecutor

from evolution.locks import RedisJobLocks
from evolution.scheduler import Job, Scheduler
from memories.models import Workspace
from memories.signalbus import Boost
from memories.signalbus.redis import RedisSignalBus
from tests import services as servers

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.services


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RedisServer:
    """A redis-server of this test's own, run by its executor (tests/services.py)."""

    executor: RedisExecutor

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.executor.port}/0"

    def start(self) -> None:
        servers.start("redis", self.executor)

    def pid(self) -> int:
        assert self.executor.process is not None
        return self.executor.process.pid

    def kill(self) -> None:
        """SIGKILL by PID (nothing is saved: the server has no persistence); returns once it is gone."""
        self.executor.kill(sig=signal.SIGKILL)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with servers.running("redis", servers.redis(_free_port(), tmp_path)) as executor:
        yield RedisServer(executor)


SETUP = """
import json
from django.contrib.auth import get_user_model
from django.utils import timezone
from memories import services
from memories.inputs import MemoryInput
from memories.models import RetrievalEvent
import uuid
user = get_user_model().objects.create_user("restart-test")
ws = services.workspace_create(owner=user, slug="w", name="W")
made = services.memories_create(workspace=ws, actor=user, items=[
    MemoryInput(content=f"note {i} about deploys and rollbacks", memory_type="episodic") for i in range(200)])
RetrievalEvent.objects.bulk_create([
    RetrievalEvent(workspace=ws, memory=m, result_set=uuid.uuid4(), rank=1, source="search", created_at=timezone.now())
    for m in made[:5]])
print(json.dumps({"workspace": ws.pk, "ids": [m.id.hex for m in made]}))
"""


class Publisher:
    """Publishes `per_call` boosts every few milliseconds until stopped, as a web process would; counts
    what it handed to the bus. `paused()` holds it still between two calls."""

    def __init__(self, bus: RedisSignalBus, workspace: int, ids: list[str], per_call: int = 40) -> None:
        self.bus, self.workspace, self.ids, self.per_call = bus, workspace, ids, per_call
        self.published = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="publisher", daemon=True)

    def _run(self) -> None:
        k = 0
        while not self.stop.is_set():
            now = datetime.now(UTC)
            batch = [
                Boost(self.workspace, uuid.UUID(hex=self.ids[(k + j) % len(self.ids)]), 0.0001, now)
                for j in range(self.per_call)
            ]
            k += self.per_call
            with self.lock:
                self.bus.publish(batch)
                self.published += len(batch)
            # A steady rate (~8,000 boosts/s), not a synchronisation.
            self.stop.wait(0.005)


def _boosts_applied(db_path: Path) -> int:
    with sqlite3.connect(db_path, timeout=30) as db:
        return int(db.execute("SELECT COALESCE(SUM(activation_boost_count), 0) FROM memories_memory").fetchone()[0])


def _retrieval_runs(db_path: Path) -> tuple[int, str]:
    with sqlite3.connect(db_path, timeout=30) as db:
        row = db.execute("SELECT runs, last_status FROM evolution_scheduledjob WHERE job = 'retrieval'").fetchone()
    return (int(row[0]), str(row[1])) if row else (0, "")


def _pending(url: str, stream: str) -> int:
    """Signals published to `stream` and not yet acknowledged (the bus's counter key)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        raw: Any = client.get(f"{stream}:pending")
        return int(raw or 0)
    finally:
        client.close()


def _wait(condition: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_boosts_and_job_locks_go_on_across_a_redis_restart_losing_only_what_redis_held_unflushed(
    own_redis: RedisServer, tmp_path: Path
) -> None:
    db_path = tmp_path / "restart.sqlite3"
    stream = f"test-restart-{uuid.uuid4().hex[:8]}"
    env = {k: v for k, v in os.environ.items() if k not in ("NEO4J_URI", "DATABASE_URL", "REDIS_URL")}
    env.update(
        DATABASE_URL=f"sqlite:///{db_path}",
        DJANGO_SETTINGS_MODULE="smartmemory_site.settings",
        REDIS_URL=own_redis.url,
        EVOLUTION_WORKER="external",
        SCHEDULER_CHECK_SECONDS="1",
        RETRIEVAL_STATS_SECONDS="1",
        PYTHONUNBUFFERED="1",
    )
    for args in (["migrate", "--no-input", "-v", "0"], ["shell", "-c", SETUP]):
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
    made = json.loads(done.stdout.strip().splitlines()[-1])
    log_path = tmp_path / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "run_workers", "--interval", "1", "--stream", stream],
        cwd=ROOT,
        env=env,
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
    )
    bus = RedisSignalBus(own_redis.url, stream=stream, consumer="publisher")
    publisher = Publisher(bus, made["workspace"], made["ids"])
    publisher.thread.start()
    try:
        _wait(lambda: _boosts_applied(db_path) > 2000, "the worker applied no boosts")
        _wait(lambda: _retrieval_runs(db_path)[0] >= 2, "the retrieval job did not run under Redis locks")
        with publisher.lock:
            # Everything Redis holds unacknowledged now is all a kill can lose (nothing is published meanwhile).
            queued = _pending(own_redis.url, stream)
            own_redis.kill()
            at_kill = publisher.published
        down_runs = _retrieval_runs(db_path)[0]
        # Publishing goes on against a dead server (the publisher keeps the boosts) while the worker's
        # flushes fail and its loop retries.
        _wait(lambda: publisher.published > at_kill + 2000, "the publisher stopped while Redis was down")
        _wait(lambda: "signal flush failed" in log_path.read_text(errors="replace"), "the worker never saw it down")
        assert worker.poll() is None, log_path.read_text(errors="replace")[-3000:]
        own_redis.start()
        restarted_at = _boosts_applied(db_path)
        _wait(lambda: _boosts_applied(db_path) > restarted_at + 2000, "no boost was applied after the restart")
        _wait(lambda: _retrieval_runs(db_path)[0] >= down_runs + 2, "the retrieval job stopped after the restart")
        # The outage was news once (no traceback a flush), and its end is reported.
        _wait(lambda: "signal flush works again" in log_path.read_text(errors="replace"), "no line said it recovered")
    finally:
        publisher.stop.set()
        publisher.thread.join(timeout=30)
    # What the publisher still holds (published while Redis was down) goes with its next publish.
    bus.publish([])
    _wait(lambda: _pending(own_redis.url, stream) == 0, "the stream was not drained")
    bus.close()
    assert worker.poll() is None, log_path.read_text(errors="replace")[-3000:]
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=60) == 0, log_path.read_text(errors="replace")[-3000:]
    applied = _boosts_applied(db_path)
    lost = publisher.published - applied
    print(f"published {publisher.published}, applied {applied}, lost {lost}, queued in Redis at the kill {queued}")
    assert 0 <= lost <= queued, (publisher.published, applied, queued)
    runs, status = _retrieval_runs(db_path)
    assert status == "ok" and runs >= down_runs + 2


@pytest.mark.django_db(transaction=True)
def test_a_job_lock_held_across_a_redis_restart_is_its_holders_again_before_another_worker_can_take_it(
    own_redis: RedisServer, workspace: Workspace
) -> None:
    prefix = f"test-restart-lock-{uuid.uuid4().hex[:8]}"
    locks = RedisJobLocks(own_redis.url, prefix=prefix)
    other = RedisJobLocks(own_redis.url, prefix=prefix)
    key = locks.key(workspace.pk, "long")
    client = redis.Redis.from_url(own_redis.url, decode_responses=True)
    seen: dict[str, Any] = {}

    def long_job(ws: Workspace, now: datetime) -> dict[str, Any]:
        token, pid = client.get(key), own_redis.pid()
        own_redis.kill()
        own_redis.start()
        assert own_redis.pid() != pid  # a new server, which knows no lock
        # The holder's lease keeper prolongs every 0.5 s: it finds the key gone and sets it again.
        _wait(lambda: client.get(key) is not None, "the holder did not get its lock back", timeout=10)
        seen["token"], seen["after"] = token, client.get(key)
        seen["other"] = other.acquire(ws.pk, "long", lease=timedelta(seconds=30), now=now)
        return {}

    job = Job("long", lambda ws: timedelta(hours=1), long_job)
    holder = Scheduler(worker="w1", locks=locks, jobs=[job], lease=timedelta(seconds=1.5))
    worked = holder.tick()
    assert [w.status for w in worked] == ["ok"]
    assert seen["token"] and seen["after"] == seen["token"]
    assert seen["other"] is None
    # Released by its holder at the end; the other worker finds it done.
    assert client.get(key) is None
    assert Scheduler(worker="w2", locks=other, jobs=[job]).tick() == []
    client.close()
    locks.close()
    other.close()
