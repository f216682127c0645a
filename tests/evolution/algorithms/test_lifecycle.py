from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

from evolution.algorithms.lifecycle import (
    daily_rollups,
    observation_groups,
    opinion_candidates,
    opinion_confidence,
    opinion_strength,
    procedural_clusters,
    semantic_eligible,
)

DAY = 86_400.0
MIDNIGHT = dt.datetime(2025, 3, 10, tzinfo=dt.UTC).timestamp()


def test_semantic_promotion_needs_high_confidence_and_three_days() -> None:
    eligible = semantic_eligible([0.95, 0.9, 0.89, 0.95, np.nan], [3.0, 10.0, 10.0, 2.99, 10.0])
    assert eligible.tolist() == [True, True, False, False, False]


def test_daily_rollup_groups_episodes_by_calendar_day() -> None:
    created = [MIDNIGHT - 2 * DAY + 3600, MIDNIGHT - 2 * DAY + 7200, MIDNIGHT - DAY + 100, MIDNIGHT - 10]
    contents = ["standup notes", "fixed login bug", "lonely episode", "late night deploy"]
    rollups = daily_rollups(created, contents, now=MIDNIGHT + 3600)
    assert [r.day for r in rollups] == [dt.date(2025, 3, 8), dt.date(2025, 3, 9)]
    assert rollups[0].indices == (0, 1)
    assert rollups[0].title == "Daily rollup 2025-03-08"
    assert rollups[0].content == "Daily rollup 2025-03-08 (2 episodes)\n- standup notes\n- fixed login bug"
    assert rollups[1].indices == (2, 3)


def test_a_day_with_one_episode_has_no_rollup() -> None:
    assert daily_rollups([MIDNIGHT - DAY], ["only one"], now=MIDNIGHT + DAY) == []


def test_today_is_left_out_until_the_day_is_over() -> None:
    created = [MIDNIGHT + 60, MIDNIGHT + 120]
    assert daily_rollups(created, ["a", "b"], now=MIDNIGHT + 3600) == []
    assert len(daily_rollups(created, ["a", "b"], now=MIDNIGHT + 3600, include_today=True)) == 1


def test_rollup_days_follow_the_utc_offset() -> None:
    created = [MIDNIGHT - 1800, MIDNIGHT + 1800]
    rollups = daily_rollups(created, ["a", "b"], now=MIDNIGHT + 5 * DAY, utc_offset_seconds=3600)
    assert [r.day for r in rollups] == [dt.date(2025, 3, 10)]


def test_rollup_lines_are_in_time_order() -> None:
    created = [MIDNIGHT - DAY + 500, MIDNIGHT - DAY + 100]
    rollups = daily_rollups(created, ["later", "earlier"], now=MIDNIGHT + DAY)
    assert rollups[0].indices == (1, 0)
    assert rollups[0].content.endswith("- earlier\n- later")


def test_five_near_identical_working_items_become_a_procedure() -> None:
    contents = [
        "run make test then git push origin main",
        "run make test then git push origin main",
        "run make test then git push origin main now",
        "unrelated shopping list item",
        "run make test then git push origin main",
        "run make test then git push origin main",
    ]
    clusters = procedural_clusters(contents)
    assert len(clusters) == 1
    assert clusters[0].indices == (0, 1, 2, 4, 5)
    assert clusters[0].representative == 0
    assert 0.8 <= clusters[0].mean_similarity <= 1.0


def test_four_repeats_are_not_yet_a_procedure() -> None:
    assert procedural_clusters(["same steps every time"] * 4) == []


def test_procedure_needs_jaccard_of_at_least_point_eight() -> None:
    base = "a b c d e f g h"
    near = "a b c d e f g h i j"  # 8 / 10 = 0.8 exactly qualifies
    assert len(procedural_clusters([base, near, near, near, near])) == 1
    far = "a b c d e f g x y z"  # 7 / 11 < 0.8
    assert procedural_clusters([base, far, far, far, far]) == []


@pytest.mark.parametrize(("n", "expected"), [(6, 0.408), (7, 0.50575), (10, 0.85), (20, 0.85)])
def test_opinion_confidence_matches_the_reference_vectors(n: int, expected: float) -> None:
    assert opinion_confidence([n])[0] == pytest.approx(expected, abs=1e-6)


def test_opinion_strength_saturates_at_ten() -> None:
    assert opinion_strength([3, 10, 30]).tolist() == pytest.approx([0.3, 1.0, 1.0])


def test_a_topic_seen_seven_times_becomes_an_opinion_and_six_times_does_not() -> None:
    tags = [["postgres", "ops"]] * 6 + [["Postgres"], ["ops", "ops"]]
    candidates = opinion_candidates(tags)
    assert [(c.topic, c.count) for c in candidates] == [("ops", 7), ("postgres", 7)]
    assert candidates[1].confidence == pytest.approx(0.50575, abs=1e-6)
    assert candidates[1].indices == (0, 1, 2, 3, 4, 5, 6)
    assert candidates[0].indices == (0, 1, 2, 3, 4, 5, 7)
    assert opinion_candidates(tags[:6]) == []


def test_opinion_content_names_the_topic_and_count() -> None:
    candidates = opinion_candidates([["coffee"]] * 8)
    assert candidates[0].content == "Recurring theme: coffee (seen in 8 memories)"


def test_two_facts_about_one_subject_become_an_observation() -> None:
    groups = observation_groups(
        ["Alice", "bob", "alice", None, "Alice"],
        ["Alice likes tea.", "Bob runs", "Alice lives in Oslo", "orphan fact", "alice likes tea"],
    )
    assert len(groups) == 1
    assert groups[0].subject == "Alice"
    assert groups[0].indices == (0, 2, 4)
    assert groups[0].content == "Summary of Alice: Alice likes tea; Alice lives in Oslo"


def test_one_repeated_fact_is_not_an_observation() -> None:
    assert observation_groups(["x", "x"], ["same fact", "Same fact."]) == []
