"""Properties of the enhanced cycle over generated workspaces (hypothesis).

- a dry run changes no Memory or Edge row;
- apply then revert of the run restores every Memory and Edge row exactly (all fields, bytes as bytes), but
  the retrieval observations (profiles, CO_RETRIEVED edges), which it keeps as the run left them;
- retention and stored activation stay in [0, 1];
- no evolver hard-deletes: row counts never drop while applying.
"""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evolution import services
from memories.algorithms.embedding import to_bytes
from memories.bulk import bulk_insert
from memories.models import Edge, EdgeType, Memory, MemoryScore, RetrievalEvent, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

_slugs = itertools.count()
WORDS = ["deploy", "billing", "jwt", "login", "cache", "queue", "disk", "alert", "retry", "schema"]

memory_spec = st.fixed_dictionaries(
    {
        "memory_type": st.sampled_from(["working", "episodic", "semantic", "fact"]),
        "age_days": st.one_of(st.floats(0.0, 0.04), st.floats(0.0, 120.0)),
        "accessed_days": st.one_of(st.none(), st.floats(0.0, 100.0)),
        "retention": st.floats(0.0, 1.0),
        "topic": st.integers(0, 3),
        "words": st.lists(st.sampled_from(WORDS), min_size=1, max_size=5),
        "embedded": st.booleans(),
        "pinned": st.booleans(),
        "metadata": st.dictionaries(st.sampled_from(["ref", "note"]), st.integers(0, 9), max_size=2),
    }
)
workspace_spec = st.fixed_dictionaries(
    {
        "memories": st.lists(memory_spec, min_size=2, max_size=45),
        "result_sets": st.lists(
            st.tuples(
                st.lists(st.integers(0, 44), min_size=1, max_size=5),
                st.sampled_from(["search", "get", "context", "helpful", "inspector"]),
                st.floats(0.0, 40.0),
            ),
            max_size=25,
        ),
        "edges": st.lists(st.tuples(st.integers(0, 44), st.integers(0, 44), st.integers(1, 9)), max_size=8),
        "working_burst": st.integers(0, 40),
        "noise_seed": st.integers(0, 2**16),
    }
)


def build(kit: Any, spec: dict[str, Any]) -> Workspace:
    ws = Workspace.objects.create(slug=f"prop-{next(_slugs)}", name="prop")
    rng = np.random.default_rng(spec["noise_seed"])
    topics = rng.normal(size=(4, 8))
    memories = []
    for k, m in enumerate(spec["memories"]):
        created = kit.NOW - timedelta(days=m["age_days"], microseconds=k)
        vector = topics[m["topic"]] + rng.normal(scale=0.05, size=8)
        memory = Memory(
            id=uuid.uuid4(),
            workspace=ws,
            memory_type=m["memory_type"],
            content=" ".join(m["words"]) + f" #{k}",
            pinned=m["pinned"],
            created_at=created,
            updated_at=created,
            last_accessed=(kit.NOW - timedelta(days=m["accessed_days"])) if m["accessed_days"] is not None else None,
            embedding=to_bytes(vector / np.linalg.norm(vector)) if m["embedded"] else None,
            metadata=m["metadata"],
        )
        memory.score = MemoryScore(retention_score=m["retention"])
        memories.append(memory)
    for k in range(spec["working_burst"]):
        created = kit.NOW - timedelta(minutes=float(rng.uniform(0, 90)))
        words = " ".join(rng.choice(WORDS, size=4))
        memories.append(
            Memory(
                workspace=ws,
                memory_type="working",
                content=f"{words} burst {k}",
                created_at=created,
                updated_at=created,
                tags=["burst"],
            )
        )
    bulk_insert(Memory, memories)  # the fast-write path: each memory with its scores row
    n = len(memories)
    events = []
    for members, source, age in spec["result_sets"]:
        result_set = uuid.uuid4()
        for rank, index in enumerate(members):
            events.append(
                RetrievalEvent(
                    workspace=ws,
                    memory=memories[index % n],
                    result_set=result_set,
                    rank=rank,
                    source=source,
                    created_at=kit.NOW - timedelta(days=age),
                )
            )
    RetrievalEvent.objects.bulk_create(events)
    Edge.objects.bulk_create(
        [
            Edge(
                workspace=ws,
                source=memories[a % n],
                target=memories[b % n],
                edge_type=EdgeType.CO_RETRIEVED,
                co_retrieval_count=count,
                first_co_retrieved_at=kit.NOW - timedelta(days=50),
                last_co_retrieved_at=kit.NOW - timedelta(days=45),
            )
            for a, b, count in spec["edges"]
            if a % n != b % n
        ],
        ignore_conflicts=True,
    )
    return ws


def bounded(ws: Workspace) -> bool:
    values = Memory.objects.filter(workspace=ws).values_list("score__retention_score", "activation_score")
    return all(0.0 <= r <= 1.0 and 0.0 <= a <= 1.0 for r, a in values)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=workspace_spec)
def test_dry_run_changes_no_row(kit: Any, spec: dict[str, Any]) -> None:
    ws = build(kit, spec)
    memories, edges = kit.memory_rows(ws), kit.edge_rows(ws)
    run = kit.run(dry_run=True, ws=ws)
    assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
    assert kit.memory_rows(ws) == memories
    assert kit.edge_rows(ws) == edges


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=workspace_spec)
def test_apply_then_revert_restores_every_row_exactly(kit: Any, spec: dict[str, Any]) -> None:
    ws = build(kit, spec)
    memories, edges = kit.memory_rows(ws, observations=False), kit.edge_rows(ws, observations=False)
    run = kit.run(ws=ws)
    assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
    assert Memory.objects.filter(workspace=ws).count() >= len(memories)
    assert Edge.objects.filter(workspace=ws).count() >= len(edges)
    assert bounded(ws)
    observed = kit.observation_rows(ws, among=memories)
    services.run_revert(workspace=ws, run=run, actor=kit.user)
    assert kit.memory_rows(ws, observations=False) == memories
    assert kit.edge_rows(ws, observations=False) == edges
    # Retrieval profiles and CO_RETRIEVED counts are observations of the events: the revert keeps them.
    assert kit.observation_rows(ws, among=memories) == observed


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=workspace_spec, days=st.lists(st.floats(0.01, 20.0), min_size=2, max_size=4))
def test_repeated_cycles_keep_scores_bounded_and_never_delete(
    kit: Any, spec: dict[str, Any], days: list[float]
) -> None:
    ws = build(kit, spec)
    counts = (Memory.objects.filter(workspace=ws).count(), Edge.objects.filter(workspace=ws).count())
    now = kit.NOW
    for step in days:
        now += timedelta(days=step)
        run = kit.run(ws=ws, now=now)
        assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
        current = (Memory.objects.filter(workspace=ws).count(), Edge.objects.filter(workspace=ws).count())
        assert current[0] >= counts[0] and current[1] >= counts[1]
        counts = current
        assert bounded(ws)
