from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from memories.models import Memory, Workspace
from surfacing.management.commands.evaluate_retrieval import load_conversations, recall_at

pytestmark = [pytest.mark.django_db]

FIXTURE = Path(__file__).resolve().parents[2] / "bench" / "fixtures" / "locomo_small.json"


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


def test_command_prints_recall_for_each_method_and_cleans_up() -> None:
    out = io.StringIO()
    call_command("evaluate_retrieval", str(FIXTURE), stdout=out)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("locomo_small.json: 3 conversations, 10 sessions, 88 turns, 47 questions")
    table = {line[:46].strip(): [float(v) for v in line[46:].split()] for line in lines[2:]}
    assert set(table) == {
        "bm25 (rank-bm25, turns only)",
        "legacy, seed defaults",
        "router, seed defaults",
        "legacy, recency 8760 h",
        "router, recency 8760 h",
        "router, recency 8760 h, no freshness",
    }
    for r1, r5, r10 in table.values():
        assert 0.0 <= r1 <= r5 <= r10 <= 1.0
    # The fixture's questions reuse the words of their evidence: every method finds most of it by 10.
    assert table["bm25 (rank-bm25, turns only)"][2] > 0.6
    assert table["legacy, recency 8760 h"][2] > 0.6
    # The seed's 24 h recency buries the early sessions of a multi-week conversation.
    assert table["legacy, seed defaults"][2] < table["legacy, recency 8760 h"][2]
    assert not Workspace.objects.filter(slug__startswith="eval-").exists()
    assert not Memory.objects.exists()


def test_command_rejects_a_file_that_is_not_locomo(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"conversation": {"session_1": [], "session_1_date_time": "yesterday"}}]))
    with pytest.raises(CommandError, match="cannot read the date"):
        call_command("evaluate_retrieval", str(bad), stdout=io.StringIO())
