from __future__ import annotations

import dataclasses
import datetime as dt

import numpy as np
import pytest

from evolution.algorithms.typed import (
    DEFAULT_POLICIES,
    ConflictAction,
    ConflictPolicy,
    DriftFlag,
    SlotMemory,
    contradiction_clusters,
    decayed_confidence,
    decide_conflict,
    drift_flags,
    goal_matches,
    half_lives,
    origin_tier,
    policy_for,
    summary_groups,
)

NOW = dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC)
EARLIER = NOW - dt.timedelta(days=1)


def _memory(**changes: object) -> SlotMemory:
    base = SlotMemory(
        id="old",
        memory_type="preference",
        subject="editor",
        content="vim",
        confidence=0.8,
        origin="api:agent",
        created_at=EARLIER,
    )
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _incoming(**changes: object) -> SlotMemory:
    defaults: dict[str, object] = {"id": "new", "content": "emacs", "created_at": NOW}
    defaults.update(changes)
    return _memory(**defaults)


def test_default_policies_follow_typedmem() -> None:
    assert DEFAULT_POLICIES["preference"] is ConflictPolicy.REPLACE
    assert DEFAULT_POLICIES["goal"] is ConflictPolicy.REPLACE
    for kind in ("fact", "event", "observation"):
        assert DEFAULT_POLICIES[kind] is ConflictPolicy.KEEP_BOTH
    assert DEFAULT_POLICIES["state"] is ConflictPolicy.FLAG
    assert policy_for("reflection") is ConflictPolicy.KEEP_BOTH
    assert policy_for("fact", {"fact": ConflictPolicy.REINFORCE}) is ConflictPolicy.REINFORCE


@pytest.mark.parametrize(
    ("origin", "tier"),
    [
        ("user:alice", 1),
        ("cli:bob", 1),
        ("api:token", 1),
        ("import:dir", 1),
        ("evolver:decay", 2),
        ("agent:x", 2),
        ("engine:evo_devo", 3),
    ],
)
def test_origin_tiers_rank_people_above_evolvers_above_the_engine(origin: str, tier: int) -> None:
    assert origin_tier(origin) == tier


def test_replace_keeps_the_newest_value_and_logs_it() -> None:
    existing = _memory(replace_log=("2025-05-01T00:00:00+00:00",), replace_count=1, version=2)
    decision = decide_conflict(existing, _incoming(), ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.REPLACE
    assert decision.content == "emacs"
    assert decision.replace_log == ("2025-05-01T00:00:00+00:00", NOW.isoformat())
    assert decision.replace_count == 2
    assert decision.version == 3
    assert decision.existing_id == "old"


def test_replace_logs_when_the_value_became_true_not_when_it_was_written() -> None:
    existing = _memory(created_at=NOW - dt.timedelta(days=30))
    true_since = NOW - dt.timedelta(days=8)
    decision = decide_conflict(existing, _incoming(created_at=true_since), ConflictPolicy.REPLACE, NOW)
    assert decision.replace_log == (true_since.isoformat(),)
    # A clock ahead of ours never puts a change in the future.
    later = decide_conflict(existing, _incoming(created_at=NOW + dt.timedelta(hours=2)), ConflictPolicy.REPLACE, NOW)
    assert later.replace_log == (NOW.isoformat(),)


def test_replace_log_keeps_the_last_twenty_entries() -> None:
    log = tuple(f"2025-05-{d:02d}T00:00:00+00:00" for d in range(1, 21))
    decision = decide_conflict(_memory(replace_log=log, replace_count=20), _incoming(), ConflictPolicy.REPLACE, NOW)
    assert len(decision.replace_log) == 20
    assert decision.replace_log[0] == log[1]
    assert decision.replace_log[-1] == NOW.isoformat()
    assert decision.replace_count == 21


@pytest.mark.parametrize(
    ("incoming", "why"),
    [
        ({"origin": "engine:evo"}, "lower source authority"),
        ({"created_at": EARLIER - dt.timedelta(hours=1)}, "older"),
        ({"confidence": 0.5}, "less confident"),
        ({"content": "  VIM "}, "already holds"),
    ],
)
def test_replace_is_skipped_by_its_guards(incoming: dict[str, object], why: str) -> None:
    decision = decide_conflict(_memory(), _incoming(**incoming), ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.SKIP
    assert why in decision.reason
    assert decision.replace_count == 0
    assert decision.content == "vim"


def test_the_stored_origin_tier_overrides_the_origin_string() -> None:
    decision = decide_conflict(_memory(), _incoming(origin_tier=3), ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.SKIP


def test_a_correction_always_wins_a_replace_slot() -> None:
    incoming = _incoming(
        origin="engine:x", confidence=0.1, created_at=EARLIER - dt.timedelta(days=9), is_correction=True
    )
    decision = decide_conflict(_memory(), incoming, ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.REPLACE
    assert decision.replace_count == 1


def test_a_correction_typed_memory_supersedes_a_keep_both_slot() -> None:
    existing = _memory(memory_type="fact")
    incoming = _incoming(memory_type="correction")
    decision = decide_conflict(existing, incoming, ConflictPolicy.KEEP_BOTH, NOW)
    assert decision.action is ConflictAction.SUPERSEDE


def test_memories_without_a_subject_never_collide() -> None:
    decision = decide_conflict(_memory(subject=None), _incoming(subject=None), ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.INSERT


def test_different_subjects_or_types_do_not_collide() -> None:
    assert decide_conflict(_memory(), _incoming(subject="shell"), ConflictPolicy.REPLACE, NOW).action is (
        ConflictAction.INSERT
    )
    assert decide_conflict(_memory(), _incoming(memory_type="goal"), ConflictPolicy.REPLACE, NOW).action is (
        ConflictAction.INSERT
    )


def test_subjects_match_ignoring_case_and_spacing() -> None:
    decision = decide_conflict(_memory(), _incoming(subject="  Editor "), ConflictPolicy.REPLACE, NOW)
    assert decision.action is ConflictAction.REPLACE


def test_flag_stores_both_and_cross_links_them() -> None:
    decision = decide_conflict(_memory(memory_type="state"), _incoming(memory_type="state"), ConflictPolicy.FLAG, NOW)
    assert decision.action is ConflictAction.FLAG
    assert decision.conflicts_with == (("old", "new"), ("new", "old"))


def test_flag_with_the_same_content_is_no_contradiction() -> None:
    decision = decide_conflict(_memory(), _incoming(content="vim"), ConflictPolicy.FLAG, NOW)
    assert decision.action is ConflictAction.KEEP_BOTH
    assert decision.conflicts_with == ()


def test_keep_both_keeps_both() -> None:
    decision = decide_conflict(
        _memory(memory_type="fact"), _incoming(memory_type="fact"), ConflictPolicy.KEEP_BOTH, NOW
    )
    assert decision.action is ConflictAction.KEEP_BOTH


def test_supersede_follows_the_replace_guards() -> None:
    assert decide_conflict(_memory(), _incoming(), ConflictPolicy.SUPERSEDE, NOW).action is ConflictAction.SUPERSEDE
    older = _incoming(created_at=EARLIER - dt.timedelta(days=1))
    assert decide_conflict(_memory(), older, ConflictPolicy.SUPERSEDE, NOW).action is ConflictAction.SKIP


def test_reinforce_combines_confidence_of_a_repeated_value() -> None:
    decision = decide_conflict(_memory(), _incoming(content="vim", confidence=0.5), ConflictPolicy.REINFORCE, NOW)
    assert decision.action is ConflictAction.REINFORCE
    assert decision.confidence == pytest.approx(1 - 0.2 * 0.5)
    assert decision.version == 2
    other = decide_conflict(_memory(), _incoming(), ConflictPolicy.REINFORCE, NOW)
    assert other.action is ConflictAction.KEEP_BOTH


def test_naive_now_is_refused() -> None:
    with pytest.raises(ValueError):
        decide_conflict(_memory(), _incoming(), ConflictPolicy.REPLACE, NOW.replace(tzinfo=None))


def test_contradiction_clusters_are_connected_components_of_two_or_more() -> None:
    edges = [("a", "b"), ("b", "c"), ("d", "e"), ("f", "f"), ("c", "a")]
    assert contradiction_clusters(edges) == [["a", "b", "c"], ["d", "e"]]


def test_no_conflicts_give_no_clusters() -> None:
    assert contradiction_clusters([]) == []
    assert contradiction_clusters([("x", "x")]) == []


def _stamps(*days_ago: float) -> list[str]:
    return [(NOW - dt.timedelta(days=d)).isoformat() for d in days_ago]


def test_three_replaces_in_thirty_days_raise_a_drift_flag() -> None:
    flags = drift_flags(
        {"m1": _stamps(1, 5, 20), "m2": _stamps(1, 5, 31), "m3": _stamps(1, 2)},
        NOW,
        labels={"m1": "preference[editor]"},
    )
    assert [f.memory_id for f in flags] == ["m1"]
    assert flags[0].reason == "preference[editor] changed 3x in last 30d"
    assert flags[0].replaces_in_window == 3
    assert flags[0].first_replace_at == NOW - dt.timedelta(days=20)


def test_drift_flags_are_idempotent_within_a_window() -> None:
    logs = {"m1": _stamps(1, 5, 20)}
    first = drift_flags(logs, NOW)
    assert drift_flags(logs, NOW, existing_flags={"m1": first}) == []
    later = NOW + dt.timedelta(days=3)
    logs_more = {"m1": [*logs["m1"], (later - dt.timedelta(hours=1)).isoformat()]}
    assert drift_flags(logs_more, later, existing_flags={"m1": first}) == []


def test_a_new_burst_after_the_flagged_window_is_flagged_again() -> None:
    first = drift_flags({"m1": _stamps(1, 5, 20)}, NOW)
    later = NOW + dt.timedelta(days=60)
    burst = [(later - dt.timedelta(days=d)).isoformat() for d in (1, 2, 3)]
    again = drift_flags({"m1": _stamps(1, 5, 20) + burst}, later, existing_flags={"m1": first})
    assert len(again) == 1
    assert again[0].flagged_at == later


def test_drift_flags_round_trip_through_json() -> None:
    flag = drift_flags({"m1": _stamps(1, 5, 20)}, NOW)[0]
    assert DriftFlag.from_dict(flag.to_dict()) == flag


def test_naive_replace_timestamps_are_read_as_utc() -> None:
    naive = [(NOW - dt.timedelta(days=d)).replace(tzinfo=None).isoformat() for d in (1, 2, 3)]
    assert len(drift_flags({"m1": naive}, NOW)) == 1


def test_goal_is_resolved_by_evidence_with_cosine_at_least_point_eight_five() -> None:
    goals = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    evidence = np.array([[0.8, 0.6], [2.0, 0.0], [0.0, 0.0]])
    matches = goal_matches(goals, evidence)
    assert matches.best_index.tolist() == [1, 0, 0]
    assert matches.best_score == pytest.approx([1.0, 0.6, (0.8 + 0.6) / np.sqrt(2)])
    assert matches.resolved.tolist() == [True, False, True]
    assert matches.reason(0, ["e0", "e1", "e2"]) == "best evidence e1 cosine 1.0000 >= 0.85"
    assert matches.reason(1) == "best evidence 0 cosine 0.6000 < 0.85"


def test_goals_without_evidence_stay_open() -> None:
    matches = goal_matches(np.ones((2, 3)), np.empty((0, 3)))
    assert matches.best_index.tolist() == [-1, -1]
    assert not matches.resolved.any()
    assert matches.reason(0) == "no evidence to match"


def test_goal_matching_in_chunks_agrees_with_one_block() -> None:
    rng = np.random.default_rng(2)
    goals = rng.standard_normal((50, 8))
    evidence = rng.standard_normal((40, 8))
    whole = goal_matches(goals, evidence)
    chunked = goal_matches(goals, evidence, chunk=7)
    assert whole.best_index.tolist() == chunked.best_index.tolist()
    assert whole.best_score == pytest.approx(chunked.best_score)


def test_event_confidence_halves_every_fourteen_days() -> None:
    assert decayed_confidence([1.0], [60.0], [14.0])[0] == pytest.approx(0.051271, abs=1e-6)
    assert decayed_confidence([0.8], [7.0], half_lives(["observation"]))[0] == pytest.approx(0.4)


def test_half_lives_by_type() -> None:
    assert half_lives(["event", "observation", "fact"]).tolist() == [14.0, 7.0, 30.0]
    assert half_lives(["fact"], {"fact": 90.0}).tolist() == [90.0]


def test_stale_groups_of_three_are_summarised() -> None:
    types = ["event", "event", "event", "event", "observation", "observation", "event", "fact"]
    subjects = ["deploy", "Deploy", "deploy ", "deploy", "cpu", "cpu", None, "deploy"]
    confidence = [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.1, 0.1]
    ages = [60.0, 60.0, 60.0, 1.0, 60.0, 60.0, 60.0, 60.0]
    excluded = [False] * 8
    groups = summary_groups(types, subjects, confidence, ages, excluded)
    assert len(groups) == 1
    assert groups[0].memory_type == "event"
    assert groups[0].subject == "deploy"
    assert groups[0].indices == (0, 1, 2)
    assert groups[0].decayed_confidence == pytest.approx((0.051271,) * 3, abs=1e-6)


def test_summaries_and_summarized_memories_never_join_a_group() -> None:
    groups = summary_groups(["event"] * 3, ["x"] * 3, [1.0] * 3, [60.0] * 3, [False, True, False])
    assert groups == []
