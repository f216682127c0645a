from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from surfacing.algorithms.relevance import (
    fts5_bm25_relevance,
    fuse,
    normalise_bm25,
    normalise_dense,
    subject_match,
)


def test_bm25_best_candidate_gets_one_and_others_scale_linearly() -> None:
    np.testing.assert_allclose(normalise_bm25(np.array([2.0, 8.0, 4.0])), [0.25, 1.0, 0.5])


def test_bm25_all_zero_and_empty_inputs_give_zeros() -> None:
    np.testing.assert_array_equal(normalise_bm25(np.zeros(3)), np.zeros(3))
    assert normalise_bm25(np.array([])).shape == (0,)


def test_bm25_negative_and_non_finite_scores_count_as_no_evidence() -> None:
    out = normalise_bm25(np.array([-3.0, math.nan, 4.0, math.inf]))
    np.testing.assert_array_equal(out, [0.0, 0.0, 1.0, 0.0])


def test_fts5_scores_are_negated_so_more_negative_ranks_higher() -> None:
    # FTS5 bm25(): -6.0 is the best match, -1.5 the worst.
    np.testing.assert_allclose(fts5_bm25_relevance(np.array([-1.5, -6.0, -3.0])), [0.25, 1.0, 0.5])


def test_fuse_is_a_convex_combination_with_negative_cosine_clipped() -> None:
    out = fuse(np.array([1.0, 0.0, 0.5]), np.array([0.0, 1.0, -0.8]), lexical_weight=0.7)
    np.testing.assert_allclose(out, [0.7, 0.3, 0.35])


def test_fuse_extremes_select_one_signal() -> None:
    lex, sem = np.array([0.2, 0.9]), np.array([0.6, 0.1])
    np.testing.assert_allclose(fuse(lex, sem, 1.0), lex)
    np.testing.assert_allclose(fuse(lex, sem, 0.0), sem)


def test_fuse_rejects_misaligned_arrays_and_bad_weights() -> None:
    with pytest.raises(ValueError, match="align"):
        fuse(np.zeros(2), np.zeros(3))
    with pytest.raises(ValueError, match="lexical_weight"):
        fuse(np.zeros(2), np.zeros(2), 1.5)


@given(
    lex=hnp.arrays(np.float64, 6, elements=st.floats(0, 1)),
    sem=hnp.arrays(np.float64, 6, elements=st.floats(-1, 1)),
    w=st.floats(0, 1),
)
def test_fused_relevance_stays_in_unit_interval(lex: np.ndarray, sem: np.ndarray, w: float) -> None:
    out = fuse(lex, sem, w)
    assert np.all((out >= 0.0) & (out <= 1.0 + 1e-12))


def test_dense_scores_span_from_the_background_to_the_best_match() -> None:
    # An e5-like model puts everything near 0.8; a hashing one near 0: the position between counts.
    np.testing.assert_allclose(normalise_dense([0.91, 0.85, 0.80]), [1.0, 5 / 11, 0.0], atol=1e-12)
    np.testing.assert_allclose(normalise_dense([0.40, 0.10, 0.05]), [1.0, 1 / 7, 0.0], atol=1e-12)


def test_dense_scores_of_edge_cases() -> None:
    assert normalise_dense([]).shape == (0,)
    assert normalise_dense([0.3]).tolist() == [1.0]
    assert normalise_dense([0.3, 0.3]).tolist() == [1.0, 1.0]
    assert normalise_dense([0.5, float("nan"), 0.1]).tolist() == [1.0, 0.0, 0.0]
    assert normalise_dense([float("nan")]).tolist() == [0.0]


@given(hnp.arrays(np.float64, st.integers(1, 30), elements=st.floats(-1, 1)))
def test_dense_scores_stay_in_the_unit_interval_and_keep_the_order(cosine: np.ndarray) -> None:
    scaled = normalise_dense(cosine)
    assert ((scaled >= 0.0) & (scaled <= 1.0)).all()
    by_cosine = np.argsort(-cosine, kind="stable")
    assert (np.diff(scaled[by_cosine]) <= 1e-12).all()  # a closer memory never scores lower


def test_subject_match_is_the_share_of_the_subject_the_query_names() -> None:
    terms = ["editor", "dana", "use"]
    subjects = ["dana-editor", "Dana", "lee-meetings", "", "the-dana-team", "api_auth"]
    np.testing.assert_allclose(subject_match(terms, subjects), [1.0, 1.0, 0.0, 0.0, 0.5, 0.0])
    assert subject_match(["auth"], ["api_auth"]).tolist() == [0.5]
    assert subject_match([], ["dana"]).tolist() == [0.0]
