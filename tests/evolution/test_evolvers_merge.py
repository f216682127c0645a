"""DuplicateMerger: near-duplicate groups become merge proposals, once, within one workspace."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evolution.evolvers import default_cycle, resolve_names
from evolution.models import Proposal, ProposalStatus
from evolution.proposals import proposal_reject
from history.models import EvolutionRecord
from memories.algorithms.embedding import to_bytes
from memories.embeddings import default_embedder
from memories.models import Memory, Workspace

pytestmark = pytest.mark.django_db


def vec(cos: float) -> bytes:
    """A unit vector of the default embedder's size at cosine `cos` to the first axis."""
    v = np.zeros(default_embedder().dim, dtype=np.float64)
    v[0], v[1] = cos, np.sqrt(max(0.0, 1.0 - cos * cos))
    return to_bytes(v)


def pair(kit: Any, cos: float = 0.97, **fields: Any) -> tuple[Memory, Memory]:
    a = kit.mem("The deploy runs on Fridays", embedding=vec(1.0), age_days=3, **fields)
    b = kit.mem("Deploys happen every Friday", embedding=vec(cos), age_days=2, **fields)
    return a, b


def merge_proposals(ws: Workspace) -> list[Proposal]:
    return list(Proposal.objects.filter(workspace=ws, kind="merge").order_by("id"))


def test_near_duplicates_become_one_pending_merge_proposal_and_memories_are_untouched(kit: Any) -> None:
    a, b = pair(kit)
    before = kit.memory_rows()
    run = kit.run("DuplicateMerger")
    (proposal,) = merge_proposals(kit.workspace)
    assert proposal.status == ProposalStatus.PENDING
    assert proposal.payload["keep"] == str(a.id) and proposal.payload["merge"] == [str(b.id)]
    assert proposal.payload["group"] == [str(a.id), str(b.id)]
    assert proposal.payload["similarity"][str(b.id)] == pytest.approx(0.97, abs=1e-6)
    assert proposal.payload["after"][str(b.id)] == {"status": "superseded", "superseded_by": str(a.id)}
    assert proposal.source_ids == [str(a.id), str(b.id)]
    assert "cosine 0.9700" in proposal.rationale
    assert kit.memory_rows() == before
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "flag" and record.after["proposal_id"] == proposal.pk


def test_identical_normalised_content_is_proposed_without_embeddings(kit: Any) -> None:
    a = kit.mem("Use tabs, not spaces.", age_days=3)
    b = kit.mem("use TABS not spaces", age_days=2)
    kit.run("DuplicateMerger")
    (proposal,) = merge_proposals(kit.workspace)
    assert proposal.payload["identical"] == [str(b.id)] and proposal.payload["keep"] == str(a.id)


def test_below_the_threshold_nothing_is_proposed_and_the_threshold_is_a_setting(kit: Any) -> None:
    pair(kit, cos=0.9)
    kit.run("DuplicateMerger")
    assert merge_proposals(kit.workspace) == []
    kit.workspace.evolution_settings = {"DuplicateMerger": {"threshold": 0.85}}
    kit.workspace.save()
    kit.run("DuplicateMerger")
    assert len(merge_proposals(kit.workspace)) == 1


def test_rerunning_creates_no_second_proposal_for_a_pending_group(kit: Any) -> None:
    pair(kit)
    kit.run("DuplicateMerger")
    run = kit.run("DuplicateMerger")
    assert len(merge_proposals(kit.workspace)) == 1
    assert not EvolutionRecord.objects.filter(run=run).exists()


def test_a_rejected_group_is_not_proposed_again(kit: Any) -> None:
    pair(kit)
    kit.run("DuplicateMerger")
    (proposal,) = merge_proposals(kit.workspace)
    proposal_reject(workspace=kit.workspace, proposal_id=proposal.pk, actor=kit.user, reason="both matter")
    kit.run("DuplicateMerger")
    assert [p.status for p in merge_proposals(kit.workspace)] == ["rejected"]


def test_a_memory_in_a_pending_merge_joins_no_other_group(kit: Any) -> None:
    pair(kit)
    kit.run("DuplicateMerger")
    kit.mem("Friday deploys", embedding=vec(0.99), age_days=1)
    kit.run("DuplicateMerger")
    assert len(merge_proposals(kit.workspace)) == 1


def test_pinned_and_inactive_memories_are_never_proposed(kit: Any) -> None:
    kit.mem("same words", pinned=True, age_days=3)
    kit.mem("same words", age_days=2)
    kit.mem("other words", status="archived", age_days=3)
    kit.mem("other words", age_days=2)
    kit.run("DuplicateMerger")
    assert merge_proposals(kit.workspace) == []


def test_another_workspace_s_memories_never_appear(kit: Any, other_workspace: Workspace) -> None:
    kit.mem("The deploy runs on Fridays", embedding=vec(1.0))
    kit.mem("The deploy runs on Fridays", embedding=vec(1.0), ws=other_workspace)
    kit.run("DuplicateMerger")
    assert merge_proposals(kit.workspace) == []
    kit.mem("The deploy runs on Fridays.", embedding=vec(0.99), ws=other_workspace)
    kit.run("DuplicateMerger", ws=other_workspace)
    (proposal,) = merge_proposals(other_workspace)
    own = set(Memory.objects.filter(workspace=other_workspace).values_list("id", flat=True))
    assert {str(i) for i in own} == set(proposal.source_ids)


def test_memories_of_different_types_are_not_merged(kit: Any) -> None:
    kit.mem("same words", memory_type="fact")
    kit.mem("same words", memory_type="preference")
    kit.run("DuplicateMerger")
    assert merge_proposals(kit.workspace) == []


def test_a_dry_run_proposes_nothing_but_previews_the_group(kit: Any) -> None:
    pair(kit)
    run = kit.run("DuplicateMerger", dry_run=True)
    assert merge_proposals(kit.workspace) == []
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.dry_run and record.after["payload"]["merge"]


def test_the_merger_runs_only_when_named() -> None:
    assert "DuplicateMerger" not in default_cycle()
    assert resolve_names(["duplicatemerger"]) == ["DuplicateMerger"]
