"""manage.py evolve and manage.py history."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from evolution.evolvers import default_cycle
from evolution.models import EvolutionRun
from memories.models import Memory

pytestmark = [pytest.mark.django_db]


def call(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def episode(kit: Any) -> Memory:
    m: Memory = kit.mem(
        "old episode", memory_type="episodic", age_days=400, last_accessed=timezone.now() - timedelta(days=30)
    )
    return m


def test_evolve_defaults_to_a_dry_run_of_the_cycle_and_prints_each_evolver(kit: Any) -> None:
    m = episode(kit)
    out = call("evolve", "--workspace", "acme")
    cycle = default_cycle()
    assert f"Dry run of {len(cycle)} evolver(s) on 'acme'" in out
    for position, name in enumerate(cycle, start=1):
        assert f"[{position}/{len(cycle)}] {name}: ok" in out
    assert "(dry run: nothing changed)" in out
    assert Memory.objects.get(id=m.id).score.retention_score == 1.0
    assert EvolutionRun.objects.get().dry_run is True


def test_evolve_apply_with_named_evolvers(kit: Any) -> None:
    m = episode(kit)
    out = call("evolve", "--workspace", "acme", "--evolver", "ExponentialDecay", "--apply")
    assert "Applying 1 evolver(s)" in out
    assert "[1/1] ExponentialDecay: ok, 1 records" in out
    assert Memory.objects.get(id=m.id).score.retention_score == pytest.approx(0.367879, abs=1e-4)


def test_evolve_rejects_unknown_workspace_evolver_and_both_modes(kit: Any) -> None:
    with pytest.raises(CommandError, match="workspace 'nowhere' not found"):
        call("evolve", "--workspace", "nowhere")
    with pytest.raises(CommandError, match="unknown evolver 'Nope'"):
        call("evolve", "--workspace", "acme", "--evolver", "Nope")
    with pytest.raises(CommandError):
        call("evolve", "--workspace", "acme", "--dry-run", "--apply")
    assert not EvolutionRun.objects.exists()


def test_evolve_fails_loudly_when_an_evolver_failed(kit: Any, workspace: Any) -> None:
    workspace.evolution_settings = {"ExponentialDecay": {"archive_threshold": "high"}}
    workspace.save()
    out = StringIO()
    with pytest.raises(CommandError, match="1 evolver"):
        call_command("evolve", "--workspace", "acme", "--evolver", "ExponentialDecay", stdout=out)
    assert "ExponentialDecay: failed" in out.getvalue()
    assert "archive_threshold" in out.getvalue()


def test_history_prints_records_newest_first(kit: Any) -> None:
    m = episode(kit)
    call("evolve", "--workspace", "acme", "--evolver", "ExponentialDecay", "--apply")
    kit.run("ExponentialDecay", now=timezone.now() + timedelta(days=1))
    out = call("history", str(m.id))
    lines = out.splitlines()
    assert lines[0] == f"memory {m.id} (acme): 2 record(s), newest first"
    assert "exp(-31.00d/30.00d)" in lines[2]
    assert "exp(-30.00d/30.00d)" in lines[6]
    assert '"retention_score"' in lines[3]


def test_history_of_an_unknown_memory_is_an_error(kit: Any) -> None:
    with pytest.raises(CommandError, match="no memory"):
        call("history", "00000000-0000-0000-0000-000000000001")
    with pytest.raises(CommandError, match="not a memory id"):
        call("history", "bogus")
