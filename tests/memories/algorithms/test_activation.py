from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memories.algorithms.activation import (
    ACTIVATION_FLOOR,
    BOOST_CO_RETRIEVED,
    BOOST_DIRECT,
    BOOST_SURFACED,
    DEFAULT_ACTIVATION,
    DEFAULT_HALF_LIFE_HOURS,
    boosted,
    clamp01,
    decayed_activation,
    decayed_activation_array,
    hours_since,
    project_decay_curve,
    replay_activation,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

# Worked values of stored * 2 ** (-hours / 720): stored, hours since last boost, expected at 720 h half-life.
DECAY_VECTORS = [
    (0.5, 720.0, 0.25),
    (1.0, 720.0, 0.5),
    (0.8, 360.0, 0.565685),
    (0.9, 24.0, 0.879444),
    (0.5, 1440.0, 0.125),
]


def test_defaults_match_the_seed() -> None:
    assert DEFAULT_ACTIVATION == 0.5
    assert DEFAULT_HALF_LIFE_HOURS == 720.0
    assert ACTIVATION_FLOOR == 0.05
    assert (BOOST_DIRECT, BOOST_SURFACED, BOOST_CO_RETRIEVED) == (0.05, 0.02, 0.01)


@pytest.mark.parametrize(("stored", "hours", "expected"), DECAY_VECTORS)
def test_decay_reproduces_reference_vectors(stored: float, hours: float, expected: float) -> None:
    last = NOW - timedelta(hours=hours)
    assert decayed_activation(stored, last, 720.0, NOW) == pytest.approx(expected, abs=1e-6)


def test_array_decay_reproduces_reference_vectors() -> None:
    stored = np.array([v[0] for v in DECAY_VECTORS])
    hours = np.array([v[1] for v in DECAY_VECTORS])
    expected = np.array([v[2] for v in DECAY_VECTORS])
    np.testing.assert_allclose(decayed_activation_array(stored, hours, 720.0), expected, atol=1e-6)


def test_never_boosted_memory_reads_its_stored_value() -> None:
    assert decayed_activation(0.7, None, 720.0, NOW) == 0.7
    out = decayed_activation_array(np.array([0.7, 0.3]), np.array([math.nan, math.nan]), 720.0)
    np.testing.assert_array_equal(out, [0.7, 0.3])


def test_non_positive_half_life_reads_zero_even_when_never_boosted() -> None:
    assert decayed_activation(0.9, NOW - timedelta(hours=1), 0.0, NOW) == 0.0
    assert decayed_activation(0.9, None, -5.0, NOW) == 0.0
    out = decayed_activation_array(np.array([0.9, 0.9]), np.array([1.0, math.nan]), np.array([0.0, -1.0]))
    np.testing.assert_array_equal(out, [0.0, 0.0])


def test_boost_in_the_future_counts_as_now_so_skew_cannot_amplify() -> None:
    assert decayed_activation(0.6, NOW + timedelta(hours=10), 720.0, NOW) == 0.6
    assert decayed_activation_array(np.array([0.6]), np.array([-10.0]), 720.0)[0] == 0.6


def test_stored_values_outside_unit_interval_are_clamped() -> None:
    assert decayed_activation(1.7, None, 720.0, NOW) == 1.0
    assert decayed_activation(-0.2, NOW, 720.0, NOW) == 0.0
    np.testing.assert_array_equal(decayed_activation_array(np.array([1.7, -0.2]), np.zeros(2), 720.0), [1, 0])


def test_array_decay_broadcasts_per_row_half_lives() -> None:
    out = decayed_activation_array(np.array([1.0, 1.0]), np.array([24.0, 24.0]), np.array([24.0, 48.0]))
    np.testing.assert_allclose(out, [0.5, 2**-0.5])


@pytest.mark.parametrize(("stored", "delta", "expected"), [(0.5, BOOST_DIRECT, 0.55), (0.98, 0.05, 1.0)])
def test_boost_adds_to_stored_value_and_caps_at_one(stored: float, delta: float, expected: float) -> None:
    assert boosted(stored, delta) == pytest.approx(expected, abs=1e-12)


def test_boost_is_applied_to_the_stored_not_the_decayed_value() -> None:
    # 0.5 stored a half-life ago reads 0.25, but the boost still starts from 0.5.
    assert boosted(0.5, BOOST_SURFACED) == pytest.approx(0.52)


def test_clamp01_maps_nan_to_zero() -> None:
    assert clamp01(math.nan) == 0.0
    assert clamp01(0.3) == 0.3


def test_hours_since_handles_none_and_timezones() -> None:
    assert math.isnan(hours_since(None, NOW))
    other_zone = datetime(2026, 5, 1, 14, 0, tzinfo=UTC).astimezone(timezone(timedelta(hours=2)))
    assert hours_since(NOW - timedelta(minutes=90), NOW) == 1.5
    assert hours_since(other_zone, NOW) == -2.0


def test_decay_curve_starts_at_current_value_and_halves_every_half_life() -> None:
    curve = project_decay_curve(0.8, 0.0, 720.0, days=91)
    assert curve.shape == (91,)
    assert curve[0] == pytest.approx(0.8)
    assert curve[30] == pytest.approx(0.4)
    assert curve[60] == pytest.approx(0.2)
    assert curve[90] == pytest.approx(0.1)
    assert np.all(np.diff(curve) < 0)


def test_decay_curve_continues_from_the_hours_already_elapsed() -> None:
    curve = project_decay_curve(0.5, 720.0, 720.0, days=3)
    assert curve[0] == pytest.approx(0.25)
    assert curve[1] == pytest.approx(0.5 * 2 ** (-(744.0 / 720.0)))


def test_decay_curve_of_a_never_boosted_memory_is_flat() -> None:
    np.testing.assert_array_equal(project_decay_curve(0.5, None, 720.0, days=4), [0.5] * 4)


def test_decay_curve_rejects_negative_days_and_allows_zero() -> None:
    assert project_decay_curve(0.5, 1.0, 720.0, days=0).shape == (0,)
    with pytest.raises(ValueError, match="days"):
        project_decay_curve(0.5, 1.0, 720.0, days=-1)


@given(
    stored=st.floats(0.0, 1.0),
    hours=st.floats(0.0, 1e6),
    extra=st.floats(0.0, 1e4),
    half_life=st.floats(0.1, 1e5),
)
def test_decay_is_bounded_and_never_increases_with_time(
    stored: float, hours: float, extra: float, half_life: float
) -> None:
    earlier = decayed_activation_array(np.array([stored]), np.array([hours]), half_life)[0]
    later = decayed_activation_array(np.array([stored]), np.array([hours + extra]), half_life)[0]
    assert 0.0 <= later <= earlier <= stored


# Half-lives stay >= 0.01 h: the scalar path goes through timedelta, which rounds to microseconds.
@given(
    stored=st.floats(-1.0, 2.0),
    hours=st.floats(-100.0, 1e5),
    half_life=st.one_of(st.floats(-10.0, 0.0), st.floats(0.01, 1e4)),
)
def test_scalar_and_array_decay_agree(stored: float, hours: float, half_life: float) -> None:
    scalar = decayed_activation(stored, NOW - timedelta(hours=hours), half_life, NOW)
    array = decayed_activation_array(np.array([stored]), np.array([hours]), np.array([half_life]))[0]
    # timedelta rounds to microseconds, hence the tolerance.
    assert scalar == pytest.approx(array, abs=1e-9)


# -- replay_activation --------------------------------------------------------------------------------------

_T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_replay_walks_back_from_the_stored_score_through_each_boost() -> None:
    day = timedelta(days=1)
    boosts = [(_T0 + day, 0.05), (_T0 + 2 * day, 0.05)]
    points = replay_activation(0.6, _T0 + 2 * day, 720.0, boosts, _T0, _T0 + 3 * day, samples_per_gap=2)
    # Flat before the first boost (no decay clock yet), a jump at each boost, decay between.
    assert points[0] == (_T0, pytest.approx(0.5))
    assert points[1] == (_T0 + day, pytest.approx(0.5))
    assert points[2] == (_T0 + day, pytest.approx(0.55))
    assert points[4][1] == pytest.approx(0.55 * 2 ** (-24 / 720))
    assert points[5] == (_T0 + 2 * day, pytest.approx(0.6))
    assert points[-1] == (_T0 + 3 * day, pytest.approx(decayed_activation(0.6, _T0 + 2 * day, 720.0, _T0 + 3 * day)))
    assert [t for t, _ in points] == sorted(t for t, _ in points)


def test_replay_ends_at_what_the_page_reads_now_and_ignores_unflushed_boosts() -> None:
    now = _T0 + timedelta(hours=5)
    last = _T0 + timedelta(hours=1)
    boosts = [(_T0 + timedelta(minutes=m), 0.05) for m in (10, 20, 30, 40, 50, 60)] + [(now, 0.05)]
    points = replay_activation(0.8, last, 24.0, boosts, _T0, now)
    assert points[-1][1] == pytest.approx(decayed_activation(0.8, last, 24.0, now))
    assert points[0][1] == pytest.approx(0.5)
    assert len({round(v, 6) for _, v in points}) > 10


def test_replay_of_a_memory_never_boosted_is_flat_and_bounded() -> None:
    assert replay_activation(0.5, None, 720.0, [], _T0, _T0 + timedelta(days=1)) == [
        (_T0, 0.5),
        (_T0 + timedelta(days=1), 0.5),
    ]
    low = replay_activation(0.03, _T0, 720.0, [(_T0, 0.05)], _T0, _T0)
    assert min(v for _, v in low) == 0.0
    with pytest.raises(ValueError):
        replay_activation(0.5, None, 720.0, [], _T0, _T0 - timedelta(seconds=1))


def test_replay_decays_from_the_last_boost_even_without_known_boosts() -> None:
    last = _T0 + timedelta(days=1)
    end = _T0 + timedelta(days=40)
    points = replay_activation(0.5, last, 720.0, [], _T0, end, samples_per_gap=4)
    assert points[0] == (_T0, 0.5)
    assert (last, 0.5) in points
    # No jump at the end: the line meets the value the page shows now.
    assert points[-1] == (end, pytest.approx(decayed_activation(0.5, last, 720.0, end)))
    assert all(b[1] <= a[1] + 1e-12 for a, b in itertools.pairwise(points))


def test_replay_of_a_score_the_decay_sweep_materialised_draws_the_same_history() -> None:
    """The sweep stores the decayed score and moves last_boost_at to its own time: the boosts before it
    replay as they did from the unmaterialised score, and the line reaches the stored score at that time."""
    day = timedelta(days=1)
    boosts = [(_T0 + day, 0.05), (_T0 + 2 * day, 0.05)]
    end = _T0 + 20 * day
    swept_at = _T0 + 10 * day
    swept = decayed_activation(0.6, _T0 + 2 * day, 720.0, swept_at)
    before = replay_activation(0.6, _T0 + 2 * day, 720.0, boosts, _T0, end, samples_per_gap=4)
    after = replay_activation(swept, swept_at, 720.0, boosts, _T0, end, samples_per_gap=4)
    assert after[0] == (_T0, pytest.approx(0.5))
    assert (_T0 + 2 * day, pytest.approx(0.6)) in after
    assert (swept_at, pytest.approx(swept)) in after
    assert after[-1] == (end, pytest.approx(before[-1][1]))
    assert all(abs(v - decayed_activation(0.6, _T0 + 2 * day, 720.0, t)) < 1e-9 for t, v in after if t > _T0 + 2 * day)
