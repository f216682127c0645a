from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from surfacing.algorithms.router import (
    IMPLEMENTED_STRATEGIES,
    RouteDecision,
    Strategy,
    parse_strategy,
    route,
)

FAST = Strategy.FAST_RECENCY
FACTUAL = Strategy.FACTUAL_POINT_QUERY
DEEP = Strategy.DEEP_MULTI_HOP


# (query, strategy, confidence, reasons) worked from the rules of the router's docstring, all with no entities found.
@pytest.mark.parametrize(
    ("query", "strategy", "confidence", "reasons"),
    [
        ("what is the db", FAST, 0.5, ("fallback",)),
        ("postgres connection pool settings for prod", FAST, 0.5, ("fallback",)),
        ("Show, all items", FACTUAL, 0.7, ("lookup_prefix:show",)),
        ("invoices", FACTUAL, 0.65, ("bare_noun",)),
        ("what caused the outage", DEEP, 0.75, ("keyword:what caused",)),
    ],
)
def test_router_reproduces_reference_vectors(
    query: str, strategy: Strategy, confidence: float, reasons: tuple[str, ...]
) -> None:
    assert route(query, entity_count=0) == RouteDecision(None, strategy, confidence, reasons)


@pytest.mark.parametrize(
    ("query", "entity_count", "expected"),
    [
        ("Why did we pick JWT?", 0, ("keyword:why",)),
        ("HOW does the cache warm up", 0, ("keyword:how",)),
        ("explain the retry policy", 0, ("keyword:explain",)),
        ("auth and billing", 2, ("entity_count:2",)),
        ("x" * 81, 0, (f"length:{81}",)),
        ("why " + "y" * 90, 3, ("keyword:why", "entity_count:3", "length:94")),
        ("how would you explain the outage", 0, ("keyword:how", "keyword:explain")),
        ("Why, why and how", 0, ("keyword:why", "keyword:how")),
        ("why did the latest deploy fail today", 0, ("keyword:why", "recency_signal:latest", "recency_signal:today")),
    ],
)
def test_deep_rule_lists_every_condition_that_holds(query: str, entity_count: int, expected: tuple[str, ...]) -> None:
    decision = route(query, entity_count=entity_count)
    assert decision.strategy is DEEP
    assert decision.confidence == 0.75
    assert decision.reasons == expected


def test_deep_keywords_match_whole_words_only() -> None:
    # "show" contains "how" and "explained" contains "explain"; neither is the keyword.
    assert route("show invoices", entity_count=0).strategy is FACTUAL
    assert route("explained invoices today", entity_count=0).reasons == ("recency_signal:today",)


def test_exactly_eighty_characters_is_not_long() -> None:
    assert route("x" * 80, entity_count=0).reasons == ("bare_noun",)
    assert route("x " * 40, entity_count=0).reasons == ("fallback",)


def test_deep_rule_beats_recency_signal() -> None:
    assert route("why did the latest deploy fail", entity_count=0).strategy is DEEP


@pytest.mark.parametrize(
    ("query", "signals"),
    [
        ("latest invoices", ("latest",)),
        ("what did we do yesterday", ("yesterday",)),
        ("Recently changed settings", ("recent",)),
        ("newest notes from today", ("newest", "today")),
        ("the latest of the most recent", ("recent", "latest")),
    ],
)
def test_every_recency_signal_is_a_substring_match_reported_in_list_order(query: str, signals: tuple[str]) -> None:
    reasons = tuple(f"recency_signal:{signal}" for signal in signals)
    assert route(query, entity_count=1) == RouteDecision(None, FAST, 0.8, reasons)


@pytest.mark.parametrize(
    ("query", "entity_count", "confidence", "reasons"),
    [
        ("list decisions", 0, 0.7, ("lookup_prefix:list",)),
        ("GET user settings", 0, 0.7, ("lookup_prefix:get",)),
        ("find, the owner of billing", 0, 0.7, ("lookup_prefix:find",)),
        ("all", 0, 0.7, ("lookup_prefix:all",)),
        ("the users", 0, 0.65, ("bare_noun",)),
        ("The Invoices", 0, 0.65, ("bare_noun",)),
        ("postgres", 1, 0.65, ("bare_noun",)),
        ("postgres pool size", 1, 0.7, ("single_entity",)),
        ("Alice on-call rotation", 1, 0.7, ("single_entity",)),
    ],
)
def test_short_queries_become_point_queries(
    query: str, entity_count: int, confidence: float, reasons: tuple[str, ...]
) -> None:
    assert route(query, entity_count=entity_count) == RouteDecision(None, FACTUAL, confidence, reasons)


@pytest.mark.parametrize(
    "query",
    [
        "who owns billing",
        "where, is the runbook",
        "when is the release",
        "which users",
        "whose keys",
        "list the seven biggest open invoices now",  # 7 words
        "",
        "   ",
        "postgres pool size",  # no entity: neither prefix, bare noun nor single entity
    ],
)
def test_other_queries_fall_back_to_fast_recency(query: str) -> None:
    assert route(query, entity_count=0) == RouteDecision(None, FAST, 0.5, ("fallback",))


def test_wh_word_blocks_point_query_even_with_one_entity() -> None:
    assert route("who is alice", entity_count=1).reasons == ("fallback",)


@pytest.mark.parametrize("strategy", [FAST, FACTUAL, DEEP])
def test_explicit_implemented_strategy_wins_with_full_confidence(strategy: Strategy) -> None:
    decision = route("why why why", entity_count=5, explicit=strategy)
    assert decision == RouteDecision(strategy, strategy, 1.0, ("caller_explicit",))


@pytest.mark.parametrize("strategy", [Strategy.PROCEDURAL_LOOKUP, Strategy.TEMPORAL_WINDOWED])
def test_reserved_strategies_soft_degrade_to_fast_recency(strategy: Strategy) -> None:
    decision = route("how to deploy", entity_count=0, explicit=strategy)
    assert decision.requested is strategy
    assert decision.strategy is FAST
    assert decision.confidence == 1.0
    assert decision.reasons == ("caller_explicit", "unimplemented_strategy_soft_degrade")


def test_strategy_values_match_the_api() -> None:
    assert [s.value for s in Strategy] == [
        "fast:recency",
        "factual:point-query",
        "deep:multi-hop",
        "procedural:lookup",
        "temporal:windowed",
    ]
    assert {FAST, FACTUAL, DEEP} == IMPLEMENTED_STRATEGIES


def test_parse_strategy_accepts_values_and_names_the_allowed_ones_on_error() -> None:
    assert parse_strategy("deep:multi-hop") is DEEP
    with pytest.raises(ValueError, match=r"'deep'.*fast:recency.*temporal:windowed"):
        parse_strategy("deep")


@given(query=st.text(max_size=120), entity_count=st.integers(0, 5))
def test_rules_always_choose_an_implemented_strategy_with_reasons(query: str, entity_count: int) -> None:
    decision = route(query, entity_count=entity_count)
    assert decision.requested is None
    assert decision.strategy in IMPLEMENTED_STRATEGIES
    assert 0.5 <= decision.confidence <= 0.8
    assert decision.reasons
