"""The self-learning engine over a workspace: sensor, corrections, reflections, evolve, covenant, decisions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from core.errors import Conflict, InvalidInput
from evolution import engine, engine_inputs, engine_selectors, proposals
from evolution.algorithms.engine import REVIEW_TASK_TYPE, strategy_key
from evolution.models import Outcome, Proposal, ProposalKind, ProposalStatus
from history.models import EvolutionRecord
from memories.models import Memory, MemoryType, Status, Workspace
from memories.services import record_revert

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
LESSON = "Always check asarUnpack for renderer files"


def outcome(
    ws: Workspace,
    *,
    days_ago: float = 0.0,
    lesson: str = LESSON,
    result: str = "fail",
    task_type: str = "Electron packaging",
    approach: str = "electron-builder",
    now: datetime = NOW,
) -> engine.OutcomeRecorded:
    return engine.outcome_record(
        workspace=ws,
        item=engine_inputs.OutcomeInput(
            task_type=task_type,
            result=result,
            approach=approach,
            lesson=lesson,
            created_at=now - timedelta(days=days_ago),
        ),
        now=now,
    )


def strategy(
    ws: Workspace, lesson: str = LESSON, *, now: datetime = NOW, task_type: str = "Electron packaging"
) -> Proposal:
    for d in (3, 2, 1):
        outcome(ws, days_ago=d, lesson=lesson, now=now, task_type=task_type)
    return Proposal.objects.get(workspace=ws, dedupe_key=strategy_key(lesson))


# ------------------------------------------------------------------------------------------------ inputs


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"result": "success"}, "task_type"),
        ({"task_type": "  ", "result": "success"}, "task_type"),
        ({"task_type": 3, "result": "success"}, "task_type"),
        ({"task_type": "x" * 121, "result": "success"}, "task_type"),
        ({"task_type": "deploy"}, "result"),
        ({"task_type": "deploy", "result": "ok"}, "result"),
        ({"task_type": "deploy", "result": "fail", "approach": ["a"]}, "approach"),
        ({"task_type": "deploy", "result": "fail", "context": "lesson"}, "context"),
        ({"task_type": "deploy", "result": "fail", "context": {"mood": "x"}}, "context.mood"),
        ({"task_type": "deploy", "result": "fail", "context": {"lesson": 1}}, "context.lesson"),
        ({"task_type": "deploy", "result": "fail", "created_at": "yesterday"}, "created_at"),
        ({"task_type": "deploy", "result": "fail", "extra": 1}, "extra"),
    ],
)
def test_every_bad_outcome_field_is_named(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        engine_inputs.outcome_input(body)
    assert caught.value.field == field


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"what_i_should_do": "b", "context": "c"}, "what_i_did_wrong"),
        ({"what_i_did_wrong": "a", "context": "c"}, "what_i_should_do"),
        ({"what_i_did_wrong": "a", "what_i_should_do": "b"}, "context"),
        ({"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c", "topic": 5}, "topic"),
        ({"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c", "why": "?"}, "why"),
    ],
)
def test_every_bad_correction_field_is_named(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        engine_inputs.correction_input(body)
    assert caught.value.field == field


def test_reflection_input_needs_all_three_parts_and_keeps_them_on_one_line() -> None:
    with pytest.raises(InvalidInput) as caught:
        engine_inputs.reflection_input({"context": "c", "reflection": "r"})
    assert caught.value.field == "lesson"
    item = engine_inputs.reflection_input({"context": "a\n b", "reflection": "r", "lesson": "l\tm", "topic": " t "})
    assert (item.context, item.lesson, item.topic) == ("a b", "l m", "t")


def test_null_or_blank_leaves_an_optional_engine_field_at_its_default() -> None:
    outcome = engine_inputs.outcome_input(
        {"task_type": "deploy", "result": "fail", "approach": " ", "context": None, "created_at": None}
    )
    assert (outcome.approach, outcome.lesson, outcome.created_at) == ("default", "", None)
    parts = {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c"}
    assert engine_inputs.correction_input({**parts, "topic": None}).topic == "general"
    assert engine_inputs.reflection_input({"context": "c", "reflection": "r", "lesson": "l", "topic": ""}).topic is None


def test_an_outcome_s_issue_and_solution_keep_their_lines() -> None:
    context = {"lesson": " one\n line ", "issue": " it broke\nat 3am ", "solution": "\nrolled back"}
    item = engine_inputs.outcome_input({"task_type": "deploy", "result": "fail", "context": context})
    assert (item.lesson, item.issue, item.solution) == ("one line", "it broke\nat 3am", "rolled back")


@pytest.mark.parametrize(
    ("parse", "body", "detail"),
    [
        (
            engine_inputs.outcome_input,
            {"task_type": "deploy", "result": "fail", "context": {"lesson": "x" * 10_001}},
            "context.lesson: longer than 10000 characters",
        ),
        (
            engine_inputs.outcome_input,
            {"task_type": "deploy", "result": "ok"},
            "result: 'ok' is not one of success, fail",
        ),
        (
            engine_inputs.outcome_input,
            {"task_type": "deploy", "result": "fail", "context": {"mood": "grim"}},
            "context.mood: unknown field; expected issue, lesson, solution",
        ),
        (
            engine_inputs.outcome_input,
            {"task_type": "x" * 121, "result": "fail"},
            "task_type: longer than 120 characters",
        ),
        (
            engine_inputs.correction_input,
            {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c", "why": "?"},
            "why: unknown field; expected context, created_at, topic, what_i_did_wrong, what_i_should_do",
        ),
        (
            engine_inputs.correction_input,
            {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c", "topic": "t" * 201},
            "topic: longer than 200 characters",
        ),
        (
            engine_inputs.reflection_input,
            {"context": "c", "reflection": "r", "lesson": " \n "},
            "lesson: must not be blank",
        ),
        (engine_inputs.reflection_input, ["c", "r", "l"], "body: expected a JSON object"),
    ],
)
def test_an_engine_refusal_names_the_field_and_says_why(parse: Any, body: Any, detail: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse(body)
    assert caught.value.detail == detail


# ------------------------------------------------------------------------------------------------ sensor


def test_an_outcome_without_approach_is_recorded_under_the_default_approach(workspace: Workspace) -> None:
    item = engine_inputs.outcome_input({"task_type": "Deploy\n staging", "result": "success"})
    recorded = engine.outcome_record(workspace=workspace, item=item, now=NOW)
    assert (recorded.outcome.task_type, recorded.outcome.approach) == ("Deploy staging", "default")
    assert recorded.evolved is None


def test_world_model_counts_successes_per_task_type_and_approach(workspace: Workspace) -> None:
    for result, approach in [("success", "a"), ("success", "a"), ("fail", "a"), ("success", "b"), ("fail", "b")]:
        outcome(workspace, result=result, approach=approach, lesson="", task_type="deploy")
    model = engine_selectors.world_model_for(workspace)
    assert model.outcomes == 5
    by = {(r["task_type"], r["approach"]): r for r in model.approaches}
    assert by[("deploy", "a")]["rate"] == pytest.approx(2 / 3, abs=1e-6)
    assert by[("deploy", "b")]["rate"] == pytest.approx(0.5, abs=1e-6)
    (task,) = model.task_types
    assert (task["successes"], task["failures"], task["best_approach"]) == (3, 2, "a")


# ------------------------------------------------------------------------------------------------ evolve


def test_the_same_lesson_three_times_in_seven_days_proposes_a_strategy_once(workspace: Workspace) -> None:
    assert outcome(workspace, days_ago=6).evolved is not None
    assert not Proposal.objects.filter(workspace=workspace).exists()
    outcome(workspace, days_ago=3, lesson="always check ASARUNPACK for renderer files!")
    third = outcome(workspace, days_ago=0)
    assert third.evolved is not None
    (proposal,) = third.evolved.created
    assert proposal.kind == ProposalKind.STRATEGY
    assert proposal.status == ProposalStatus.PENDING
    assert proposal.dedupe_key == strategy_key(LESSON)
    assert proposal.payload["weight"] == pytest.approx(0.5)
    assert proposal.payload["rule"] == LESSON
    assert proposal.payload["task_type"] == "Electron packaging"
    assert proposal.payload["evidence"] == ["sensor:S-0001", "sensor:S-0002", "sensor:S-0003"]
    assert "seen 3 times" in proposal.rationale
    # A fourth sighting and a manual run change nothing.
    assert outcome(workspace, days_ago=0).evolved is None
    assert engine.engine_evolve(workspace=workspace, now=NOW).empty
    assert Proposal.objects.filter(workspace=workspace).count() == 1


def test_three_sightings_spread_over_more_than_seven_days_propose_nothing(workspace: Workspace) -> None:
    for days in (15, 7.5, 0):
        outcome(workspace, days_ago=days)
    assert engine.engine_evolve(workspace=workspace, now=NOW).empty
    assert not Proposal.objects.exists()


def test_reflection_lessons_count_but_the_dreams_own_log_does_not(workspace: Workspace, user: Any) -> None:
    def reflect(days: float, topic: str | None) -> engine.ReflectionRecorded:
        item = engine_inputs.ReflectionInput(
            context="Electron packaging",
            reflection="adm-zip needs a separate include",
            lesson=LESSON,
            topic=topic,
            created_at=NOW - timedelta(days=days),
        )
        return engine.reflection_record(workspace=workspace, actor=user, item=item, now=NOW)

    for d in (3, 2, 1):
        assert reflect(d, engine_inputs.DREAM_TOPIC).evolved is None
    assert engine.engine_evolve(workspace=workspace, now=NOW).empty
    reflect(3, None)
    reflect(2, "packaging")
    third = reflect(1, None)
    assert third.evolved is not None
    (proposal,) = third.evolved.created
    assert str(third.memory.id) in proposal.source_ids
    memory = third.memory
    assert memory.memory_type == MemoryType.REFLECTION
    assert (
        memory.content == f"CONTEXT: Electron packaging\nREFLECTION: adm-zip needs a separate include\nLESSON: {LESSON}"
    )


def test_the_covenant_vetoes_a_strategy_touching_secrets_and_lists_why(workspace: Workspace) -> None:
    for d in (3, 2, 1):
        outcome(workspace, days_ago=d, lesson="Paste the API token into the build log")
    vetoed = Proposal.objects.get(workspace=workspace)
    assert vetoed.status == ProposalStatus.VETOED
    assert any("Touches secrets (token)" in r for r in vetoed.payload["vetoes"])
    assert "Touches secrets" in vetoed.rationale
    assert vetoed.decision_reason.startswith("Touches secrets")
    # Idempotent: the vetoed key is never proposed again.
    assert engine.engine_evolve(workspace=workspace, now=NOW + timedelta(hours=1)).empty


def test_two_rejected_similar_strategies_make_a_new_one_start_below_the_covenant_minimum(
    workspace: Workspace, user: Any
) -> None:
    for i, lesson in enumerate(["Always run the linter before pushing", "Always run the linter before a push"]):
        p = strategy(workspace, lesson, now=NOW + timedelta(days=10 * i))
        proposals.proposal_reject(workspace=workspace, proposal_id=p.pk, actor=user, reason="noise")
    later = NOW + timedelta(days=30)
    result = strategy(workspace, "Always run the linter before pushing code", now=later)
    assert result.status == ProposalStatus.VETOED
    assert result.payload["weight"] == pytest.approx(0.5 * 0.7 * 0.7)
    assert any("below the covenant minimum" in r for r in result.payload["vetoes"])


# --------------------------------------------------------------------------------------------- decisions


def test_approving_a_strategy_makes_a_hot_rule_and_records_a_success(workspace: Workspace, user: Any) -> None:
    p = strategy(workspace)
    approved = proposals.proposal_approve(workspace=workspace, proposal_id=p.pk, actor=user, now=NOW)
    assert approved.status == ProposalStatus.APPROVED
    record = approved.applied_record
    assert record is not None and record.evolver == engine.ENGINE_EVOLVER
    rule = Memory.objects.get(id=record.output_ids[0])
    assert (rule.memory_type, rule.tier, rule.status) == (MemoryType.STRATEGY, "hot", Status.ACTIVE)
    assert (rule.content, rule.origin, rule.origin_tier) == (LESSON, engine.ENGINE_ORIGIN, 3)
    assert rule.subject == "Electron packaging"
    assert rule.metadata["strategy"]["proposal_id"] == p.pk
    review = Outcome.objects.get(workspace=workspace, task_type=REVIEW_TASK_TYPE)
    assert (review.result, review.approach, review.lesson) == ("success", p.dedupe_key, "")
    with pytest.raises(Conflict):
        proposals.proposal_approve(workspace=workspace, proposal_id=p.pk, actor=user)
    # The rule is an audited creation: reverting the record removes it again.
    record_revert(workspace=workspace, record_id=record.pk, actor=user)
    assert not Memory.objects.filter(id=rule.id).exists()


def test_a_rewritten_strategy_becomes_the_reviewers_manual_rule(workspace: Workspace, user: Any) -> None:
    p = strategy(workspace)
    approved = proposals.proposal_approve(
        workspace=workspace, proposal_id=p.pk, actor=user, payload={"rule": "Check asarUnpack before every release"}
    )
    assert approved.status == ProposalStatus.MODIFIED
    assert approved.applied_record is not None
    rule = Memory.objects.get(id=approved.applied_record.output_ids[0])
    assert (rule.content, rule.origin, rule.origin_tier) == ("Check asarUnpack before every release", "user:alice", 1)


def test_approval_refuses_a_rewrite_the_covenant_vetoes_or_a_changed_weight(workspace: Workspace, user: Any) -> None:
    p = strategy(workspace)
    with pytest.raises(InvalidInput) as caught:
        proposals.proposal_approve(
            workspace=workspace, proposal_id=p.pk, actor=user, payload={"rule": "Store the password in the repo"}
        )
    assert caught.value.field == "payload.rule"
    with pytest.raises(InvalidInput) as caught:
        proposals.proposal_approve(workspace=workspace, proposal_id=p.pk, actor=user, payload={"weight": 1.0})
    assert caught.value.field == "payload.weight"
    assert Proposal.objects.get(pk=p.pk).status == ProposalStatus.PENDING
    assert not Memory.objects.filter(workspace=workspace, memory_type=MemoryType.STRATEGY).exists()


def test_rejecting_records_a_failure_and_lowers_similar_strategies_only(workspace: Workspace, user: Any) -> None:
    # Distinct task types keep the precedence check between rules of one subject out of this test.
    rejected = strategy(workspace, "Always run the linter before pushing", task_type="t1")
    similar = strategy(workspace, "Always run the linter before a push", task_type="t2")
    approved_similar = strategy(workspace, "Run the linter before pushing always please", task_type="t3")
    other = strategy(workspace, "Pin the node version in CI", task_type="t4")
    proposals.proposal_approve(workspace=workspace, proposal_id=approved_similar.pk, actor=user)
    proposals.proposal_reject(workspace=workspace, proposal_id=rejected.pk, actor=user, reason="too obvious", now=NOW)
    weights = {p.pk: p.payload["weight"] for p in Proposal.objects.filter(workspace=workspace)}
    assert weights[similar.pk] == pytest.approx(0.35)
    assert weights[approved_similar.pk] == pytest.approx(0.35)
    assert weights[rejected.pk] == pytest.approx(0.35)
    assert weights[other.pk] == pytest.approx(0.5)
    history = Proposal.objects.get(pk=similar.pk).payload["weight_history"]
    assert history[-1]["from"] == pytest.approx(0.5) and history[-1]["to"] == pytest.approx(0.35)
    failure = Outcome.objects.get(workspace=workspace, task_type=REVIEW_TASK_TYPE, result="fail")
    assert (failure.approach, failure.issue) == (rejected.dedupe_key, "too obvious")
    # A second similar rejection culls the pending one: 0.35 * 0.7 < 0.3.
    third = strategy(workspace, "Always run the linter before pushing a branch", task_type="t5")
    proposals.proposal_reject(workspace=workspace, proposal_id=third.pk, actor=user)
    culled = Proposal.objects.get(pk=similar.pk)
    assert culled.status == ProposalStatus.VETOED
    assert culled.payload["weight"] == pytest.approx(0.245)
    assert "below the covenant minimum" in culled.decision_reason
    # The approved rule keeps its place: a person approved it.
    assert Proposal.objects.get(pk=approved_similar.pk).status == ProposalStatus.APPROVED


# ------------------------------------------------------------------------------------- corrections, precedence


def test_a_correction_lands_in_hot_and_wins_over_every_memory_of_its_topic(
    workspace: Workspace, user: Any, make_memory: Any
) -> None:
    preference = make_memory("use vim", memory_type="preference", subject="editor")
    rule = make_memory("edit with nano", memory_type="strategy", subject="Editor", tier="hot")
    item = engine_inputs.correction_input(
        {"what_i_did_wrong": "opened vim", "what_i_should_do": "use emacs", "context": "editing", "topic": "editor"}
    )
    correction = engine.correction_record(workspace=workspace, actor=user, item=item)
    assert (correction.memory_type, correction.tier, correction.origin_tier) == ("correction", "hot", 1)
    assert correction.metadata["correction"]["what_i_did_wrong"] == "opened vim"
    assert Memory.objects.get(id=preference.id).content == "use emacs"
    assert Memory.objects.get(id=rule.id).status == Status.SUPERSEDED
    assert EvolutionRecord.objects.filter(workspace=workspace, evolver="WritePolicy").count() == 2


def test_a_correction_without_topic_claims_no_subject(workspace: Workspace, user: Any, make_memory: Any) -> None:
    bystander = make_memory("x", memory_type="preference", subject="general")
    item = engine_inputs.correction_input({"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c"})
    correction = engine.correction_record(workspace=workspace, actor=user, item=item)
    assert (correction.subject, correction.metadata["correction"]["topic"]) == ("", "general")
    assert Memory.objects.get(id=bystander.id).content == "x"


def test_a_strategy_conflicting_with_a_correction_of_its_task_type_is_vetoed(workspace: Workspace, user: Any) -> None:
    item = engine_inputs.correction_input(
        {
            "what_i_did_wrong": "skipped asar",
            "what_i_should_do": "use the asar whitelist",
            "context": "c",
            "topic": "electron packaging",
        }
    )
    correction = engine.correction_record(workspace=workspace, actor=user, item=item)
    p = strategy(workspace)
    assert p.status == ProposalStatus.VETOED
    assert f"user correction {correction.id}" in p.decision_reason


def test_a_strategy_supersedes_an_older_engine_rule_of_its_task_type_when_approved(
    workspace: Workspace, user: Any
) -> None:
    old = strategy(workspace, "Use electron-packager", now=NOW - timedelta(days=20))
    proposals.proposal_approve(workspace=workspace, proposal_id=old.pk, actor=user, now=NOW - timedelta(days=20))
    old_rule = Memory.objects.get(workspace=workspace, memory_type=MemoryType.STRATEGY)
    new = strategy(workspace)
    assert new.payload["supersedes"] == [str(old_rule.id)]
    proposals.proposal_approve(workspace=workspace, proposal_id=new.pk, actor=user)
    old_rule.refresh_from_db()
    assert old_rule.status == Status.SUPERSEDED
    assert Memory.objects.filter(workspace=workspace, memory_type=MemoryType.STRATEGY, status="active").count() == 1


def test_an_ambiguous_conflict_asks_the_person_with_a_conflict_proposal(workspace: Workspace, make_memory: Any) -> None:
    # An engine rule of the same subject made at the same instant: origin, scope and time all tie.
    tie = make_memory("Use electron-forge", memory_type="strategy", subject="Electron packaging", origin="engine:x")
    Memory.objects.filter(id=tie.id).update(created_at=NOW)
    for d in (3, 2, 1):
        Outcome.objects.create(
            workspace=workspace,
            task_type="Electron packaging",
            approach="a",
            result="fail",
            lesson=LESSON,
            created_at=NOW - timedelta(days=d),
        )
    result = engine.engine_evolve(workspace=workspace, now=NOW)
    (created,) = result.created
    (question,) = result.questions
    assert created.status == ProposalStatus.PENDING
    assert question.kind == ProposalKind.CONFLICT
    assert question.payload["strategy_proposal"] == created.pk
    assert question.payload["options"][0]["memory_id"] == str(tie.id)
    assert question.source_ids == [str(tie.id)]
