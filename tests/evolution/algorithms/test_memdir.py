from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path
from typing import get_args

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evolution.algorithms.engine import propose_strategies, strategy_key
from evolution.algorithms.memdir import (
    CORRECTIONS,
    DECAY_SCORES,
    EVO_DEVO,
    HOT_MEMORY,
    META,
    PROPOSALS,
    REFLECTIONS,
    SENSOR,
    WORLD_MODEL,
    Area,
    Correction,
    DecayScore,
    MemdirError,
    MemoryDirectory,
    Meta,
    ProposalEntry,
    ProposalStatus,
    Reflection,
    Rule,
    SensorRecord,
    StrategyRecord,
    lessons_from_reflections,
    next_proposal_id,
    parse_directory,
    read_tree,
    render_directory,
    write_tree,
)
from evolution.algorithms.tiers import ItemKind, Tier

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def sample() -> MemoryDirectory:
    return MemoryDirectory(
        rules=(
            Rule("hot", "", "Always run the tests before pushing"),
            Rule(
                "hot",
                "",
                "Check asarUnpack for renderer files",
                section="Packaging",
                id="R-7",
                added=date(2026, 1, 2),
                origin="engine",
                source="P-003",
            ),
            Rule("project", "smartmemory", "Use the shared venv"),
            Rule("archive", "old-ci", "Use Travis"),
        ),
        corrections=(
            Correction(date(2026, 1, 3), "packaging", "Zipped node_modules", "Use asarUnpack", "Electron builds"),
        ),
        reflections=(
            Reflection(date(2026, 1, 1), "Electron packaging", "adm-zip needs an include", "Check asarUnpack"),
            Reflection(date(2026, 1, 5), "CI", "Tests ran twice", "Cache the venv", topic="CI speed"),
        ),
        proposals=(
            ProposalEntry(
                "P-003",
                "Check asarUnpack",
                "approved",
                "Check asarUnpack for renderer files",
                0.5,
                date(2026, 1, 2),
                key="strategy:0123456789abcdef",
                task_type="Electron packaging",
                evidence=("sensor:S-1", "reflection:2026-01-01#1"),
                decided=date(2026, 1, 3),
            ),
        ),
        sensor=(SensorRecord("S-1", "Electron packaging", "asar", "fail", AT, lesson="Check asarUnpack"),),
        strategies=(
            StrategyRecord(
                "strategy:0123456789abcdef",
                "Check asarUnpack",
                "Check asarUnpack for renderer files",
                0.5,
                "approved",
                AT,
                proposal_id="P-003",
            ),
        ),
        decay_scores=(DecayScore("R-7", Tier.HOT, ItemKind.ENGINE_STRATEGY, 1.0, 2, AT, 1.0, AT),),
        meta=Meta(exported_at=AT, workspace="demo"),
    )


def test_render_writes_the_documented_layout() -> None:
    files = render_directory(sample())
    assert list(files) == sorted(files)
    assert set(files) == {
        HOT_MEMORY,
        CORRECTIONS,
        REFLECTIONS,
        PROPOSALS,
        SENSOR,
        WORLD_MODEL,
        EVO_DEVO,
        DECAY_SCORES,
        META,
        "warm/projects/smartmemory.md",
        "cold/archive/old-ci.md",
    }
    assert files[HOT_MEMORY] == (
        "# Hot memory\n\n- Always run the tests before pushing\n\n## Packaging\n\n"
        "- Check asarUnpack for renderer files <!-- id: R-7; added: 2026-01-02; origin: engine; source: P-003 -->\n"
    )
    assert files[CORRECTIONS] == (
        "# Corrections\n\n## 2026-01-03 — packaging\n**What I did wrong**: Zipped node_modules\n"
        "**What I should do**: Use asarUnpack\n**Context**: Electron builds\n"
    )
    assert files[REFLECTIONS].startswith(
        "# Reflections (newest first)\n\n## 2026-01-05 — CI speed\nCONTEXT: CI\nREFLECTION: Tests ran twice\n"
        "LESSON: Cache the venv\n\n## 2026-01-01\nCONTEXT: Electron packaging\n"
    )
    assert "## [P-003] Check asarUnpack\n**Status**: approved\n**Key**: strategy:0123456789abcdef\n" in files[PROPOSALS]
    assert "**Evidence**: sensor:S-1, reflection:2026-01-01#1\n" in files[PROPOSALS]
    assert (
        files[META]
        == json.dumps(
            {"exported_at": AT.isoformat(), "format": "memory-evolution", "version": 1, "workspace": "demo"},
            indent=2,
            sort_keys=True,
            ensure_ascii=False,
        )
        + "\n"
    )
    world = json.loads(files[WORLD_MODEL])
    assert world["task_types"] == [
        {"task_type": "Electron packaging", "successes": 0, "failures": 1, "rate": 0.0, "best_approach": "asar"}
    ]


def test_parse_of_render_gives_back_the_same_directory() -> None:
    d = sample()
    assert parse_directory(render_directory(d)) == d


def test_an_empty_mapping_is_an_empty_directory() -> None:
    assert parse_directory({}) == MemoryDirectory()


def test_hand_written_files_are_read_leniently() -> None:
    files = {
        HOT_MEMORY: "\ufeff- first rule\r\n  - indented rule  \r\n\r\n## Style\n- short lines\n",
        CORRECTIONS: "## 2026-01-03 – topic\n**What I did wrong:** a\n**Context**: c\n**What I should do**:  b\n",
        REFLECTIONS: "## 2026-01-01\nCONTEXT: x\nREFLECTION: y\nLESSON: z\n\n## 2026-01-09 - later\n"
        "CONTEXT: x\nREFLECTION: y\nLESSON: z2\n",
        META: '{"version": 1}',
    }
    d = parse_directory(files)
    assert [r.text for r in d.rules] == ["first rule", "indented rule", "short lines"]
    assert d.rules[2].section == "Style"
    assert d.corrections == (Correction(date(2026, 1, 3), "topic", "a", "b", "c"),)
    assert [r.lesson for r in d.reflections] == ["z2", "z"]  # newest first whatever the file order
    assert d.meta == Meta()


def test_rules_are_grouped_by_file_then_section_keeping_their_order() -> None:
    d = MemoryDirectory(
        rules=(
            Rule("hot", "", "b", section="S"),
            Rule("project", "p", "x"),
            Rule("hot", "", "a"),
            Rule("hot", "", "c", section="S"),
        )
    )
    assert [r.text for r in d.rules] == ["a", "b", "c", "x"]


def test_a_malformed_directory_reports_every_problem_with_file_and_line() -> None:
    files = {
        HOT_MEMORY: "# Hot memory\n\n- fine\n### too deep\nloose text\n- bad <!-- id: R 1 -->\n",
        "warm/projects/bad name.md": "- x\n",
        "notes.txt": "hello\n",
        CORRECTIONS: "## 2026-13-01 — topic\n**What I did wrong**: a\n**What I should do**: b\n**Context**: c\n"
        "\n## 2026-01-02 — ok\n**What I did wrong**: a\n**Context**: c\n**Mood**: x\n",
        REFLECTIONS: "CONTEXT: orphan\n## yesterday\nCONTEXT: a\nREFLECTION: b\nLESSON: c\n",
        PROPOSALS: "## [P-001] one\n**Status**: pending\n**Weight**: 1.5\n**Rule**: r\n**Created**: 2026-01-01\n"
        "## [P-001] two\n**Status**: maybe\n**Weight**: 0.5\n**Rule**: r\n**Created**: 2026-01-01\n"
        "## [P-002] three\n**Status**: pending\n**Weight**: 0.5\n**Rule**: r\n**Created**: 2026-01-01\n",
        SENSOR: '{\n  "records": [\n    {"id": "S-1"}\n  ]\n}\n',
        EVO_DEVO: '{\n  "strategies": [\n    {\n      "key": "k",\n      "title": "t",\n'
        '      "rule": "r",\n      "weight": "heavy",\n      "status": "proposed",\n'
        '      "created_at": "2026-01-01T00:00:00",\n      "task_type": null,\n      "evidence": [],\n'
        '      "proposal_id": null,\n      "extra": 1\n    }\n  ]\n}\n',
        DECAY_SCORES: '{\n  "items": [\n    1,\n  ]\n}\n',
        WORLD_MODEL: '{"approaches": [], "task_types": [], "approaches": []}',
        META: '{"version": 7, "format": "other"}',
    }
    with pytest.raises(MemdirError) as caught:
        parse_directory(files)
    found = [(p.file, p.line, p.message) for p in caught.value.problems]
    expected = [
        (HOT_MEMORY, 4, "bad heading"),
        (HOT_MEMORY, 5, "unexpected text"),
        (HOT_MEMORY, 6, "id 'R 1'"),
        (CORRECTIONS, 1, "bad date '2026-13-01'"),
        (CORRECTIONS, 6, "missing What I should do"),
        (CORRECTIONS, 9, "unknown field 'Mood'"),
        (DECAY_SCORES, 4, "invalid JSON"),
        (EVO_DEVO, 7, "strategies[0].weight: expected a finite number"),
        (EVO_DEVO, 9, "strategies[0].created_at: datetime '2026-01-01T00:00:00' must carry a timezone offset"),
        (EVO_DEVO, 13, "strategies[0].extra: unknown key"),
        (WORLD_MODEL, 1, "approaches: duplicate key"),
        (SENSOR, 3, "records[0]: missing task_type, approach, result, at, lesson, issue, solution"),
        (META, 1, "format: expected 'memory-evolution'"),
        (META, 1, "version 7 is not supported"),
        ("notes.txt", None, "unknown file"),
        (PROPOSALS, 3, "weight must be in [0, 1], got 1.5"),
        (PROPOSALS, 7, "status must be one of"),
        (PROPOSALS, 6, "duplicate proposal id 'P-001' (first at proposals/pending.md:1)"),
        (REFLECTIONS, 1, "field 'CONTEXT' before the first '## ' entry"),
        (REFLECTIONS, 2, "bad date 'yesterday'"),
        ("warm/projects/bad name.md", None, "bad topic 'bad name'"),
    ]
    for file, line, text in expected:
        assert any(f == file and n == line and text in m for f, n, m in found), (file, line, text, found)
    assert len(found) == len(expected), found
    assert "hot/memory.md:4: " in str(caught.value)


def test_a_meta_json_with_an_unsupported_version_is_a_problem() -> None:
    with pytest.raises(MemdirError) as caught:
        parse_directory({META: '{"version": 2}'})
    [problem] = caught.value.problems
    assert (problem.file, problem.line) == (META, 1)
    assert "version 2 is not supported" in problem.message


def test_duplicate_rule_ids_across_files_are_reported_where_they_repeat() -> None:
    files = {HOT_MEMORY: "- a <!-- id: R-1 -->\n", "warm/domains/web.md": "# Web\n\n- b <!-- id: R-1 -->\n"}
    with pytest.raises(MemdirError) as caught:
        parse_directory(files)
    [problem] = caught.value.problems
    assert (problem.file, problem.line) == ("warm/domains/web.md", 3)
    assert "duplicate rule id 'R-1' (first at hot/memory.md:1)" in problem.message


def test_directory_refuses_duplicate_ids_when_built_in_code() -> None:
    record = SensorRecord("S-1", "t", "a", "success", AT)
    with pytest.raises(ValueError, match="duplicate sensor record id"):
        MemoryDirectory(sensor=(record, record))


@pytest.mark.parametrize(
    "bad",
    [
        lambda: Rule("hot", "topic", "x"),
        lambda: Rule("project", "a b", "x"),
        lambda: Rule("hot", "", "x <!-- y -->"),
        lambda: Rule("hot", "", "two\nlines"),
        lambda: Rule("hot", "", " padded"),
        lambda: ProposalEntry("P-1", "t", "pending", "r", 0.5, date(2026, 1, 1)),
        lambda: ProposalEntry("P-001", "t", "pending", "r", 0.5, date(2026, 1, 1), decided=date(2026, 1, 2)),
        lambda: ProposalEntry("P-001", "t", "pending", "r", 0.5, date(2026, 1, 1), evidence=("a,b",)),
        lambda: SensorRecord("S-1", "t", "a", "success", datetime(2026, 1, 1)),
        lambda: DecayScore("k", Tier.HOT, ItemKind.ENGINE_STRATEGY, 1.0, 1, AT, 1.0, AT, is_correction=True),
        lambda: Meta(version=0),
    ],
)
def test_entries_refuse_values_the_format_cannot_hold(bad: object) -> None:
    with pytest.raises(ValueError):
        bad()  # type: ignore[operator]


def test_decay_score_counts_uses_in_the_seven_days_before_now() -> None:
    now = AT + timedelta(days=10)
    uses = (AT, AT + timedelta(days=3.5), AT + timedelta(days=9), AT + timedelta(days=11))
    score = DecayScore("k", Tier.WARM, ItemKind.RULE, 1.0, 4, AT, 0.5, AT, recent_uses=uses)
    item = score.to_tier_item(now)
    assert item.uses_in_last_7d == 2
    assert (item.tier, item.access_count, item.base) == (Tier.WARM, 4, 1.0)


def test_reflection_lessons_feed_the_engine_and_propose_a_strategy() -> None:
    d = MemoryDirectory(
        reflections=tuple(
            Reflection(date(2026, 1, day), "Electron packaging", "again", "Check asarUnpack!") for day in (1, 3, 6)
        )
    )
    lessons = lessons_from_reflections(d.reflections)
    assert [lesson.ref for lesson in lessons] == [
        "reflection:2026-01-06#1",
        "reflection:2026-01-03#1",
        "reflection:2026-01-01#1",
    ]
    [p] = propose_strategies([], lessons, AT + timedelta(days=30), existing_keys=())
    assert p.key == strategy_key("check asarunpack") and p.task_type == "Electron packaging"


def test_next_proposal_id_counts_on_from_the_highest() -> None:
    assert next_proposal_id([]) == "P-001"
    assert next_proposal_id(["P-002", "P-010", "junk"]) == "P-011"
    assert next_proposal_id(["P-999"]) == "P-1000"


def test_trees_are_written_and_read_back_unchanged(tmp_path: Path) -> None:
    files = render_directory(sample())
    write_tree(tmp_path / "export", files)
    (tmp_path / "export" / ".DS_Store").write_bytes(b"\xff\x00")
    assert read_tree(tmp_path / "export") == files
    assert parse_directory(read_tree(tmp_path / "export")) == sample()


def test_read_tree_reports_files_that_are_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "hot").mkdir()
    (tmp_path / "hot" / "memory.md").write_bytes(b"- fine\n- caf\xe9\n")
    with pytest.raises(MemdirError) as caught:
        read_tree(tmp_path)
    assert [(p.file, p.line) for p in caught.value.problems] == [(HOT_MEMORY, 2)]


@pytest.mark.parametrize("path", ["/etc/passwd", "../up.md", "a/../../b.md", "", "a\\b.md", "dir/"])
def test_write_tree_refuses_paths_outside_the_tree(tmp_path: Path, path: str) -> None:
    with pytest.raises(ValueError):
        write_tree(tmp_path, {"meta.json": "{}", path: "x"})
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------- properties

one_line = (
    st.text(st.characters(codec="utf-8", exclude_characters="\n\r"), min_size=1, max_size=20)
    .map(str.strip)
    .filter(bool)
)
rule_text = one_line.filter(lambda s: "<!--" not in s)
ref = one_line.filter(lambda s: "," not in s)
token = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:/@#+-]{0,8}", fullmatch=True)
topic = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,8}", fullmatch=True)
zones = st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30)), timezone(timedelta(hours=-8))])
moments = st.datetimes(min_value=datetime(1900, 1, 1), max_value=datetime(2200, 1, 1), timezones=zones)
dates = st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1))
unit = st.floats(0.0, 1.0)
positive = st.floats(0.0, 1e6)


@st.composite
def rules(draw: st.DrawFn) -> tuple[Rule, ...]:
    out = []
    for n in range(draw(st.integers(0, 6))):
        area = draw(st.sampled_from(get_args(Area)))
        out.append(
            Rule(
                area=area,
                topic="" if area == "hot" else draw(st.sampled_from(["a", "b.c"]) | topic),
                text=draw(rule_text),
                section=draw(st.sampled_from(["", "S"]) | one_line),
                id=draw(st.none() | st.just(f"R-{n}")),
                added=draw(st.none() | dates),
                origin=draw(st.sampled_from(["manual", "engine"])),
                source=draw(st.none() | token),
            )
        )
    return tuple(out)


@st.composite
def proposals(draw: st.DrawFn) -> tuple[ProposalEntry, ...]:
    numbers = draw(st.lists(st.integers(1, 2000), unique=True, max_size=4))
    out = []
    for n in numbers:
        status = draw(st.sampled_from(get_args(ProposalStatus)))
        out.append(
            ProposalEntry(
                id=f"P-{n:03d}",
                title=draw(one_line),
                status=status,
                rule=draw(one_line),
                weight=draw(unit),
                created=draw(dates),
                key=draw(st.none() | token),
                task_type=draw(st.none() | one_line),
                evidence=tuple(draw(st.lists(ref, max_size=3))),
                decided=None if status == "pending" else draw(st.none() | dates),
                reason=draw(st.none() | one_line),
            )
        )
    return tuple(out)


@st.composite
def directories(draw: st.DrawFn) -> MemoryDirectory:
    sensor = tuple(
        SensorRecord(
            id=f"S-{i}",
            task_type=draw(one_line),
            approach=draw(one_line),
            result=draw(st.sampled_from(["success", "fail"])),
            at=draw(moments),
            lesson=draw(st.text(max_size=10)),
            issue=draw(st.text(max_size=10)),
            solution=draw(st.text(max_size=10)),
        )
        for i in range(draw(st.integers(0, 4)))
    )
    strategies = tuple(
        StrategyRecord(
            key=key,
            title=draw(one_line),
            rule=draw(one_line),
            weight=draw(unit),
            status=draw(st.sampled_from(["proposed", "approved", "rejected"])),
            created_at=draw(moments),
            task_type=draw(st.none() | one_line),
            evidence=tuple(draw(st.lists(ref, max_size=3))),
            proposal_id=draw(st.none() | st.just("P-001")),
        )
        for key in draw(st.lists(token, unique=True, max_size=3))
    )
    decay = []
    for key in draw(st.lists(one_line, unique=True, max_size=3)):
        kind = draw(st.sampled_from(ItemKind))
        decay.append(
            DecayScore(
                key=key,
                tier=draw(st.sampled_from(Tier)),
                kind=kind,
                base=draw(positive),
                access_count=draw(st.integers(0, 10**9)),
                last_access=draw(moments),
                score=draw(positive),
                scored_at=draw(moments),
                is_correction=kind is ItemKind.RULE and draw(st.booleans()),
                recent_uses=tuple(draw(st.lists(moments, max_size=3))),
            )
        )
    corrections = st.builds(Correction, date=dates, topic=one_line, wrong=one_line, should=one_line, context=one_line)
    reflections = st.builds(
        Reflection,
        date=dates,
        context=one_line,
        reflection=one_line,
        lesson=one_line,
        topic=st.none() | one_line,
    )
    return MemoryDirectory(
        rules=draw(rules()),
        corrections=tuple(draw(st.lists(corrections, max_size=3))),
        reflections=tuple(draw(st.lists(reflections, max_size=4))),
        proposals=draw(proposals()),
        sensor=sensor,
        strategies=strategies,
        decay_scores=tuple(decay),
        meta=Meta(exported_at=draw(st.none() | moments), workspace=draw(st.none() | one_line)),
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(directories())
def test_parse_render_round_trips_and_rendering_is_byte_stable(d: MemoryDirectory) -> None:
    files = render_directory(d)
    again = parse_directory(files)
    assert again == d
    assert render_directory(again) == files
