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
    assert scored.breakdown(2) == ScoreBreakdown(
        activation=0.3,
        relevance=1.0,
        recency=1.0,
        centrality=0.5,
        anchor_forced=True,
        session_pin_boost=0.0,
        freshness_boost=0.0,
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
