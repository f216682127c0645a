"""Proposal services: create with dedupe, approve (as proposed or modified), reject, decided once."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import Conflict, InvalidInput, NotFound
from evolution.models import Proposal, ProposalStatus
from evolution.proposals import (
    proposal_approve,
    proposal_create,
    proposal_reject,
    register_proposal_applier,
)
from history.models import EvolutionRecord
from memories.models import Edge, EdgeType, Memory, Workspace
from memories.services import record_revert

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def summary_proposal(kit: Any, n: int = 3, **payload: Any) -> tuple[Proposal, list[Memory]]:
    sources = [kit.mem(f"event {k}", memory_type="event", subject="deploy", age_days=60) for k in range(n)]
    ids = [str(m.id) for m in sources]
    proposal, created = proposal_create(
        workspace=kit.workspace,
        kind="summary",
        title="Summarize deploy events",
        rationale="stale",
        payload={
            "memory_type": "fact",
            "subject": "deploy",
            "content": "deploys failed",
            "confidence": 0.7,
            "summarizes": ids,
            **payload,
        },
        source_ids=ids,
        dedupe_key="summary:test",
        created_by="SummaryEvolver",
    )
    assert created
    return proposal, sources


def test_create_with_a_known_dedupe_key_returns_the_existing_proposal(kit: Any) -> None:
    first, _ = summary_proposal(kit)
    again, created = proposal_create(
        workspace=kit.workspace, kind="summary", title="x", payload={}, dedupe_key="summary:test"
    )
    assert not created
    assert again.pk == first.pk


def test_create_refuses_an_unknown_kind(workspace: Workspace) -> None:
    with pytest.raises(InvalidInput, match="kind"):
        proposal_create(workspace=workspace, kind="nonsense", title="x", payload={})


def test_approve_applies_the_summary_and_records_who_and_when(kit: Any, user: Any) -> None:
    proposal, sources = summary_proposal(kit)
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, reason="looks right")
    assert approved.status == ProposalStatus.APPROVED
    assert approved.decided_by == user
    assert approved.decided_at is not None
    assert approved.decision_reason == "looks right"
    summary = Memory.objects.get(memory_type="fact")
    assert summary.content == "deploys failed"
    assert summary.metadata["proposal_id"] == proposal.pk
    assert summary.embedding is not None
    edges = Edge.objects.filter(source=summary, edge_type=EdgeType.SUMMARIZES)
    assert {e.target_id for e in edges} == {m.id for m in sources}
    record = approved.applied_record
    assert record is not None and record.action == "create" and record.actor_id == user.pk


def test_a_second_decision_is_a_conflict(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    with pytest.raises(Conflict) as info:
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert info.value.code == "already_decided"
    with pytest.raises(Conflict, match="already decided: approved"):
        proposal_reject(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert Memory.objects.filter(memory_type="fact").count() == 1


def test_reject_keeps_the_reason_and_applies_nothing(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    rows = kit.memory_rows()
    rejected = proposal_reject(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, reason="keep details")
    assert rejected.status == ProposalStatus.REJECTED
    assert rejected.decision_reason == "keep details"
    assert rejected.decided_by == user
    assert kit.memory_rows() == rows


def test_modify_then_approve_applies_the_edit_and_keeps_the_proposed_text(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    approved = proposal_approve(
        workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"content": "Three deploys failed."}
    )
    assert approved.status == ProposalStatus.MODIFIED
    assert approved.payload["content"] == "Three deploys failed."
    assert approved.payload["proposed"] == {"content": "deploys failed"}
    assert Memory.objects.get(memory_type="fact").content == "Three deploys failed."


def test_an_unchanged_payload_is_a_plain_approval(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    approved = proposal_approve(
        workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"content": "deploys failed"}
    )
    assert approved.status == ProposalStatus.APPROVED
    assert "proposed" not in approved.payload


def test_the_sources_of_a_summary_cannot_be_modified(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    with pytest.raises(InvalidInput, match=r"payload\.summarizes"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"summarizes": []})
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_a_blank_modified_content_is_refused_and_nothing_is_decided(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    with pytest.raises(InvalidInput, match=r"payload\.content"):
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, payload={"content": "  "})
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    assert not Memory.objects.filter(memory_type="fact").exists()


def test_a_stale_proposal_is_refused_whole(kit: Any, user: Any) -> None:
    proposal, sources = summary_proposal(kit)
    other = kit.mem("older summary", memory_type="fact")
    Memory.objects.filter(id=sources[1].id).update(summarized_by=other.id)
    with pytest.raises(Conflict) as info:
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert info.value.code == "stale_proposal"
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING
    assert Memory.objects.filter(memory_type="fact").count() == 1


def test_reverting_the_applied_summary_restores_every_row(kit: Any, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    rows = kit.memory_rows()
    edges = kit.edge_rows()
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert approved.applied_record is not None
    record_revert(workspace=kit.workspace, record_id=approved.applied_record.pk, actor=user)
    assert kit.memory_rows() == rows
    assert kit.edge_rows() == edges


def test_a_proposal_of_another_workspace_is_not_found(kit: Any, other_workspace: Workspace, user: Any) -> None:
    proposal, _ = summary_proposal(kit)
    with pytest.raises(NotFound):
        proposal_approve(workspace=other_workspace, proposal_id=proposal.pk, actor=user)
    with pytest.raises(NotFound):
        proposal_reject(workspace=kit.workspace, proposal_id="abc", actor=user)


def test_a_kind_without_an_applier_records_the_decision_only(kit: Any, user: Any) -> None:
    # Conflict questions are the kind that stays a decision only (merge, promotion and reflection now apply).
    proposal, _ = proposal_create(workspace=kit.workspace, kind="conflict", title="which rule?", payload={"ids": []})
    approved = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user)
    assert approved.status == ProposalStatus.APPROVED
    assert approved.applied_record is None
    assert not EvolutionRecord.objects.exists()


def test_one_applier_per_kind() -> None:
    with pytest.raises(ValueError, match="already have an applier"):
        register_proposal_applier("summary", lambda *args: None)
    with pytest.raises(ValueError, match="not a proposal kind"):
        register_proposal_applier("nonsense", lambda *args: None)


def test_bulk_create_skips_known_and_repeated_keys(workspace: Workspace) -> None:
    from django.utils import timezone

    from evolution.proposals import ProposalDraft, proposals_create

    proposal_create(workspace=workspace, kind="merge", title="old", payload={}, dedupe_key="k1")
    drafts = [
        ProposalDraft(kind="merge", title="a", payload={}, dedupe_key="k1"),
        ProposalDraft(kind="merge", title="b", payload={}, dedupe_key="k2"),
        ProposalDraft(kind="merge", title="c", payload={}, dedupe_key="k2"),
        ProposalDraft(kind="merge", title="d", payload={}),
    ]
    created = proposals_create(workspace=workspace, drafts=drafts, now=timezone.now())
    assert [p.title for p in created] == ["b", "d"]
    assert all(p.pk is not None and p.status == ProposalStatus.PENDING for p in created)
    assert Proposal.objects.count() == 3
