"""Lifecycle evolvers over a real database: what they derive, what they mark, exact revert."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from evolution import services
from evolution.evolvers import default_cycle
from history.models import EvolutionRecord
from memories.models import Edge, EdgeType, Memory, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

LIFECYCLE = [
    "EpisodicToSemantic",
    "EpisodicToZettel",
    "OpinionSynthesis",
    "ObservationSynthesis",
    "WorkingToProcedural",
]


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def test_lifecycle_evolvers_run_only_when_named() -> None:
    assert not set(LIFECYCLE) & set(default_cycle())


# -- EpisodicToSemantic ---------------------------------------------------------------------------


def test_confident_settled_episodes_become_semantic_and_are_archived(kit: Any) -> None:
    ready = kit.mem(
        "We chose JWT for the API",
        memory_type="episodic",
        confidence=0.95,
        age_days=4,
        subject="auth",
        tags=["auth"],
        metadata={"ref": "s1"},
    )
    unsure = kit.mem("Maybe Redis", memory_type="episodic", confidence=0.85, age_days=10)
    recent = kit.mem("Picked Postgres", memory_type="episodic", confidence=1.0, age_days=2)
    run = kit.run("EpisodicToSemantic")
    (semantic,) = Memory.objects.filter(memory_type="semantic")
    assert semantic.content == "We chose JWT for the API"
    assert semantic.subject == "auth" and semantic.tags == ["auth"]
    assert semantic.confidence == pytest.approx(0.95)
    assert semantic.origin == "evolver:EpisodicToSemantic" and semantic.origin_tier == 2
    assert semantic.metadata["derived_from"] == [str(ready.id)]
    assert semantic.embedding is not None
    assert Edge.objects.filter(source=semantic, target_id=ready.id, edge_type=EdgeType.DERIVED_FROM).exists()
    source = fresh(ready)
    assert source.status == Status.ARCHIVED
    assert source.metadata == {"ref": "s1", "promoted_to_semantic": str(semantic.id)}
    assert fresh(unsure).status == Status.ACTIVE and fresh(recent).status == Status.ACTIVE
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "promote"
    assert record.after["created_memories"] == [str(semantic.id)]


def test_semantic_promotion_reverts_exactly(kit: Any, workspace: Workspace) -> None:
    for k in range(3):
        kit.mem(f"episode {k}", memory_type="episodic", confidence=0.9, age_days=5)
    rows, edges = kit.memory_rows(), kit.edge_rows()
    dry = kit.run("EpisodicToSemantic", dry_run=True)
    assert kit.memory_rows() == rows and kit.edge_rows() == edges
    assert dry.summary["evolvers"][0]["stats"]["promoted"] == 3
    run = kit.run("EpisodicToSemantic")
    assert Memory.objects.filter(memory_type="semantic").count() == 3
    services.run_revert(workspace=workspace, run=run, actor=None)
    assert kit.memory_rows() == rows and kit.edge_rows() == edges


# -- EpisodicToZettel -----------------------------------------------------------------------------


def test_finished_days_roll_up_into_one_zettel_each(kit: Any) -> None:
    day = kit.NOW.replace(hour=0, minute=0, second=0) - timedelta(days=2)
    episodes = [
        kit.mem(
            f"turn {k}",
            memory_type="episodic",
            age_days=(kit.NOW - (day + timedelta(hours=9 + k))).total_seconds() / 86400,
        )
        for k in range(3)
    ]
    lonely = kit.mem("alone", memory_type="episodic", age_days=3.2)
    today = [kit.mem(f"today {k}", memory_type="episodic", age_days=0.01 * (k + 1)) for k in range(2)]
    kit.run("EpisodicToZettel")
    (zettel,) = Memory.objects.filter(memory_type="zettel")
    assert zettel.content.splitlines() == [
        f"Daily rollup {day.date().isoformat()} (3 episodes)",
        "- turn 0",
        "- turn 1",
        "- turn 2",
    ]
    assert zettel.metadata["rollup_day"] == day.date().isoformat()
    assert all(fresh(e).metadata["rolled_up_into"] == str(zettel.id) for e in episodes)
    assert all(fresh(e).status == Status.ACTIVE for e in episodes)
    assert "rolled_up_into" not in fresh(lonely).metadata
    assert all("rolled_up_into" not in fresh(m).metadata for m in today)
    assert Edge.objects.filter(source=zettel, edge_type=EdgeType.DERIVED_FROM).count() == 3
    again = kit.run("EpisodicToZettel")
    assert again.summary["counts"]["records"] == 0
    assert Memory.objects.filter(memory_type="zettel").count() == 1


# -- WorkingToProcedural --------------------------------------------------------------------------

STEP = "restart the api server with make restart then tail the error log"


def test_five_repeats_of_a_procedure_become_procedural(kit: Any) -> None:
    items = [kit.mem(STEP, memory_type="working", age_days=1 - k * 0.01) for k in range(4)]
    items.append(kit.mem(STEP + " again", memory_type="working", age_days=0.5))
    other = kit.mem("buy milk", memory_type="working", age_days=0.2)
    run = kit.run("WorkingToProcedural")
    (procedure,) = Memory.objects.filter(memory_type="procedural")
    assert procedure.content == STEP
    assert procedure.metadata["source_count"] == 5
    assert all(fresh(m).status == Status.ARCHIVED for m in items)
    assert all(fresh(m).metadata["promoted_to_procedural"] == str(procedure.id) for m in items)
    assert fresh(other).status == Status.ACTIVE
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert "5 working items" in record.reason


def test_four_repeats_are_not_a_procedure(kit: Any) -> None:
    for _ in range(4):
        kit.mem(STEP, memory_type="working")
    kit.run("WorkingToProcedural")
    assert not Memory.objects.filter(memory_type="procedural").exists()


# -- OpinionSynthesis -----------------------------------------------------------------------------


def tagged(kit: Any, tag: str, n: int, memory_type: str = "episodic") -> list[Memory]:
    return [kit.mem(f"{tag} note {k}", memory_type=memory_type, tags=[tag, f"x{k}"]) for k in range(n)]


def test_seven_mentions_form_an_opinion_and_six_do_not(kit: Any) -> None:
    tagged(kit, "postgres", 7)
    tagged(kit, "redis", 6, memory_type="fact")
    kit.run("OpinionSynthesis")
    (opinion,) = Memory.objects.filter(memory_type="opinion")
    assert opinion.subject == "postgres"
    # s = min(1, 7 / 10): 0.7 * 0.85 * (0.5 + 0.35) = 0.50575 (n = 6 -> 0.408 stays below 0.5).
    assert opinion.confidence == pytest.approx(0.50575, abs=1e-6)
    assert opinion.content == "Recurring theme: postgres (seen in 7 memories)"
    assert opinion.metadata["count"] == 7
    assert Edge.objects.filter(source=opinion, edge_type=EdgeType.DERIVED_FROM).count() == 7


def test_an_opinion_is_updated_when_its_support_grows_and_left_alone_otherwise(kit: Any) -> None:
    tagged(kit, "postgres", 7)
    kit.run("OpinionSynthesis")
    rows = kit.memory_rows()
    unchanged = kit.run("OpinionSynthesis")
    assert kit.memory_rows() == rows
    assert unchanged.summary["counts"]["records"] == 0
    kit.mem("one more", memory_type="semantic", tags=["Postgres"])
    run = kit.run("OpinionSynthesis")
    (opinion,) = Memory.objects.filter(memory_type="opinion")
    assert opinion.metadata["count"] == 8
    assert opinion.confidence == pytest.approx(0.8 * 0.85 * 0.9, abs=1e-9)
    assert [r.action for r in EvolutionRecord.objects.filter(run=run)] == ["update"]


# -- ObservationSynthesis -------------------------------------------------------------------------


def test_two_facts_about_a_subject_become_an_observation(kit: Any) -> None:
    kit.mem("Billing runs on Postgres 15.", memory_type="fact", subject="billing", age_days=3)
    kit.mem("billing runs on postgres 15", memory_type="fact", subject="Billing", age_days=2)
    kit.mem("Billing invoices go out on the 1st", memory_type="fact", subject="billing", age_days=1)
    kit.mem("Search uses BM25", memory_type="fact", subject="search")
    kit.run("ObservationSynthesis")
    (observation,) = Memory.objects.filter(memory_type="observation")
    assert observation.content == "Summary of billing: Billing runs on Postgres 15; Billing invoices go out on the 1st"
    assert observation.metadata["source_count"] == 3
    kit.mem("Billing retries failed cards twice", memory_type="fact", subject="billing", age_days=0.5)
    kit.run("ObservationSynthesis")
    (updated,) = Memory.objects.filter(memory_type="observation")
    assert updated.id == observation.id
    assert updated.content.endswith("; Billing retries failed cards twice")


# -- all of them ----------------------------------------------------------------------------------


def test_a_run_of_every_lifecycle_evolver_reverts_to_the_exact_prior_rows(kit: Any, workspace: Workspace) -> None:
    for k in range(3):
        kit.mem(
            f"episode {k} about postgres",
            memory_type="episodic",
            confidence=0.95,
            age_days=4 + k * 0.01,
            tags=["postgres"],
        )
    tagged(kit, "postgres", 5, memory_type="fact")
    for _ in range(5):
        kit.mem(STEP, memory_type="working")
    kit.mem("Billing runs on Postgres 15", memory_type="fact", subject="billing")
    kit.mem("Billing invoices go out on the 1st", memory_type="fact", subject="billing")
    rows, edges = kit.memory_rows(), kit.edge_rows()
    run = kit.run(*LIFECYCLE)
    assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
    assert Memory.objects.count() > len(rows)
    services.run_revert(workspace=workspace, run=run, actor=None)
    assert kit.memory_rows() == rows
    assert kit.edge_rows() == edges
