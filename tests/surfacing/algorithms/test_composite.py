from __future__ import annotations

import math
from typing import get_type_hints

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from surfacing.algorithms.composite import (
    CandidateSignals,
    ScoreBreakdown,
    ScoreFactors,
    ScoreProfile,
    SurfacingMode,
    Weights,
    freshness,
    legacy_score,
    pin_boost,
    rank,
    recency,
    router_score,
    score_candidates,
)


def test_recency_reproduces_reference_vectors_and_unknown_age_is_half() -> None:
    # (ran) 1 h -> 0.959189, 12 h -> 0.606531.
    np.testing.assert_allclose(recency(np.array([1.0, 12.0, 0.0])), [0.959189, 0.606531, 1.0], atol=1e-6)
    assert recency(np.array([math.nan]))[0] == 0.5


def test_recency_treats_future_timestamps_as_now_and_honours_the_time_constant() -> None:
    assert recency(np.array([-5.0]))[0] == 1.0
    assert recency(np.array([48.0]), time_constant_hours=48.0)[0] == pytest.approx(math.exp(-1))


def test_freshness_reproduces_reference_vectors() -> None:
    # (ran) 1 h -> 0.191667, 12 h -> 0.1; nothing from 24 h on.
    out = freshness(np.array([1.0, 12.0, 0.0, 24.0, 100.0, math.nan, -3.0]))
    np.testing.assert_allclose(out, [0.191667, 0.1, 0.2, 0.0, 0.0, 0.0, 0.2], atol=1e-6)


def test_freshness_honours_window_and_maximum() -> None:
    np.testing.assert_allclose(freshness(np.array([6.0]), window_hours=12.0, max_boost=0.4), [0.2])


def test_pin_boost_is_weight_times_multiplier() -> None:
    np.testing.assert_allclose(pin_boost(np.array([1.0, 2.0, 0.0])), [0.3, 0.6, 0.0])


def test_legacy_score_floors_activation() -> None:
    out = legacy_score(np.array([0.0, 0.8]), np.array([0.5, 0.5]), np.array([1.0, 0.5]))
    np.testing.assert_allclose(out, [0.025, 0.2])


def test_router_score_follows_the_seed_formula() -> None:
    # base = max(0.73, 0.05) * 0.92 * 0.88; lift = 1 + 0.5 * 0.65; additives 0 + 0 + 0.15
    out = router_score(
        np.array([0.73]), np.array([0.92]), np.array([0.88]), np.array([0.65]),
        np.array([0.0]), np.array([0.0]), np.array([0.15]),
    )  # fmt: skip
    assert out[0] == pytest.approx(0.73 * 0.92 * 0.88 * 1.325 + 0.15)


def test_router_score_lets_a_zero_activation_pinned_item_surface() -> None:
    out = router_score(
        np.array([0.0, 0.9]), np.array([0.1, 0.9]), np.array([0.1, 0.9]), np.zeros(2),
        np.zeros(2), np.array([0.3, 0.0]), np.zeros(2),
    )  # fmt: skip
    assert out[0] == pytest.approx(0.05 * 0.01 + 0.3)
    assert out[0] < out[1]  # pins add, they do not multiply: rank() is what forces them in


@given(
    act=hnp.arrays(np.float64, 5, elements=st.floats(0, 1)),
    rel=hnp.arrays(np.float64, 5, elements=st.floats(0, 1)),
    rec=hnp.arrays(np.float64, 5, elements=st.floats(0, 1)),
    cen=hnp.arrays(np.float64, 5, elements=st.floats(0, 1)),
)
def test_router_score_without_additives_is_legacy_times_a_lift_of_at_most_one_and_a_half(
    act: np.ndarray, rel: np.ndarray, rec: np.ndarray, cen: np.ndarray
) -> None:
    zeros = np.zeros(5)
    legacy = legacy_score(act, rel, rec)
    routed = router_score(act, rel, rec, cen, zeros, zeros, zeros)
    assert np.all(routed >= legacy - 1e-15)
    assert np.all(routed <= 1.5 * legacy + 1e-15)


def test_rank_puts_mandatory_rows_first_then_score_with_stable_ties() -> None:
    composite = np.array([0.2, 0.9, 0.5, 0.9, 0.1, math.nan])
    mandatory = np.array([False, False, True, False, True, False])
    assert rank(composite, mandatory).tolist() == [2, 4, 1, 3, 0, 5]


def test_rank_rejects_misaligned_inputs() -> None:
    with pytest.raises(ValueError, match="align"):
        rank(np.zeros(2), np.zeros(3, dtype=bool))


def test_weights_default_to_the_seed_and_reject_nonsense() -> None:
    w = Weights()
    assert (w.activation_floor, w.centrality_weight, w.pin_multiplier) == (0.05, 0.5, 0.3)
    assert (w.freshness_max, w.freshness_window_hours, w.recency_time_constant_hours) == (0.2, 24.0, 24.0)
    assert w.anchor_boost == 1.0
    with pytest.raises(ValueError, match="centrality_weight"):
        Weights(centrality_weight=-1.0)
    with pytest.raises(ValueError, match="freshness_window_hours"):
        Weights(freshness_window_hours=0.0)


def test_score_breakdown_has_exactly_the_api_fields() -> None:
    assert list(get_type_hints(ScoreBreakdown)) == [
        "activation",
        "relevance",
        "recency",
        "centrality",
        "anchor_forced",
        "session_pin_boost",
        "freshness_boost",
        "subject_match",
        "time_cue",
        "factors",
    ]
    assert list(get_type_hints(ScoreFactors)) == [
        "profile",
        "relevance",
        "subject",
        "time",
        "activation",
        "recency",
        "centrality",
        "base",
        "log_base",
        "anchor",
        "pin",
        "freshness",
    ]


def _signals() -> CandidateSignals:
    # rows: plain recent hit, old hit, anchor, pinned low scorer
    return CandidateSignals(
        activation=np.array([0.6, 0.9, 0.3, 0.0]),
        relevance=np.array([0.8, 0.9, 0.0, 0.1]),
        age_hours=np.array([12.0, 200.0, 500.0, math.nan]),
        centrality=np.array([1.0, 0.0, 0.5, 0.0]),
        is_anchor=np.array([False, False, True, False]),
        is_pinned=np.array([False, False, False, True]),
        pin_weight=np.array([5.0, 0.0, 0.0, 2.0]),
    )


def test_router_mode_scores_every_component_and_forces_anchors_and_pins() -> None:
    scored = score_candidates(_signals(), mode=SurfacingMode.ROUTER)
    rec12 = math.exp(-0.5)
    expected = [
        0.6 * 0.8 * rec12 * 1.5 + 0.1,
        0.9 * 0.9 * math.exp(-200 / 24),
        0.3 * 1.0 * 1.0 * 1.25 + 1.0,
        0.05 * 0.1 * 0.5 + 0.6,
    ]
    np.testing.assert_allclose(scored.composite, expected)
    assert scored.mandatory.tolist() == [False, False, True, True]
    assert scored.order().tolist() == [2, 3, 0, 1]
    breakdown = scored.breakdown(2)
    assert {key: value for key, value in breakdown.items() if key != "factors"} == dict(
        activation=0.3,
        relevance=1.0,
        recency=1.0,
        centrality=0.5,
        anchor_forced=True,
        session_pin_boost=0.0,
        freshness_boost=0.0,
        subject_match=0.0,
        time_cue=0.0,
    )
    assert breakdown["factors"] == ScoreFactors(
        profile="seed",
        relevance=1.0,
        subject=1.0,
        time=1.0,
        activation=0.3,
        recency=1.0,
        centrality=1.25,
        base=0.375,
        log_base=None,
        anchor=1.0,
        pin=0.0,
        freshness=0.0,
    )
    assert scored.breakdown(3)["session_pin_boost"] == pytest.approx(0.6)
    assert scored.breakdown(0)["freshness_boost"] == pytest.approx(0.1)
    assert scored.breakdown(0)["session_pin_boost"] == 0.0  # weight ignored where not pinned


def test_legacy_mode_drops_pins_freshness_and_centrality_but_keeps_anchors() -> None:
    scored = score_candidates(_signals(), mode=SurfacingMode.LEGACY)
    expected = [0.6 * 0.8 * math.exp(-0.5), 0.9 * 0.9 * math.exp(-200 / 24), 0.3, 0.05 * 0.1 * 0.5]
    np.testing.assert_allclose(scored.composite, expected)
    assert scored.mandatory.tolist() == [False, False, True, False]
    for row in range(4):
        b = scored.breakdown(row)
        assert (b["centrality"], b["session_pin_boost"], b["freshness_boost"]) == (0.0, 0.0, 0.0)
    assert scored.breakdown(2)["anchor_forced"] is True
    assert scored.order().tolist() == [2, 0, 3, 1]


def test_custom_weights_change_the_router_score() -> None:
    w = Weights(centrality_weight=0.0, anchor_boost=0.0, pin_multiplier=1.0, freshness_max=0.0)
    scored = score_candidates(_signals(), mode=SurfacingMode.ROUTER, weights=w)
    np.testing.assert_allclose(scored.composite[[0, 2, 3]], [0.6 * 0.8 * math.exp(-0.5), 0.3, 0.05 * 0.1 * 0.5 + 2])


def test_candidate_arrays_must_align() -> None:
    with pytest.raises(ValueError, match="align"):
        CandidateSignals(
            activation=np.zeros(2),
            relevance=np.zeros(2),
            age_hours=np.zeros(3),
            centrality=np.zeros(2),
            is_anchor=np.zeros(2, bool),
            is_pinned=np.zeros(2, bool),
            pin_weight=np.zeros(2),
        )


CALIBRATED = Weights(
    profile=ScoreProfile.CALIBRATED,
    activation_weight=0.2,
    recency_weight=0.1,
    centrality_weight=0.3,
    recency_time_constant_hours=720.0,
)


def test_calibrated_score_multiplies_relevance_by_bounded_priors() -> None:
    scored = score_candidates(_signals(), mode=SurfacingMode.ROUTER, weights=CALIBRATED)
    rec0 = math.exp(-12 / 720)
    fresh0 = 0.2 * (1 - 12 / 24)
    expected0 = 0.8 * (1 + 0.2 * 0.6) * (1 + 0.1 * rec0 + fresh0) * (1 + 0.3 * 1.0)
    assert scored.composite[0] == pytest.approx(expected0)
    factors = scored.breakdown(0)["factors"]
    assert factors["profile"] == "calibrated"
    assert factors["activation"] == pytest.approx(1.12)
    assert factors["recency"] == pytest.approx(1 + 0.1 * rec0 + fresh0)
    assert factors["centrality"] == pytest.approx(1.3)
    assert factors["base"] == pytest.approx(expected0)
    assert factors["freshness"] == 0.0  # folded into the recency factor
    # anchor: relevance 1, recency 1, plus the anchor boost; pin: its weight times the multiplier
    assert scored.composite[2] == pytest.approx(1.0 * 1.06 * 1.1 * 1.15 + 1.0)
    assert scored.composite[3] == pytest.approx(0.1 * 1.0 * (1 + 0.1 * 0.5) * 1.0 + 0.6)
    assert scored.order().tolist() == [2, 3, 0, 1]


def test_calibrated_score_never_lifts_what_has_no_relevance() -> None:
    signals = CandidateSignals(
        activation=np.array([1.0, 0.0]),
        relevance=np.array([0.0, 0.4]),
        age_hours=np.array([0.5, 24.0 * 3650]),
        centrality=np.array([1.0, 0.0]),
        is_anchor=np.zeros(2, bool),
        is_pinned=np.zeros(2, bool),
        pin_weight=np.zeros(2),
    )
    scored = score_candidates(signals, mode=SurfacingMode.ROUTER, weights=CALIBRATED)
    assert scored.composite[0] == 0.0
    assert scored.composite[1] == pytest.approx(0.4)  # ten years old and cold: its relevance is intact
    assert scored.order().tolist() == [1, 0]


@given(
    relevance=st.floats(0.0, 1.0),
    activation=st.floats(0.0, 1.0),
    age=st.floats(0.0, 1e7),
    centrality=st.floats(0.0, 1.0),
)
def test_calibrated_priors_stay_within_their_bounds(
    relevance: float, activation: float, age: float, centrality: float
) -> None:
    signals = CandidateSignals(
        activation=np.array([activation]),
        relevance=np.array([relevance]),
        age_hours=np.array([age]),
        centrality=np.array([centrality]),
        is_anchor=np.zeros(1, bool),
        is_pinned=np.zeros(1, bool),
        pin_weight=np.zeros(1),
    )
    scored = score_candidates(signals, mode=SurfacingMode.ROUTER, weights=CALIBRATED)
    ceiling = 1.2 * (1 + 0.1 + 0.2) * 1.3
    assert relevance <= scored.composite[0] + 1e-12
    assert scored.composite[0] <= relevance * ceiling + 1e-12


def test_seed_profile_orders_underflowed_scores_by_their_log() -> None:
    # Three years old: exp(-age / 24 h) is exactly 0 for all, yet the more relevant memory ranks first
    # and, at equal relevance, the younger one (by an hour).
    signals = CandidateSignals(
        activation=np.array([0.05, 0.05, 0.05]),
        relevance=np.array([0.3, 0.9, 0.9]),
        age_hours=np.array([24.0 * 1095, 24.0 * 1095 + 1.0, 24.0 * 1095]),
        centrality=np.zeros(3),
        is_anchor=np.zeros(3, bool),
        is_pinned=np.zeros(3, bool),
        pin_weight=np.zeros(3),
    )
    for mode in SurfacingMode:
        scored = score_candidates(signals, mode=mode)
        assert scored.composite.tolist() == [0.0, 0.0, 0.0]
        assert scored.order().tolist() == [2, 1, 0]
        factors = scored.breakdown(2)["factors"]
        assert factors["log_base"] == pytest.approx(math.log(0.05) + math.log(0.9) - 1095.0)


def test_legacy_mode_of_the_calibrated_profile_has_no_centrality_freshness_or_pins() -> None:
    scored = score_candidates(_signals(), mode=SurfacingMode.LEGACY, weights=CALIBRATED)
    rec0 = math.exp(-12 / 720)
    assert scored.composite[0] == pytest.approx(0.8 * 1.12 * (1 + 0.1 * rec0))
    assert scored.mandatory.tolist() == [False, False, True, False]
    assert scored.breakdown(0)["factors"]["centrality"] == 1.0
