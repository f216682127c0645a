"""FORGOTTEN by workspace policy: off by default, proposed by the ladder, applied only when a person approves
(through the service or the proposal page), one revertible record, never for what a person wrote."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from core.errors import Conflict, InvalidInput
from evolution import services
from evolution.models import Proposal, ProposalKind, ProposalStatus
from evolution.proposals import proposal_approve, proposal_reject
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.algorithms.embedding import to_bytes
from memories.embedding_service import pending_vectors
from memories.embeddings import default_embedder
from memories.models import CompressionTier, Memory, Status, Workspace
from memories.selectors import lexical_search
from memories.vectorindex import vector_search
from surfacing.settings import validate_evolution_changes
from tests.evolution.conftest import NOW

pytestmark = [pytest.mark.django_db, pytest.mark.api]

TEXT = "The deploy of the billing service moved to Thursdays after the March outage; Bob owns the runbook."


def tombstone(kit: Any, *, age_days: float = 400.0, **fields: Any) -> Memory:
    """An agent's memory already compressed to TOMBSTONE, unused since it was made."""
    values: dict[str, Any] = {
        "origin": "agent:bot",
        "origin_tier": 2,
        "memory_type": "episodic",
        "activation_score": 0.2,
        "compression_tier": CompressionTier.TOMBSTONE,
        "snapshots": [{"tier": 0, "content": TEXT, "at": (NOW - timedelta(days=100)).isoformat()}],
        **fields,
    }
    memory: Memory = kit.mem(f"[compressed: {len(TEXT)} chars original]", age_days=age_days, **values)
    return memory


def policy(workspace: Workspace, **settings: Any) -> Workspace:
    workspace.evolution_settings = {"compression_enabled": True, "forgotten_enabled": True, **settings}
    workspace.save()
    return workspace


def forget_proposals(workspace: Workspace) -> list[Proposal]:
    return list(Proposal.objects.filter(workspace=workspace, kind=ProposalKind.FORGET).order_by("id"))


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def test_without_the_policy_a_tombstone_stays_a_tombstone_and_nothing_is_proposed(kit: Any) -> None:
    kit.workspace.evolution_settings = {"compression_enabled": True}
    kit.workspace.save()
    old = tombstone(kit)
    run = kit.run("CompressionLadder")
    assert fresh(old).compression_tier == CompressionTier.TOMBSTONE
    assert forget_proposals(kit.workspace) == []
    assert "forget_proposed" not in run.summary["evolvers"][0]["stats"]


def test_the_policy_proposes_old_cold_tombstones_and_changes_nothing_until_approved(kit: Any) -> None:
    policy(kit.workspace)
    old = tombstone(kit, age_days=200)
    young = tombstone(kit, age_days=100)
    used = tombstone(kit, activation_last_boost_at=NOW - timedelta(days=1))
    rows = kit.memory_rows()
    run = kit.run("CompressionLadder")
    assert kit.memory_rows() == rows
    (proposal,) = forget_proposals(kit.workspace)
    assert proposal.status == ProposalStatus.PENDING
    assert proposal.source_ids == [str(old.id)]
    assert proposal.payload["forget_after_days"] == 180.0
    assert str(young.id) not in proposal.source_ids and str(used.id) not in proposal.source_ids
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "flag" and record.after["proposal_id"] == proposal.pk
    # Proposed once: the next cycle does not ask again.
    kit.run("CompressionLadder")
    assert len(forget_proposals(kit.workspace)) == 1


def test_a_dry_run_records_the_proposal_it_would_make_without_making_it(kit: Any) -> None:
    policy(kit.workspace)
    tombstone(kit)
    run = kit.run("CompressionLadder", dry_run=True)
    assert forget_proposals(kit.workspace) == []
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.dry_run and "proposal_id" not in record.after
    assert run.summary["evolvers"][0]["stats"]["forget_candidates"] == 1


def test_the_policy_age_is_a_workspace_setting(kit: Any) -> None:
    policy(kit.workspace, forget_after_days=60)
    memory = tombstone(kit, age_days=90)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    assert proposal.source_ids == [str(memory.id)]


def test_what_a_person_wrote_is_never_proposed_nor_forgotten(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    mine = tombstone(kit, origin="user:alice", origin_tier=1)
    agent = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    assert proposal.source_ids == [str(agent.id)]
    # Even a proposal that names one (a hand-made or edited one) leaves it as it is.
    Proposal.objects.filter(pk=proposal.pk).update(
        source_ids=[str(agent.id), str(mine.id)], payload={**proposal.payload, "forget": [str(agent.id), str(mine.id)]}
    )
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert fresh(mine).compression_tier == CompressionTier.TOMBSTONE and fresh(mine).status == Status.ACTIVE
    assert fresh(agent).compression_tier == CompressionTier.FORGOTTEN


def test_approving_forgets_the_memory_as_one_record_that_reverts_byte_for_byte(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit, status=Status.ARCHIVED, tags=["ops"])
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    rows = kit.memory_rows()
    decided = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    forgotten = fresh(memory)
    assert forgotten.compression_tier == CompressionTier.FORGOTTEN
    assert forgotten.status == Status.FORGOTTEN
    assert forgotten.content == "" and forgotten.snapshots == []
    assert forgotten.tags == ["ops"]
    record = decided.applied_record
    assert record is not None and record.action == "compress" and record.actor_id == user.pk
    assert record.evolver == "CompressionLadder"
    assert f"forget proposal {proposal.pk} approved by {user.get_username()}" in record.reason
    assert record.before[str(memory.id)]["snapshots"][0]["content"] == TEXT
    memory_services.record_revert(workspace=kit.workspace, record_id=record.pk, actor=user)
    assert kit.memory_rows() == rows


def test_a_memory_used_since_the_proposal_is_left_as_it_is(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    used, cold = tombstone(kit), tombstone(kit, age_days=300)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    Memory.objects.filter(pk=used.pk).update(activation_score=0.55, activation_last_boost_at=NOW)
    decided = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert fresh(used).compression_tier == CompressionTier.TOMBSTONE
    assert fresh(cold).compression_tier == CompressionTier.FORGOTTEN
    assert decided.applied_record is not None
    assert f"left as they are: {used.id} (activation 0.550 now" in decided.applied_record.reason


def test_approving_when_nothing_is_left_to_forget_is_refused_and_changes_nothing(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    memory_services.memory_rehydrate(workspace=kit.workspace, memory=fresh(memory), actor=user)
    with pytest.raises(Conflict) as refused:
        proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert refused.value.code == "stale_proposal"
    assert "not TOMBSTONE" in str(refused.value)
    assert Proposal.objects.get(pk=proposal.pk).status == ProposalStatus.PENDING


def test_a_rejected_tombstone_is_not_proposed_again(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    proposal_reject(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, reason="keep it")
    kit.run("CompressionLadder", now=NOW + timedelta(days=30))
    assert forget_proposals(kit.workspace) == [Proposal.objects.get(pk=proposal.pk)]
    assert fresh(memory).compression_tier == CompressionTier.TOMBSTONE


def test_a_forgotten_memory_leaves_the_search(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    query = "compressed chars original"
    assert memory.id in found(kit.workspace, query, statuses=None)
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert memory.id not in found(kit.workspace, query)
    # Its content is gone from the index too, not only filtered out by status.
    assert memory.id not in found(kit.workspace, query, statuses=None)


def test_a_forgotten_memory_drops_its_vector_and_a_revert_brings_it_back(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    embedder = default_embedder()
    vector = embedder.embed([TEXT])[0]
    memory = tombstone(kit, embedding=to_bytes(vector))
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    assert memory.id in near(kit.workspace, vector)
    decided = proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    forgotten = fresh(memory)
    assert (forgotten.embedding, forgotten.embedding_model) == (None, "")
    assert forgotten.embedded_at is not None  # a vector write: not left waiting for the embed job
    assert memory.id not in near(kit.workspace, vector)
    record = decided.applied_record
    assert record is not None
    memory_services.record_revert(workspace=kit.workspace, record_id=record.pk, actor=user)
    back = fresh(memory)
    assert (bytes(back.embedding), back.embedding_model) == (to_bytes(vector), embedder.name)
    assert memory.id in near(kit.workspace, vector)


def test_a_forgotten_memory_without_a_vector_is_not_embedded_from_its_empty_text(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    assert pending_vectors(workspace=kit.workspace).filter(id=memory.id).exists()
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    assert not pending_vectors(workspace=kit.workspace).filter(id=memory.id).exists()


def near(workspace: Workspace, vector: Any) -> set[Any]:
    workspace.refresh_from_db()
    return {mid for mid, _ in vector_search(workspace=workspace, vector=vector, model=default_embedder().name)}


def found(workspace: Workspace, query: str, statuses: Any = ("active",)) -> set[Any]:
    return {mid for mid, _ in lexical_search(workspace=workspace, query=query, limit=10, statuses=statuses)}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"forgotten_enabled": "yes"}, "evolution.forgotten_enabled"),
        ({"forget_after_days": 0}, "evolution.forget_after_days"),
        ({"forget_after_days": True}, "evolution.forget_after_days"),
    ],
)
def test_the_policy_settings_are_validated(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as bad:
        validate_evolution_changes(changes)
    assert bad.value.field == field


def test_the_policy_is_off_by_default() -> None:
    assert validate_evolution_changes({"forgotten_enabled": True}) == {"forgotten_enabled": True}
    from surfacing.settings import evolution_defaults

    assert evolution_defaults()["forgotten_enabled"] is False
    assert evolution_defaults()["forget_after_days"] == 180.0


def test_a_person_approves_forgetting_on_the_proposal_page_and_can_revert_the_run(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    run = kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    browser = Client()
    browser.force_login(user)
    page = browser.get("/w/acme/evolution/proposals/").content.decode()
    card = page[page.index(f'id="proposal-{proposal.pk}"') :]
    card = card[: card.index("</article>")]
    assert "Nothing is deleted" in card and "FORGOTTEN" in card
    assert f'href="/w/acme/memories/{memory.id}/"' in card
    rows = kit.memory_rows()
    response = browser.post(
        f"/w/acme/evolution/proposals/{proposal.pk}/approve/",
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET=f"proposal-{proposal.pk}",
    )
    assert response.status_code == 200 and "approved" in response.content.decode()
    assert fresh(memory).compression_tier == CompressionTier.FORGOTTEN
    record = Proposal.objects.get(pk=proposal.pk).applied_record
    assert record is not None
    memory_services.record_revert(workspace=kit.workspace, record_id=record.pk, actor=user)
    assert kit.memory_rows() == rows
    # The run that proposed it reverts too: the proposal record changed no memory.
    services.run_revert(workspace=kit.workspace, run=run, actor=user)
    assert kit.memory_rows() == rows


def test_a_forgotten_memory_is_brought_back_by_revert_not_by_rehydrate(kit: Any, user: Any) -> None:
    policy(kit.workspace)
    memory = tombstone(kit)
    kit.run("CompressionLadder")
    (proposal,) = forget_proposals(kit.workspace)
    proposal_approve(workspace=kit.workspace, proposal_id=proposal.pk, actor=user, now=NOW)
    with pytest.raises(Conflict) as refused:
        memory_services.memory_rehydrate(workspace=kit.workspace, memory=fresh(memory), actor=user)
    assert refused.value.code == "forgotten" and "revert that record" in str(refused.value)
    assert fresh(memory).status == Status.FORGOTTEN
    # Its page does not offer what would be refused; it says how the memory comes back.
    client = Client()
    client.force_login(user)
    page = client.get(f"/w/{kit.workspace.slug}/memories/{memory.id}/").content.decode()
    assert 'id="rehydrate"' not in page
    assert "revert that step in its history below to bring it back" in page
