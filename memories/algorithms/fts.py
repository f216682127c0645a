"""Turn a free-text query into full-text search expressions (SQLite FTS5 and PostgreSQL tsquery).

User queries are natural language ("why did we pick JWT?"); passing them to MATCH verbatim would
make punctuation a syntax error and AND every word together. Terms are extracted, stop words that
carry no retrieval signal are dropped, and the rest are ORed so BM25 ranks partial matches.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import Stemmer

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

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


PREFIX_MIN = 3
"""Shortest term a list search also matches as a prefix ("rab" finds "rabbitmq"; "a" would find everything)."""


def _prefixable(term: str) -> bool:
    return len(term) >= PREFIX_MIN and len(_PART.findall(term)) == 1


def fts5_expression(terms: list[str], *, prefix: bool = False) -> str:
    """FTS5 MATCH expression ORing the quoted terms.

    Quotes make every term a literal string (no operators, no column filters); the tokenizer turns a
    joined word inside them into a phrase of its parts, as it split the indexed text. With ``prefix``, a
    single word of at least PREFIX_MIN characters also matches the words it begins ("rabbit" finds
    "rabbitmq"), besides its stem.
    """
    quoted = ['"' + t.replace('"', '""') + '"' for t in terms]
    if prefix:
        quoted = [f"{q} OR {q}*" if _prefixable(t) else q for t, q in zip(terms, quoted, strict=True)]
    return " OR ".join(quoted)


def tsquery_expression(terms: list[str], *, prefix: bool = False) -> str:
    """PostgreSQL to_tsquery text ORing the terms; a joined word becomes a phrase of its parts.

    Only letters and digits reach to_tsquery, so no term can inject tsquery operators. ``prefix`` as in
    ``fts5_expression`` (``rabbit | rabbit:*``).
    """
    clauses: list[str] = []
    for term in terms:
        parts = _PART.findall(term)
        if len(parts) == 1:
            clauses.append(f"{parts[0]} | {parts[0]}:*" if prefix and _prefixable(term) else parts[0])
        elif parts:
            clauses.append("(" + " <-> ".join(parts) + ")")
    return " | ".join(clauses)


# -- BM25 with one workspace's term statistics -------------------------------------------------------


def fts5_idf(rows: int, hits: npt.ArrayLike) -> FloatArray:
    """Inverse document frequency as SQLite FTS5's bm25() computes it, per term.

    ``idf = ln((N - n + 0.5) / (n + 0.5))`` for ``N`` indexed rows of which ``n`` match the term, and
    1e-6 where that is not positive (a term in more than half of the rows), so every matching term
    still counts a little.
    """
    n = np.asarray(hits, dtype=np.float64)
    idf = np.log((float(rows) - n + 0.5) / (n + 0.5))
    return np.where(idf > 0.0, idf, 1e-6)


# Okapi BM25 constants, FTS5's defaults.
BM25_K1 = 1.2
BM25_B = 0.75
# FTS5's porter tokenizer leaves tokens shorter than 3 or longer than 64 bytes as they are.
_STEM_MIN = 3
_STEM_MAX_BYTES = 64
_stemmers = threading.local()


def _stem(tokens: list[str]) -> list[str]:
    stemmer = getattr(_stemmers, "porter", None)
    if stemmer is None:
        stemmer = _stemmers.porter = Stemmer.Stemmer("porter")
    stems: list[str] = stemmer.stemWords(tokens)
    for i, token in enumerate(tokens):
        if len(token) < _STEM_MIN or (len(token) * 4 > _STEM_MAX_BYTES and len(token.encode()) > _STEM_MAX_BYTES):
            stems[i] = token
    return stems


def _folded(text: str) -> str:
    plain = text.lower()
    if not plain.isascii():
        plain = "".join(ch for ch in unicodedata.normalize("NFKD", plain) if not unicodedata.combining(ch))
    return plain


def index_tokens(text: str) -> list[str]:
    """The tokens the full-text index keeps for ``text``: its ``porter unicode61 remove_diacritics 2``
    tokenizer, as far as word boundaries, case, diacritics and Porter stems go.

    Runs of letters and digits are tokens, anything else separates them; diacritics are dropped
    ("café" -> "cafe") and each token is reduced to its Porter stem ("running" -> "run").
    """
    return _stem(_PART.findall(_folded(text)))


def term_counts(texts: Sequence[str], terms: Sequence[str]) -> tuple[IntArray, IntArray]:
    """``(counts, lengths)``: how often each term (a word, or a phrase of the parts of a joined word)
    occurs in each text as the index sees it (``index_tokens``), and each text's token count.

    Only the words that can stem to a term are stemmed: Porter's rules change a word's end, so a word
    that stems to ``s`` starts with ``s`` less its last letter. A joined term ("real-time") is counted
    over the whole stemmed text.
    """
    phrases = [index_tokens(t) for t in terms]
    counts = np.zeros((len(texts), len(terms)), dtype=np.int64)
    lengths = np.zeros(len(texts), dtype=np.int64)
    singles: dict[str, list[int]] = {}
    for p, phrase in enumerate(phrases):
        if len(phrase) == 1:
            singles.setdefault(phrase[0], []).append(p)
    longer = [(p, tuple(phrase)) for p, phrase in enumerate(phrases) if len(phrase) > 1]
    prefixes = sorted({stem[:-1] if len(stem) > 1 else stem for stem in singles}, key=len, reverse=True)
    candidates = re.compile(r"(?<![^\W_])(?:" + "|".join(map(re.escape, prefixes)) + r")[^\W_]*") if prefixes else None
    for d, text in enumerate(texts):
        plain = _folded(text)
        words = _PART.findall(plain)
        lengths[d] = len(words)
        if candidates is not None:
            for stem in _stem(candidates.findall(plain)):
                for p in singles.get(stem, ()):
                    counts[d, p] += 1
        if longer:
            tokens = _stem(words)
            for p, joined in longer:
                width = len(joined)
                counts[d, p] = sum(tuple(tokens[i : i + width]) == joined for i in range(len(tokens) - width + 1))
    return counts, lengths


def bm25(counts: npt.ArrayLike, lengths: npt.ArrayLike, average_length: float, idf: npt.ArrayLike) -> FloatArray:
    """Okapi BM25 of each document (rows of ``counts``, one column per term; higher is better):

    ``sum_t idf[t] * tf * (k1 + 1) / (tf + k1 * (1 - b + b * length / average_length))``, FTS5's bm25()
    with every column weight 1 (``k1`` = 1.2, ``b`` = 0.75).
    """
    tf = np.asarray(counts, dtype=np.float64)
    if tf.size == 0:
        return np.zeros(tf.shape[0] if tf.ndim else 0, dtype=np.float64)
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * np.asarray(lengths, dtype=np.float64) / max(average_length, 1e-9))
    parts = tf * (BM25_K1 + 1.0) / (tf + norm[:, None])
    result: FloatArray = parts @ np.asarray(idf, dtype=np.float64)
    return result


# -- ranking only the rarer terms' matches (PostgreSQL) --------------------------------------------


def rare_term_subset(counts: Sequence[int], *, pool: int, budget: int) -> list[int] | None:
    """Which terms' matches to rank, given each term's match count (possibly capped above ``budget``):
    the rarest terms first, while their counts add up to at most ``budget`` (the rarest always), or
    None to rank every match (the subset would be every term, or may hold fewer than ``pool`` rows).

    A match of only common terms is worth least to any idf-weighted rank (BM25's idf falls with a term's
    count), and a GIN index has to read the row of every match to rank it: a query with one word in 1%
    of the rows reads 1% of the workspace. When the rare terms alone give a full pool, their rows
    (ranked by the whole query, common terms included) are the pool.
    """
    if pool <= 0 or budget <= 0 or len(counts) < 2:
        return None
    order = sorted(range(len(counts)), key=lambda k: (counts[k], k))
    chosen: list[int] = []
    total = 0
    for k in order:
        if chosen and total + counts[k] > budget:
            break
        chosen.append(k)
        total += counts[k]
    if len(chosen) == len(counts) or total < pool:
        return None
    return sorted(chosen)
