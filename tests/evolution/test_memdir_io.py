"""Export to and import from the memory-evolution directory: mapping, strict import, byte-exact round trip."""

from __future__ import annotations

import contextlib
import io
import json
import uuid
import zipfile
from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from evolution import dream, engine, engine_inputs, memdir_common, memdir_export, memdir_import, proposals
from evolution.algorithms import memdir
from evolution.models import Outcome, Proposal, ProposalStatus
from history.models import Action, EvolutionRecord
from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, RetrievalEvent, Workspace

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
EXPORT_AT = NOW + timedelta(hours=3)
_slugs = count(1)


def new_workspace(user: Any, prefix: str = "copy") -> Workspace:
    return services.workspace_create(owner=user, slug=f"{prefix}-{next(_slugs)}", name=prefix)


def record_outcome(ws: Workspace, task: str, result: str, lesson: str = "", days: float = 1.0) -> None:
    engine.outcome_record(
        workspace=ws,
        item=engine_inputs.OutcomeInput(
            task_type=task, result=result, lesson=lesson, created_at=NOW - timedelta(days=days)
        ),
        now=NOW,
    )


def record_correction(ws: Workspace, user: Any, topic: str, should: str, days: float = 1.0) -> Memory:
    return engine.correction_record(
        workspace=ws,
        actor=user,
        item=engine_inputs.CorrectionInput(
            what_i_did_wrong=f"not {should}",
            what_i_should_do=should,
            context="when it applies",
            topic=topic,
            created_at=NOW - timedelta(days=days),
        ),
    )


def record_reflection(ws: Workspace, user: Any, lesson: str, days: float = 1.0, topic: str | None = None) -> None:
    engine.reflection_record(
        workspace=ws,
        actor=user,
        item=engine_inputs.ReflectionInput(
            context="Electron packaging",
            reflection="adm-zip needs a separate include",
            lesson=lesson,
            topic=topic,
            created_at=NOW - timedelta(days=days),
        ),
        now=NOW,
    )


def manual_rule(ws: Workspace, user: Any, text: str, *, tier: str = "hot", days: float = 2.0, **kw: Any) -> Memory:
    return services.memory_create(
        workspace=ws,
        actor=user,
        item=MemoryInput(content=text, memory_type="strategy", tier=tier, created_at=NOW - timedelta(days=days), **kw),
    )


def preference(ws: Workspace, user: Any, text: str, subject: str, *, tier: str = "warm", days: float = 2.0) -> Memory:
    return services.memory_create(
        workspace=ws,
        actor=user,
        item=MemoryInput(
            content=text, memory_type="preference", subject=subject, tier=tier, created_at=NOW - timedelta(days=days)
        ),
    )


def rich_history(ws: Workspace, user: Any) -> None:
    """A workspace that uses every part of the layout: rules in every tier, corrections (one superseded),
    reflections, proposals in every status, sensor readings and decisions, retrieval uses, a dream."""
    for days in (3.0, 2.0, 1.0):
        record_outcome(ws, "Electron packaging", "fail", "Always check asarUnpack for renderer files", days)
    for days in (3.5, 2.5, 1.5):
        record_outcome(ws, "deploy", "fail", "Paste the API token into the deploy log", days)
    for days in (4.0, 3.0, 2.0):
        record_outcome(ws, "ci", "success", "Cache the node_modules folder, keyed by lockfile", days)
    for days in (4.0, 3.0, 2.0):
        record_outcome(ws, "docs", "fail", "Run the link checker before publishing docs", days)
    record_outcome(ws, "deploy", "success", "", 0.5)
    pending = {p.payload["rule"]: p for p in Proposal.objects.filter(workspace=ws, status=ProposalStatus.PENDING)}
    proposals.proposal_approve(
        workspace=ws, proposal_id=pending["Always check asarUnpack for renderer files"].pk, actor=user, now=NOW
    )
    proposals.proposal_approve(
        workspace=ws,
        proposal_id=pending["Cache the node_modules folder, keyed by lockfile"].pk,
        actor=user,
        payload={"rule": "Cache node_modules by lockfile hash, always"},
        now=NOW,
    )
    proposals.proposal_reject(
        workspace=ws,
        proposal_id=pending["Run the link checker before publishing docs"].pk,
        actor=user,
        reason="the CI\ndoes it",
        now=NOW,
    )
    for days in (2.0, 1.0, 0.5):
        record_reflection(ws, user, "Pin the electron version in package.json", days)
    record_reflection(ws, user, "Ship smaller bundles", 1, topic="bundles")
    record_correction(ws, user, "editor", "use vim", days=5)
    record_correction(ws, user, "editor", "use emacs", days=4)
    record_correction(ws, user, "general", "answer in English", days=3)
    record_correction(ws, user, "tests", "run pytest -x first, <!-- not make", days=3)
    manual_rule(ws, user, "Prefer small, reviewed PRs")
    manual_rule(ws, user, "Use ruff with line length 120", tier="warm", days=10, subject="lint")
    manual_rule(ws, user, "Old habit <!-- keep", tier="warm", days=200)
    manual_rule(ws, user, "Deprecated step", tier="cold", status="archived", days=300)
    preference(ws, user, "Answers in short paragraphs", "answer style", tier="hot", days=6)
    preference(ws, user, "Dark theme in every editor", "theme", days=3)
    used = manual_rule(ws, user, "Hot because used", tier="warm", days=20)
    RetrievalEvent.objects.bulk_create(
        [
            RetrievalEvent(
                workspace=ws,
                memory=used,
                result_set=uuid.uuid4(),
                rank=0,
                source="search",
                created_at=NOW - timedelta(hours=h),
            )
            for h in (1, 5, 30)
        ]
    )
    Memory.objects.filter(id=used.id).update(access_count=7, last_accessed=NOW - timedelta(hours=1))
    dream.dream_run(workspace=ws, now=NOW + timedelta(hours=1))


def round_trip(source: Workspace, user: Any) -> tuple[dict[str, str], dict[str, str], Workspace]:
    first = memdir_export.memdir_export(workspace=source, now=EXPORT_AT)
    target = new_workspace(user)
    memdir_import.memdir_import(workspace=target, files=first, actor=user, now=EXPORT_AT)
    second = memdir_export.memdir_export(workspace=target, now=EXPORT_AT)
    return first, second, target


# ------------------------------------------------------------------------------------------------ export


def test_export_maps_every_part_of_the_workspace_to_the_layout(workspace: Workspace, user: Any) -> None:
    rich_history(workspace, user)
    files = memdir_export.memdir_export(workspace=workspace, now=EXPORT_AT)
    assert {
        "hot/memory.md",
        "hot/corrections.md",
        "reflections/log.md",
        "proposals/pending.md",
        "engine/sensor.json",
        "engine/world_model.json",
        "engine/evo_devo.json",
        "engine/decay-scores.json",
        "meta.json",
    } <= set(files)
    hot = files["hot/memory.md"]
    assert "## Electron packaging\n\n- Always check asarUnpack for renderer files <!-- id: R-" in hot
    assert "origin: engine; source: P-001 -->" in hot
    assert "- Cache node_modules by lockfile hash, always <!-- id: R-" in hot  # the reviewer's rule: manual
    assert "- Hot because used <!--" in hot  # promoted by the dream: used 3 times in 7 days
    assert "- Use ruff with line length 120 <!--" in files["warm/domains/lint.md"]
    assert "- Old habit < !-- keep <!--" in files["cold/archive/general.md"]  # archived by the dream
    assert "- Deprecated step <!--" in files["cold/archive/general.md"]
    # Hot memory holds confirmed rules and preferences; a preference's section is its subject.
    assert "## answer style\n\n- Answers in short paragraphs <!-- id: R-" in hot and "; kind: preference -->" in hot
    assert "- Dark theme in every editor <!--" in files["warm/domains/theme.md"]
    corrections = files["hot/corrections.md"]
    assert "**What I should do**: use emacs" in corrections
    assert "use vim" not in corrections.replace("not use vim", "")  # superseded by the later correction
    assert "## 2026-03-07 — general\n**What I did wrong**: not answer in English" in corrections
    pending = files["proposals/pending.md"]
    assert "**Status**: vetoed" in pending and "Touches secrets (token)" in pending
    assert "**Status**: modified" in pending
    assert "**Status**: rejected" in pending and "**Reason**: the CI does it" in pending
    assert "**Status**: pending\n**Key**: strategy:" in pending  # the reflections' lesson
    sensor = json.loads(files["engine/sensor.json"])["records"]
    assert sensor[0]["id"] == "S-0001" and sensor[0]["task_type"] == "Electron packaging"
    assert [r["result"] for r in sensor if r["task_type"] == "engine_strategy_review"] == ["success", "success", "fail"]
    decay = {i["key"]: i for i in json.loads(files["engine/decay-scores.json"])["items"]}
    used = next(i for i in decay.values() if i["access_count"] == 7)
    assert used["tier"] == "hot" and len(used["recent_uses"]) == 3
    assert used["score"] == pytest.approx(
        1.0 * 2.718281828459045 ** (-0.03 * 4 / 24) * 3.0 * 1.5, abs=1e-6
    )  # 4 h idle at export, log2(7 + 1) = 3, HOT weight 1.5
    assert "correction:2026-03-06#1" in decay and decay["correction:2026-03-06#1"]["is_correction"] is True
    meta = json.loads(files["meta.json"])
    assert meta == {
        "exported_at": EXPORT_AT.isoformat(),
        "format": "memory-evolution",
        "version": 1,
        "workspace": "acme",
    }
    # The export renders the canonical form: parsing it back gives the same files.
    assert memdir.render_directory(memdir.parse_directory(files)) == files


def test_export_then_import_into_a_new_workspace_then_export_is_byte_for_byte_the_same(
    workspace: Workspace, user: Any
) -> None:
    rich_history(workspace, user)
    first, second, target = round_trip(workspace, user)
    assert second == first

    # And the copy behaves like the original: same rules in the same tiers, same proposals and sensor.
    def shape(ws: Workspace) -> list[tuple[str, str, str, str]]:
        rows = Memory.objects.filter(workspace=ws).values_list("memory_type", "tier", "status", "content")
        # A rule's text is one line without "<!--" in the directory (the bullet's metadata comment).
        return sorted((t, tier, s, engine_inputs.one_line(c).replace("<!--", "< !--")) for t, tier, s, c in rows)

    assert shape(target) == [s for s in shape(workspace) if s[2] != "superseded"]
    assert Outcome.objects.filter(workspace=target).count() == Outcome.objects.filter(workspace=workspace).count()
    assert memdir_export.memdir_zip(second) == memdir_export.memdir_zip(first)


TEXTS = ["Use the asar whitelist", "a, b; c", "Ünïcödé rule — ok", "multi\nline  text", "tag <!-- x", "x"]
TOPICS = ["general", "editor", "Deploy Prod", "tests"]
OPERATIONS = st.one_of(
    st.tuples(
        st.just("outcome"),
        st.sampled_from(["build", "deploy"]),
        st.sampled_from(["success", "fail"]),
        st.sampled_from(["", *TEXTS]),
        st.floats(0, 10),
    ),
    st.tuples(st.just("correction"), st.sampled_from(TOPICS), st.sampled_from(TEXTS), st.floats(0, 10)),
    st.tuples(st.just("reflection"), st.sampled_from([None, *TOPICS]), st.sampled_from(TEXTS), st.floats(0, 10)),
    st.tuples(st.just("rule"), st.sampled_from(["hot", "warm", "cold"]), st.sampled_from(TEXTS), st.floats(0, 200)),
    st.tuples(st.just("preference"), st.sampled_from(["hot", "warm"]), st.sampled_from(TEXTS), st.floats(0, 200)),
    st.tuples(st.just("approve"), st.booleans()),
    st.tuples(
        st.just("reject"),
    ),
    st.tuples(st.just("use"), st.integers(0, 5)),
    st.tuples(st.just("dream"), st.floats(0, 100)),
)


def apply_operation(ws: Workspace, user: Any, op: tuple[Any, ...]) -> None:
    kind = op[0]
    if kind == "outcome":
        record_outcome(ws, op[1], op[2], op[3], op[4])
    elif kind == "correction":
        record_correction(ws, user, op[1], engine_inputs.one_line(op[2]) or "x", op[3])
    elif kind == "reflection":
        record_reflection(ws, user, engine_inputs.one_line(op[2]) or "x", op[3], topic=op[1])
    elif kind == "rule":
        manual_rule(ws, user, op[2], tier=op[1], days=op[3], status="archived" if op[1] == "cold" else "active")
    elif kind == "preference":
        preference(ws, user, op[2], "style", tier=op[1], days=op[3])
    elif kind in ("approve", "reject"):
        waiting = Proposal.objects.filter(workspace=ws, status=ProposalStatus.PENDING, kind="strategy").first()
        if waiting is None:
            return
        if kind == "reject":
            proposals.proposal_reject(workspace=ws, proposal_id=waiting.pk, actor=user, reason="no", now=NOW)
            return
        changes = {"rule": "Reviewer's wording"} if op[1] else None
        # The covenant may refuse it on approval; it then stays pending.
        with contextlib.suppress(InvalidInput):
            proposals.proposal_approve(workspace=ws, proposal_id=waiting.pk, actor=user, payload=changes, now=NOW)
    elif kind == "use":
        rules = list(Memory.objects.filter(workspace=ws, memory_type="strategy").order_by("created_at", "id"))
        if rules:
            target = rules[op[1] % len(rules)]
            RetrievalEvent.objects.create(
                workspace=ws, memory=target, result_set=uuid.uuid4(), rank=0, source="get", created_at=NOW
            )
            Memory.objects.filter(id=target.id).update(access_count=target.access_count + 1, last_accessed=NOW)
    elif kind == "dream":
        dream.dream_run(workspace=ws, now=NOW + timedelta(days=op[1]))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(ops=st.lists(OPERATIONS, max_size=14))
def test_round_trip_is_exact_for_any_history(user: Any, ops: list[tuple[Any, ...]]) -> None:
    source = new_workspace(user, "src")
    for op in ops:
        apply_operation(source, user, op)
    first, second, _ = round_trip(source, user)
    assert second == first


# ------------------------------------------------------------------------------------------------ import


def test_a_malformed_directory_reports_every_problem_with_file_and_line_and_imports_nothing(
    workspace: Workspace, user: Any
) -> None:
    files = {
        "hot/memory.md": "# Hot memory\n\n- fine\n### too deep\n",
        "hot/corrections.md": "## 2026-13-01 — topic\n**What I did wrong**: a\n**What I should do**: b\n"
        "**Context**: c\n",
        "engine/sensor.json": '{\n  "records": [\n    {"id": "S-1"}\n  ]\n}\n',
        "notes.txt": "hello\n",
    }
    before = (Memory.objects.count(), Outcome.objects.count(), Proposal.objects.count())
    with pytest.raises(memdir_import.DirectoryInvalid) as caught:
        memdir_import.memdir_import(workspace=workspace, files=files, actor=user)
    found = {(p["file"], p["line"]) for p in caught.value.problems_json()}
    assert found == {("hot/memory.md", 4), ("hot/corrections.md", 1), ("engine/sensor.json", 3), ("notes.txt", None)}
    assert (Memory.objects.count(), Outcome.objects.count(), Proposal.objects.count()) == before
    assert not EvolutionRecord.objects.filter(evolver=memdir_common.LINEAGE_EVOLVER, action=Action.IMPORT).exists()


def test_workspace_level_problems_are_reported_with_their_line_too(workspace: Workspace, user: Any) -> None:
    decay = {
        "items": [
            {
                "key": "R-missing",
                "tier": "hot",
                "kind": "rule",
                "is_correction": False,
                "base": 1.0,
                "access_count": 1,
                "last_access": "2026-01-01T00:00:00+00:00",
                "recent_uses": [],
                "score": 1.0,
                "scored_at": "2026-01-01T00:00:00+00:00",
            }
        ]
    }
    files = {
        "hot/memory.md": "- a rule <!-- id: R-1 -->\n",
        "engine/decay-scores.json": json.dumps(decay, indent=2),
        "engine/sensor.json": json.dumps(
            {
                "records": [
                    {
                        "id": "S-1",
                        "task_type": "t" * 121,
                        "approach": "a",
                        "result": "fail",
                        "at": "2026-01-01T00:00:00+00:00",
                        "lesson": "",
                        "issue": "",
                        "solution": "",
                    }
                ]
            },
            indent=2,
        ),
    }
    with pytest.raises(memdir_import.DirectoryInvalid) as caught:
        memdir_import.memdir_import(workspace=workspace, files=files, actor=user)
    problems = caught.value.problems_json()
    assert {"file": "engine/decay-scores.json", "line": 4, "message": pytest.approx} != problems[0]
    assert [(p["file"], p["line"]) for p in problems] == [("engine/sensor.json", 4), ("engine/decay-scores.json", 4)]
    assert "R-missing" in problems[1]["message"]
    assert not Memory.objects.filter(workspace=workspace).exists()


def test_a_hand_written_directory_imports_into_the_right_types_and_tiers(workspace: Workspace, user: Any) -> None:
    files = {
        "hot/memory.md": "# Hot memory\n\n- Confirm before deleting files\n\n## Style\n- Answer briefly\n",
        "warm/projects/site.md": "- Deploy with make deploy\n",
        "cold/archive/old.md": "- Use Python 2\n",
        "hot/corrections.md": "## 2026-01-02 — editor\n**What I did wrong**: used vim\n"
        "**What I should do**: use emacs\n**Context**: editing\n",
        "reflections/log.md": "## 2026-01-03\nCONTEXT: Electron packaging\n"
        "REFLECTION: adm-zip needs a separate include\nLESSON: Always check asarUnpack\n",
    }
    summary = memdir_import.memdir_import(workspace=workspace, files=files, actor=user, now=NOW)
    assert summary.created == {"proposals": 0, "outcomes": 0, "corrections": 1, "reflections": 1, "rules": 4}
    rows = {m.content: m for m in Memory.objects.filter(workspace=workspace)}
    assert (rows["Answer briefly"].tier, rows["Answer briefly"].metadata["memdir"]["section"]) == ("hot", "Style")
    assert (rows["Deploy with make deploy"].tier, rows["Use Python 2"].tier) == ("warm", "cold")
    assert rows["Use Python 2"].status == "archived"
    correction = rows["use emacs"]
    assert (correction.memory_type, correction.tier, correction.subject, correction.origin_tier) == (
        "correction",
        "hot",
        "editor",
        1,
    )
    assert correction.created_at == datetime(2026, 1, 2, tzinfo=UTC)
    reflection = next(m for m in rows.values() if m.memory_type == "reflection")
    assert reflection.metadata["reflection"]["lesson"] == "Always check asarUnpack"
    files_out = memdir_export.memdir_export(workspace=workspace, now=NOW)
    assert "## Style\n\n- Answer briefly <!-- id: R-" in files_out["hot/memory.md"]
    assert "- Deploy with make deploy <!--" in files_out["warm/projects/site.md"]


def test_importing_the_same_directory_twice_adds_nothing_the_second_time(workspace: Workspace, user: Any) -> None:
    rich_history(workspace, user)
    files = memdir_export.memdir_export(workspace=workspace, now=EXPORT_AT)
    target = new_workspace(user)
    first = memdir_import.memdir_import(workspace=target, files=files, actor=user, now=EXPORT_AT)
    counts = (Memory.objects.filter(workspace=target).count(), Outcome.objects.filter(workspace=target).count())
    second = memdir_import.memdir_import(workspace=target, files=files, actor=user, now=EXPORT_AT)
    assert set(second.created.values()) == {0}
    assert second.skipped == {k: v for k, v in first.created.items()}
    assert (Memory.objects.filter(workspace=target).count(), Outcome.objects.filter(workspace=target).count()) == counts
    assert memdir_export.memdir_export(workspace=target, now=EXPORT_AT) == files


def test_importing_a_workspace_its_own_export_adds_nothing(workspace: Workspace, user: Any) -> None:
    """Rules approved here have no directory id: the export names them after the memory, and the import knows
    that name, so the HOT strategy is not listed twice (it was, with origin import:memory-evolution)."""
    rich_history(workspace, user)
    strategies = list(Memory.objects.filter(workspace=workspace, memory_type="strategy").values_list("id", flat=True))
    files = memdir_export.memdir_export(workspace=workspace, now=EXPORT_AT)
    summary = memdir_import.memdir_import(workspace=workspace, files=files, actor=user, now=EXPORT_AT)
    assert summary.created.get("rules", 0) == 0
    assert summary.skipped["rules"] > 0
    assert sorted(Memory.objects.filter(workspace=workspace, memory_type="strategy").values_list("id", flat=True)) == (
        sorted(strategies)
    )
    assert not Memory.objects.filter(workspace=workspace, origin=memdir_import.IMPORT_ORIGIN, memory_type="strategy")


def test_an_imported_correction_wins_over_the_memories_of_its_topic(
    workspace: Workspace, user: Any, make_memory: Any
) -> None:
    preference = make_memory("use vim", memory_type="preference", subject="editor")
    files = {
        "hot/corrections.md": "## 2026-01-02 — editor\n**What I did wrong**: used vim\n"
        "**What I should do**: use emacs\n**Context**: editing\n",
    }
    memdir_import.memdir_import(workspace=workspace, files=files, actor=user)
    assert Memory.objects.get(id=preference.id).content == "use emacs"


def test_the_copy_names_the_workspace_its_history_started_in(workspace: Workspace, user: Any) -> None:
    record_outcome(workspace, "build", "success")
    _, second, target = round_trip(workspace, user)
    assert json.loads(second["meta.json"])["workspace"] == "acme"
    assert target.slug != "acme"


# ------------------------------------------------------------------------------------------------- uploads


def zip_of(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_a_zip_is_read_from_inside_its_folder_skipping_hidden_files() -> None:
    data = zip_of(
        {
            "memory-evolution/hot/memory.md": b"- a\n",
            "memory-evolution/.DS_Store": b"\x00",
            "__MACOSX/memory-evolution/._x": b"\x00",
        }
    )
    assert memdir_import.memdir_files_from_zip(data) == {"hot/memory.md": "- a\n"}


def test_the_export_zip_is_stable_and_reads_back() -> None:
    files = {"meta.json": '{"version": 1}\n', "hot/memory.md": "- a\n"}
    first = memdir_export.memdir_zip(files)
    assert first == memdir_export.memdir_zip(dict(reversed(list(files.items()))))
    assert memdir_import.memdir_files_from_zip(first) == files


def test_bad_uploads_are_refused_naming_the_file_and_line() -> None:
    with pytest.raises(InvalidInput) as bad_zip:
        memdir_import.memdir_files_from_zip(b"not a zip")
    assert bad_zip.value.field == "file"
    with pytest.raises(memdir_import.DirectoryInvalid) as caught:
        memdir_import.memdir_files_from_zip(zip_of({"hot/memory.md": b"- ok\n- caf\xe9\n", "../evil.md": b"x"}))
    assert {(p.file, p.line) for p in caught.value.problems} == {("hot/memory.md", 2), ("../evil.md", None)}
    with pytest.raises(InvalidInput) as not_text:
        memdir_import.memdir_files_from_json({"files": {"hot/memory.md": 3}})
    assert not_text.value.field == "files.hot/memory.md"
    with pytest.raises(InvalidInput) as unknown:
        memdir_import.memdir_files_from_json({"files": {"a": "b"}, "mode": "merge"})
    assert unknown.value.field == "mode"
