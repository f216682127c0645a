"""The five enhanced evolvers through the run service, against values worked by hand from their formulas (to 1e-6)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from evolution.algorithms.consolidation import WorkingItem, cluster_working
from evolution.algorithms.retrieval import retrieval_boost
from evolution.evolvers.enhanced import cluster_buffer
from evolution.retrieval_stats import iso_milliseconds
from graph.store import CO_RETRIEVED_FULL_COUNT
from history.models import EvolutionRecord
from memories.models import Edge, EdgeType, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def fresh(m: Memory) -> Memory:
    return Memory.objects.get(id=m.id)


# -- ExponentialDecay -------------------------------------------------------------------------------


def test_decay_matches_reference_values_and_archives_below_threshold(kit: Any) -> None:
    kept = kit.mem("69 days", memory_type="episodic", age_days=200, last_accessed=kit.NOW - timedelta(days=69))
    gone = kit.mem("70 days", memory_type="episodic", age_days=200, last_accessed=kit.NOW - timedelta(days=70))
    month = kit.mem("30 days", memory_type="episodic", age_days=30)
    run = kit.run("ExponentialDecay")
    assert run.summary["evolvers"][0]["status"] == "ok"
    assert fresh(kept).score.retention_score == pytest.approx(0.100259, abs=1e-6)
    assert fresh(kept).status == "active"
    assert fresh(gone).score.retention_score == pytest.approx(0.096972, abs=1e-6)
    assert fresh(gone).status == "archived"
    assert fresh(month).score.retention_score == pytest.approx(0.367879, abs=1e-6)
    archive = EvolutionRecord.objects.get(run=run, action="archive")
    assert archive.before[str(gone.id)] == {"retention_score": 1.0, "status": "active"}
    assert "< 0.1: archived" in archive.after["reasons"][str(gone.id)]


def test_decay_uses_event_time_when_never_accessed_and_ignores_other_types(kit: Any) -> None:
    event = kit.mem("event", memory_type="episodic", age_days=5, valid_from=kit.NOW - timedelta(days=30))
    fact = kit.mem("fact", memory_type="fact", age_days=300)
    kit.run("ExponentialDecay")
    assert fresh(event).score.retention_score == pytest.approx(math.exp(-1), abs=1e-9)
    assert fresh(fact).score.retention_score == 1.0


def test_decay_never_archives_a_pinned_memory(kit: Any) -> None:
    pinned = kit.mem("pinned", memory_type="episodic", age_days=400, pinned=True)
    kit.run("ExponentialDecay")
    assert fresh(pinned).status == "active"
    assert fresh(pinned).score.retention_score < 0.1


def test_decay_reads_stability_per_memory(kit: Any) -> None:
    stable = kit.mem("stable", memory_type="episodic", age_days=60, stability=60.0)
    kit.run("ExponentialDecay")
    assert fresh(stable).score.retention_score == pytest.approx(math.exp(-1), abs=1e-9)


def test_iso_milliseconds_formats_as_datetime_does() -> None:
    rng = np.random.default_rng(5)
    # Random times, times with stored milliseconds read back through julianday (as the selectors do), and
    # the rounding edges: half a microsecond, a fraction rounding up to the next second.
    random_times = 1_764_469_740 + rng.random(20_000) * 86_400 * 400
    stored = np.round(random_times * 1000) / 1000
    julian = ((2_440_587.5 + stored / 86_400.0) - 2_440_587.5) * 86_400.0
    edges = [1764469740.1225, 1764469740.0005, 1764469740.9995, 1764469740.9999995, 1e9 + 5e-7, 0.5]
    epochs = np.concatenate([random_times, julian, edges])
    expected = [datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds") for t in epochs.tolist()]
    assert iso_milliseconds(epochs) == expected


# -- InterferenceBasedConsolidation ---------------------------------------------------------------


def test_interference_penalises_both_ends_of_a_similar_pair_once(kit: Any) -> None:
    a_vec, b_vec = kit.cosine_pair(0.9)
    a = kit.mem("a", embedding=a_vec)
    b = kit.mem("b", embedding=b_vec, retention_score=0.8)
    far = kit.mem("far", embedding=kit.unit(0.0, 0.0, 1.0))
    run = kit.run("InterferenceBasedConsolidation")
    entry = run.summary["evolvers"][0]
    assert entry["status"] == "ok", entry
    assert entry["stats"]["pairs"] == 1
    assert fresh(a).score.retention_score == pytest.approx(1.0 * (1 - 0.9 * 0.05), abs=1e-6)
    assert fresh(b).score.retention_score == pytest.approx(0.8 * (1 - 0.9 * 0.05), abs=1e-6)
    assert fresh(far).score.retention_score == 1.0
    assert "interference_checked" in fresh(far).metadata


def test_interference_is_incremental_only_new_memories_are_compared(kit: Any) -> None:
    a_vec, b_vec = kit.cosine_pair(0.9)
    a = kit.mem("a", embedding=a_vec)
    b = kit.mem("b", embedding=b_vec)
    kit.run("InterferenceBasedConsolidation")
    after_first = fresh(a).score.retention_score
    second = kit.run("InterferenceBasedConsolidation")
    assert second.summary["evolvers"][0]["stats"]["candidates"] == 0
    assert fresh(a).score.retention_score == after_first
    c = kit.mem("c", embedding=kit.unit(1.0, 0.01))
    third = kit.run("InterferenceBasedConsolidation")
    assert third.summary["evolvers"][0]["stats"]["candidates"] == 1
    assert fresh(c).score.retention_score < 1.0
    assert fresh(a).score.retention_score < after_first
    assert fresh(b).score.retention_score <= 1.0


def test_interference_below_threshold_leaves_scores(kit: Any) -> None:
    a_vec, b_vec = kit.cosine_pair(0.84)
    a = kit.mem("a", embedding=a_vec)
    kit.mem("b", embedding=b_vec)
    kit.run("InterferenceBasedConsolidation")
    assert fresh(a).score.retention_score == 1.0


def test_interference_rechecks_a_memory_whose_embedding_changed(kit: Any) -> None:
    a_vec, b_vec = kit.cosine_pair(0.95)
    a = kit.mem("a", embedding=a_vec)
    b = kit.mem("b", embedding=kit.unit(0.0, 1.0))
    kit.run("InterferenceBasedConsolidation")
    assert fresh(a).score.retention_score == 1.0
    Memory.objects.filter(id=b.id).update(embedding=b_vec)
    kit.run("InterferenceBasedConsolidation")
    assert fresh(a).score.retention_score == pytest.approx(1 - 0.95 * 0.05, abs=1e-6)


# -- RetrievalBasedStrengthening ------------------------------------------------------------------


def test_strengthening_boost_follows_the_formula_and_stores_the_profile(kit: Any) -> None:
    m = kit.mem("retrieved", retention_score=0.5, age_days=60)
    other = kit.mem("filler", age_days=60)
    for day in (1, 2, 3, 10, 20):
        kit.retrieve([other, m], age_days=day)  # m at rank 1
    kit.retrieve([m], source="get", age_days=0.5)
    kit.retrieve([m, other], source="inspector", age_days=0.5)  # dry reads never count
    kit.run("RetrievalBasedStrengthening")
    total, v7, v30 = 6, 4 / 7, 6 / 30
    avg_rank = 1.0
    expected = 0.5 + float(retrieval_boost(total, avg_rank, v7, v30))
    assert fresh(m).score.retention_score == pytest.approx(expected, abs=1e-9)
    profile = fresh(m).score.retrieval_profile
    assert profile["total_count"] == 6
    assert profile["search_count"] == 5
    assert profile["avg_search_rank"] == pytest.approx(1.0)
    assert profile["velocity_7d"] == pytest.approx(v7)
    assert profile["velocity_30d"] == pytest.approx(v30)
    assert profile["top1_count"] == 0
    assert profile["last_retrieved_at"] == (kit.NOW - timedelta(days=0.5)).isoformat(timespec="milliseconds")


def test_a_stored_profile_only_changes_when_its_counts_or_windows_do(kit: Any) -> None:
    m = kit.mem("retrieved", retention_score=0.5, age_days=60)
    kit.retrieve([m], age_days=2)
    kit.run("RetrievalBasedStrengthening")
    stored = fresh(m).score.retrieval_profile
    later = kit.run("RetrievalBasedStrengthening", now=kit.NOW + timedelta(hours=3))
    assert later.summary["evolvers"][0]["stats"]["profiles"] == 0
    assert fresh(m).score.retrieval_profile == stored
    week = kit.run("RetrievalBasedStrengthening", now=kit.NOW + timedelta(days=6))
    assert week.summary["evolvers"][0]["stats"]["profiles"] == 1
    assert fresh(m).score.retrieval_profile["velocity_7d"] == 0.0
    # Profiles are observations of the events, kept outside the records (evolution.retrieval_stats).
    assert all(set(r.after[str(m.id)]) == {"retention_score"} for r in EvolutionRecord.objects.filter(run=week))


def test_strengthening_reference_formula_values() -> None:
    assert float(retrieval_boost(10, 1.0, 2, 4)) == pytest.approx(0.059947, abs=1e-6)
    assert float(retrieval_boost(10, 0.0, 1, 1)) == pytest.approx(0.239789, abs=1e-6)


def test_unretrieved_memory_decays_gently_and_reruns_do_not_compound(kit: Any) -> None:
    m = kit.mem("never retrieved", age_days=90)
    kit.run("RetrievalBasedStrengthening")
    assert fresh(m).score.retention_score == pytest.approx(1 - 0.005 * 30, abs=1e-9)
    kit.run("RetrievalBasedStrengthening", now=kit.NOW + timedelta(days=1))
    assert fresh(m).score.retention_score == pytest.approx(0.85 * (1 - 0.005 * 1), abs=1e-9)


def test_young_unretrieved_memory_only_loses_its_own_age(kit: Any) -> None:
    m = kit.mem("two days old", age_days=2)
    kit.run("RetrievalBasedStrengthening")
    assert fresh(m).score.retention_score == pytest.approx(1 - 0.005 * 2, abs=1e-9)


# -- HebbianCoRetrieval ---------------------------------------------------------------------------


def test_hebbian_reference_count_ten_boosts_both_ends(kit: Any) -> None:
    a = kit.mem("a", retention_score=0.5)
    b = kit.mem("b", retention_score=0.6)
    for k in range(10):
        kit.retrieve([a, b], age_days=1 + k)
    run = kit.run("HebbianCoRetrieval")
    assert run.summary["evolvers"][0]["status"] == "ok", run.summary
    edge = kit.co_edge(a, b)
    assert edge is not None
    assert edge.co_retrieval_count == 10
    assert edge.first_co_retrieved_at == kit.NOW - timedelta(days=10)
    assert edge.last_co_retrieved_at == kit.NOW - timedelta(days=1)
    assert fresh(a).score.retention_score == pytest.approx(0.64, abs=1e-6)
    assert fresh(b).score.retention_score == pytest.approx(0.74, abs=1e-6)


def test_hebbian_caps_at_one_and_ignores_counts_below_three(kit: Any) -> None:
    a = kit.mem("a", retention_score=0.95)
    b = kit.mem("b", retention_score=0.5)
    c = kit.mem("c", retention_score=0.5)
    d = kit.mem("d", retention_score=0.5)
    for _ in range(10):
        kit.retrieve([a, b])
    for _ in range(2):
        kit.retrieve([c, d])
    kit.run("HebbianCoRetrieval")
    assert fresh(a).score.retention_score == 1.0
    assert fresh(c).score.retention_score == 0.5
    assert kit.co_edge(c, d).co_retrieval_count == 2


def test_hebbian_max_boost_setting(kit: Any, workspace: Workspace) -> None:
    workspace.evolution_settings = {"HebbianCoRetrieval": {"max_boost": 0.1}}
    workspace.save()
    a = kit.mem("a", retention_score=0.5)
    b = kit.mem("b", retention_score=0.5)
    for _ in range(10):
        kit.retrieve([a, b])
    kit.run("HebbianCoRetrieval")
    assert fresh(a).score.retention_score == pytest.approx(0.6, abs=1e-6)


def test_hebbian_boosts_each_node_once_by_its_strongest_edge(kit: Any) -> None:
    hub = kit.mem("hub", retention_score=0.5)
    b = kit.mem("b", retention_score=0.5)
    c = kit.mem("c", retention_score=0.5)
    for _ in range(10):
        kit.retrieve([hub, b])
    for _ in range(8):
        kit.retrieve([hub, c])
    kit.run("HebbianCoRetrieval")
    assert fresh(hub).score.retention_score == pytest.approx(0.64, abs=1e-6)
    assert fresh(c).score.retention_score == pytest.approx(0.6, abs=1e-6)


def test_hebbian_counts_only_used_sources_and_each_event_once(kit: Any) -> None:
    a = kit.mem("a")
    b = kit.mem("b")
    for _ in range(5):
        kit.retrieve([a, b], source="inspector")
    kit.retrieve([a, b], source="context")
    kit.retrieve([a, b], source="helpful")
    kit.run("HebbianCoRetrieval")
    assert kit.co_edge(a, b).co_retrieval_count == 2
    kit.run("HebbianCoRetrieval")
    assert kit.co_edge(a, b).co_retrieval_count == 2
    kit.retrieve([b, a])
    kit.run("HebbianCoRetrieval")
    assert kit.co_edge(a, b).co_retrieval_count == 3


def test_hebbian_increments_an_existing_edge_in_either_direction(kit: Any, workspace: Workspace) -> None:
    a = kit.mem("a")
    b = kit.mem("b")
    first = kit.NOW - timedelta(days=40)
    edge = Edge.objects.create(
        workspace=workspace,
        source=b,
        target=a,
        edge_type=EdgeType.CO_RETRIEVED,
        co_retrieval_count=4,
        first_co_retrieved_at=first,
        last_co_retrieved_at=first,
    )
    kit.retrieve([a, b], age_days=2)
    kit.run("HebbianCoRetrieval")
    edge.refresh_from_db()
    assert edge.co_retrieval_count == 5
    assert edge.first_co_retrieved_at == first
    assert edge.last_co_retrieved_at == kit.NOW - timedelta(days=2)
    assert Edge.objects.filter(edge_type=EdgeType.CO_RETRIEVED).count() == 1


def test_hebbian_rebuilds_snapshots_only_for_counts_that_change_a_weight_and_new_pairs_extend_them(
    kit: Any, workspace: Workspace
) -> None:
    def counters() -> tuple[int, int]:
        row = Workspace.objects.values_list("graph_generation", "graph_rewrites").get(pk=workspace.pk)
        return int(row[0]), int(row[1])

    a, b, c = kit.mem("a"), kit.mem("b"), kit.mem("c")
    seen_often = CO_RETRIEVED_FULL_COUNT
    Edge.objects.create(
        workspace=workspace, source=a, target=b, edge_type=EdgeType.CO_RETRIEVED, co_retrieval_count=seen_often
    )
    before = counters()
    kit.retrieve([a, b], age_days=2)
    kit.run("HebbianCoRetrieval")
    # The count moved, but the edge weighed its full weight already: snapshots stay as they are.
    assert counters() == before
    kit.retrieve([a, c], age_days=1)
    kit.run("HebbianCoRetrieval")
    # A new CO_RETRIEVED edge: snapshots append it (generation), nothing to rebuild (rewrites).
    assert counters() == (before[0] + 1, before[1])
    kit.retrieve([a, c], age_days=0.5)
    kit.run("HebbianCoRetrieval")
    # Its count moved from 1 to 2: its weight in a snapshot changed, the next read rebuilds.
    assert counters() == (before[0] + 2, before[1] + 1)


# -- EnhancedWorkingToEpisodic --------------------------------------------------------------------


def _working(kit: Any, n: int, *, chars: int = 50, age_hours: float = 0.1, text: str = "") -> list[Memory]:
    made = []
    for k in range(n):
        body = text or f"working note {k} " + "x" * chars
        made.append(kit.mem(body[:chars], memory_type="working", age_days=age_hours / 24 + k * 1e-6))
    return made


def test_working_buffer_below_adaptive_threshold_does_not_fire(kit: Any) -> None:
    _working(kit, 30)
    run = kit.run("EnhancedWorkingToEpisodic")
    stats = run.summary["evolvers"][0]["stats"]
    assert stats["threshold"] == 31
    assert stats["episodes"] == 0
    assert not Memory.objects.filter(memory_type="episodic").exists()


def test_working_buffer_at_threshold_consolidates_into_episodes(kit: Any) -> None:
    sources = _working(kit, 31, text="deploy the billing service to staging " + "y" * 20)
    run = kit.run("EnhancedWorkingToEpisodic")
    assert run.summary["evolvers"][0]["stats"]["threshold"] == 31
    episode = Memory.objects.get(memory_type="episodic")
    assert episode.origin == "evolver:EnhancedWorkingToEpisodic"
    assert episode.origin_tier == 2
    assert episode.embedding is not None
    assert episode.metadata["source_count"] == 31
    assert len(episode.metadata["promoted_from"]) == 31
    lines = episode.content.split("\n")
    assert len(lines) == 31
    assert all(line.startswith("[w=1.00] deploy the billing") for line in lines)
    derived = Edge.objects.filter(source=episode, edge_type=EdgeType.DERIVED_FROM)
    assert {e.target_id for e in derived} == {m.id for m in sources}
    for m in sources:
        m = fresh(m)
        assert m.status == "archived"
        assert m.metadata["promoted_to_episodic"] == str(episode.id)
    record = EvolutionRecord.objects.get(run=run, action="promote")
    assert record.after["created_memories"] == [str(episode.id)]
    assert sorted(record.after["created_edges"]) == sorted(e.pk for e in derived)


def test_dissimilar_or_distant_working_items_form_separate_episodes(kit: Any) -> None:
    for k in range(12):
        kit.mem(f"alpha beta gamma delta {k}", memory_type="working", age_days=0.01)
    for k in range(12):
        kit.mem(f"kubernetes ingress certificate renewal {k}", memory_type="working", age_days=0.01)
    for k in range(12):
        kit.mem(f"alpha beta gamma delta {k}", memory_type="working", age_days=0.2)
    kit.run("EnhancedWorkingToEpisodic")
    assert Memory.objects.filter(memory_type="episodic").count() == 3


def test_stale_working_cluster_is_archived_without_an_episode(kit: Any) -> None:
    stale = _working(kit, 40, age_hours=80)
    kit.run("EnhancedWorkingToEpisodic")
    assert not Memory.objects.filter(memory_type="episodic").exists()
    assert fresh(stale[0]).status == "archived"
    assert fresh(stale[0]).metadata["working_expired"] is True


def test_windowed_clustering_equals_cluster_working_on_large_buffers() -> None:
    rng = np.random.default_rng(11)
    words = ["deploy", "billing", "staging", "alert", "cpu", "disk", "jwt", "login", "cache", "queue"]
    items = []
    t = 1_700_000_000.0
    for k in range(1500):
        t += float(rng.exponential(40.0)) if rng.random() > 0.02 else 4000.0
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 6))))
        items.append(WorkingItem(index=k, content=text, created_at_ts=t))
    assert cluster_buffer(items, block=64) == cluster_working(items)


def test_an_episode_of_a_huge_buffer_stays_within_the_content_limit() -> None:
    from evolution.evolvers.enhanced import _bounded
    from memories.inputs import MAX_CONTENT_CHARS

    lines = [f"[w=1.00] note {k} " + "x" * 80 for k in range(3000)]
    bounded = _bounded("\n".join(lines))
    assert len(bounded) <= MAX_CONTENT_CHARS
    kept = bounded.split("\n")[:-1]
    assert kept == lines[: len(kept)]
    assert bounded.endswith(f"[... {3000 - len(kept)} more lines]")
    assert _bounded("short") == "short"
