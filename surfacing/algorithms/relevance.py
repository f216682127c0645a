"""Query relevance: lexical (BM25) and dense (cosine) scores mapped to [0, 1] and fused, and the subject
a query names.

All functions take arrays aligned by candidate (row ``i`` of every input is the same memory) and return
float64 arrays of the same length.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

from memories.algorithms.fts import STOP_WORDS

__all__ = [
    "DEFAULT_LEXICAL_WEIGHT",
    "fts5_bm25_relevance",
    "fuse",
    "normalise_bm25",
    "normalise_dense",
    "subject_match",
]

FloatArray = npt.NDArray[np.float64]

DEFAULT_LEXICAL_WEIGHT = 0.8


def normalise_bm25(raw: npt.ArrayLike) -> FloatArray:
    """Scale BM25 scores of one query's candidates to [0, 1]: ``max(s, 0) / max_j max(s_j, 0)``.

    Input convention: higher is better (rank-bm25 and Lucene style). SQLite FTS5 ``bm25()`` returns
    negative numbers where more negative is better; negate those first, or call ``fts5_bm25_relevance``.
    The best candidate gets 1.0. Negative, NaN and infinite inputs count as 0 (no lexical evidence), and
    an all-zero (or empty) input gives zeros rather than dividing by zero.
    """
    scores = np.asarray(raw, dtype=np.float64)
    scores = np.where(np.isfinite(scores), np.maximum(scores, 0.0), 0.0)
    top = float(scores.max()) if scores.size else 0.0
    if top <= 0.0:
        return np.zeros_like(scores)
    return scores / top


def normalise_dense(cosine: npt.ArrayLike) -> FloatArray:
    """Scale the cosines of one query's nearest memories to [0, 1]: ``(c - floor) / (top - floor)``.

    ``cosine`` holds the similarities of the ``n`` nearest memories (the vector index's answer); ``floor``
    is the lowest of them, the similarity any memory of the workspace reaches for this query, and ``top``
    the best. Embedding models place unrelated texts at very different cosines (a hashing embedder near 0,
    an e5 model near 0.8), so raw cosines cannot share one weight with lexical scores; the position
    between the background and the best match can. A memory outside the nearest ``n`` counts as 0. NaN
    counts as the floor; all-equal (or a single) cosine gives 1 for every finite value.
    """
    c = np.asarray(cosine, dtype=np.float64)
    if c.size == 0:
        return np.zeros(0)
    finite = np.isfinite(c)
    if not finite.any():
        return np.zeros_like(c)
    floor, top = float(c[finite].min()), float(c[finite].max())
    if top <= floor:
        return np.where(finite, 1.0, 0.0)
    return np.clip(np.where(finite, (c - floor) / (top - floor), 0.0), 0.0, 1.0)


def fts5_bm25_relevance(raw_fts5: npt.ArrayLike) -> FloatArray:
    """``normalise_bm25`` for SQLite FTS5 ``bm25()`` output (negative, more negative = better)."""
    return normalise_bm25(-np.asarray(raw_fts5, dtype=np.float64))


def fuse(lexical: npt.ArrayLike, semantic: npt.ArrayLike, lexical_weight: float = DEFAULT_LEXICAL_WEIGHT) -> FloatArray:
    """Convex combination ``w * lexical + (1 - w) * clip(semantic, 0, 1)``, in [0, 1].

    ``lexical`` is already normalised to [0, 1] (``normalise_bm25``); ``semantic`` is a cosine in [-1, 1]
    whose negative part carries no evidence of relevance, hence the clip. NaN inputs count as 0.
    ``lexical_weight`` = 1 is pure lexical search (e.g. factual point queries skip embeddings).
    """
    if not 0.0 <= lexical_weight <= 1.0:
        raise ValueError(f"lexical_weight must be in [0, 1], got {lexical_weight}")
    lex = np.nan_to_num(np.asarray(lexical, dtype=np.float64), nan=0.0)
    sem = np.nan_to_num(np.asarray(semantic, dtype=np.float64), nan=0.0)
    if lex.shape != sem.shape:
        raise ValueError(f"lexical and semantic must align by candidate, got {lex.shape} and {sem.shape}")
    return lexical_weight * np.clip(lex, 0.0, 1.0) + (1.0 - lexical_weight) * np.clip(sem, 0.0, 1.0)


_SUBJECT_PART = re.compile(r"[^\W_]+", re.UNICODE)


def subject_match(query_terms: Iterable[str], subjects: Sequence[str]) -> FloatArray:
    """How much of each memory's subject the query names: the share of the subject's words (lower-cased,
    stop words aside) among ``query_terms``, in [0, 1].

    A subject is what a memory is about ("dana-editor", "api-auth", a conversation turn's speaker), so a
    query naming it ("which editor does Dana use?") asks about that memory more than about one that only
    shares a word with it. Subjects are few and repeat: each distinct one is split once.
    """
    terms = {t.lower() for t in query_terms}
    scores: dict[str, float] = {}
    out = np.zeros(len(subjects))
    for i, subject in enumerate(subjects):
        if not subject:
            continue
        score = scores.get(subject)
        if score is None:
            parts = {p for p in _SUBJECT_PART.findall(subject.lower()) if p not in STOP_WORDS}
            score = scores[subject] = len(parts & terms) / len(parts) if parts else 0.0
        out[i] = score
    return out
