"""Real `manage.py run_workers` processes over one SQLite file: a worker killed with SIGKILL in the middle
of the applied cycle leaves its run to another worker, which finishes it without applying any evolver
twice, and every queued run is worked exactly once."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = """
import json
from django.contrib.auth import get_user_model
from evolution import jobs
from memories import services
from memories.inputs import MemoryInput
user = get_user_model().objects.create_user("worker-test")
ws = services.workspace_create(owner=user, slug="w", name="W")
services.memories_create(workspace=ws, actor=user, items=[
    MemoryInput(content=f"episode {i} about deploy {i % 97} and rollback {i % 13}", memory_type="episodic")
    for i in range(4000)])
previews = [str(jobs.run_enqueue(workspace=ws, actor=user, evolvers=["ExponentialDecay"], dry_run=True).id)
            for _ in range(6)]
applied = str(jobs.run_enqueue(workspace=ws, actor=user, evolvers=None, dry_run=False).id)
print(json.dumps({"previews": previews, "applied": applied}))
"""
REPORT = """
import json
from django.db.models import Count
from evolution.models import EvolutionRun
from history.models import EvolutionRecord
runs = {}
for run in EvolutionRun.objects.all():
    counts = dict(EvolutionRecord.objects.filter(run=run).values_list("evolver").annotate(n=Count("id")))
    runs[str(run.id)] = {"status": run.status, "worker": run.worker, "entries": run.summary.get("evolvers", []),
                         "records": counts}
print(json.dumps(runs))
"""


def _manage(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def _python(env: dict[str, str], code: str) -> Any:
    return json.loads(_manage(env, "shell", "-c", code).strip().splitlines()[-1])


@pytest.fixture
def site(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "NEO4J_URI", "DATABASE_URL")}
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'workers.sqlite3'}",
        DJANGO_SETTINGS_MODULE="smartmemory_site.settings",
        EVOLUTION_WORKER="external",
        EVOLUTION_RUN_LEASE_SECONDS="2",
        PYTHONUNBUFFERED="1",
    )
    _manage(env, "migrate", "--no-input", "-v", "0")
    return env


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)


def _start(site: dict[str, str], tmp_path: Path, name: str) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"{name}.log").open("wb")
    return subprocess.Popen(
        [sys.executable, "manage.py", "run_workers", "--poll", "0.1"],
        cwd=ROOT,
        env=site,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _state(site: dict[str, str]) -> dict[str, Any]:
    result: dict[str, Any] = _python(site, REPORT)
    return result


def _run_row(site: dict[str, str], run_id: str) -> tuple[str, str]:
    """(status, worker) of a run, read straight from the database file (a poll every few milliseconds)."""
    path = site["DATABASE_URL"].removeprefix("sqlite:///")
    with sqlite3.connect(path, timeout=30) as db:
        row = db.execute(
            "SELECT status, worker FROM evolution_evolutionrun WHERE id = ?", [run_id.replace("-", "")]
        ).fetchone()
    return (str(row[0]), str(row[1])) if row else ("missing", "")


def test_a_worker_killed_mid_cycle_leaves_its_run_to_another_that_applies_nothing_twice(
    site: dict[str, str], workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    ids = _python(site, SETUP)
    first = _start(site, tmp_path, "first")
    workers.append(first)
    # Kill the first worker (SIGKILL: no clean-up, its open transaction rolls back) once it works the
    # applied cycle and has committed at least one evolver of it.
    deadline = time.monotonic() + 300
    while True:
        assert time.monotonic() < deadline, "the first worker never reached the applied cycle"
        status, worker = _run_row(site, ids["applied"])
        if status == "running" and f":{first.pid}:" in worker:
            break
        assert status in ("queued", "running"), status
        time.sleep(0.005)
    time.sleep(0.3)
    first.kill()
    first.wait(timeout=30)
    killed_at = _state(site)[ids["applied"]]
    second = _start(site, tmp_path, "second")
    workers.append(second)
    while True:
        assert time.monotonic() < deadline, "the second worker did not finish the queue"
        if all(_run_row(site, r)[0] not in ("queued", "running") for r in [*ids["previews"], ids["applied"]]):
            break
        time.sleep(0.2)
    state = _state(site)
    applied = state[ids["applied"]]
    if killed_at["status"] == "running":
        # Taken over after the lease: the second worker finished it.
        assert f":{second.pid}:" in applied["worker"]
    assert applied["status"] == "completed"
    names = [entry["name"] for entry in applied["entries"]]
    assert names and len(names) == len(set(names))
    # Each evolver's records are one pass: the count its summary entry reports, never twice that.
    for entry in applied["entries"]:
        assert applied["records"].get(entry["name"], 0) == entry["records"], entry["name"]
    # What the first worker had committed stays, and was not run again.
    for entry in killed_at["entries"]:
        assert entry in applied["entries"]
    for preview in ids["previews"]:
        assert state[preview]["status"] == "completed" and state[preview]["worker"]
        assert [entry["name"] for entry in state[preview]["entries"]] == ["ExponentialDecay"]
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=60) == 0
