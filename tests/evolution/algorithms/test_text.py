from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolution.algorithms.text import (
    extractive_summary,
    jaccard,
    jaccard_matrix,
    join_phrases,
    key_phrases,
    split_sentences,
    tokenize,
    word_set,
)

MEETING = (
    "Alice decided to move the billing service to Postgres 15 because MySQL replication kept failing. "
    "The team talked about lunch options for a while. "
    "Bob will migrate the 3 remaining tables by Friday. "
    "Everyone agreed the weather was nice. "
    "We looked at some dashboards and they looked fine overall today."
)


def test_tokenize_lowercases_words_and_drops_punctuation() -> None:
    assert tokenize("Hello, World! Don't panic: v2 ok_go.") == ["hello", "world", "don't", "panic", "v2", "ok_go"]


def test_word_set_is_the_set_of_tokens() -> None:
    assert word_set("the cat saw the Cat") == frozenset({"the", "cat", "saw"})


def test_jaccard_is_intersection_over_union() -> None:
    assert jaccard({"a", "b", "c"}, {"b", "c", "d"}) == pytest.approx(0.5)


def test_jaccard_of_two_empty_sets_is_zero() -> None:
    assert jaccard(set(), set()) == 0.0


def test_jaccard_matrix_matches_pairwise_jaccard() -> None:
    texts = ["a b c", "b c d", "", "x y", "A B C"]
    matrix = jaccard_matrix(texts)
    for i, a in enumerate(texts):
        for j, b in enumerate(texts):
            assert matrix[i, j] == pytest.approx(jaccard(word_set(a), word_set(b)))


def test_jaccard_matrix_of_nothing_is_empty() -> None:
    assert jaccard_matrix([]).shape == (0, 0)


def test_split_sentences_splits_on_terminators_and_newlines() -> None:
    assert split_sentences("One. Two!  Three?\nFour") == ["One.", "Two!", "Three?", "Four"]


def test_summary_keeps_the_decision_sentence_within_forty_percent() -> None:
    summary = extractive_summary(MEETING)
    assert len(summary) <= int(0.4 * len(MEETING))
    assert "Alice decided" in summary
    assert "Postgres 15" in summary
    assert "lunch" not in summary
    assert "weather" not in summary


def test_summary_emits_chosen_sentences_in_original_order() -> None:
    text = (
        "Filler sentence with nothing in it at all here. Carol chose Redis because 5 ms matters. "
        "More filler without anything important inside. Dave will ship 2 releases. "
        "And yet another filler sentence to pad the text out a lot more than before."
    )
    summary = extractive_summary(text, max_ratio=0.5)
    assert summary.index("Carol") < summary.index("Dave")


def test_summary_is_deterministic() -> None:
    assert extractive_summary(MEETING) == extractive_summary(MEETING)


def test_summary_of_one_long_sentence_keeps_salient_words_first() -> None:
    text = (
        "Alice decided that the whole billing platform would move to Postgres 15 because replication "
        "kept failing every single night"
    )
    summary = extractive_summary(text)
    assert len(summary) <= int(0.4 * len(text))
    for word in ("Alice", "decided", "Postgres", "15", "because"):
        assert word in summary.split()


def test_summary_of_empty_text_is_empty() -> None:
    assert extractive_summary("") == ""


def test_summary_rejects_a_ratio_outside_zero_to_one() -> None:
    with pytest.raises(ValueError):
        extractive_summary(MEETING, max_ratio=0.0)


@given(st.text(max_size=400), st.floats(min_value=0.05, max_value=1.0))
def test_summary_never_exceeds_its_budget(text: str, ratio: float) -> None:
    assert len(extractive_summary(text, ratio)) <= int(ratio * len(text))


def test_key_phrases_returns_between_five_and_ten_phrases_for_a_paragraph() -> None:
    phrases = key_phrases(MEETING)
    assert 5 <= len(phrases) <= 10
    assert len(set(phrases)) == len(phrases)
    assert all(1 <= len(p.split()) <= 3 for p in phrases)


def test_key_phrases_prefer_names_and_numbers() -> None:
    joined = join_phrases(key_phrases(MEETING))
    assert "Postgres 15" in joined
    assert "Alice" in joined
    assert "lunch" not in joined


def test_key_phrases_come_in_order_of_appearance() -> None:
    phrases = key_phrases(MEETING)
    positions = [MEETING.index(p) for p in phrases]
    assert positions == sorted(positions)


def test_key_phrases_of_a_short_text_do_not_invent_phrases() -> None:
    assert key_phrases("Postgres upgrade") == ["Postgres upgrade"]
    assert key_phrases("the of and") == []


def test_key_phrases_rejects_bad_bounds() -> None:
    with pytest.raises(ValueError):
        key_phrases(MEETING, n_min=6, n_max=5)


@given(st.text(max_size=300))
def test_key_phrases_never_exceed_n_max(text: str) -> None:
    assert len(key_phrases(text)) <= 10


def test_jaccard_matrix_is_symmetric_with_unit_diagonal_for_nonempty_texts() -> None:
    matrix = jaccard_matrix(["a b", "b c", "c d e"])
    assert np.allclose(matrix, matrix.T)
    assert np.allclose(np.diag(matrix), 1.0)
