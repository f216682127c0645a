"""Compression ladder over a real database: opt-in, tiers by stored activation, snapshots,
protected memories, LLM client use and failure, rehydrate and exact revert."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client

from evolution import services
from evolution.algorithms.text import join_phrases, key_phrases
from evolution.evolvers import compression
from evolution.evolvers.compression import CompressionLadder
from evolution.llm import FakeClient, LLMError
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.models import CompressionTier, Memory, Workspace
from tests.evolution.conftest import NOW

pytestmark = [pytest.mark.django_db, pytest.mark.api]

TEXT = (
    "The team met on Monday to review the billing outage. Alice Chen decided to move invoices to "
    "PostgreSQL 15 because SQLite locked under 400 writes per second. Lunch was pizza. Bob said the "
    "weather was nice. The migration must finish by March 3 and will cost 2 engineer weeks. Everyone "
    "agreed the dashboards looked fine and nobody had other comments about the plan or the room."
)


@pytest.fixture
def enabled(workspace: Workspace) -> Workspace:
    workspace.evolution_settings = {"compression_enabled": True}
    workspace.save()
    return workspace


def agent_memory(kit: Any, activation: float, age_days: float = 5.0, **fields: Any) -> Memory:
    """An agent's memory whose activation is ``activation`` at the run's time (boosted to it just now)."""
    values = {
        "origin": "agent:bot",
        "origin_tier": 2,
        "activation_score": activation,
        "activation_last_boost_at": NOW,
        **fields,
    }
    memory: Memory = kit.mem(TEXT, memory_type="episodic", age_days=age_days, **values)
    return memory


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def test_compression_is_off_unless_the_workspace_opts_in(kit: Any) -> None:
    agent_memory(kit, 0.01, age_days=60)
    rows = kit.memory_rows()
    run = kit.run("CompressionLadder")
    assert kit.memory_rows() == rows
    assert run.summary["evolvers"][0]["stats"]["enabled"] == 0


def test_reference_tiers_by_activation_at_the_run_time(kit: Any, enabled: Workspace) -> None:
    warm = agent_memory(kit, 0.40)
    summary = agent_memory(kit, 0.39)
    skeleton = agent_memory(kit, 0.149)
    young_cold = agent_memory(kit, 0.049, age_days=10)
    old_cold = agent_memory(kit, 0.049, age_days=30)
    kit.run("CompressionLadder")
    assert fresh(warm).compression_tier == CompressionTier.FULL
    assert fresh(summary).compression_tier == CompressionTier.SUMMARY
    assert fresh(skeleton).compression_tier == CompressionTier.SKELETON
    assert fresh(young_cold).compression_tier == CompressionTier.SKELETON
    assert fresh(old_cold).compression_tier == CompressionTier.TOMBSTONE


def test_a_memory_nobody_used_for_a_hundred_days_fades_down_the_ladder(kit: Any, enabled: Workspace) -> None:
    """Its last boost left 0.9, a hundred days ago: with a 30-day half-life it is at 0.09 now, so the
    ladder takes it to SKELETON although the stored value is far above FULL's threshold."""
    cold = agent_memory(kit, 0.9, age_days=120, activation_last_boost_at=NOW - timedelta(days=100))
    used = agent_memory(kit, 0.9, age_days=120, activation_last_boost_at=NOW - timedelta(days=1))
    kit.run("CompressionLadder")
    assert fresh(cold).compression_tier == CompressionTier.SKELETON
    assert fresh(used).compression_tier == CompressionTier.FULL


def test_each_rung_has_the_seed_content_and_the_row_keeps_only_it(kit: Any, enabled: Workspace) -> None:
    vector = kit.unit(0.6, 0.8)
    summary = agent_memory(kit, 0.39, embedding=vector)
    skeleton = agent_memory(kit, 0.1)
    tombstone = agent_memory(kit, 0.01, age_days=45)
    run = kit.run("CompressionLadder")
    digest = fresh(summary).content
    assert 0 < len(digest) <= int(0.4 * len(TEXT))
    assert "Alice Chen decided" in digest
    assert fresh(skeleton).content == join_phrases(key_phrases(TEXT))
    assert 5 <= len(fresh(skeleton).content.split("; ")) <= 10
    assert fresh(tombstone).content == f"[compressed: {len(TEXT)} chars original]"
    (record,) = EvolutionRecord.objects.filter(run=run)
    for memory in (summary, skeleton, tombstone):
        assert fresh(memory).snapshots == []
        # The FULL text is kept once, in the record of the step, with exactly the fields its revert needs.
        assert record.before[str(memory.id)] == {"content": TEXT, "compression_tier": CompressionTier.FULL}
        assert set(record.after[str(memory.id)]) == {"content", "compression_tier"}
    # The vector still describes the full text.
    assert bytes(fresh(summary).embedding or b"") == vector


def test_user_authored_pinned_and_retired_memories_are_never_compressed(kit: Any, enabled: Workspace) -> None:
    mine = kit.mem(TEXT, memory_type="episodic", age_days=90, activation_score=0.01)
    pinned = agent_memory(kit, 0.01, age_days=90, pinned=True)
    retired = agent_memory(kit, 0.01, age_days=90, status="superseded")
    kit.run("CompressionLadder")
    assert mine.origin_tier == 1
    for memory in (mine, pinned, retired):
        assert fresh(memory).compression_tier == CompressionTier.FULL
        assert fresh(memory).content == TEXT


def test_the_ladder_only_goes_down_and_later_rungs_start_from_the_full_text(kit: Any, enabled: Workspace) -> None:
    memory = agent_memory(kit, 0.3)
    kit.run("CompressionLadder")
    assert fresh(memory).compression_tier == CompressionTier.SUMMARY
    summary_text = fresh(memory).content
    Memory.objects.filter(id=memory.id).update(activation_score=0.95)
    kit.run("CompressionLadder")
    assert fresh(memory).compression_tier == CompressionTier.SUMMARY
    Memory.objects.filter(id=memory.id).update(activation_score=0.1)
    kit.run("CompressionLadder")
    compressed = fresh(memory)
    assert compressed.compression_tier == CompressionTier.SKELETON
    assert compressed.content == join_phrases(key_phrases(TEXT))
    assert summary_text != compressed.content and compressed.snapshots == []


def test_rehydrate_restores_the_full_content(kit: Any, enabled: Workspace, user: Any) -> None:
    memory = agent_memory(kit, 0.01, age_days=60)
    kit.run("CompressionLadder")
    rehydrated = memory_services.memory_rehydrate(workspace=enabled, memory=fresh(memory), actor=user)
    assert rehydrated.compression_tier == CompressionTier.FULL
    assert fresh(memory).content == TEXT


def test_apply_then_revert_restores_every_row_and_dry_run_changes_nothing(kit: Any, enabled: Workspace) -> None:
    for activation in (0.39, 0.1, 0.01):
        agent_memory(kit, activation, age_days=40)
    rows = kit.memory_rows()
    dry = kit.run("CompressionLadder", dry_run=True)
    assert kit.memory_rows() == rows
    assert dry.summary["evolvers"][0]["stats"]["compressed"] == 3
    run = kit.run("CompressionLadder")
    (record,) = EvolutionRecord.objects.filter(run=run)
    assert record.action == "compress"
    assert len(record.after["reasons"]) == 3
    services.run_revert(workspace=enabled, run=run, actor=None)
    assert kit.memory_rows() == rows


def test_the_llm_client_writes_the_summary(kit: Any, enabled: Workspace) -> None:
    memory = agent_memory(kit, 0.2)
    skeleton = agent_memory(kit, 0.1)
    fake = FakeClient("Alice moved invoices to PostgreSQL 15 by March 3.", phrases=["Alice Chen", "PostgreSQL 15"])
    result = CompressionLadder(client=fake).evolve(enabled, dry_run=False, run=None, now=kit.NOW)
    assert fresh(memory).content == "Alice moved invoices to PostgreSQL 15 by March 3."
    assert fresh(skeleton).content == "Alice Chen; PostgreSQL 15"
    assert sorted(c[0] for c in fake.calls) == ["digest", "key_phrases"]
    assert result.stats["to_summary"] == 1 and result.stats["to_skeleton"] == 1


def test_an_llm_failure_fails_the_evolver_without_writing(
    kit: Any, enabled: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent_memory(kit, 0.2)
    agent_memory(kit, 0.3)
    rows = kit.memory_rows()
    monkeypatch.setattr(compression, "default_client", lambda: FakeClient(error=LLMError("endpoint down")))
    run = kit.run("CompressionLadder")
    (entry,) = run.summary["evolvers"]
    assert entry["status"] == "failed"
    assert "endpoint down" in entry["error"]
    assert kit.memory_rows() == rows


def test_a_tiny_memory_keeps_its_text_when_a_digest_would_be_empty(kit: Any, enabled: Workspace) -> None:
    tiny = kit.mem("ok", memory_type="episodic", origin="agent:bot", origin_tier=2, activation_score=0.2)
    kit.run("CompressionLadder")
    assert fresh(tiny).compression_tier == CompressionTier.SUMMARY
    assert fresh(tiny).content == "ok"


def ladder_run(kit: Any, memory: Memory, activation: float, days: float) -> Any:
    """One applied ladder run `days` after NOW, the memory boosted to `activation` just before it."""
    at = kit.NOW + timedelta(days=days)
    Memory.objects.filter(id=memory.id).update(activation_score=activation, activation_last_boost_at=at)
    return kit.run("CompressionLadder", now=at)


def compressed_fields(memory: Memory) -> tuple[bytes, int, list[Any]]:
    row = fresh(memory)
    return row.content.encode(), row.compression_tier, row.snapshots


def test_full_summary_skeleton_tombstone_then_each_step_and_the_whole_run_revert_byte_for_byte(
    kit: Any, enabled: Workspace, user: Any
) -> None:
    memory = agent_memory(kit, 0.9, age_days=40)
    original = kit.memory_rows()
    before_step = []
    runs = []
    for a, d in ((0.3, 1), (0.1, 2), (0.01, 3)):
        before_step.append(compressed_fields(memory))
        runs.append(ladder_run(kit, memory, a, d))
        (record,) = EvolutionRecord.objects.filter(run=runs[-1])
        assert set(record.before[str(memory.id)]) == {"content", "compression_tier"}
    tomb = fresh(memory)
    assert tomb.compression_tier == CompressionTier.TOMBSTONE
    assert tomb.content == f"[compressed: {len(TEXT)} chars original]" and tomb.snapshots == []
    # The FULL text is held once in the whole ladder: the records after the first hold only rungs.
    assert sum(json.dumps([r.before, r.after]).count(TEXT[:60]) for r in EvolutionRecord.objects.all()) == 1
    rungs = [EvolutionRecord.objects.get(run=run).before[str(memory.id)]["content"] for run in runs]
    assert rungs[0] == TEXT and len(rungs[1]) <= 0.4 * len(TEXT) and rungs[2] == join_phrases(key_phrases(TEXT))
    # Each step reverts to what the memory held just before it, newest first.
    for k in (2, 1, 0):
        (record,) = EvolutionRecord.objects.filter(run=runs[k])
        memory_services.record_revert(workspace=enabled, record_id=record.pk, actor=user)
        assert compressed_fields(memory) == before_step[k]
    assert fresh(memory).content.encode() == TEXT.encode()
    # Down the ladder again, then the whole runs revert, newest first.
    again = [ladder_run(kit, memory, a, d) for a, d in ((0.3, 4), (0.1, 5), (0.01, 6))]
    for run in reversed(again):
        services.run_revert(workspace=enabled, run=run, actor=user)
    # The boosts the test made are not the ladder's: put them back, then every field is the original's.
    Memory.objects.filter(id=memory.id).update(activation_score=0.9, activation_last_boost_at=kit.NOW)
    assert kit.memory_rows() == original


def test_a_tombstone_rehydrates_from_the_record_that_kept_its_full_text(
    kit: Any, enabled: Workspace, user: Any
) -> None:
    memory = agent_memory(kit, 0.9, age_days=40)
    for a, d in ((0.3, 1), (0.01, 2)):
        ladder_run(kit, memory, a, d)
    rehydrated = memory_services.memory_rehydrate(workspace=enabled, memory=fresh(memory), actor=user)
    assert rehydrated.content == TEXT and fresh(memory).compression_tier == CompressionTier.FULL
    # Reverting the rehydrate makes it a tombstone again, which still rehydrates.
    (record,) = EvolutionRecord.objects.filter(action="rehydrate")
    memory_services.record_revert(workspace=enabled, record_id=record.pk, actor=user)
    assert fresh(memory).compression_tier == CompressionTier.TOMBSTONE
    memory_services.memory_rehydrate(workspace=enabled, memory=fresh(memory), actor=user)
    assert fresh(memory).content == TEXT


def test_a_memory_compressed_under_the_old_rule_keeps_its_snapshots_and_still_steps_down(
    kit: Any, enabled: Workspace, user: Any
) -> None:
    snapshots = [{"tier": 0, "content": TEXT, "at": "2025-01-01T00:00:00+00:00"}]
    memory = agent_memory(kit, 0.01, age_days=40, compression_tier=CompressionTier.SUMMARY, snapshots=snapshots)
    Memory.objects.filter(id=memory.id).update(content="digest")
    kit.run("CompressionLadder")
    assert fresh(memory).content == f"[compressed: {len(TEXT)} chars original]"
    assert fresh(memory).snapshots == snapshots
    memory_services.memory_rehydrate(workspace=enabled, memory=fresh(memory), actor=user)
    assert fresh(memory).content == TEXT and fresh(memory).snapshots == []


def test_the_memory_page_shows_the_kept_full_text_of_a_tombstone(kit: Any, enabled: Workspace, user: Any) -> None:
    memory = agent_memory(kit, 0.01, age_days=40)
    kit.run("CompressionLadder")
    browser = Client()
    browser.force_login(user)
    page = browser.get(f"/w/acme/memories/{memory.id}/").content.decode()
    assert 'id="rehydrate"' in page
    assert "Alice Chen decided to move invoices" in page[page.index('id="memory-compression"') :]
