"""The retention the strengthening evolver hands to the Hebbian evolver of the same cycle
(selectors.CycleHandoff): taken only when nothing can have changed it, and the cycle's outcome is the same
as when the Hebbian evolver reads it itself."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any, ClassVar

import pytest
from django.db import connection

from evolution import selectors
from evolution.evolvers import base
from evolution.evolvers.base import EvolutionResult
from history.models import EvolutionRecord
from memories.models import Edge, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each `CycleHandoff.take` returned (None: the Hebbian evolver read the rows itself)."""
    seen: list[Any] = []
    take = selectors.CycleHandoff.take

    def spy(self: selectors.CycleHandoff, workspace: Workspace) -> Any:
        result = take(self, workspace)
        seen.append(result)
        return result

    monkeypatch.setattr(selectors.CycleHandoff, "take", spy)
    return seen


def _world(kit: Any, ws: Workspace | None = None) -> list[Any]:
    a, b, c = (kit.mem(x, retention_score=r, ws=ws) for x, r in (("a", 0.5), ("b", 0.7), ("c", 0.9)))
    kit.mem("gone", status="archived", ws=ws)
    kit.mem("never retrieved", age_days=40, retention_score=0.8, ws=ws)
    for age in (0.2, 0.4, 0.6, 0.8):
        kit.retrieve([a, b, c], age_days=age, ws=ws)
    return [a, b, c]


def _outcome(kit: Any, ws: Workspace, *, dry_run: bool) -> tuple[Any, ...]:
    """Retention by content, CO_RETRIEVED counts by content pair, records by evolver and action."""
    run = kit.run("RetrievalBasedStrengthening", "HebbianCoRetrieval", dry_run=dry_run, ws=ws)
    assert [e["status"] for e in run.summary["evolvers"]] == ["ok", "ok"]
    content = dict(Memory.objects.filter(workspace=ws).values_list("id", "content"))
    retention = {content[m]: row[-2] for m, row in kit.memory_rows(ws).items()}
    # Unordered pairs: an edge's orientation follows its ends' ids, which differ between the workspaces.
    edges = sorted(
        (*sorted((content[s], content[t])), n)
        for s, t, n in Edge.objects.filter(workspace=ws).values_list("source", "target", "co_retrieval_count")
    )
    records = sorted(EvolutionRecord.objects.filter(run=run).values_list("evolver", "action"))
    return retention, edges, records


@pytest.mark.parametrize("dry_run", [False, True])
def test_hebbian_takes_the_retention_the_strengthening_left_and_ends_as_if_it_had_read_it(
    kit: Any, taken: list[Any], monkeypatch: pytest.MonkeyPatch, dry_run: bool
) -> None:
    other = Workspace.objects.create(slug="twin", name="twin")
    _world(kit)
    _world(kit, ws=other)
    with_handoff = _outcome(kit, kit.workspace, dry_run=dry_run)
    if connection.vendor == "sqlite":
        (offered,) = taken
        status = Memory._meta.fields.index(Memory._meta.get_field("status"))
        written = {str(m): row[-2] for m, row in kit.memory_rows().items() if row[status] == "active"}
        assert dict(offered) == written
    else:
        assert taken == [None], "offers are made on SQLite only (data_version)"

    monkeypatch.setattr(selectors, "hand_over_active_retention", lambda **kwargs: None)
    read_itself = _outcome(kit, other, dry_run=dry_run)
    assert taken[-1] is None
    assert with_handoff == read_itself
    assert with_handoff[2], "the cycle recorded what it did"
    assert bool(with_handoff[1]) is not dry_run, "an applied cycle counted co-retrievals"


def test_an_offer_is_refused_after_another_connection_committed(
    kit: Any, taken: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _world(kit)
    versions = iter([1, 2])  # as made, as found by the taker
    monkeypatch.setattr(selectors, "_data_version", lambda: next(versions))
    run = kit.run("RetrievalBasedStrengthening", "HebbianCoRetrieval")
    assert [e["status"] for e in run.summary["evolvers"]] == ["ok", "ok"]
    assert taken == [None]


class Failing:
    name: ClassVar[str] = "Failing"

    def evolve(self, workspace: Workspace, *, dry_run: bool, run: Any, now: Any) -> EvolutionResult:
        selectors.hand_over_active_retention(workspace=workspace, rows=[("stale", 0.0)])
        raise RuntimeError("after offering")


class Quiet:
    name: ClassVar[str] = "Quiet"

    def evolve(self, workspace: Workspace, *, dry_run: bool, run: Any, now: Any) -> EvolutionResult:
        return EvolutionResult(evolver=self.name, dry_run=dry_run)


def _before_hebbian(monkeypatch: pytest.MonkeyPatch, *extra: type) -> None:
    order: dict[str, Any] = {}
    for name, cls in base.EVOLVERS.items():
        if name == "HebbianCoRetrieval":
            order.update((e.name, e) for e in extra)  # type: ignore[attr-defined]
        order[name] = cls
    monkeypatch.setattr(base, "EVOLVERS", order)


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        (Failing, ["Failing", "HebbianCoRetrieval"]),
        (Quiet, ["RetrievalBasedStrengthening", "Quiet", "HebbianCoRetrieval"]),
    ],
)
def test_the_runner_drops_a_failed_evolvers_offer_and_one_the_next_evolver_did_not_take(
    kit: Any, taken: list[Any], monkeypatch: pytest.MonkeyPatch, extra: type, names: list[str]
) -> None:
    _world(kit)
    _before_hebbian(monkeypatch, extra)
    run = kit.run(*names)
    assert [e["name"] for e in run.summary["evolvers"]] == names
    assert run.summary["evolvers"][-1]["status"] == "ok"
    assert taken == [None]


def test_a_failed_evolvers_offer_and_an_offer_not_taken_at_once_are_dropped() -> None:
    handoff = selectors.CycleHandoff()
    workspace = Workspace(pk=1)
    handoff.made = selectors._Offer(1, 0, [("a", 0.5)])
    handoff.advance(succeeded=False)
    assert handoff.available is None
    handoff.made = selectors._Offer(1, 0, [("a", 0.5)])
    handoff.advance(succeeded=True)
    assert handoff.available is not None
    handoff.advance(succeeded=True)  # the next evolver did not take it
    assert handoff.available is None
    handoff.available = selectors._Offer(2, 0, [("a", 0.5)])
    assert handoff.take(workspace) is None, "another workspace's offer"
    assert handoff.available is None


def test_outside_a_cycle_offers_are_ignored(kit: Any) -> None:
    _world(kit)
    selectors.hand_over_active_retention(workspace=kit.workspace, rows=[("stale", 0.0)])
    assert len(selectors.active_retention(workspace=kit.workspace)) == 4


def test_sqlite_data_version_moves_with_other_connections_commits_only(tmp_path: Path) -> None:
    """The property the handoff relies on, checked on the SQLite this Python links."""
    path = tmp_path / "dv.sqlite3"
    mine = sqlite3.connect(path, isolation_level=None)
    mine.execute("PRAGMA journal_mode=WAL")
    mine.execute("CREATE TABLE t (x)")

    def version() -> int:
        return int(mine.execute("PRAGMA data_version").fetchone()[0])

    start = version()
    mine.execute("INSERT INTO t VALUES (1)")
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    assert version() == start, "own commits and a passive checkpoint leave it"
    other.execute("INSERT INTO t VALUES (2)")
    assert version() != start, "another connection's commit moves it"
    other.close()
    mine.close()
