from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from surfacing.algorithms.relevance import cosine_to_query, fts5_bm25_relevance, fuse, normalise_bm25, subject_match


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


def test_cosine_of_unit_rows_with_query() -> None:
    m = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, 0.0]], dtype=np.float32)
    out = cosine_to_query(m, np.array([3.0, 0.0]))
    np.testing.assert_allclose(out, [1.0, 0.0, -1.0, 0.0], atol=1e-7)
    assert out.dtype == np.float64


def test_cosine_renormalises_rows_that_are_not_unit_length() -> None:
    m = np.array([[3.0, 4.0]], dtype=np.float32)
    assert cosine_to_query(m, np.array([0.6, 0.8]))[0] == pytest.approx(1.0, abs=1e-6)


def test_cosine_with_zero_query_or_no_rows_is_zero() -> None:
    np.testing.assert_array_equal(cosine_to_query(np.ones((2, 3), np.float32), np.zeros(3)), [0.0, 0.0])
    assert cosine_to_query(np.zeros((0, 3), np.float32), np.ones(3)).shape == (0,)


def test_cosine_rejects_shape_mismatches() -> None:
    with pytest.raises(ValueError, match="dimension"):
        cosine_to_query(np.ones((2, 3), np.float32), np.ones(4))
    with pytest.raises(ValueError, match="2-D"):
        cosine_to_query(np.ones(3, np.float32), np.ones(3))


def test_cosine_matches_a_reference_computation_on_random_embeddings() -> None:
    rng = np.random.default_rng(7)
    m = rng.normal(size=(500, 64)).astype(np.float32)
    m /= np.linalg.norm(m, axis=1, keepdims=True)
    q = rng.normal(size=64)
    expected = m.astype(np.float64) @ (q / np.linalg.norm(q))
    np.testing.assert_allclose(cosine_to_query(m, q), expected, atol=1e-5)


def test_subject_match_is_the_share_of_the_subject_the_query_names() -> None:
    terms = ["editor", "dana", "use"]
    subjects = ["dana-editor", "Dana", "lee-meetings", "", "the-dana-team", "api_auth"]
    np.testing.assert_allclose(subject_match(terms, subjects), [1.0, 1.0, 0.0, 0.0, 0.5, 0.0])
    assert subject_match(["auth"], ["api_auth"]).tolist() == [0.5]
    assert subject_match([], ["dana"]).tolist() == [0.0]
