"""The cycle runner: seed order, failures contained per evolver, progress, dry runs, cursors."""

from __future__ import annotations

import threading
from datetime import datetime, timedelta
from typing import Any, ClassVar

import pytest

from core.errors import InvalidInput
from evolution.evolvers import EVOLVERS, EvolutionResult, default_cycle
from evolution.models import EvolutionRun, RunStatus
from history.models import EvolutionRecord
from memories.models import Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

SEED_ORDER = [
    "EnhancedWorkingToEpisodic",
    "ExponentialDecay",
    "InterferenceBasedConsolidation",
    "RetrievalBasedStrengthening",
    "HebbianCoRetrieval",
]


class Boom:
    """Writes a change, then fails: the change must not survive."""

    name: ClassVar[str] = "Boom"

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        Memory.objects.filter(workspace=workspace).update(content="clobbered")
        raise RuntimeError("boom went the evolver")


@pytest.fixture
def boom(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EVOLVERS, "Boom", Boom)


def test_default_cycle_is_the_seed_order() -> None:
    assert default_cycle()[:5] == SEED_ORDER


def test_requested_evolvers_run_in_cycle_order_whatever_the_request_order(kit: Any) -> None:
    run = kit.run("HebbianCoRetrieval", "exponentialdecayevolver", "EnhancedWorkingToEpisodic")
    assert [e["name"] for e in run.summary["evolvers"]] == [
        "EnhancedWorkingToEpisodic",
        "ExponentialDecay",
        "HebbianCoRetrieval",
    ]
    assert run.evolvers == [e["name"] for e in run.summary["evolvers"]]


def test_unknown_evolver_is_refused_naming_it_before_anything_is_written(kit: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        kit.run("ExponentialDecay", "MagicForgetter")
    assert "MagicForgetter" in caught.value.detail
    assert caught.value.code == "unknown_evolver"
    assert not EvolutionRun.objects.exists()


def test_a_failing_evolver_is_recorded_and_the_cycle_goes_on(kit: Any, boom: None) -> None:
    episodic = kit.mem("old episode", memory_type="episodic", age_days=30)
    run = kit.run("ExponentialDecay", "Boom")
    decay, failed = run.summary["evolvers"]
    assert decay["status"] == "ok"
    assert failed["status"] == "failed"
    assert "RuntimeError: boom went the evolver" in failed["error"]
    assert failed["records"] == 0
    assert run.status == RunStatus.COMPLETED
    assert run.summary["counts"] == {"records": decay["records"], "ok": 1, "failed": 1}
    episodic.refresh_from_db()
    assert episodic.content == "old episode"
    assert episodic.score.retention_score == pytest.approx(0.367879, abs=1e-6)
    assert not EvolutionRecord.objects.filter(run=run, evolver="Boom").exists()


def test_a_run_where_every_evolver_failed_is_failed(kit: Any, boom: None) -> None:
    kit.mem("x")
    run = kit.run("Boom")
    assert run.status == RunStatus.FAILED
    assert run.finished_at is not None


def test_progress_is_written_and_published_per_evolver(
    kit: Any, monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks: Any
) -> None:
    events: list[tuple[int, str, dict[str, Any]]] = []
    monkeypatch.setattr("memories.live.workspace_event", lambda ws, event, payload: events.append((ws, event, payload)))
    seen: list[dict[str, Any]] = []
    from evolution import services

    with django_capture_on_commit_callbacks(execute=True):
        run = services.evolution_run(
            workspace=kit.workspace,
            actor=kit.user,
            evolvers=["ExponentialDecay", "HebbianCoRetrieval"],
            dry_run=True,
            now=kit.NOW,
            on_progress=seen.append,
        )
    assert run.progress == {"evolver": "", "index": 2, "done": 2, "total": 2}
    assert [p["evolver"] for p in seen if "result" not in p] == ["ExponentialDecay", "HebbianCoRetrieval"]
    assert [p["result"]["status"] for p in seen if "result" in p] == ["ok", "ok"]
    published = [p for _, event, p in events if event == "evolution.progress"]
    assert {p.get("evolver") for p in published} >= {"ExponentialDecay", "HebbianCoRetrieval"}
    assert published[-1]["status"] == RunStatus.COMPLETED
    assert all(ws == kit.workspace.pk for ws, _, _ in events)


def test_dry_run_changes_nothing_but_keeps_the_run_and_its_records(kit: Any) -> None:
    for k in range(35):
        kit.mem(f"working note about deploys {k}", memory_type="working", age_days=0.01)
    a, b = kit.mem("a", memory_type="episodic", age_days=80), kit.mem("b", retention_score=0.5)
    for _ in range(5):
        kit.retrieve([a, b])
    v1, v2 = kit.cosine_pair(0.97)
    kit.mem("c", embedding=v1)
    kit.mem("d", embedding=v2)
    memories, edges = kit.memory_rows(), kit.edge_rows()
    run = kit.run(dry_run=True)
    assert kit.memory_rows() == memories
    assert kit.edge_rows() == edges
    assert run.dry_run is True
    records = EvolutionRecord.objects.filter(run=run)
    assert records.exists()
    assert not records.filter(dry_run=False).exists()
    assert {r.evolver for r in records} == set(SEED_ORDER)
    promote = records.get(action="promote")
    assert promote.after["episodes"]
    # The Hebbian boost of b from the co-retrieval count the dry run planned (5) and did not store.
    assert records.filter(evolver="HebbianCoRetrieval", action="boost").exists()
    assert kit.co_edge(a, b) is None


def test_dry_runs_do_not_advance_the_hebbian_watermark(kit: Any) -> None:
    a, b = kit.mem("a"), kit.mem("b")
    kit.retrieve([a, b])
    kit.run("HebbianCoRetrieval", dry_run=True)
    kit.run("HebbianCoRetrieval")
    assert kit.co_edge(a, b).co_retrieval_count == 1


def test_reverting_a_run_keeps_its_co_retrieval_counts_and_never_counts_the_events_again(kit: Any) -> None:
    """The counts are observations of the events (evolution.retrieval_stats): a revert undoes the boosts the
    run decided, not what was counted, so the next run finds nothing new to count."""
    from evolution import services

    a, b = kit.mem("a"), kit.mem("b")
    kit.retrieve([a, b])
    first = kit.run("HebbianCoRetrieval")
    services.run_revert(workspace=kit.workspace, run=first, actor=kit.user)
    assert kit.co_edge(a, b).co_retrieval_count == 1
    kit.run("HebbianCoRetrieval", now=kit.NOW + timedelta(hours=1))
    assert kit.co_edge(a, b).co_retrieval_count == 1


# -- SQLite write settings of a cycle ------------------------------------------------------------


@pytest.fixture
def file_sqlite(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A connection to a SQLite file in WAL mode (the test database is in memory, where the cycle's
    write settings do nothing), installed as the runner's connection."""
    from django.conf import settings
    from django.db.backends.sqlite3.base import DatabaseWrapper

    from evolution import runner

    wrapper = DatabaseWrapper({**settings.DATABASES["default"], "NAME": str(tmp_path / "cycle.sqlite3")})
    with wrapper.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA wal_autocheckpoint=1000")
        cursor.execute("PRAGMA cache_size=-2000")
        cursor.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    monkeypatch.setattr(runner, "connection", wrapper)
    yield wrapper
    wrapper.close()


def _pragma(wrapper: Any, name: str) -> int:
    with wrapper.cursor() as cursor:
        cursor.execute(f"PRAGMA {name}")
        return int(cursor.fetchone()[0])


def test_a_cycle_on_a_sqlite_file_defers_checkpoints_then_checkpoints_and_restores_the_settings(
    file_sqlite: Any,
) -> None:
    import os

    from evolution.runner import CYCLE_CACHE_KIB, sqlite_bulk_writes, wait_for_checkpoints

    wal = f"{file_sqlite.settings_dict['NAME']}-wal"
    with sqlite_bulk_writes():
        assert _pragma(file_sqlite, "wal_autocheckpoint") == 0
        assert _pragma(file_sqlite, "cache_size") == -CYCLE_CACHE_KIB
        with file_sqlite.cursor() as cursor:
            cursor.executemany("INSERT INTO t (v) VALUES (?)", [(b"x" * 3000,) for _ in range(2000)])
        # No automatic checkpoint ran: every written page is still in the WAL (2000 rows > 1000 pages).
        assert os.path.getsize(wal) > 1000 * 4096
    assert _pragma(file_sqlite, "wal_autocheckpoint") == 1000
    assert _pragma(file_sqlite, "cache_size") == -2000
    # The checkpoint at the end (on a thread of its own) copied the rows into the database file itself.
    assert wait_for_checkpoints(timeout=30)
    assert os.path.getsize(file_sqlite.settings_dict["NAME"]) > 2000 * 3000


def test_the_last_checkpoint_runs_after_the_block_on_its_own_thread_and_can_be_waited_for(
    file_sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evolution.runner import Checkpoints, sqlite_bulk_writes, wait_for_checkpoints

    release = threading.Event()
    ran_on: list[str] = []

    def slow_checkpoint(path: str) -> None:
        release.wait(30)
        ran_on.append(threading.current_thread().name)

    monkeypatch.setattr(Checkpoints, "_checkpoint", staticmethod(slow_checkpoint))
    with sqlite_bulk_writes() as checkpoints:
        checkpoints.after_commit()  # still running when the block ends: the last one waits for it
    # The block has ended and restored the settings while both checkpoints still wait.
    assert ran_on == []
    assert _pragma(file_sqlite, "wal_autocheckpoint") == 1000
    assert not wait_for_checkpoints(timeout=0.05)
    release.set()
    assert wait_for_checkpoints(timeout=30)
    assert len(ran_on) == 2 and threading.current_thread().name not in ran_on
    assert ran_on[-1] == "sqlite-final-checkpoint"


def test_a_checkpoint_after_a_commit_copies_the_pages_on_its_own_thread_while_the_cycle_goes_on(
    file_sqlite: Any,
) -> None:
    import os

    from evolution.runner import sqlite_bulk_writes

    database = file_sqlite.settings_dict["NAME"]
    with sqlite_bulk_writes() as checkpoints:
        with file_sqlite.cursor() as cursor:
            cursor.executemany("INSERT INTO t (v) VALUES (?)", [(b"x" * 3000,) for _ in range(2000)])
        assert os.path.getsize(database) < 2000 * 3000
        checkpoints.after_commit()
        assert checkpoints.thread is not None and checkpoints.thread.name != threading.current_thread().name
        checkpoints.wait()
        # Copied before the block ended, the cycle's connection still in its bulk settings.
        assert os.path.getsize(database) > 2000 * 3000
        assert _pragma(file_sqlite, "wal_autocheckpoint") == 0


def test_a_checkpoint_of_a_database_removed_meanwhile_logs_and_creates_nothing(
    tmp_path: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from evolution.runner import Checkpoints

    gone = tmp_path / "removed.sqlite3"
    Checkpoints._checkpoint(str(gone))
    assert not gone.exists()
    assert "background checkpoint of" in caplog.text


def test_inside_a_transaction_the_cycle_leaves_the_sqlite_settings_alone(file_sqlite: Any) -> None:
    from evolution.runner import sqlite_bulk_writes

    file_sqlite.in_atomic_block = True  # a caller's open transaction: PRAGMAs there would not apply
    try:
        with sqlite_bulk_writes() as checkpoints:
            assert _pragma(file_sqlite, "wal_autocheckpoint") == 1000
            assert _pragma(file_sqlite, "cache_size") == -2000
            checkpoints.after_commit()
            assert checkpoints.thread is None
    finally:
        file_sqlite.in_atomic_block = False


def test_a_cycle_runs_with_the_collector_off_and_restores_it_even_when_an_evolver_fails(
    kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gc

    seen: list[bool] = []

    class Looks(Boom):
        def evolve(self, workspace: Any, *, dry_run: bool, run: Any, now: Any) -> EvolutionResult:
            seen.append(gc.isenabled())
            raise RuntimeError("boom")

    monkeypatch.setitem(EVOLVERS, "Boom", Looks)
    monkeypatch.setitem(EVOLVERS, "Boom2", Looks)
    assert gc.isenabled()
    kit.run("Boom", "Boom2")
    assert seen == [False, False]
    assert gc.isenabled()
    gc.disable()
    try:
        kit.run("Boom")
        assert not gc.isenabled(), "a collector switched off by the caller stays off"
    finally:
        gc.enable()


def test_collections_between_evolvers_free_reference_cycles(kit: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import gc
    import weakref

    refs: list[weakref.ref[Any]] = []
    alive: list[bool] = []

    class Node:
        other: Any = None

    class Cyclic(Boom):
        def evolve(self, workspace: Any, *, dry_run: bool, run: Any, now: Any) -> EvolutionResult:
            if refs:
                alive.append(refs[-1]() is not None)
            a, b = Node(), Node()
            a.other, b.other = b, a
            refs.append(weakref.ref(a))
            return EvolutionResult(evolver="Boom", dry_run=dry_run)

    monkeypatch.setitem(EVOLVERS, "Boom", Cyclic)
    monkeypatch.setitem(EVOLVERS, "Boom2", Cyclic)
    assert gc.isenabled()
    kit.run("Boom", "Boom2")
    assert alive == [False], "the first evolver's reference cycle was collected before the second ran"
