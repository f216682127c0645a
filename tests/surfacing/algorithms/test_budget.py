from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from surfacing.algorithms.budget import (
    apply_budget,
    estimate_tokens,
    estimate_tokens_array,
    estimate_tokens_many,
    min_required_tokens,
)


@pytest.mark.parametrize(("text", "tokens"), [("", 1), ("abc", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)])
def test_token_estimate_is_a_quarter_of_the_characters_rounded_up_at_least_one(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_vectorised_token_estimates_agree_with_the_scalar_rule() -> None:
    texts = ["", "a", "abcd", "abcde", "é" * 9]
    expected = [estimate_tokens(t) for t in texts]
    assert estimate_tokens_many(texts).tolist() == expected
    assert estimate_tokens_array([len(t) for t in texts]).tolist() == expected
    with pytest.raises(ValueError, match="lengths"):
        estimate_tokens_array([-1])


NONE = np.zeros(6, dtype=bool)


def test_without_a_budget_the_first_k_ranked_rows_are_taken() -> None:
    result = apply_budget(np.array([3, 1, 0, 2, 5, 4]), np.full(6, 10), NONE, k=3, max_tokens=None)
    assert result.selected.tolist() == [3, 1, 0]
    assert result.tokens_used == 30
    assert result.dropped_for_budget.tolist() == []


def test_items_that_do_not_fit_are_skipped_and_smaller_later_ones_taken() -> None:
    tokens = np.array([50, 40, 30, 5, 5, 5])
    result = apply_budget(np.arange(6), tokens, NONE, k=4, max_tokens=60)
    assert result.selected.tolist() == [0, 3, 4]
    assert result.tokens_used == 60
    assert result.dropped_for_budget.tolist() == [1, 2]


def test_k_stops_selection_even_with_budget_left() -> None:
    result = apply_budget(np.arange(6), np.ones(6), NONE, k=2, max_tokens=100)
    assert result.selected.tolist() == [0, 1]
    assert result.tokens_used == 2


def test_mandatory_rows_are_considered_first_but_respect_k_and_budget() -> None:
    tokens = np.array([1, 1, 100, 1, 7, 1])
    mandatory = np.array([False, False, True, False, True, True])
    order = np.array([0, 1, 2, 3, 4, 5])
    result = apply_budget(order, tokens, mandatory, k=3, max_tokens=10)
    assert result.selected.tolist() == [4, 5, 0]  # anchor 2 (100 tokens) cannot fit
    assert result.tokens_used == 9
    assert result.dropped_for_budget.tolist() == [2]
    assert apply_budget(order, tokens, mandatory, k=2, max_tokens=None).selected.tolist() == [2, 4]


def test_zero_k_or_zero_budget_select_nothing() -> None:
    assert apply_budget(np.arange(3), np.ones(3), np.zeros(3, bool), k=0, max_tokens=None).selected.size == 0
    result = apply_budget(np.arange(3), np.ones(3), np.zeros(3, bool), k=3, max_tokens=0)
    assert result.selected.size == 0
    assert result.dropped_for_budget.tolist() == [0, 1, 2]


def test_order_may_be_a_subset_of_rows() -> None:
    result = apply_budget(np.array([4, 2]), np.ones(5), np.array([True, False, False, False, False]), 5, None)
    assert result.selected.tolist() == [4, 2]  # row 0 is mandatory but was not offered


@pytest.mark.parametrize(
    ("order", "tokens", "mandatory", "k", "max_tokens", "message"),
    [
        ([0, 1], [1, 1], [False], 1, None, "align"),
        ([0, 2], [1, 1], [False, False], 1, None, "row indices"),
        ([0, 1], [1, 1], [False, False], -1, None, "k must"),
        ([0, 1], [1, 1], [False, False], 1, -5, "max_tokens"),
        ([0, 1], [1, -1], [False, False], 1, None, "token counts"),
    ],
)
def test_invalid_budget_arguments_are_rejected(
    order: list[int], tokens: list[int], mandatory: list[bool], k: int, max_tokens: int | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        apply_budget(np.array(order), np.array(tokens), np.array(mandatory), k, max_tokens)


def test_min_required_tokens_is_the_smallest_masked_row() -> None:
    tokens = np.array([9, 3, 5, 1])
    assert min_required_tokens(tokens, np.array([True, False, True, False])) == 5
    assert min_required_tokens(tokens, np.zeros(4, bool)) == 0
    with pytest.raises(ValueError, match="align"):
        min_required_tokens(tokens, np.zeros(3, bool))


@given(
    sizes=st.lists(st.integers(0, 50), min_size=1, max_size=40),
    k=st.integers(0, 40),
    max_tokens=st.one_of(st.none(), st.integers(0, 400)),
    data=st.data(),
)
def test_budget_invariants_hold(sizes: list[int], k: int, max_tokens: int | None, data: st.DataObject) -> None:
    n = len(sizes)
    order = np.array(data.draw(st.permutations(range(n))))
    mandatory = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    tokens = np.array(sizes)
    result = apply_budget(order, tokens, mandatory, k, max_tokens)
    chosen = result.selected.tolist()
    assert len(chosen) <= k
    assert len(set(chosen)) == len(chosen)
    assert result.tokens_used == int(tokens[result.selected].sum())
    if max_tokens is not None:
        assert result.tokens_used <= max_tokens
    # Mandatory rows come before every optional row in the output.
    flags = mandatory[result.selected].tolist()
    assert flags == sorted(flags, reverse=True)
    # Nothing selected is also reported as dropped, and dropping only happens under a budget.
    assert not set(chosen) & set(result.dropped_for_budget.tolist())
    if max_tokens is None:
        assert result.dropped_for_budget.size == 0
        assert len(chosen) == min(k, n)
