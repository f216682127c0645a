"""Edges that evolution writes or reverts reach a Bolt graph store too (FalkorDB from tests/services.py)."""

from __future__ import annotations

from typing import Any

import pytest

from evolution import services
from graph.bolt import Neo4jGraphStore
from history.models import EvolutionRecord
from memories.models import EdgeType, Memory, Status
from tests.evolution.conftest import EvolutionKit

pytestmark = [pytest.mark.services, pytest.mark.django_db]


def test_co_retrieved_edges_are_mirrored_and_a_revert_keeps_them(
    kit: EvolutionKit, mirrored: Neo4jGraphStore, django_capture_on_commit_callbacks: Any
) -> None:
    """CO_RETRIEVED edges are counted from the retrieval events (evolution.retrieval_stats), here by the
    Hebbian evolver's own catch-up: mirrored when counted, and kept by a revert of the run (they are what
    the events say, not what the run decided)."""
    a, b, c = (kit.mem(t) for t in ("alpha", "beta", "gamma"))
    kit.retrieve([a, b, c])
    with django_capture_on_commit_callbacks(execute=True):
        run = kit.run("HebbianCoRetrieval")
    pairs = {frozenset((a.id, b.id)), frozenset((a.id, c.id)), frozenset((b.id, c.id))}
    mirrored_edges = mirrored.read_edges(kit.workspace)
    assert {frozenset((s, t)) for s, t, kind in mirrored_edges if kind == EdgeType.CO_RETRIEVED} == pairs
    assert all(weight == 1.0 for weight in mirrored_edges.values())

    with django_capture_on_commit_callbacks(execute=True):
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert mirrored.read_edges(kit.workspace) == mirrored_edges


def test_episodes_link_their_sources_in_the_graph_and_a_revert_unlinks_them(
    kit: EvolutionKit, mirrored: Neo4jGraphStore, django_capture_on_commit_callbacks: Any
) -> None:
    # 31 working memories reach the adaptive threshold of an empty workspace's buffer.
    items = [
        kit.mem("deploy the billing service to staging " + "y" * 12, memory_type="working", age_days=0.004 + k * 1e-6)
        for k in range(31)
    ]
    with django_capture_on_commit_callbacks(execute=True):
        run = kit.run("EnhancedWorkingToEpisodic")
    derived = {(s, t) for s, t, kind in mirrored.read_edges(kit.workspace) if kind == EdgeType.DERIVED_FROM}
    assert derived, "the episode's DERIVED_FROM edges should be in the graph"
    assert {t for _, t in derived} == {m.id for m in items}

    assert EvolutionRecord.objects.filter(run=run).exists()
    with django_capture_on_commit_callbacks(execute=True):
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert mirrored.read_edges(kit.workspace) == {}
    assert set(kit.memory_rows()) == {m.id for m in items}
    assert set(Memory.objects.filter(id__in=[m.id for m in items]).values_list("status", flat=True)) == {Status.ACTIVE}
