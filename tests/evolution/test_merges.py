"""Merge proposals: approving supersedes the duplicates, one revertible record; rejecting changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from core.errors import Conflict, InvalidInput
from evolution.merges import merge_dedupe_key
from evolution.models import Proposal, ProposalStatus
from evolution.proposals import proposal_approve, proposal_create, proposal_reject
from memories.models import Edge, EdgeType, Memory, Status
from memories.services import record_revert

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def merge_proposal(kit: Any, n: int = 3) -> tuple[Proposal, list[Memory]]:
    rows = [
        kit.mem("The deploy runs on Fridays", tags=["deploy"], retention_score=0.4, age_days=3),
        kit.mem("the deploy runs on fridays.", tags=["ops", "deploy"], retention_score=0.9, age_days=2),
        kit.mem("The deploy runs on Fridays!", tags=["friday"], retention_score=0.2, age_days=1),
    ][:n]
    ids = [str(m.id) for m in rows]
    kit.run("DuplicateMerger")
    proposal = Proposal.objects.get(workspace=kit.workspace, kind="merge")
    assert proposal.payload["group"] == ids
    return proposal, rows


def fresh(m: Memory) -> Memory:
    return Memory.objects.get(pk=m.pk)


def test_approving_supersedes_the_others_and_the_kept_one_gets_all_tags_and_the_best_retention(
    kit: Any, user: Any
) -> None:
    proposal, (keep, b, c) = merge_proposal(kit)
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert approved.status == ProposalStatus.APPROVED
    for other in (b, c):
        row = fresh(other)
        assert row.status == Status.SUPERSEDED and row.superseded_by == keep.id
        assert Edge.objects.filter(source_id=keep.id, target_id=other.id, edge_type=EdgeType.SUPERSEDES).exists()
    kept = fresh(keep)
    assert kept.status == Status.ACTIVE
    assert kept.tags == ["deploy", "ops", "friday"]
    assert kept.score.retention_score == 0.9
    record = approved.applied_record
    assert record is not None and record.evolver == "DuplicateMerger" and record.action == "supersede"
    assert record.actor_id == user.pk and record.output_ids == [str(keep.id)]
    assert Memory.objects.filter(workspace=kit.workspace).count() == 3


def test_reverting_the_applied_record_restores_every_row_byte_for_byte(kit: Any, user: Any) -> None:
    proposal, _ = merge_proposal(kit)
    memories, edges = kit.memory_rows(), kit.edge_rows()
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert kit.memory_rows() != memories
    record_revert(workspace=kit.workspace, record_id=approved.applied_record_id, actor=user)
    assert kit.memory_rows() == memories
    assert kit.edge_rows() == edges


def test_a_second_approve_is_a_conflict_and_changes_nothing_more(kit: Any, user: Any) -> None:
    proposal, _ = merge_proposal(kit)
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    rows = kit.memory_rows()
    with pytest.raises(Conflict, match="already decided"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert kit.memory_rows() == rows


def test_a_memory_archived_since_the_proposal_makes_approval_a_conflict(kit: Any, user: Any) -> None:
    proposal, (_, b, _) = merge_proposal(kit)
    Memory.objects.filter(pk=b.pk).update(status=Status.ARCHIVED)
    rows = kit.memory_rows()
    with pytest.raises(Conflict, match="archived"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert kit.memory_rows() == rows
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_modify_then_approve_keeps_another_memory_and_leaves_one_out(kit: Any, user: Any) -> None:
    proposal, (a, b, c) = merge_proposal(kit)
    approved = proposal_approve(
        workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"keep": str(b.id), "merge": [str(a.id)]}
    )
    assert approved.status == ProposalStatus.MODIFIED
    assert approved.payload["proposed"] == {"keep": str(a.id), "merge": [str(b.id), str(c.id)]}
    assert fresh(a).superseded_by == b.id and fresh(a).status == Status.SUPERSEDED
    assert fresh(c).status == Status.ACTIVE
    assert fresh(b).tags == ["ops", "deploy"]


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"group": []}, "payload.group"),
        ({"keep": "00000000-0000-0000-0000-000000000000"}, "payload.keep"),
        ({"merge": []}, "payload.merge"),
    ],
)
def test_modifying_outside_the_group_is_refused(kit: Any, user: Any, changes: dict[str, Any], field: str) -> None:
    proposal, _ = merge_proposal(kit)
    with pytest.raises(InvalidInput) as caught:
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload=changes)
    assert caught.value.field == field


def test_the_kept_memory_cannot_also_be_merged(kit: Any, user: Any) -> None:
    proposal, (a, _, _) = merge_proposal(kit)
    with pytest.raises(InvalidInput, match="kept memory"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"merge": [str(a.id)]})


def test_rejecting_keeps_the_reason_and_changes_no_memory(kit: Any, user: Any) -> None:
    proposal, _ = merge_proposal(kit)
    rows = kit.memory_rows()
    rejected = proposal_reject(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, reason="both matter")
    assert rejected.status == ProposalStatus.REJECTED and rejected.decision_reason == "both matter"
    assert kit.memory_rows() == rows


def test_an_existing_supersedes_edge_is_not_duplicated_and_revert_keeps_it(kit: Any, user: Any) -> None:
    proposal, (a, b, _) = merge_proposal(kit)
    Edge.objects.create(workspace=kit.workspace, source=a, target=b, edge_type=EdgeType.SUPERSEDES)
    edges = kit.edge_rows()
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert Edge.objects.filter(source=a, target=b, edge_type=EdgeType.SUPERSEDES).count() == 1
    record_revert(workspace=kit.workspace, record_id=approved.applied_record_id, actor=user)
    assert kit.edge_rows() == edges


def test_the_rest_api_lists_approves_and_refuses_a_second_decision(api: APIClient, kit: Any) -> None:
    proposal, (a, b, _) = merge_proposal(kit)
    base = "/api/v1/workspaces/acme/proposals/"
    (item,) = api.get(base + "?status=pending").json()["results"]
    assert item["kind"] == "merge" and item["payload"]["keep"] == str(a.id)
    response = api.post(f"{base}{proposal.pk}/approve/", {}, format="json")
    assert response.status_code == 200, response.content
    assert fresh(b).status == Status.SUPERSEDED
    assert api.post(f"{base}{proposal.pk}/approve/", {}, format="json").status_code == 409


def test_the_dedupe_key_does_not_depend_on_the_order_of_ids() -> None:
    assert merge_dedupe_key(["b", "a"]) == merge_dedupe_key(["a", "b"])


def test_a_hand_made_merge_proposal_without_a_group_is_refused(kit: Any, user: Any) -> None:
    proposal, _ = proposal_create(workspace=kit.workspace, kind="merge", title="x", payload={})
    with pytest.raises(InvalidInput, match=r"payload\.group"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
