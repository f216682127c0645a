"""Turn a free-text query into full-text search expressions (SQLite FTS5 and PostgreSQL tsquery).

User queries are natural language ("why did we pick JWT?"); passing them to MATCH verbatim would
make punctuation a syntax error and AND every word together. Terms are extracted, stop words that
carry no retrieval signal are dropped, and the rest are ORed so BM25 ranks partial matches.
"""

from __future__ import annotations

import re

# A word, possibly joined by hyphens or apostrophes ("real-time", "don't", "O'Brien").
_WORD = re.compile(r"[^\W_]+(?:[-'\u2019][^\W_]+)*", re.UNICODE)
_PART = re.compile(r"[^\W_]+", re.UNICODE)
_POSSESSIVE = re.compile(r"'s$")

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

    A possessive "'s" is dropped ("JWT's" searches for "jwt", as both indexes split it off the
    text); other joined words stay whole and are searched as a phrase of their parts. A query made
    only of stop words keeps them, so "who is it" still searches for something.
    """
    words = [_POSSESSIVE.sub("", w.lower().replace("\u2019", "'")) for w in _WORD.findall(query)]
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


def only_stop_words(terms: list[str]) -> bool:
    """True when every term is a stop word: PostgreSQL's english configuration would drop them all."""
    return bool(terms) and all(t in STOP_WORDS for t in terms)


def fts5_expression(terms: list[str]) -> str:
    """FTS5 MATCH expression ORing the quoted terms.

    Quotes make every term a literal string (no operators, no column filters); the tokenizer turns a
    joined word inside them into a phrase of its parts, as it split the indexed text.
    """
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


def tsquery_expression(terms: list[str]) -> str:
    """PostgreSQL to_tsquery text ORing the terms; a joined word becomes a phrase of its parts.

    Only letters and digits reach to_tsquery, so no term can inject tsquery operators.
    """
    clauses: list[str] = []
    for term in terms:
        parts = _PART.findall(term)
        if len(parts) == 1:
            clauses.append(parts[0])
        elif parts:
            clauses.append("(" + " <-> ".join(parts) + ")")
    return " | ".join(clauses)
