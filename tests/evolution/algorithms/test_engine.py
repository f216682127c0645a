from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolution.algorithms.engine import (
    COVENANT_MIN_WEIGHT,
    INITIAL_STRATEGY_WEIGHT,
    REVIEW_TASK_TYPE,
    Lesson,
    Outcome,
    RuleClaim,
    StrategyProposal,
    adjust_weights_after_rejection,
    best_approach,
    covenant_check,
    jaccard,
    lesson_key,
    precedence,
    propose_strategies,
    record_decision,
    strategy_key,
    world_model,
)

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def outcome(
    lesson: str = "",
    *,
    days: float = 0.0,
    task: str = "electron packaging",
    approach: str = "asar",
    result: str = "fail",
    ref: str = "",
) -> Outcome:
    return Outcome(
        task_type=task,
        approach=approach,
        result=result,  # type: ignore[arg-type]
        lesson=lesson,
        issue="",
        solution="",
        at=T0 + timedelta(days=days),
        ref=ref,
    )


def proposal(rule: str = "Always check asarUnpack for renderer files", **changes: object) -> StrategyProposal:
    base = StrategyProposal(
        key=strategy_key(rule),
        title="Check asarUnpack",
        rule_text=rule,
        evidence=("sensor:S-1", "sensor:S-2", "reflection:2026-02-01#1"),
        task_type="electron packaging",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------- world model


def test_world_model_counts_successes_and_failures_per_approach_and_task_type() -> None:
    outcomes = [
        outcome(result="success"),
        outcome(result="success"),
        outcome(result="fail"),
        outcome(approach="zip", result="fail"),
        outcome(task="deploy", approach="ssh", result="success"),
    ]
    model = world_model(outcomes)
    asar = model.by_approach[("electron packaging", "asar")]
    assert (asar.successes, asar.failures, asar.total) == (2, 1, 3)
    assert asar.rate == pytest.approx(2 / 3)
    assert model.by_approach[("electron packaging", "zip")].rate == 0.0
    packaging = model.by_task_type["electron packaging"]
    assert (packaging.successes, packaging.failures) == (2, 2)
    assert packaging.rate == pytest.approx(0.5)
    assert list(model.by_approach) == sorted(model.by_approach)


def test_best_approach_prefers_the_highest_rate_then_more_trials() -> None:
    outcomes = [
        outcome(approach="a", result="success"),
        outcome(approach="b", result="success"),
        outcome(approach="b", result="success"),
        outcome(approach="c", result="fail"),
    ]
    model = world_model(outcomes)
    assert best_approach(model, "electron packaging") == "b"
    assert best_approach(model, "unknown task") is None


def test_outcomes_must_be_timezone_aware_and_success_or_fail() -> None:
    with pytest.raises(ValueError):
        replace(outcome(), at=datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        outcome(result="maybe")


# --------------------------------------------------------------------------------------------- lesson key


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Always check asarUnpack!", "always  check ASARUNPACK"),
        ("Use the --frozen flag.", "use the frozen flag"),
        ("  Retry, then   give up  ", "retry then give up"),
        ("api_key rotation", "API key rotation"),
        ("Ｆｕｌｌｗｉｄｔｈ text", "fullwidth text"),
        ("Straße", "STRASSE"),
    ],
)
def test_lesson_key_treats_case_punctuation_and_spacing_as_the_same_lesson(a: str, b: str) -> None:
    assert lesson_key(a) == lesson_key(b)


def test_lesson_key_keeps_different_words_apart() -> None:
    assert lesson_key("check asarUnpack") != lesson_key("check asar unpack files")
    assert lesson_key("?!...") == ""


# -------------------------------------------------------------------------------------------- evo_devo


def test_same_lesson_three_times_in_seven_days_proposes_one_strategy() -> None:
    outcomes = [
        outcome("Always check asarUnpack for renderer files", days=0, ref="sensor:S-1"),
        outcome("always check asarUnpack for renderer files!", days=3, ref="sensor:S-2"),
        outcome("Always check ASARUNPACK for renderer files.", days=6, ref="sensor:S-3"),
    ]
    [p] = propose_strategies(outcomes, [], NOW, existing_keys=set())
    assert p.key == strategy_key("always check asarunpack for renderer files")
    assert p.weight == INITIAL_STRATEGY_WEIGHT == 0.5
    assert p.evidence == ("sensor:S-1", "sensor:S-2", "sensor:S-3")
    assert p.rule_text == "Always check ASARUNPACK for renderer files."
    assert p.task_type == "electron packaging"
    assert p.title.startswith("Seen 3x in 7 days: ")


def test_a_lesson_already_proposed_is_not_proposed_again() -> None:
    outcomes = [outcome("Pin the node version", days=d, ref=f"sensor:{d}") for d in (0, 1, 2)]
    first = propose_strategies(outcomes, [], NOW, existing_keys=set())
    assert len(first) == 1
    again = propose_strategies(outcomes, [], NOW, existing_keys={p.key for p in first})
    assert again == []


def test_three_sightings_spread_over_eight_days_propose_nothing() -> None:
    outcomes = [outcome("Pin the node version", days=d, ref=f"sensor:{d}") for d in (0, 4, 8)]
    assert propose_strategies(outcomes, [], NOW, existing_keys=set()) == []


def test_sightings_exactly_seven_days_apart_still_count() -> None:
    outcomes = [outcome("Pin the node version", days=d, ref=f"sensor:{d}") for d in (0, 3.5, 7)]
    assert len(propose_strategies(outcomes, [], NOW, existing_keys=set())) == 1


def test_lessons_from_outcomes_and_reflections_count_together() -> None:
    outcomes = [outcome("Run migrations before tests", days=0, ref="sensor:S-1")]
    reflections = [
        Lesson("run migrations before tests", T0 + timedelta(days=1), "reflection:2026-02-02#1", "CI setup"),
        Lesson("Run migrations, before tests", T0 + timedelta(days=2), "reflection:2026-02-03#1", "CI setup"),
    ]
    [p] = propose_strategies(outcomes, reflections, NOW, existing_keys=())
    assert p.evidence == ("sensor:S-1", "reflection:2026-02-02#1", "reflection:2026-02-03#1")
    assert p.task_type == "CI setup"  # two of three sightings


def test_the_same_source_counted_twice_is_one_sighting() -> None:
    outcomes = [outcome("Pin the node version", days=d, ref="sensor:S-1") for d in (0, 1, 2)]
    assert propose_strategies(outcomes, [], NOW, existing_keys=()) == []


def test_sightings_after_now_are_ignored() -> None:
    outcomes = [outcome("Pin the node version", days=d, ref=f"sensor:{d}") for d in (0, 1, 2)]
    assert propose_strategies(outcomes, [], T0 + timedelta(days=1.5), existing_keys=()) == []


def test_empty_lessons_never_propose() -> None:
    outcomes = [outcome(lesson, days=d, ref=f"sensor:{d}") for d, lesson in enumerate(["", " ", "!!"])]
    assert propose_strategies(outcomes, [], NOW, existing_keys=()) == []


def test_evidence_is_the_newest_qualifying_window() -> None:
    days = (0, 1, 2, 20, 21, 22, 23)
    outcomes = [outcome("Pin the node version", days=d, ref=f"sensor:{d}") for d in days]
    [p] = propose_strategies(outcomes, [], NOW, existing_keys=())
    assert p.evidence == ("sensor:20", "sensor:21", "sensor:22", "sensor:23")


@given(
    st.lists(
        st.tuples(st.sampled_from(["pin node", "Pin node!", "use uv", "USE UV"]), st.floats(0, 27)),
        max_size=15,
    )
)
def test_proposals_have_enough_evidence_in_the_window_and_a_second_run_adds_nothing(
    sightings: list[tuple[str, float]],
) -> None:
    outcomes = [outcome(text, days=d, ref=f"sensor:{i}") for i, (text, d) in enumerate(sightings)]
    proposals = propose_strategies(outcomes, [], NOW, existing_keys=())
    times = {f"sensor:{i}": T0 + timedelta(days=d) for i, (_, d) in enumerate(sightings)}
    for p in proposals:
        stamps = [times[ref] for ref in p.evidence]
        assert len(stamps) >= 3
        assert max(stamps) - min(stamps) <= timedelta(days=7)
    assert len({p.key for p in proposals}) == len(proposals)
    assert propose_strategies(outcomes, [], NOW, existing_keys={p.key for p in proposals}) == []


# -------------------------------------------------------------------------------------------- covenant


@pytest.mark.parametrize(
    "text",
    [
        "Store the password in the notes",
        "Paste the TOKEN into the config",
        "Keep the secret handy",
        "Commit api_key to the repo",
        "Put the API key in the README",
        "Log the api-key on start",
        "Share credentials with the bot",
        "Copy the private_key to the server",
        "Keep the Private Key in memory",
        "Rotate passwords weekly",
        "Refresh tokens on 401",
    ],
)
def test_covenant_vetoes_every_secret_word(text: str) -> None:
    verdict = covenant_check(proposal(text), known_rule_keys=())
    assert not verdict.allowed
    assert any("secrets" in r for r in verdict.reasons)


@pytest.mark.parametrize(
    "text",
    [
        "Always check asarUnpack for renderer files",
        "Use the tokenizer from the model card",
        "Keep secretary notes short",
        "Run the template engine tests before release",
        "Update the sensor firmware before calibration",
    ],
)
def test_covenant_passes_a_clean_proposal(text: str) -> None:
    verdict = covenant_check(proposal(text), known_rule_keys={"strategy:0000000000000000"})
    assert verdict.allowed, verdict.reasons
    assert verdict.reasons == ()


@pytest.mark.parametrize(
    "text",
    [
        "Modify the evolution engine to skip failures",
        "Disable the covenant when it blocks a strategy",
        "Rewrite your own rules after each failure",
        "Lower the weight of this rule when unused",
        "Edit SKILL.md to add more triggers",
        "Raise strategy weights after every success",
        "Auto-approve pending proposals",
        "Update the world model by hand",
    ],
)
def test_covenant_vetoes_rules_that_change_the_engine_itself(text: str) -> None:
    verdict = covenant_check(proposal(text), known_rule_keys=())
    assert not verdict.allowed
    assert any(r.startswith("Self-loop") for r in verdict.reasons)


def test_covenant_vetoes_a_rule_that_only_restates_its_trigger() -> None:
    verdict = covenant_check(proposal("Retry on timeout.", task_type="retry on timeout"), known_rule_keys=())
    [reason] = verdict.reasons
    assert reason.startswith("Self-loop") and "restates its trigger" in reason


def test_covenant_vetoes_a_rule_that_refers_to_itself_or_to_other_rules() -> None:
    p = proposal()
    own = covenant_check(replace(p, rule_text=f"Apply {p.key} everywhere"), known_rule_keys=())
    assert any("refers to itself" in r for r in own.reasons)
    other = covenant_check(replace(p, rule_text="Follow strategy:abc first"), known_rule_keys={"strategy:abc"})
    assert any("refers to other rules (strategy:abc)" in r for r in other.reasons)


def test_covenant_vetoes_re_proposing_a_known_rule_and_engine_only_evidence() -> None:
    p = proposal()
    assert not covenant_check(p, known_rule_keys={p.key}).allowed
    looped = covenant_check(replace(p, evidence=("strategy:x", "proposal:P-001")), known_rule_keys=())
    assert looped.reasons == ("Self-loop: all evidence is the engine's own output, not an observation.",)


@pytest.mark.parametrize(("weight", "allowed"), [(0.0, False), (0.29, False), (COVENANT_MIN_WEIGHT, True), (0.5, True)])
def test_covenant_vetoes_a_weight_below_point_three(weight: float, allowed: bool) -> None:
    assert covenant_check(proposal(weight=weight), known_rule_keys=()).allowed is allowed


def test_covenant_lists_every_reason_that_applies() -> None:
    verdict = covenant_check(proposal("Edit SKILL.md and store the password", weight=0.1), known_rule_keys=())
    assert len(verdict.reasons) == 3


# ---------------------------------------------------------------------------------- decisions and weights


def test_rejection_lowers_similar_strategies_and_keeps_the_rest() -> None:
    strategies = [
        ("a", "Always check asarUnpack for renderer files", 0.5),
        ("b", "check asarUnpack for all renderer files", 0.5),  # 6 shared of 7 words
        ("c", "Pin the node version in CI", 0.5),
    ]
    weights = adjust_weights_after_rejection(strategies, "Always check asarUnpack for renderer files")
    assert weights == pytest.approx({"a": 0.35, "b": 0.35, "c": 0.5})


def test_two_similar_rejections_bring_a_strategy_under_the_covenant_minimum() -> None:
    text = "Always check asarUnpack for renderer files"
    weights = {"a": 0.5}
    for _ in range(2):
        weights = adjust_weights_after_rejection([("a", text, weights["a"])], text)
    assert weights["a"] == pytest.approx(0.245)
    assert not covenant_check(proposal(text, weight=weights["a"]), known_rule_keys=()).allowed


def test_similarity_is_jaccard_of_word_sets() -> None:
    assert jaccard("a b c", "a b d") == pytest.approx(0.5)
    assert jaccard("", "") == 0.0
    assert jaccard("Check, asar!", "check asar") == 1.0


@pytest.mark.parametrize("factor", [0.0, -0.5, 1.5])
def test_rejection_factor_must_lie_in_zero_to_one(factor: float) -> None:
    with pytest.raises(ValueError):
        adjust_weights_after_rejection([("a", "x", 0.5)], "x", factor=factor)


def test_approval_and_rejection_are_recorded_as_success_and_failure() -> None:
    p = proposal()
    approved = record_decision(p, "approve", NOW)
    rejected = record_decision(p, "reject", NOW, reason="too broad", ref="sensor:S-9")
    assert (approved.result, rejected.result) == ("success", "fail")
    assert approved.task_type == rejected.task_type == REVIEW_TASK_TYPE
    assert approved.approach == p.key and approved.solution == p.rule_text
    assert rejected.issue == "too broad" and rejected.ref == "sensor:S-9"
    assert approved.lesson == rejected.lesson == ""


def test_decisions_never_feed_back_into_new_proposals() -> None:
    p = proposal()
    decisions = [record_decision(p, "reject", T0 + timedelta(days=d), ref=f"sensor:{d}") for d in (0, 1, 2)]
    assert propose_strategies(decisions, [], NOW, existing_keys=()) == []
    stats = world_model(decisions).by_approach[(REVIEW_TASK_TYPE, p.key)]
    assert (stats.successes, stats.failures) == (0, 3)


# ------------------------------------------------------------------------------------------- precedence


def claim(key: str, origin: str, scope: str, days: float = 0.0) -> RuleClaim:
    return RuleClaim(key=key, origin=origin, scope=scope, at=T0 + timedelta(days=days))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        (claim("fix", "correction", "global"), claim("rule", "manual", "project", 9), "fix"),
        (claim("fix", "correction", "global"), claim("prop", "engine", "project", 9), "fix"),
        (claim("rule", "manual", "global"), claim("prop", "engine", "project", 9), "rule"),
        (claim("p", "manual", "project"), claim("d", "manual", "domain", 9), "p"),
        (claim("d", "engine", "domain"), claim("g", "engine", "global", 9), "d"),
        (claim("old", "manual", "domain", 0), claim("new", "manual", "domain", 1), "new"),
        (claim("old", "correction", "project", 0), claim("new", "correction", "project", 1), "new"),
    ],
)
def test_precedence_is_correction_then_manual_then_engine_then_scope_then_newest(
    a: RuleClaim, b: RuleClaim, winner: str
) -> None:
    assert precedence(a, b) is not None
    assert precedence(a, b).key == winner  # type: ignore[union-attr]
    assert precedence(b, a).key == winner  # type: ignore[union-attr]


def test_precedence_is_ambiguous_when_origin_scope_and_time_tie() -> None:
    assert precedence(claim("a", "manual", "domain"), claim("b", "manual", "domain")) is None


def test_precedence_refuses_unknown_origins_and_scopes() -> None:
    with pytest.raises(ValueError):
        claim("a", "robot", "domain")
    with pytest.raises(ValueError):
        claim("a", "manual", "planet")


claims = st.builds(
    claim,
    key=st.text(min_size=1, max_size=4),
    origin=st.sampled_from(["correction", "manual", "engine"]),
    scope=st.sampled_from(["project", "domain", "global"]),
    days=st.integers(0, 3),
)


@given(claims, claims)
def test_corrections_always_win_precedence(a: RuleClaim, b: RuleClaim) -> None:
    winner = precedence(a, b)
    assert winner is None or winner in (a, b)
    if a.key != b.key and (a.origin == "correction") != (b.origin == "correction"):
        assert winner is not None and winner.origin == "correction"


@given(claims, claims)
def test_precedence_does_not_depend_on_argument_order(a: RuleClaim, b: RuleClaim) -> None:
    if a.key != b.key:
        assert precedence(a, b) == precedence(b, a)
