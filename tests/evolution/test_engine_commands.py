"""manage.py dream, export_memory_evolution and import_memory_evolution."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from evolution import engine, engine_inputs
from evolution.algorithms.memdir import read_tree
from evolution.models import DreamReport, Outcome
from memories.inputs import MemoryInput
from memories.models import Membership, Memory, Workspace
from memories.services import memory_create

pytestmark = [pytest.mark.django_db]


def call(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=out)
    return out.getvalue()


def stale_rule(workspace: Workspace, user: Any) -> Memory:
    rule = memory_create(
        workspace=workspace, actor=user, item=MemoryInput(content="an old rule", memory_type="strategy", tier="hot")
    )
    Memory.objects.filter(id=rule.id).update(created_at=timezone.now() - timedelta(days=40))
    return rule


def history(workspace: Workspace, user: Any) -> None:
    for days in (3, 2, 1):
        engine.outcome_record(
            workspace=workspace,
            item=engine_inputs.OutcomeInput(
                task_type="build",
                result="fail",
                lesson="Pin the toolchain",
                created_at=timezone.now() - timedelta(days=days),
            ),
        )
    engine.correction_record(
        workspace=workspace,
        actor=user,
        item=engine_inputs.CorrectionInput(what_i_did_wrong="a", what_i_should_do="b", context="c", topic="t"),
    )
    stale_rule(workspace, user)


def test_dream_applies_and_prints_what_moved_and_why(workspace: Workspace, user: Any) -> None:
    rule = stale_rule(workspace, user)
    out = call("dream", "--workspace", "acme")
    report = DreamReport.objects.get(workspace=workspace)
    assert f"Dream report #{report.pk} on 'acme': 1 scored, 0 promoted, 1 demoted, 0 archived" in out
    assert f"demoted {rule.id} (hot -> warm): Demoted from HOT to WARM" in out
    assert Memory.objects.get(id=rule.id).tier == "warm"


def test_dream_dry_run_prints_the_report_as_json_and_changes_nothing(workspace: Workspace, user: Any) -> None:
    rule = stale_rule(workspace, user)
    body = json.loads(call("dream", "--workspace", "acme", "--dry-run", "--json"))
    assert body["id"] is None and body["dry_run"] is True
    assert [e["memory_id"] for e in body["demoted"]] == [str(rule.id)]
    assert Memory.objects.get(id=rule.id).tier == "hot"
    assert not DreamReport.objects.exists()


def test_dream_on_an_unknown_workspace_fails_clearly(db: None) -> None:
    with pytest.raises(CommandError, match="workspace 'nope' not found"):
        call("dream", "--workspace", "nope")


def test_export_then_import_into_a_new_workspace_round_trips(workspace: Workspace, user: Any, tmp_path: Path) -> None:
    history(workspace, user)
    first = tmp_path / "first"
    out = call("export_memory_evolution", str(first), "--workspace", "acme")
    assert "Exported 'acme'" in out and "hot/corrections.md" in out
    out = call("import_memory_evolution", str(first), "--workspace", "copy", "--create-owner", "alice")
    assert "Imported into new workspace 'copy': 1 proposals, 3 outcomes, 1 corrections" in out
    copy = Workspace.objects.get(slug="copy")
    assert Membership.objects.get(workspace=copy).user == user
    second = tmp_path / "second"
    call("export_memory_evolution", str(second), "--workspace", "copy")
    a, b = read_tree(first), read_tree(second)
    assert set(a) == set(b)
    # Only the export time (meta.json, decay scores) differs between two exports made seconds apart.
    assert {k: v for k, v in a.items() if k not in ("meta.json", "engine/decay-scores.json")} == {
        k: v for k, v in b.items() if k not in ("meta.json", "engine/decay-scores.json")
    }
    assert json.loads(b["meta.json"])["workspace"] == "acme"
    again = call("import_memory_evolution", str(first), "--workspace", "copy")
    assert "already there: 1 proposals, 3 outcomes, 1 corrections" in again


def test_export_refuses_a_non_empty_directory_unless_forced(workspace: Workspace, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(CommandError, match="is not empty"):
        call("export_memory_evolution", str(tmp_path), "--workspace", "acme")
    call("export_memory_evolution", str(tmp_path), "--workspace", "acme", "--force")
    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert (tmp_path / "meta.json").exists()


def test_import_prints_every_problem_with_file_and_line_and_imports_nothing(
    db: None, user: Any, tmp_path: Path
) -> None:
    (tmp_path / "hot").mkdir()
    (tmp_path / "hot" / "memory.md").write_text("- fine\n### bad\n")
    (tmp_path / "reflections").mkdir()
    (tmp_path / "reflections" / "log.md").write_bytes(b"## 2026-01-01\nCONTEXT: caf\xe9\n")
    err = StringIO()
    with pytest.raises(CommandError, match="1 problem"):
        call_command(
            "import_memory_evolution", str(tmp_path), "--workspace", "new", "--create-owner", "alice", stderr=err
        )
    assert "reflections/log.md:2: not UTF-8 text" in err.getvalue()
    (tmp_path / "reflections" / "log.md").write_text("CONTEXT: orphan\n")
    err = StringIO()
    with pytest.raises(CommandError, match="2 problem"):
        call_command(
            "import_memory_evolution", str(tmp_path), "--workspace", "new", "--create-owner", "alice", stderr=err
        )
    assert "hot/memory.md:2: " in err.getvalue() and "reflections/log.md:1: " in err.getvalue()
    # The refused import left no workspace behind.
    assert not Workspace.objects.filter(slug="new").exists()
    assert not Memory.objects.exists() and not Outcome.objects.exists()


def test_import_into_a_missing_workspace_needs_an_existing_owner(db: None, user: Any, tmp_path: Path) -> None:
    (tmp_path / "meta.json").write_text('{"version": 1}\n')
    with pytest.raises(CommandError, match="pass --create-owner USERNAME"):
        call("import_memory_evolution", str(tmp_path), "--workspace", "new")
    with pytest.raises(CommandError, match="no user 'bob'"):
        call("import_memory_evolution", str(tmp_path), "--workspace", "new", "--create-owner", "bob")
    with pytest.raises(CommandError, match="not a directory"):
        call("import_memory_evolution", str(tmp_path / "missing"), "--workspace", "new")
    assert not Workspace.objects.filter(slug="new").exists()
