"""The decay sweep: decayed activation and retention written into the stored columns, in batches, without
changing what a reader sees of activation, and idempotent at a fixed clock."""

from __future__ import annotations

import math
from datetime import timedelta
from typing import Any

import pytest

from evolution import decay_sweep as sweep_module
from evolution.decay_sweep import decay_sweep
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.algorithms.activation import decayed_activation
from memories.algorithms.sortkey import activation_sort_key
from memories.models import Memory
from tests.evolution.conftest import EvolutionKit

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def fresh(m: Memory) -> Memory:
    return Memory.objects.select_related("score").get(id=m.id)


def test_activation_is_stored_decayed_with_the_clock_moved_and_reads_the_same(kit: EvolutionKit) -> None:
    m = kit.mem("thirty days untouched", age_days=30, activation_score=0.8)
    later = kit.NOW + timedelta(days=10)
    reading_then = decayed_activation(0.8, m.activation_last_boost_at, 720.0, later)
    stats = decay_sweep(workspace=kit.workspace, now=kit.NOW)
    assert stats.activation_written == 1
    swept = fresh(m)
    assert swept.activation_score == pytest.approx(0.4, abs=1e-12)  # one half-life
    assert swept.activation_last_boost_at == kit.NOW
    assert swept.activation_sort_key == pytest.approx(activation_sort_key(swept.activation_score, kit.NOW, 720.0))
    # Readers see the same activation now and later as before the sweep.
    assert decayed_activation(swept.activation_score, kit.NOW, 720.0, kit.NOW) == pytest.approx(0.4)
    assert decayed_activation(swept.activation_score, kit.NOW, 720.0, later) == pytest.approx(reading_then)


def test_pinned_memories_and_moves_under_a_thousandth_are_left_alone(kit: EvolutionKit) -> None:
    pinned = kit.mem("pinned", age_days=30, pinned=True)
    # 0.5 over one hour loses 0.00048: under the 0.001 step.
    recent = kit.mem("an hour old", age_days=1 / 24)
    never = kit.mem("never decays", age_days=30, activation_half_life_hours=0.0)
    before = kit.memory_rows()
    decay_sweep(workspace=kit.workspace, now=kit.NOW)
    after = kit.memory_rows()
    for m in (pinned, recent, never):
        assert after[m.id] == before[m.id]


def test_a_second_sweep_at_the_same_clock_changes_nothing(kit: EvolutionKit) -> None:
    for k in range(7):
        kit.mem(f"episode {k}", memory_type="episodic", age_days=5 + 9 * k, activation_score=0.3 + 0.1 * k)
    kit.mem("a fact", age_days=50)
    first = decay_sweep(workspace=kit.workspace, now=kit.NOW)
    assert first.activation_written == 8 and first.retention_written >= 6
    rows, records = kit.memory_rows(), EvolutionRecord.objects.count()
    second = decay_sweep(workspace=kit.workspace, now=kit.NOW)
    assert second.activation_written == second.retention_written == second.records == 0
    assert kit.memory_rows() == rows and EvolutionRecord.objects.count() == records


def test_batches_cover_every_memory(kit: EvolutionKit, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep_module, "ACTIVATION_BATCH", 3)
    monkeypatch.setattr(sweep_module, "RETENTION_BATCH", 2)
    made = [kit.mem(f"episode {k}", memory_type="episodic", age_days=40) for k in range(7)]
    stats = decay_sweep(workspace=kit.workspace, now=kit.NOW)
    assert stats.activation_read == stats.activation_written == 7
    assert stats.retention_written == 7 and stats.records == 4
    assert {fresh(m).activation_last_boost_at for m in made} == {kit.NOW}


def test_retention_is_lowered_to_the_forgetting_curve_with_a_record_and_never_raised(kit: EvolutionKit) -> None:
    old = kit.mem("episode 30 days ago", memory_type="episodic", age_days=30)
    accessed = kit.mem(
        "episode used yesterday", memory_type="episodic", age_days=60, last_accessed=kit.NOW - timedelta(days=1)
    )
    under = kit.mem("episode under its curve", memory_type="episodic", age_days=30, retention_score=0.2)
    semantic = kit.mem("a semantic memory (not the decay evolver's type)", age_days=90)
    decay_sweep(workspace=kit.workspace, now=kit.NOW)
    assert fresh(old).score.retention_score == pytest.approx(math.exp(-1.0), abs=1e-9)
    assert fresh(accessed).score.retention_score == pytest.approx(math.exp(-1 / 30), abs=1e-9)
    assert fresh(under).score.retention_score == 0.2
    assert fresh(semantic).score.retention_score == 1.0
    (record,) = EvolutionRecord.objects.filter(evolver="DecaySweep")
    assert record.action == "decay" and record.run is None
    assert record.before[str(old.id)] == {"retention_score": 1.0}
    assert "exp(-30.00d/30.00d)" in record.after["reasons"][str(old.id)]


def test_a_sweep_record_reverts_like_any_other(kit: EvolutionKit) -> None:
    m = kit.mem("episode", memory_type="episodic", age_days=45, retention_score=0.9)
    decay_sweep(workspace=kit.workspace, now=kit.NOW)
    record = EvolutionRecord.objects.get(evolver="DecaySweep")
    memory_services.record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    assert fresh(m).score.retention_score == 0.9


def test_the_decay_evolver_settings_choose_the_swept_types(kit: EvolutionKit, workspace: Any) -> None:
    workspace.evolution_settings = {"ExponentialDecay": {"memory_types": ["fact"], "default_stability": 10.0}}
    workspace.save()
    fact = kit.mem("a fact", memory_type="fact", age_days=10, stability=0.0)
    episode = kit.mem("an episode", memory_type="episodic", age_days=10)
    decay_sweep(workspace=workspace, now=kit.NOW)
    assert fresh(fact).score.retention_score == pytest.approx(math.exp(-1.0), abs=1e-9)
    assert fresh(episode).score.retention_score == 1.0
