"""BM25 as the full-text index computes it, redone in Python for one workspace's statistics (no Django:
an in-memory SQLite FTS5 table with the index's tokenizer is the reference)."""

from __future__ import annotations

import math
import sqlite3

import numpy as np
import pytest

from memories.algorithms.fts import bm25, fts5_expression, fts5_idf, index_tokens, rare_term_subset, term_counts

TOKENIZER = "porter unicode61 remove_diacritics 2"
TEXTS = [
    "Caroline went to the LGBTQ support group; she's generously adopting two dogs",
    "Relational databases: the nginx load-balancer has no sticky sessions, running since 2019",
    "Café crème at the résumé workshop, happily organised by Zoë",
    "a b cd — it's real-time streaming with Kafka (kafka lag was 12s)",
    "Melanie painted a sunrise; painting relaxes her, she paints every week",
]


def _index(texts: list[str]) -> sqlite3.Connection:
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE VIRTUAL TABLE t USING fts5(content, tokenize='{TOKENIZER}')")
    db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    db.executemany("INSERT INTO t(content) VALUES (?)", [(text,) for text in texts])
    return db


def test_python_tokens_are_the_index_tokens() -> None:
    db = _index(TEXTS)
    for rowid, text in enumerate(TEXTS, start=1):
        indexed = [term for (term,) in db.execute("SELECT term FROM v WHERE doc = ? ORDER BY offset", [rowid])]
        assert index_tokens(text) == indexed


@pytest.mark.parametrize("terms", [["kafka", "lag"], ["painting", "sunrise"], ["real-time", "kafka"], ["cafe"]])
def test_python_bm25_equals_fts5_bm25_over_the_same_rows(terms: list[str]) -> None:
    db = _index(TEXTS)
    expected = dict(db.execute("SELECT rowid, -bm25(t) FROM t WHERE t MATCH ?", [fts5_expression(terms)]).fetchall())
    rows = len(TEXTS)
    hits = [sum(1 for text in TEXTS if _matches(db, text, term)) for term in terms]
    counts, lengths = term_counts(TEXTS, terms)
    scores = bm25(counts, lengths, float(lengths.mean()), fts5_idf(rows, hits))
    assert set(expected) == {i + 1 for i in np.flatnonzero(counts.sum(axis=1)).tolist()}
    for rowid, score in expected.items():
        assert scores[rowid - 1] == pytest.approx(score, rel=1e-9)


def _matches(db: sqlite3.Connection, text: str, term: str) -> bool:
    found = db.execute("SELECT content FROM t WHERE t MATCH ?", [fts5_expression([term])]).fetchall()
    return (text,) in found


def test_idf_is_the_fts5_formula_and_never_reaches_zero() -> None:
    idf = fts5_idf(100, [1, 10, 50, 90])
    assert idf[0] == pytest.approx(math.log(99.5 / 1.5))
    assert idf[1] == pytest.approx(math.log(90.5 / 10.5))
    assert idf[2] == pytest.approx(1e-6) and idf[3] == pytest.approx(1e-6)


def test_a_joined_term_counts_as_a_phrase_and_no_texts_give_nothing() -> None:
    counts, lengths = term_counts(["real-time or real time, not time real", "realtime"], ["real-time", "time"])
    assert counts.tolist() == [[2, 3], [0, 0]] and lengths.tolist() == [8, 1]
    empty, no_lengths = term_counts([], ["kafka"])
    assert empty.shape == (0, 1) and bm25(empty, no_lengths, 10.0, [1.0]).shape == (0,)


# -- rare_term_subset ------------------------------------------------------------------------------


def test_the_rarest_terms_are_ranked_alone_when_they_fill_the_pool_within_the_budget() -> None:
    # counts: a common word (5,000), two topic words (105, 176) and a mid one (580)
    assert rare_term_subset([5000, 105, 176, 580], pool=130, budget=520) == [1, 2]


def test_every_match_is_ranked_when_the_rare_terms_cannot_fill_the_pool() -> None:
    assert rare_term_subset([5000, 40, 30], pool=130, budget=520) is None


def test_every_match_is_ranked_when_every_term_fits_the_budget() -> None:
    assert rare_term_subset([100, 200, 150], pool=130, budget=520) is None


def test_the_rarest_term_is_kept_even_over_the_budget() -> None:
    assert rare_term_subset([9000, 800], pool=130, budget=520) == [1]


def test_a_single_term_or_an_empty_pool_is_ranked_in_full() -> None:
    assert rare_term_subset([9000], pool=130, budget=520) is None
    assert rare_term_subset([9000, 10], pool=0, budget=520) is None


def test_equal_counts_keep_the_query_order() -> None:
    assert rare_term_subset([300, 300, 300], pool=100, budget=600) == [0, 1]
