from __future__ import annotations

import math

import pytest

from evolution.algorithms.consolidation import (
    WorkingItem,
    adaptive_threshold,
    buffer_threshold,
    cluster_working,
    episode_summary,
)

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("avg_len", "frac_recent", "expected"),
    [(50.0, 1.0, 31), (200.0, 1.0, 25), (50.0, 0.0, 37), (0.0, 0.0, 40), (1000.0, 1.0, 25)],
)
def test_adaptive_threshold_matches_the_reference_vectors(avg_len: float, frac_recent: float, expected: int) -> None:
    assert adaptive_threshold(avg_len, frac_recent) == expected


def test_adaptive_threshold_rejects_a_fraction_outside_zero_to_one() -> None:
    with pytest.raises(ValueError):
        adaptive_threshold(50.0, 1.5)


def test_buffer_threshold_of_forty_recent_fifty_char_items_is_thirty_one() -> None:
    items = [WorkingItem(k, "x" * 50, NOW - 60) for k in range(40)]
    assert buffer_threshold(items, NOW) == 31


def test_buffer_threshold_of_two_hour_old_items_is_thirty_seven() -> None:
    items = [WorkingItem(k, "x" * 50, NOW - 7200) for k in range(40)]
    assert buffer_threshold(items, NOW) == 37


def test_buffer_threshold_of_an_empty_buffer_is_forty() -> None:
    assert buffer_threshold([], NOW) == 40


def test_similar_items_close_in_time_cluster_together() -> None:
    items = [
        WorkingItem(10, "deploy the billing service to staging", NOW - 600),
        WorkingItem(11, "deploy the billing service to production", NOW - 300),
        WorkingItem(12, "buy milk and eggs", NOW - 200),
    ]
    assert cluster_working(items) == [[10, 11], [12]]


def test_similar_items_far_apart_in_time_stay_apart() -> None:
    # exp(-dt/3600) > 0.5 needs dt < 3600 ln 2 = 2495 s.
    items = [
        WorkingItem(1, "deploy the billing service", NOW - 2600),
        WorkingItem(2, "deploy the billing service", NOW),
    ]
    assert cluster_working(items) == [[1], [2]]
    items[0] = WorkingItem(1, "deploy the billing service", NOW - 2400)
    assert cluster_working(items) == [[1, 2]]


def test_jaccard_must_exceed_point_three() -> None:
    # 3 shared words out of 10: Jaccard exactly 0.3 does not cluster.
    a = WorkingItem(1, "a b c d e f", NOW)
    b = WorkingItem(2, "d e f g h i j", NOW)
    assert cluster_working([a, b]) == [[1], [2]]
    c = WorkingItem(3, "a b c d e f g", NOW)
    assert cluster_working([a, c]) == [[1, 3]]


def test_clusters_compare_with_the_seed_and_do_not_chain() -> None:
    items = [
        WorkingItem(1, "alpha beta gamma", NOW - 30),
        WorkingItem(2, "beta gamma delta", NOW - 20),
        WorkingItem(3, "gamma delta epsilon", NOW - 10),
    ]
    assert cluster_working(items) == [[1, 2], [3]]


def test_clustering_visits_items_oldest_first() -> None:
    items = [WorkingItem(5, "same words here", NOW), WorkingItem(4, "same words here", NOW - 10)]
    assert cluster_working(items) == [[4, 5]]


def test_cluster_working_of_nothing_is_nothing() -> None:
    assert cluster_working([]) == []


def test_episode_summary_weights_lines_by_age_and_drops_old_ones() -> None:
    items = [
        WorkingItem(2, "second", NOW - 12 * 3600),
        WorkingItem(1, "first", NOW - 3600),
        WorkingItem(3, "too old", NOW - 60 * 3600),
    ]
    w1 = math.exp(-1 / 24)
    w12 = math.exp(-12 / 24)
    assert episode_summary(items, NOW) == f"[w={w12:.2f}] second\n[w={w1:.2f}] first"
    assert episode_summary(items, NOW) == "[w=0.61] second\n[w=0.96] first"


def test_episode_summary_keeps_only_weights_above_point_one() -> None:
    cutoff_hours = 24 * math.log(10)
    kept = WorkingItem(1, "kept", NOW - (cutoff_hours - 0.01) * 3600)
    dropped = WorkingItem(2, "dropped", NOW - (cutoff_hours + 0.01) * 3600)
    assert episode_summary([kept, dropped], NOW) == "[w=0.10] kept"


def test_episode_summary_of_stale_items_is_empty() -> None:
    assert episode_summary([WorkingItem(1, "old", NOW - 100 * 3600)], NOW) == ""
