"""Turn a free-text query into full-text search expressions (SQLite FTS5 and PostgreSQL tsquery).

User queries are natural language ("why did we pick JWT?"); passing them to MATCH verbatim would
make punctuation a syntax error and AND every word together. Terms are extracted, stop words that
carry no retrieval signal are dropped, and the rest are ORed so BM25 ranks partial matches.
"""

from __future__ import annotations

import re

_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*", re.UNICODE)

_STOP_WORDS_TEXT = (
    "a about above after again against all am an and any are as at be because been before being below "
    "between both but by can could did do does doing down during each few for from further had has "
    "have having he her here hers herself him himself his how i if in into is it its itself just me "
    "more most my myself no nor not now of off on once only or other our ours ourselves out over own "
    "same she should so some such than that the their theirs them themselves then there these they "
    "this those through to too under until up very was we were what when where which while who whom "
    "why will with would you your yours yourself yourselves "
)
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

MAX_TERMS = 32


def query_terms(query: str) -> list[str]:
    """Return the distinct lower-cased search terms of `query` in order, stop words removed.

    A query made only of stop words keeps them, so "who is it" still searches for something.
    """
    words = [w.lower().replace("'", "") for w in _WORD.findall(query)]
    seen: set[str] = set()
    terms: list[str] = []
    for word in words:
        if word in STOP_WORDS or word in seen:
            continue
        seen.add(word)
        terms.append(word)
    if not terms:
        for word in words:
            if word not in seen:
                seen.add(word)
                terms.append(word)
    return terms[:MAX_TERMS]


def fts5_expression(terms: list[str]) -> str:
    """FTS5 MATCH expression ORing the quoted terms (quotes make every term a literal string)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def tsquery_expression(terms: list[str]) -> str:
    """PostgreSQL to_tsquery text ORing the terms; each is reduced to characters tsquery accepts."""
    cleaned = [re.sub(r"[^\w]", "", t) for t in terms]
    return " | ".join(t for t in cleaned if t)
