"""Two real `manage.py run_workers` processes over one SQLite file, locking through the real redis-server
that pytest starts (tests/services.py): looking every second for a few seconds, between them they work every
due scheduled job of every workspace exactly once, and what the jobs count is counted once."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parents[2]
REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6390/0")
SETUP = """
import uuid
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from memories import services
from memories.inputs import MemoryInput
from memories.models import RetrievalEvent
call_command("migrate", verbosity=0)
user = get_user_model().objects.create_user("scheduler-test")
now = timezone.now()
for slug, hours in (("alpha", 24), ("beta", 0)):
    ws = services.workspace_create(owner=user, slug=slug, name=slug)
    ws.evolution_settings = {"cycle_every_hours": hours, "dream_every_hours": hours}
    ws.save()
    made = services.memories_create(workspace=ws, actor=user, items=[
        MemoryInput(content=f"{slug} episode {i} about deploys", memory_type="episodic") for i in range(6)])
    for k in range(5):
        result_set = uuid.uuid4()
        RetrievalEvent.objects.bulk_create([
            RetrievalEvent(workspace=ws, memory=m, result_set=result_set, rank=rank, source="search",
                           created_at=now - timedelta(hours=k + 1))
            for rank, m in enumerate(made[:3], start=1)])
print("ready")
"""


@pytest.fixture
def site(tmp_path: Path, redis_server: object) -> Iterator[dict[str, str]]:
    prefix = f"test-sched-{uuid.uuid4().hex[:12]}"
    env = {k: v for k, v in os.environ.items() if k not in ("NEO4J_URI", "DATABASE_URL")}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'scheduler.sqlite3'}",
        DJANGO_SETTINGS_MODULE="smartmemory_site.settings",
        REDIS_URL=REDIS_URL,
        SCHEDULER_LOCK_PREFIX=prefix,
        SCHEDULER_CHECK_SECONDS="1",
        EVOLUTION_WORKER="external",
        PYTHONUNBUFFERED="1",
    )
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SETUP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0 and "ready" in done.stdout, done.stderr[-3000:]
    yield env
    client = redis.Redis.from_url(REDIS_URL)
    for key in [*client.scan_iter(f"{prefix}:*"), *client.scan_iter(f"{prefix}-stream*")]:
        client.delete(key)
    client.close()


def _rows(env: dict[str, str], sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(env["DATABASE_URL"].removeprefix("sqlite:///"), timeout=30) as db:
        return list(db.execute(sql).fetchall())


def test_two_workers_work_each_due_scheduled_job_exactly_once(site: dict[str, str], tmp_path: Path) -> None:
    stream = f"{site['SCHEDULER_LOCK_PREFIX']}-stream"
    logs = [tmp_path / f"worker-{k}.log" for k in range(2)]
    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "run_workers", "--poll", "0.2", "--stream", stream],
            cwd=ROOT,
            env=site,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        for log in logs
    ]
    try:
        deadline = time.monotonic() + 60
        # The logs exist from the start (opened above); each worker names the scheduled jobs once it runs.
        while not all("scheduled jobs" in log.read_text(errors="replace") for log in logs):
            assert time.monotonic() < deadline, [log.read_text(errors="replace") for log in logs]
            time.sleep(0.1)
        # Both look several times; the cycle one of them queued is worked by one of them.
        time.sleep(2.5)
        while _rows(site, "SELECT COUNT(*) FROM evolution_evolutionrun WHERE scheduled AND status != 'completed'")[0][
            0
        ]:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(timeout=60)
    output = "\n".join(log.read_text(errors="replace") for log in logs)
    assert all(w.returncode == 0 for w in workers), output[-3000:]
    jobs = _rows(
        site,
        "SELECT w.slug, j.job, j.runs, j.last_status FROM evolution_scheduledjob j "
        "JOIN memories_workspace w ON w.id = j.workspace_id ORDER BY w.slug, j.job",
    )
    assert jobs == [
        ("alpha", "cycle", 1, "ok"),
        ("alpha", "decay", 1, "ok"),
        ("alpha", "dream", 1, "ok"),
        ("alpha", "retrieval", 1, "ok"),
        ("beta", "decay", 1, "ok"),
        ("beta", "retrieval", 1, "ok"),
    ], output[-3000:]
    assert _rows(site, "SELECT COUNT(*) FROM evolution_evolutionrun WHERE scheduled") == [(1,)]
    assert _rows(site, "SELECT COUNT(*) FROM evolution_dreamreport") == [(1,)]
    # Five result sets of the same three memories: three pairs, each counted five times, once.
    counts = _rows(site, "SELECT co_retrieval_count FROM memories_edge WHERE edge_type = 'CO_RETRIEVED'")
    assert sorted(counts) == [(5,)] * 6, output[-3000:]
