from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolution.algorithms.decay import (
    SECONDS_PER_DAY,
    days_since_reference,
    decay_plan,
    retention,
)

finite_days = st.floats(min_value=-10.0, max_value=1e6, allow_nan=False)
stabilities = st.floats(min_value=-5.0, max_value=1e4, allow_nan=False)


@pytest.mark.parametrize(
    ("days", "expected"),
    [(69.0, 0.100259), (70.0, 0.096972), (30.0, 0.367879)],
)
def test_retention_matches_the_reference_vectors_at_default_stability(days: float, expected: float) -> None:
    assert retention(np.array([days]), np.array([30.0]))[0] == pytest.approx(expected, abs=1e-6)


def test_sixty_nine_days_is_kept_and_seventy_days_is_archived() -> None:
    plan = decay_plan([4, 7, 9], [69.0, 70.0, 30.0], [30.0, 30.0, 30.0])
    assert plan.retention == pytest.approx([0.100259, 0.096972, 0.367879], abs=1e-6)
    assert plan.archive.tolist() == [False, True, False]
    assert plan.archived_indices.tolist() == [7]


def test_decay_plan_reason_explains_the_formula_and_the_verdict() -> None:
    plan = decay_plan([0, 1], [69.0, 70.0], 30.0)
    assert plan.reason(0) == "retention exp(-69.00d/30.00d) = 0.100259 >= 0.1: kept"
    assert plan.reason(1) == "retention exp(-70.00d/30.00d) = 0.096972 < 0.1: archived"


def test_missing_or_nonpositive_stability_uses_the_default() -> None:
    plan = decay_plan([0, 1, 2], [30.0, 30.0, 30.0], [np.nan, 0.0, -3.0])
    assert plan.stability.tolist() == [30.0, 30.0, 30.0]
    assert plan.retention == pytest.approx([0.367879] * 3, abs=1e-6)


def test_missing_days_mean_no_decay() -> None:
    plan = decay_plan([0], [np.nan], [30.0])
    assert plan.retention.tolist() == [1.0]
    assert not plan.archive[0]


def test_decay_plan_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError):
        decay_plan([0, 1], [1.0], [30.0, 30.0])


def test_a_custom_archive_threshold_is_respected() -> None:
    plan = decay_plan([0], [30.0], [30.0], archive_threshold=0.5)
    assert plan.archive.tolist() == [True]


def test_reference_time_prefers_last_access_then_event_then_creation() -> None:
    now = 100 * SECONDS_PER_DAY
    days = days_since_reference(
        now,
        last_accessed_ts=[90 * SECONDS_PER_DAY, np.nan, np.nan, np.nan],
        event_ts=[10 * SECONDS_PER_DAY, 80 * SECONDS_PER_DAY, np.nan, np.nan],
        created_ts=[0.0, 0.0, 70 * SECONDS_PER_DAY, 101 * SECONDS_PER_DAY],
    )
    assert days.tolist() == [10.0, 20.0, 30.0, 0.0]


def test_nonpositive_stability_in_the_raw_formula_means_nothing_is_retained() -> None:
    assert retention(np.array([1.0]), np.array([0.0])).tolist() == [0.0]


def test_whole_workspace_decays_in_one_call() -> None:
    rng = np.random.default_rng(1)
    days = rng.uniform(0, 200, 100_000)
    plan = decay_plan(np.arange(days.size), days, 30.0)
    assert plan.retention.shape == (100_000,)
    assert plan.archive.sum() == int((days > 30.0 * np.log(10.0)).sum())


@given(finite_days, stabilities)
def test_retention_stays_between_zero_and_one(days: float, stability: float) -> None:
    value = retention(np.array([days]), np.array([stability]))[0]
    assert 0.0 <= value <= 1.0


@given(st.floats(min_value=0, max_value=1e4), st.floats(min_value=0, max_value=1e4))
def test_retention_never_grows_with_time(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    values = retention(np.array([lo, hi]), np.array([30.0, 30.0]))
    assert values[0] >= values[1]
