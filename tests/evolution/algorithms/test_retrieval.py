from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolution.algorithms.retrieval import profiles_from_events, retrieval_boost, strengthening


@pytest.mark.parametrize(
    ("total", "rank", "v7", "v30", "expected"),
    [(10, 1.0, 2.0, 4.0, 0.059947), (10, 0.0, 1.0, 1.0, 0.239789)],
)
def test_boost_matches_the_reference_vectors(total: int, rank: float, v7: float, v30: float, expected: float) -> None:
    assert retrieval_boost([total], [rank], [v7], [v30])[0] == pytest.approx(expected, abs=1e-6)


def test_retrieved_memories_gain_the_boost_capped_at_one() -> None:
    result = strengthening([0.5, 0.9], [10, 10], [1.0, 0.0], [2.0, 1.0], [4.0, 1.0], [1.0, 2.0])
    assert result.retention == pytest.approx([0.559947, 1.0], abs=1e-6)
    assert result.boost == pytest.approx([0.059947, 0.239789], abs=1e-6)
    assert result.retrieved.tolist() == [True, True]
    assert result.changed.tolist() == [0, 1]


def test_unretrieved_memories_lose_at_most_the_window_worth() -> None:
    result = strengthening([0.8, 0.8], [0, 3], [0, 0], [0, 0], [0, 0], [np.inf, 45.0])
    assert result.retention == pytest.approx([0.8 * 0.85, 0.8 * 0.85])
    assert result.elapsed_days.tolist() == [30.0, 30.0]
    assert result.retrieved.tolist() == [False, False]


def test_a_young_unretrieved_memory_only_loses_its_age() -> None:
    result = strengthening([0.8], [0], [0], [0], [0], [np.inf], age_days=[4.0])
    assert result.retention == pytest.approx([0.8 * (1 - 0.005 * 4)])


def test_retrieved_in_the_window_but_not_recently_is_unchanged() -> None:
    result = strengthening([0.6], [5], [1.0], [0.0], [5 / 30], [12.0])
    assert result.retention.tolist() == [0.6]
    assert result.changed.size == 0


def test_strengthening_reasons_explain_both_branches() -> None:
    result = strengthening([0.5, 0.8], [10, 0], [1.0, 0], [2.0, 0], [4.0, 0], [1.0, np.inf])
    assert result.reason(0) == "retrieval strengthening: boost 0.059947; retention 0.500000 -> 0.559947"
    assert result.reason(1) == (
        "not retrieved in 30d: retention x (1 - 0.005 x 30.00d) = x 0.850000; retention 0.800000 -> 0.680000"
    )


def test_profiles_count_events_per_memory_with_per_day_velocities() -> None:
    # memory 0: 22 events within 7 days, 2 more within 30 days, 23 older -> total 47, velocity_7d 3.1, velocity_30d 0.8.
    ages = np.concatenate([np.full(22, 1.0), np.full(2, 20.0), np.full(23, 90.0)])
    ranks = np.concatenate([np.zeros(12), np.full(32, 3.0), np.full(3, -1.0)])
    index = np.zeros(ages.size, dtype=np.intp)
    profile = profiles_from_events(index, ranks, ages, n_memories=2)
    assert profile.total_count.tolist() == [47, 0]
    assert profile.search_count.tolist() == [44, 0]
    assert profile.top1_count.tolist() == [12, 0]
    assert profile.avg_rank[0] == pytest.approx(96 / 44)
    assert profile.velocity_7d[0] == pytest.approx(22 / 7)
    assert round(float(profile.velocity_7d[0]), 1) == 3.1
    assert profile.velocity_30d[0] == pytest.approx(0.8)
    assert profile.last_retrieved_days_ago.tolist() == [1.0, np.inf]
    assert profile.as_dict(1)["last_retrieved_days_ago"] is None
    assert profile.as_dict(0)["avg_search_rank"] == pytest.approx(96 / 44)


def test_gets_without_rank_count_as_retrievals_but_not_searches() -> None:
    profile = profiles_from_events([0, 0], [np.nan, -1], [0.5, 0.5], n_memories=1)
    assert profile.total_count.tolist() == [2]
    assert profile.search_count.tolist() == [0]
    assert profile.avg_rank.tolist() == [0.0]


def test_profiles_refuse_out_of_range_memories() -> None:
    with pytest.raises(ValueError):
        profiles_from_events([3], [0], [1.0], n_memories=2)


def test_profiles_feed_strengthening() -> None:
    profile = profiles_from_events([0, 0, 1], [0, 1, 0], [1.0, 2.0, 40.0], n_memories=3)
    result = strengthening(
        [0.5, 0.5, 0.5],
        profile.total_count,
        profile.avg_rank,
        profile.velocity_7d,
        profile.velocity_30d,
        profile.last_retrieved_days_ago,
    )
    assert result.retrieved.tolist() == [True, False, False]
    assert result.retention[0] > 0.5
    assert result.retention[1] == pytest.approx(0.5 * 0.85)


@given(
    st.floats(-1, 2),
    st.integers(0, 10_000),
    st.floats(0, 100),
    st.floats(0, 50),
    st.floats(0, 50),
    st.floats(0, 1000) | st.just(float("inf")),
)
def test_strengthened_retention_stays_between_zero_and_one(
    base: float, total: int, rank: float, v7: float, v30: float, since: float
) -> None:
    value = strengthening([base], [total], [rank], [v7], [v30], [since]).retention[0]
    assert 0.0 <= value <= 1.0
