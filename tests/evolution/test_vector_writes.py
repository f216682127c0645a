"""Evolution's vector writes name their model and stamp it; its comparisons read one model's vectors only."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from history.models import EvolutionRecord
from memories import services
from memories.algorithms.embedding import to_bytes
from memories.embeddings import default_embedder
from memories.models import Memory, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

SITE = default_embedder().name


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def generation(workspace: Workspace) -> int:
    return int(Workspace.objects.values_list("vector_generation", flat=True).get(pk=workspace.pk))


def test_an_episode_made_from_working_memories_names_its_model(kit: Any, workspace: Workspace) -> None:
    for k in range(31):
        kit.mem("deploy the billing service to staging", memory_type="working", age_days=0.004 + k * 1e-6)
    before = generation(workspace)
    kit.run("EnhancedWorkingToEpisodic")
    episode = Memory.objects.get(memory_type="episodic")
    assert episode.embedding_model == SITE and episode.embedded_at is not None
    assert generation(workspace) == before + 1


def test_a_derived_semantic_memory_names_its_model(kit: Any) -> None:
    kit.mem("We chose JWT for the API", memory_type="episodic", confidence=0.95, age_days=4, subject="auth")
    kit.run("EpisodicToSemantic")
    semantic = Memory.objects.get(memory_type="semantic")
    assert semantic.embedding_model == SITE and semantic.embedded_at is not None


def test_a_replace_moves_the_vector_with_its_model_and_a_revert_stamps_the_old_one_anew(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    Memory.objects.filter(id=first.id).update(embedding_model="hashing:256-old")
    second = make_memory("uses emacs", memory_type="preference", subject="editor")
    holder = fresh(first)
    assert (holder.embedding, holder.embedding_model) == (fresh(second).embedding, SITE)
    assert holder.embedded_at == fresh(second).embedded_at
    (record,) = EvolutionRecord.objects.filter(evolver="WritePolicy")
    before = generation(workspace)
    services.record_revert(workspace=workspace, record_id=record.pk, actor=None)
    reverted = fresh(first)
    assert reverted.embedding_model == "hashing:256-old"
    assert reverted.embedded_at is not None and holder.embedded_at is not None
    assert reverted.embedded_at > holder.embedded_at
    assert generation(workspace) == before + 1


def test_interference_compares_only_vectors_of_the_workspace_model(kit: Any) -> None:
    a_vec, b_vec = kit.cosine_pair(0.95)
    a = kit.mem("a", embedding=a_vec)
    b = kit.mem("b", embedding=b_vec, embedding_model="hashing:4")
    run = kit.run("InterferenceBasedConsolidation")
    assert run.summary["evolvers"][0]["stats"]["pairs"] == 0
    assert fresh(a).score.retention_score == 1.0 and fresh(b).score.retention_score == 1.0


def test_the_goal_resolver_embeds_anew_a_memory_whose_vector_is_of_another_model(kit: Any) -> None:
    dim = default_embedder().dim
    same = np.zeros(dim)
    same[0] = 1.0
    # Stored vectors say "identical", but one is labelled with another model: it is embedded from its
    # words instead, which have nothing in common with the goal's.
    goal = kit.mem("ship the billing service", memory_type="goal", embedding=to_bytes(same))
    kit.mem("grandma bakes apple pie", memory_type="event", embedding=to_bytes(same), embedding_model="other:256")
    kit.run("GoalResolver")
    assert fresh(goal).status == Status.ACTIVE


def test_the_duplicate_merger_does_not_compare_vectors_of_two_models(kit: Any) -> None:
    dim = default_embedder().dim
    same = np.zeros(dim)
    same[0] = 1.0
    kit.mem("The deploy runs on Fridays", embedding=to_bytes(same), age_days=3)
    kit.mem("Lunch is at noon", embedding=to_bytes(same), embedding_model="other:256", age_days=2)
    run = kit.run("DuplicateMerger")
    assert run.summary["evolvers"][0]["stats"]["groups"] == 0
