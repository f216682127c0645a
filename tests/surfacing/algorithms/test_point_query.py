from __future__ import annotations

import numpy as np
import pytest

from graph.algorithms import edge_type_code
from surfacing.algorithms.point_query import ENTITY_RELEVANCE, MENTION_EDGE_CODES, entity_keys, mention_relevance


@pytest.mark.parametrize(
    ("query", "keys"),
    [
        # A bare name starts its "sentence", so the extractor leaves it out; the whole query catches it.
        ("Caroline", ["caroline"]),
        ("show Bob Smith", ["bob smith"]),
        ("find, the Potsdam office", ["potsdam", "potsdam office"]),
        ("list pg settings", ["postgresql", "pg settings"]),
        ("Caroline's", ["caroline", "caroline's"]),
        ("show Caroline's plans", ["caroline", "caroline's plans"]),
        ("invoices", ["invoices"]),
        ("all", []),
        ("show", []),
    ],
)
def test_keys_are_the_named_entities_then_the_query_without_its_lookup_word(query: str, keys: list[str]) -> None:
    assert entity_keys(query) == keys


def test_a_key_longer_than_a_subject_is_dropped() -> None:
    assert entity_keys("x" * 201) == []
    assert entity_keys("x" * 200) == ["x" * 200]


def test_mentions_are_joined_by_mention_edges_in_either_direction() -> None:
    assert {edge_type_code("MENTIONS"), edge_type_code("MENTIONED_IN")} == MENTION_EDGE_CODES


def test_relevance_is_the_damped_entity_relevance_or_the_lexical_score_when_higher() -> None:
    lexical = np.array([0.0, 0.3, 0.8, 0.2])
    hops = np.array([0, 1, 1, 2])
    got = mention_relevance(lexical, hops, 0.5)
    np.testing.assert_allclose(got, [ENTITY_RELEVANCE, 0.5, 0.8, 0.25])
    np.testing.assert_allclose(mention_relevance([0.1], [1], 0.8), [0.8])
