"""An evolution run holds the database only briefly: a chunked evolver plans outside any transaction and
commits its writes in short transactions, each with the records that describe it; a run interrupted between
two of them is consistent, resumes without applying anything twice and reverts exactly; a row another
request changed meanwhile is left alone; and while an evolver writes, another workspace's requests get
the database between its transactions."""

from __future__ import annotations

import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, connections, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from evolution import jobs, runner, selectors, services, writes
from evolution.evolvers import base
from evolution.models import EvolutionRun, RunStatus
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.inputs import MemoryInput
from memories.models import Memory, MemoryScore, Workspace

STABILITY_DAYS = 30.0  # ExponentialDecay's default stability


class WorkerKilled(BaseException):
    """The worker process dies: no `except Exception` of the runner sees it and its open transaction is lost."""


def _episodes(kit: Any, n: int, ws: Workspace | None = None) -> list[Memory]:
    """n episodic memories aged 20..49 days before NOW, so each decays to its own retention."""
    return [kit.mem(f"episode {k}", memory_type="episodic", age_days=20 + k % 30, ws=ws) for k in range(n)]


def _retention_by_content(ws: Workspace) -> dict[str, float]:
    return dict(Memory.objects.filter(workspace=ws).values_list("content", "score__retention_score"))


def _expected(content: str) -> float:
    return math.exp(-(20 + int(content.split()[-1]) % 30) / STABILITY_DAYS)


@pytest.fixture
def small_units(monkeypatch: pytest.MonkeyPatch, settings: Any) -> None:
    """Records of 40 memories, and a transaction budget of 0: each unit commits on its own."""
    monkeypatch.setattr(base, "RECORD_CHUNK", 40)
    settings.EVOLUTION_TRANSACTION_MS = 0


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, units: int, error: BaseException) -> Callable[[], None]:
    """The unit after the first `units` raises `error` inside its transaction; returns what undoes that."""
    original = base._apply_span
    calls = [0]

    def apply(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] > units:
            raise error
        return original(*args)

    monkeypatch.setattr(base, "_apply_span", apply)
    return lambda: monkeypatch.setattr(base, "_apply_span", original)


# -- bounded transactions -----------------------------------------------------------------------------


@pytest.fixture
def commits(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, int]]:
    """Per committed write transaction of the runner: the memory rows written and the records saved in it
    (counted by the writes themselves, and collected by an on_commit hook of each transaction)."""
    done: list[dict[str, int]] = []
    current = {"rows": 0, "records": 0}
    hold, write, save = runner._hold, base.write_memory_updates, base.save_records

    def committed() -> None:
        done.append(dict(current))
        current.update(rows=0, records=0)

    def counted_hold(run: EvolutionRun) -> bool:
        stop = hold(run)
        transaction.on_commit(committed)
        return stop

    def counted_write(updates: Any) -> int:
        n = write(updates)
        current["rows"] += n
        return n

    def counted_save(records: Any) -> Any:
        saved = save(records)
        current["records"] += len(saved)
        return saved

    monkeypatch.setattr(runner, "_hold", counted_hold)
    monkeypatch.setattr(base, "write_memory_updates", counted_write)
    monkeypatch.setattr(runner, "save_records", counted_save)
    return done


@pytest.mark.django_db(transaction=True)
def test_a_chunked_evolver_commits_each_unit_in_its_own_transaction_with_its_record(
    kit: Any, small_units: None, commits: list[dict[str, int]]
) -> None:
    _episodes(kit, 100)
    run = kit.run("ExponentialDecay")
    (entry,) = run.summary["evolvers"]
    assert entry["status"] == "ok" and entry["records"] == 3
    # 100 memories in records of 40: three transactions, each with its rows and the record of those rows
    # (the summary entry commits in the last one).
    assert commits == [{"rows": 40, "records": 1}, {"rows": 40, "records": 1}, {"rows": 20, "records": 1}]
    assert entry["transactions"] == 3 and entry["longest_transaction_ms"] > 0
    for content, retention in _retention_by_content(kit.workspace).items():
        assert retention == pytest.approx(_expected(content), abs=1e-9)


@pytest.mark.django_db(transaction=True)
def test_a_transaction_takes_units_until_its_time_budget_is_spent(
    kit: Any, small_units: None, commits: list[dict[str, int]], settings: Any
) -> None:
    _episodes(kit, 100)
    settings.EVOLUTION_TRANSACTION_MS = 60_000
    run = kit.run("ExponentialDecay")
    assert commits == [{"rows": 100, "records": 3}]
    assert run.summary["evolvers"][0]["transactions"] == 1


# -- interrupted, failed, changed meanwhile -----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.api
def test_a_run_interrupted_between_units_is_consistent_and_the_takeover_applies_each_change_once(
    kit: Any, small_units: None, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    settings.EVOLUTION_WORKER = "external"
    _episodes(kit, 100)
    original = {
        m: r for m, r in MemoryScore.objects.filter(workspace=kit.workspace).values_list("memory", "retention_score")
    }
    run = jobs.run_enqueue(workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay"], dry_run=False)
    EvolutionRun.objects.filter(pk=run.pk).update(started_at=kit.NOW)
    claimed = jobs.claim(run.pk, "dead")
    assert claimed is not None
    heal = _interrupt_after(monkeypatch, 2, WorkerKilled())
    with pytest.raises(WorkerKilled):
        runner.cycle_run(run=claimed, names=["ExponentialDecay"], now=kit.NOW)

    # What committed: two units, each memory they changed described by a record of the run, nothing else.
    records = list(EvolutionRecord.objects.filter(run=run))
    assert len(records) == 2
    described = {key: fields for r in records for key, fields in r.after.items() if key != base.REASONS}
    assert len(described) == 80
    now = dict(MemoryScore.objects.filter(workspace=kit.workspace).values_list("memory", "retention_score"))
    for memory, retention in now.items():
        fields = described.get(str(memory))
        if fields is None:
            assert retention == original[memory]
        else:
            assert retention == fields["retention_score"]
            assert next(r for r in records if str(memory) in r.before).before[str(memory)] == {
                "retention_score": original[memory]
            }
    assert EvolutionRun.objects.get(pk=run.pk).summary.get("evolvers", []) == []

    # Another worker takes the run over: the interrupted evolver's units are taken back, then it runs whole.
    heal()
    EvolutionRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - jobs.lease() - timedelta(seconds=1))
    taken = jobs.claim(None, "alive")
    assert taken is not None and taken.pk == run.pk
    done = jobs.work(taken)
    assert done.status == RunStatus.COMPLETED
    (entry,) = done.summary["evolvers"]
    assert entry["status"] == "ok" and entry["records"] == 3
    assert EvolutionRecord.objects.filter(run=run).count() == 3
    for content, retention in _retention_by_content(kit.workspace).items():
        assert retention == pytest.approx(_expected(content), abs=1e-9)

    # And the whole run reverts exactly.
    services.run_revert(workspace=kit.workspace, run=done, actor=kit.user)
    after_revert = dict(MemoryScore.objects.filter(workspace=kit.workspace).values_list("memory", "retention_score"))
    assert after_revert == original


@pytest.mark.django_db
@pytest.mark.api
def test_a_run_asked_to_stop_inside_an_evolver_stops_before_its_next_transaction_and_reverts_whole(
    kit: Any, small_units: None, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    """Cancel reaches a long evolver between two of its transactions: what committed stays (whole records,
    revertible), nothing more is written, the next evolver never starts and the entry says so."""
    settings.EVOLUTION_WORKER = "external"
    _episodes(kit, 100)
    before = kit.memory_rows()
    run = jobs.run_enqueue(
        workspace=kit.workspace, actor=None, evolvers=["ExponentialDecay", "RetrievalBasedStrengthening"], dry_run=False
    )
    claimed = jobs.claim(run.pk, "w1")
    assert claimed is not None
    original = base._apply_span
    calls = [0]

    def apply_then_cancel(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            # A person presses Stop while the first unit writes (the request commits on its own connection
            # in production; here it is the runner's, which commits with the unit).
            jobs.run_cancel(workspace=kit.workspace, run=EvolutionRun.objects.get(pk=run.pk), actor=None)
        return original(*args)

    monkeypatch.setattr(base, "_apply_span", apply_then_cancel)
    done = jobs.work(claimed)

    assert done.status == RunStatus.CANCELLED
    (entry,) = done.summary["evolvers"]
    assert entry["name"] == "ExponentialDecay" and entry["status"] == "cancelled"
    assert entry["records"] == 1 and entry["units_left"] == 2 and calls[0] == 1
    assert done.summary["counts"] == {"records": 1, "ok": 0, "failed": 0}
    (record,) = EvolutionRecord.objects.filter(run=run)
    changed = {str(m) for m, row in kit.memory_rows().items() if row != before[m]}
    assert changed == {key for key in record.after if key != base.REASONS} and len(changed) == 40

    services.run_revert(workspace=kit.workspace, run=done, actor=kit.user)
    assert kit.memory_rows() == before


@pytest.mark.django_db
@pytest.mark.api
def test_a_chunked_evolver_that_fails_midway_is_taken_back_whole(
    kit: Any, small_units: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _episodes(kit, 100)
    before = kit.memory_rows()
    _interrupt_after(monkeypatch, 2, RuntimeError("the third unit fails"))
    run = kit.run("ExponentialDecay")
    (entry,) = run.summary["evolvers"]
    assert entry["status"] == "failed" and "RuntimeError: the third unit fails" in entry["error"]
    assert entry["records"] == 0
    assert kit.memory_rows() == before
    assert not EvolutionRecord.objects.filter(run=run).exists()
    assert run.status == RunStatus.FAILED


@pytest.mark.django_db
@pytest.mark.api
def test_a_memory_another_request_changed_after_the_plan_is_left_alone_and_out_of_the_record(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    episodes = _episodes(kit, 5)
    victim = episodes[2]
    planned = writes.deferred_writes

    @contextmanager
    def then_a_request_writes() -> Iterator[Any]:
        with planned() as session:
            yield session
        # Between the plan and its units: a person sets the retention by hand.
        MemoryScore.objects.filter(memory=victim).update(retention_score=0.5)

    monkeypatch.setattr(runner, "deferred_writes", then_a_request_writes)
    run = kit.run("ExponentialDecay")
    (entry,) = run.summary["evolvers"]
    assert entry["status"] == "ok" and entry["skipped_changed"] == 1
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert str(victim.id) not in record.before and str(victim.id) not in record.input_ids
    assert len(record.before) == 4
    assert kit.retention(victim) == 0.5
    services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert kit.retention(victim) == 0.5
    assert all(kit.retention(m) == 1.0 for m in episodes if m != victim)


# -- another workspace's requests while an evolver writes ---------------------------------------------


@pytest.fixture
def file_database(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Copy the test database (SQLite, in memory) to a file in WAL mode; `use(timeout)` makes connections
    that threads open from then on use the file, waiting `timeout` s for a lock as DATABASE_LOCK_TIMEOUT_SECONDS
    would make them. The test's own connection stays on the in-memory database."""
    assert connection.vendor == "sqlite", "this module runs on SQLite (it is not an api test)"
    path = tmp_path / "site.sqlite3"

    def use(timeout: float) -> None:
        connection.ensure_connection()
        target = sqlite3.connect(path)
        connection.connection.backup(target)
        target.execute("PRAGMA journal_mode=WAL")
        target.close()
        current = connections.settings["default"]
        monkeypatch.setitem(
            connections.settings,
            "default",
            {**current, "NAME": str(path), "OPTIONS": {**current.get("OPTIONS", {}), "timeout": timeout}},
        )

    return use


@pytest.mark.django_db(transaction=True)
def test_while_an_evolver_writes_another_workspaces_requests_get_the_database_between_its_transactions(
    workspace: Workspace,
    other_workspace: Workspace,
    client_for: Callable[[Any], APIClient],
    file_database: Callable[[float], None],
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    """2,000 memories decay: the plan computes for 1 s, then units of 250 are written, each slowed to ~0.25 s,
    ~2 s in all; a request waits at most 0.8 s for the database. In one transaction the run would hold the
    database for all 3 s and the other workspace's writes would fail; now the plan holds nothing and a
    request waits for one unit at most."""
    owner = get_user_model().objects.get(username="alice")
    memory_services.memories_create(
        workspace=workspace,
        actor=owner,
        items=[MemoryInput(content=f"episode {k} of the deploy", memory_type="episodic") for k in range(2000)],
    )
    mallory = client_for(get_user_model().objects.get(username="mallory"))
    mallory.raise_request_exception = False  # a 500 is an answer to count, not an error of the thread
    monkeypatch.setattr(base, "RECORD_CHUNK", 250)
    settings.EVOLUTION_TRANSACTION_MS = 0
    timeout = 0.8
    file_database(timeout)

    writing = threading.Event()
    write = base.write_memory_updates

    def slow_write(updates: Any) -> int:
        writing.set()
        n = write(updates)
        time.sleep(n * 0.001)  # holding the transaction, as a slow disk would
        return n

    monkeypatch.setattr(base, "write_memory_updates", slow_write)
    planning = threading.Event()
    decay_rows = selectors.decay_rows

    def slow_read(**kwargs: Any) -> Any:
        rows = decay_rows(**kwargs)
        planning.set()
        time.sleep(1.0)  # a long computation over the rows read
        return rows

    monkeypatch.setattr(selectors, "decay_rows", slow_read)
    outcome: dict[str, Any] = {}

    ready = threading.Event()

    def work() -> None:
        try:
            assert ready.wait(60), "the requests never got ready"
            outcome["run"] = services.evolution_run(
                workspace=workspace,
                actor=None,
                evolvers=["ExponentialDecay"],
                dry_run=False,
                now=timezone.now() + timedelta(days=60),
            )
        finally:
            connections.close_all()

    answers: list[tuple[str, int, float]] = []

    def request(name: str, k: int) -> tuple[str, int, float]:
        started = time.perf_counter()
        if name == "create":
            body = {"content": f"note {k}"}
            response = mallory.post("/api/v1/workspaces/other/memories/", body, format="json")
        elif name == "context":
            response = mallory.post("/api/v1/workspaces/other/context/", {"query": "deploy"}, format="json")
        else:
            response = mallory.get("/healthz")
        return name, response.status_code, time.perf_counter() - started

    def ask() -> None:
        try:
            # A first request on a new connection warms it (and the workspace's caches) up: ~1-2 s here.
            for name in ("create", "context", "healthz"):
                request(name, -1)
            ready.set()
            assert planning.wait(60), "the evolver never planned"
            answers.extend(request(name, 0) for name in ("create", "context", "healthz"))
            assert writing.wait(60), "the evolver never wrote"
            for k in range(1, 4):
                answers.extend(request(name, k) for name in ("create", "context", "healthz"))
                time.sleep(0.1)
        finally:
            ready.set()
            connections.close_all()

    threads = [threading.Thread(target=work), threading.Thread(target=ask)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(answers) == 12
    for name, status, seconds in answers:
        assert status in (200, 201), (name, status)
        assert seconds < timeout, (name, seconds)
    (entry,) = outcome["run"].summary["evolvers"]
    assert entry["status"] == "ok" and entry["transactions"] == 8, entry
    assert entry["stats"]["decayed"] == 2000 and entry["records"] == 8


@pytest.mark.parametrize("held_ms", [1, 3, 5, 12, 20, 37, 50, 80, 99, 100, 120, 150, 175, 200, 250, 400, 1000])
def test_every_writer_that_waited_through_a_transaction_tries_again_within_the_pause_after_it(held_ms: int) -> None:
    """SQLite's busy handler: whenever during the transaction a writer began waiting, one of its tries falls
    in the pause that follows (so it gets the database before the run takes it back)."""
    sleeps = [1, 2, 5, 10, 15, 20, 25, 25, 25, 50, 50] + [100] * 100
    held = held_ms / 1000.0
    pause = runner.pause_after(held)
    for arrived_ms in range(0, held_ms + 1):
        tries, at = [], float(arrived_ms)
        for sleep in sleeps:
            at += sleep
            tries.append(at)
        assert any(held_ms <= t <= held_ms + pause * 1000.0 for t in tries), (arrived_ms, pause)
    assert pause <= max(0.005, held)  # never longer than the transaction (past the 5 ms floor)
