"""Query relevance: lexical (BM25) and semantic (cosine) scores mapped to [0, 1] and fused.

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
    "cosine_to_query",
    "fts5_bm25_relevance",
    "fuse",
    "normalise_bm25",
    "subject_match",
]

FloatArray = npt.NDArray[np.float64]

DEFAULT_LEXICAL_WEIGHT = 0.7


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


def cosine_to_query(matrix: npt.ArrayLike, query_vec: npt.ArrayLike) -> FloatArray:
    """Cosine similarity of each row of ``matrix`` (n, d) with ``query_vec`` (d,), in [-1, 1].

    Rows are expected L2-normalised (or all zeros for memories without an embedding); they are
    renormalised here anyway because the cost equals that of the dot product and a stale embedding
    written by another embedder must not score above 1. Zero rows and a zero query give 0.
    """
    m = np.asarray(matrix, dtype=np.float32)
    q = np.asarray(query_vec, dtype=np.float32).ravel()
    if m.ndim != 2:
        raise ValueError(f"matrix must be 2-D (n, d), got shape {m.shape}")
    if m.shape[1] != q.shape[0]:
        raise ValueError(f"dimension mismatch: matrix has d={m.shape[1]}, query has d={q.shape[0]}")
    q_norm = float(np.linalg.norm(q))
    if m.shape[0] == 0 or q_norm == 0.0:
        return np.zeros(m.shape[0], dtype=np.float64)
    dots = (m @ (q / q_norm)).astype(np.float64)
    row_norms = np.sqrt(np.einsum("ij,ij->i", m, m, dtype=np.float64))
    safe = np.where(row_norms > 0.0, row_norms, 1.0)
    cos = np.where(row_norms > 0.0, dots / safe, 0.0)
    result: FloatArray = np.clip(np.nan_to_num(cos, nan=0.0), -1.0, 1.0)
    return result


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
