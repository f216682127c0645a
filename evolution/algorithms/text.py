"""Deterministic text helpers: tokens, Jaccard similarity and the no-network LLM stand-in.

The extractive digest (`extractive_summary`) and key-phrase skeleton (`key_phrases`) are what the
compression ladder and the summary evolvers use when no LLM endpoint is configured. Both are pure
functions of the text: the same input always gives the same output, so dry runs and real runs agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from collections.abc import Set as AbstractSet

import numpy as np
import numpy.typing as npt
from scipy import sparse

FloatArray = npt.NDArray[np.float64]

_WORD_RE = re.compile(r"\w+(?:['’]\w+)*")
# A sentence ends at . ! ? (maybe followed by a closing quote/bracket) before whitespace, or at a newline.
_SENTENCE_SPLIT_RE = re.compile(r"(?<=[.!?])[\"')\]]*\s+|\n+")
_TOKEN_RE = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")


def _wordlist(words: str) -> frozenset[str]:
    return frozenset(words.split())


STOPWORDS: frozenset[str] = _wordlist(
    """
    a about above after again against all am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have having he
    her here hers herself him himself his how i if in into is it its itself just me more most my myself
    no nor not now of off on once only or other our ours ourselves out over own same she so some such
    than that the their theirs them themselves then there these they this those through to too under
    until up very was we were what when where which while who whom why with would you your yours
    yourself yourselves also get got let lets i'm it's there's that's we're they're you're
    """
)

DECISION_WORDS: frozenset[str] = _wordlist(
    """
    decided decide decides decision decisions chose choose chooses chosen picked pick picks because must
    will shall should agreed agree selected select settled prefer prefers preferred always never resolved
    resolve plan planned require requires required deadline approved rejected switched
    """
)

# Connectives that mark a decision make a sentence salient but are not themselves key phrases.
_PHRASE_STOPWORDS = STOPWORDS | frozenset({"because", "will", "must", "should", "shall"})


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters, digits, underscore; inner apostrophes kept: "don't")."""
    return _WORD_RE.findall(text.lower())


def word_set(text: str) -> frozenset[str]:
    """The set of lower-cased word tokens of `text`."""
    return frozenset(tokenize(text))


def jaccard(a: AbstractSet[str], b: AbstractSet[str]) -> float:
    """|a ∩ b| / |a ∪ b|; two empty sets score 0.0 (empty contents are not evidence of similarity)."""
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def jaccard_matrix(texts: Sequence[str]) -> FloatArray:
    """Pairwise word-set Jaccard of `texts` as an (n, n) float64 matrix (diagonal 1, empty rows 0).

    Built from a sparse document-term incidence matrix X: |a ∩ b| = (X Xᵀ)ab, |a ∪ b| = |a| + |b| - |a ∩ b|,
    so the cost is one sparse product rather than n² Python set operations.
    """
    n = len(texts)
    if n == 0:
        return np.zeros((0, 0), dtype=np.float64)
    vocab: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for r, text in enumerate(texts):
        for w in word_set(text):
            rows.append(r)
            cols.append(vocab.setdefault(w, len(vocab)))
    x = sparse.csr_matrix(
        (
            np.ones(len(rows), dtype=np.float64),
            (np.asarray(rows, dtype=np.int64), np.asarray(cols, dtype=np.int64)),
        ),
        shape=(n, max(len(vocab), 1)),
    )
    inter = np.asarray((x @ x.T).todense(), dtype=np.float64)
    sizes = np.diag(inter).copy()
    union = sizes[:, None] + sizes[None, :] - inter
    out = np.zeros((n, n), dtype=np.float64)
    np.divide(inter, union, out=out, where=union > 0)
    return out


def split_sentences(text: str) -> list[str]:
    """Sentences of `text`: split after . ! ? followed by whitespace and at newlines; stripped, non-empty."""
    return [s.strip() for s in _SENTENCE_SPLIT_RE.split(text) if s and s.strip()]


def _is_name(word: str, sentence_initial: bool) -> bool:
    # A capitalised word is taken as a name unless it merely starts the sentence and is a common word.
    if not word[:1].isupper():
        return False
    return not (sentence_initial and word.lower() in STOPWORDS)


def _is_number(word: str) -> bool:
    return any(ch.isdigit() for ch in word)


def _salience(words: Sequence[str]) -> list[bool]:
    return [_is_name(w, i == 0) or _is_number(w) or w.lower() in DECISION_WORDS for i, w in enumerate(words)]


def sentence_score(sentence: str) -> float:
    """Salience of one sentence: names + numbers + 2 x decision words (a decision is the rarest signal)."""
    words = _WORD_RE.findall(sentence)
    names = sum(_is_name(w, i == 0) for i, w in enumerate(words))
    numbers = sum(_is_number(w) for w in words)
    decisions = sum(w.lower() in DECISION_WORDS for w in words)
    return float(names + numbers + 2 * decisions)


def extractive_summary(text: str, max_ratio: float = 0.4) -> str:
    """Deterministic digest of `text` no longer than floor(max_ratio * len(text)) characters.

    Sentences are ranked by `sentence_score` (names, numbers, decision words such as decided, chose,
    because, must, will), ties broken by position; they are taken greedily while they fit the budget and
    emitted in their original order joined by one space. When not even one sentence fits (a single long
    sentence), the best sentence is shortened to its salient words first, then the others, in the
    original word order, until the budget is used.
    """
    if not 0.0 < max_ratio <= 1.0:
        raise ValueError("max_ratio must be in (0, 1]")
    budget = int(max_ratio * len(text))
    sentences = split_sentences(text)
    if budget <= 0 or not sentences:
        return ""
    scores = [sentence_score(s) for s in sentences]
    order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    chosen: list[int] = []
    used = 0
    for i in order:
        cost = len(sentences[i]) + (1 if chosen else 0)
        if used + cost <= budget:
            chosen.append(i)
            used += cost
    if chosen:
        return " ".join(sentences[i] for i in sorted(chosen))
    return _telegraphic(sentences[order[0]], budget)


def _telegraphic(sentence: str, budget: int) -> str:
    words = _WORD_RE.findall(sentence)
    salient = _salience(words)
    # Salient words claim the budget first; plain words fill what is left; output keeps sentence order.
    priority = sorted(range(len(words)), key=lambda i: (not salient[i], i))
    keep: list[int] = []
    used = 0
    for i in priority:
        cost = len(words[i]) + (1 if keep else 0)
        if used + cost <= budget:
            keep.append(i)
            used += cost
    return " ".join(words[i] for i in sorted(keep))


def _candidate_phrases(text: str, max_words: int) -> list[list[str]]:
    phrases: list[list[str]] = []
    for sentence in split_sentences(text):
        run: list[str] = []
        tokens = _TOKEN_RE.findall(sentence)
        for tok in [*tokens, "."]:
            is_word = tok[0].isalnum() or tok[0] == "_"
            if not is_word or tok.lower() in _PHRASE_STOPWORDS:
                # Long runs are cut into consecutive windows so a skeleton stays a list of short phrases.
                phrases.extend(run[k : k + max_words] for k in range(0, len(run), max_words))
                run = []
            else:
                run.append(tok)
    return phrases


def key_phrases(text: str, n_min: int = 5, n_max: int = 10, max_words: int = 3) -> list[str]:
    """Skeleton of `text`: its n best key phrases in order of first appearance (RAKE-style scoring).

    Candidates are runs of up to `max_words` non-stopword words between stopwords and punctuation.
    Word score = degree / frequency (degree = total length of the candidate phrases containing the word);
    a phrase scores the sum of its word scores plus 1 for each name (capitalised) or number word.
    n = clamp(word_count // 8, n_min, n_max), capped by the number of distinct candidates, so a very
    short text yields fewer than `n_min` phrases rather than invented ones. Ties go to the earlier phrase.
    """
    if not 1 <= n_min <= n_max:
        raise ValueError("need 1 <= n_min <= n_max")
    phrases = _candidate_phrases(text, max_words)
    if not phrases:
        return []
    freq: dict[str, int] = {}
    degree: dict[str, int] = {}
    for ph in phrases:
        for w in ph:
            lw = w.lower()
            freq[lw] = freq.get(lw, 0) + 1
            degree[lw] = degree.get(lw, 0) + len(ph)
    best: dict[str, tuple[float, int, str]] = {}
    for pos, ph in enumerate(phrases):
        key = " ".join(w.lower() for w in ph)
        score = sum(degree[w.lower()] / freq[w.lower()] for w in ph)
        score += sum(1.0 for w in ph if w[:1].isupper() or _is_number(w))
        if key not in best or score > best[key][0]:
            best[key] = (score, best[key][1] if key in best else pos, " ".join(ph))
    n = min(max(len(tokenize(text)) // 8, n_min), n_max, len(best))
    top = sorted(best.values(), key=lambda t: (-t[0], t[1]))[:n]
    return [phrase for _, _, phrase in sorted(top, key=lambda t: t[1])]


def join_phrases(phrases: Iterable[str]) -> str:
    """The stored form of a skeleton: key phrases joined by "; "."""
    return "; ".join(phrases)
