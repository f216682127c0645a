"""Surfacing router: pick a retrieval strategy for a query with a few ordered, explainable rules.

Rules, first match wins:

1. ``deep:multi-hop`` (confidence 0.75) when the query contains one of the words
   ``why | how | what caused | explain`` (case-insensitive, whole words; reason ``keyword:<m>`` for each
   distinct keyword, in query order), or the caller saw >= 2 entities (``entity_count:<n>``), or the query
   is longer than 80 characters (``length:<n>``). Every condition that holds is listed as a reason, in
   that order.
2. ``fast:recency`` (0.8) when the lower-cased query contains ``recent | latest | newest | today |
   yesterday`` as a substring (``recency_signal:<w>`` for each signal word found, in that list's order).
   A deep query that also carries recency signals lists them after its own reasons: the router names
   every signal it saw, not only those of the rule that won.
3. For 1..6 whitespace-separated words whose first word (lower-cased, trailing comma stripped) is not a
   wh-word (what who where when why which whose how), ``factual:point-query``:
   first word in ``list | show | get | find | all`` -> 0.7 (``lookup_prefix:<w>``); else the whole query
   matches ``^(the\\s+)?\\w+s?$`` -> 0.65 (``bare_noun``); else ``entity_count == 1`` -> 0.7
   (``single_entity``).
4. Otherwise ``fast:recency`` (0.5, ``fallback``).

An explicit strategy from the caller wins with confidence 1.0 (``caller_explicit``).
``procedural:lookup`` and ``temporal:windowed`` are reserved: requesting them runs ``fast:recency`` and adds
``unimplemented_strategy_soft_degrade``; ``RouteDecision.requested`` still records what was asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "IMPLEMENTED_STRATEGIES",
    "RouteDecision",
    "Strategy",
    "parse_strategy",
    "route",
]


class Strategy(StrEnum):
    FAST_RECENCY = "fast:recency"
    FACTUAL_POINT_QUERY = "factual:point-query"
    DEEP_MULTI_HOP = "deep:multi-hop"
    PROCEDURAL_LOOKUP = "procedural:lookup"
    TEMPORAL_WINDOWED = "temporal:windowed"


IMPLEMENTED_STRATEGIES: frozenset[Strategy] = frozenset(
    {Strategy.FAST_RECENCY, Strategy.FACTUAL_POINT_QUERY, Strategy.DEEP_MULTI_HOP}
)
"""Strategies that run as themselves; the others soft-degrade to ``fast:recency``."""


@dataclass(frozen=True)
class RouteDecision:
    """Outcome of routing.

    ``requested`` is the caller's explicit strategy (None when the rules chose); ``strategy`` is the one
    actually run, after soft-degrade; ``confidence`` in [0, 1]; ``reasons`` are machine-readable tags.
    """

    requested: Strategy | None
    strategy: Strategy
    confidence: float
    reasons: tuple[str, ...]


DEEP_CONFIDENCE = 0.75
RECENCY_CONFIDENCE = 0.8
LOOKUP_PREFIX_CONFIDENCE = 0.7
BARE_NOUN_CONFIDENCE = 0.65
SINGLE_ENTITY_CONFIDENCE = 0.7
FALLBACK_CONFIDENCE = 0.5
EXPLICIT_CONFIDENCE = 1.0

DEEP_MIN_ENTITIES = 2
DEEP_MIN_LENGTH_EXCLUSIVE = 80
POINT_QUERY_MAX_WORDS = 6

_DEEP_KEYWORDS = re.compile(r"\b(why|how|what caused|explain)\b", re.IGNORECASE)
_RECENCY_SIGNALS = ("recent", "latest", "newest", "today", "yesterday")
_WH_WORDS = frozenset({"what", "who", "where", "when", "why", "which", "whose", "how"})
_LOOKUP_PREFIXES = frozenset({"list", "show", "get", "find", "all"})
_BARE_NOUN = re.compile(r"^(the\s+)?\w+s?$", re.IGNORECASE)


def parse_strategy(value: str) -> Strategy:
    """Return the strategy named ``value`` (e.g. ``"deep:multi-hop"``); ValueError names the allowed ones."""
    try:
        return Strategy(value)
    except ValueError:
        allowed = ", ".join(s.value for s in Strategy)
        raise ValueError(f"unknown strategy {value!r}; allowed: {allowed}") from None


def _explicit(explicit: Strategy) -> RouteDecision:
    if explicit in IMPLEMENTED_STRATEGIES:
        return RouteDecision(explicit, explicit, EXPLICIT_CONFIDENCE, ("caller_explicit",))
    return RouteDecision(
        explicit,
        Strategy.FAST_RECENCY,
        EXPLICIT_CONFIDENCE,
        ("caller_explicit", "unimplemented_strategy_soft_degrade"),
    )


def _deep_reasons(query: str, entity_count: int) -> list[str]:
    keywords = [m.group(1).lower() for m in _DEEP_KEYWORDS.finditer(query)]
    reasons = [f"keyword:{k}" for k in dict.fromkeys(keywords)]
    if entity_count >= DEEP_MIN_ENTITIES:
        reasons.append(f"entity_count:{entity_count}")
    if len(query) > DEEP_MIN_LENGTH_EXCLUSIVE:
        reasons.append(f"length:{len(query)}")
    return reasons


def _point_query(query: str, entity_count: int) -> RouteDecision | None:
    words = query.split()
    if not 1 <= len(words) <= POINT_QUERY_MAX_WORDS:
        return None
    first = words[0].lower().rstrip(",")
    if first in _WH_WORDS:
        return None
    if first in _LOOKUP_PREFIXES:
        reason = f"lookup_prefix:{first}"
        return RouteDecision(None, Strategy.FACTUAL_POINT_QUERY, LOOKUP_PREFIX_CONFIDENCE, (reason,))
    if _BARE_NOUN.match(query.strip()):
        return RouteDecision(None, Strategy.FACTUAL_POINT_QUERY, BARE_NOUN_CONFIDENCE, ("bare_noun",))
    if entity_count == 1:
        return RouteDecision(None, Strategy.FACTUAL_POINT_QUERY, SINGLE_ENTITY_CONFIDENCE, ("single_entity",))
    return None


def route(query: str, *, entity_count: int, explicit: Strategy | None = None) -> RouteDecision:
    """Choose the strategy for ``query`` by the ordered rules in the module docstring.

    ``entity_count`` is the number of known entities the caller found in the query.
    """
    if explicit is not None:
        return _explicit(explicit)
    deep = _deep_reasons(query, entity_count)
    lowered = query.lower()
    recency = tuple(f"recency_signal:{signal}" for signal in _RECENCY_SIGNALS if signal in lowered)
    if deep:
        return RouteDecision(None, Strategy.DEEP_MULTI_HOP, DEEP_CONFIDENCE, (*deep, *recency))
    if recency:
        return RouteDecision(None, Strategy.FAST_RECENCY, RECENCY_CONFIDENCE, recency)
    point = _point_query(query, entity_count)
    if point is not None:
        return point
    return RouteDecision(None, Strategy.FAST_RECENCY, FALLBACK_CONFIDENCE, ("fallback",))
