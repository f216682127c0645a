from __future__ import annotations

import io
import itertools
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memories.models import Memory, RetrievalEvent, Workspace
from surfacing.management.commands.evaluate_retrieval import load_conversations, recall_at, shifted_to_now

pytestmark = [pytest.mark.django_db]

FIXTURE = Path(__file__).resolve().parents[2] / "bench" / "fixtures" / "locomo_small.json"


def run(*args: str) -> tuple[str, dict[str, dict[str, list[float]]]]:
    """The command's output and its tables: layout -> method -> [R@1, R@5, R@10, R@10 per category...]."""
    out = io.StringIO()
    call_command("evaluate_retrieval", str(FIXTURE), *args, stdout=out)
    tables: dict[str, dict[str, list[float]]] = {}
    layout = ""
    for line in out.getvalue().splitlines()[1:]:
        if line.endswith(" s)"):
            layout = line.split()[0]
            tables[layout] = {}
        elif line and not line.startswith("method") and layout:
            name, *values = line.split()
            tables[layout][name] = [float(v) for v in values]
    return out.getvalue(), tables


def test_fixture_is_in_the_locomo_layout() -> None:
    conversations = load_conversations(FIXTURE)
    assert len(conversations) == 3
    assert sum(len(c.sessions) for c in conversations) == 10
    assert sum(len(c.questions) for c in conversations) >= 40
    for conv in conversations:
        assert all(q.evidence <= set(conv.refs) for q in conv.questions)
        assert conv.sessions == sorted(conv.sessions, key=lambda s: s.started_at)


def test_recall_counts_the_share_of_evidence_in_the_first_k() -> None:
    evidence = frozenset({"D1:1", "D2:3"})
    ranked = ["D1:4", "D2:3", None, "D1:1"]
    assert recall_at(ranked, evidence, 1) == 0.0
    assert recall_at(ranked, evidence, 2) == 0.5
    assert recall_at(ranked, evidence, 4) == 1.0


def test_shifting_moves_the_last_session_to_an_hour_ago_and_keeps_the_gaps() -> None:
    sessions = load_conversations(FIXTURE)[0].sessions
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    moved = shifted_to_now(sessions, now)
    assert max(s.started_at for s in moved) == now - timedelta(hours=1)
    gaps = [b.started_at - a.started_at for a, b in itertools.pairwise(sessions)]
    assert gaps == [b.started_at - a.started_at for a, b in itertools.pairwise(moved)]
    assert [s.turns for s in moved] == [s.turns for s in sessions]


def test_command_prints_recall_per_layout_and_mode_beside_the_lexical_ranking_and_cleans_up() -> None:
    text, tables = run()
    assert text.splitlines()[0].startswith("locomo_small.json: 3 conversations, 10 sessions, 88 turns, 47 questions")
    assert "usage on" in text.splitlines()[0]
    assert set(tables) == {"dataset", "today"}
    for table in tables.values():
        assert set(table) == {"lexical", "router", "legacy"}
        for r1, r5, r10, *categories in table.values():
            assert 0.0 <= r1 <= r5 <= r10 <= 1.0
            assert categories and all(0.0 <= c <= 1.0 for c in categories)
        # The fixture's questions reuse the words of their evidence: every method finds most of it by 10,
        # and the calibrated default never ranks below the plain full-text ranking.
        assert table["lexical"][2] > 0.6
        assert table["router"][2] >= table["lexical"][2]
    assert not Workspace.objects.filter(slug__startswith="eval-").exists()
    assert not Memory.objects.exists()


def test_the_seed_formula_buries_old_sessions_that_the_calibrated_default_finds() -> None:
    _, calibrated = run("--layouts", "today", "--modes", "legacy")
    _, seed = run("--layouts", "today", "--modes", "legacy", "--surfacing", '{"score_profile": "seed"}')
    assert seed["today"]["legacy"][2] < calibrated["today"]["legacy"][2] - 0.2


def test_usage_on_records_what_each_question_surfaced_and_no_usage_records_nothing() -> None:
    run("--layouts", "dataset", "--modes", "router", "--keep")
    assert RetrievalEvent.objects.filter(source="context").exists()
    RetrievalEvent.objects.all().delete()
    run("--layouts", "dataset", "--modes", "router", "--no-usage", "--keep")
    assert not RetrievalEvent.objects.exists()


def test_command_rejects_a_file_that_is_not_locomo_and_unknown_options(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"conversation": {"session_1": [], "session_1_date_time": "yesterday"}}]))
    with pytest.raises(CommandError, match="cannot read the date"):
        call_command("evaluate_retrieval", str(bad), stdout=io.StringIO())
    with pytest.raises(CommandError, match="--modes"):
        call_command("evaluate_retrieval", str(FIXTURE), "--modes", "bm25", stdout=io.StringIO())
    with pytest.raises(CommandError, match=r"surfacing\.score_profile"):
        call_command("evaluate_retrieval", str(FIXTURE), "--surfacing", '{"score_profile": "x"}', stdout=io.StringIO())
