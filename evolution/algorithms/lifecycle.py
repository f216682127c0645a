"""Memory lifecycle evolvers: episodic -> semantic, daily zettel rollups, working -> procedural,
opinion synthesis and observation synthesis.

Inputs are aligned arrays / sequences over the candidate memories; results name positions in those
inputs (the caller maps them to ids). Times are epoch seconds; `now` is passed in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from evolution.algorithms.text import jaccard_matrix

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

SEMANTIC_MIN_CONFIDENCE = 0.9
SEMANTIC_MIN_AGE_DAYS = 3.0
ROLLUP_MIN_ITEMS = 2
PROCEDURAL_MIN_ITEMS = 5
PROCEDURAL_MIN_JACCARD = 0.8
OPINION_SATURATION = 10.0
# The opinion formula's fixed uncertainty discount: 1 - 0.3 * 0.5.
OPINION_DISCOUNT = 1.0 - 0.3 * 0.5
OPINION_MIN_CONFIDENCE = 0.5
OBSERVATION_MIN_FACTS = 2


def semantic_eligible(
    confidence: npt.ArrayLike,
    age_days: npt.ArrayLike,
    *,
    min_confidence: float = SEMANTIC_MIN_CONFIDENCE,
    min_age_days: float = SEMANTIC_MIN_AGE_DAYS,
) -> BoolArray:
    """Episodic memories ready to become semantic: confidence >= 0.9 and at least 3 days old (NaN: no)."""
    conf = np.asarray(confidence, dtype=np.float64)
    age = np.asarray(age_days, dtype=np.float64)
    eligible: BoolArray = (conf >= min_confidence) & (age >= min_age_days)
    return eligible


@dataclass(frozen=True, slots=True)
class DailyRollup:
    """One zettel note rolling up the episodes of one calendar day (positions in the inputs)."""

    day: dt.date
    indices: tuple[int, ...]
    title: str
    content: str


def daily_rollups(
    created_ts: npt.ArrayLike,
    contents: Sequence[str],
    now: float,
    *,
    utc_offset_seconds: float = 0.0,
    min_items: int = ROLLUP_MIN_ITEMS,
    include_today: bool = False,
) -> list[DailyRollup]:
    """Group episodes by calendar day (UTC shifted by `utc_offset_seconds`); days with >= 2 become notes.

    The current day (of `now`) is left out unless include_today, because it is still filling up and a
    rollup of half a day would be superseded by the next run. Note content: "Daily rollup YYYY-MM-DD"
    and one "- content" line per episode in time order. Rollups come out oldest day first.
    """
    ts = np.asarray(created_ts, dtype=np.float64).ravel()
    if ts.size != len(contents):
        raise ValueError("created_ts and contents must have the same length")
    if ts.size == 0:
        return []
    day_numbers = np.floor((ts + utc_offset_seconds) / 86_400.0).astype(np.int64)
    today = int(np.floor((now + utc_offset_seconds) / 86_400.0))
    order = np.lexsort((np.arange(ts.size), ts, day_numbers))
    days_sorted = day_numbers[order]
    uniq, starts, sizes = np.unique(days_sorted, return_index=True, return_counts=True)
    rollups: list[DailyRollup] = []
    epoch = dt.date(1970, 1, 1)
    for day_number, start, size in zip(uniq.tolist(), starts.tolist(), sizes.tolist(), strict=True):
        if size < min_items or (day_number >= today and not include_today):
            continue
        members = tuple(int(k) for k in order[start : start + size])
        day = epoch + dt.timedelta(days=day_number)
        title = f"Daily rollup {day.isoformat()}"
        lines = [f"{title} ({size} episodes)", *(f"- {contents[k].strip()}" for k in members)]
        rollups.append(DailyRollup(day=day, indices=members, title=title, content="\n".join(lines)))
    return rollups


@dataclass(frozen=True, slots=True)
class ProceduralCluster:
    """Near-identical working items that repeat a procedure (positions in the inputs).

    representative: the member with the highest mean Jaccard to the other members (its content becomes
    the procedural memory). mean_similarity: mean pairwise Jaccard inside the cluster.
    """

    indices: tuple[int, ...]
    representative: int
    mean_similarity: float


def procedural_clusters(
    contents: Sequence[str],
    *,
    min_items: int = PROCEDURAL_MIN_ITEMS,
    min_jaccard: float = PROCEDURAL_MIN_JACCARD,
) -> list[ProceduralCluster]:
    """Clusters of >= 5 working items whose word-set Jaccard with the cluster seed is >= 0.8.

    Greedy in input order (pass items oldest first): each unassigned item seeds a cluster and takes every
    unassigned item similar enough to it. Clusters below `min_items` are dropped and their members stay
    available as seeds for later clusters.
    """
    n = len(contents)
    if n < min_items:
        return []
    sim = jaccard_matrix(contents)
    joins = sim >= min_jaccard
    unassigned = np.ones(n, dtype=bool)
    clusters: list[ProceduralCluster] = []
    for seed in range(n):
        if not unassigned[seed]:
            continue
        members = joins[seed] & unassigned
        members[seed] = True
        idx = np.flatnonzero(members)
        if idx.size < min_items:
            continue
        unassigned[idx] = False
        sub = sim[np.ix_(idx, idx)]
        mean_to_others = (sub.sum(axis=1) - 1.0) / (idx.size - 1)
        clusters.append(
            ProceduralCluster(
                indices=tuple(int(k) for k in idx),
                representative=int(idx[int(np.argmax(mean_to_others))]),
                mean_similarity=float(mean_to_others.mean()),
            )
        )
    return clusters


def opinion_strength(n: npt.ArrayLike) -> FloatArray:
    """strength = min(1, n / 10) for a tag/topic seen in n memories."""
    strength: FloatArray = np.minimum(1.0, np.asarray(n, dtype=np.float64) / OPINION_SATURATION)
    return strength


def opinion_confidence(n: npt.ArrayLike) -> FloatArray:
    """confidence = strength * (1 - 0.3 * 0.5) * (0.5 + 0.5 * min(1, n / 10)).

    (ran) n = 6 -> 0.408 (below 0.5, no opinion); n = 7 -> 0.50575 (opinion formed).
    """
    s = opinion_strength(n)
    confidence: FloatArray = s * OPINION_DISCOUNT * (0.5 + 0.5 * s)
    return confidence


@dataclass(frozen=True, slots=True)
class OpinionCandidate:
    """A recurring topic strong enough to become an opinion memory (indices: supporting positions)."""

    topic: str
    count: int
    strength: float
    confidence: float
    indices: tuple[int, ...]
    content: str


def opinion_candidates(
    topic_lists: Sequence[Iterable[str]],
    *,
    min_confidence: float = OPINION_MIN_CONFIDENCE,
) -> list[OpinionCandidate]:
    """Topics (tags) seen in enough memories to pass `opinion_confidence` >= min_confidence.

    topic_lists[k]: the tags/topics of memory k. A topic counts once per memory; topics are matched
    case-insensitively after stripping and reported in their first-seen spelling. Sorted by count
    (descending) then topic.
    """
    support: dict[str, list[int]] = {}
    spelling: dict[str, str] = {}
    for k, topics in enumerate(topic_lists):
        for raw in topics:
            shown = raw.strip()
            key = shown.casefold()
            if not key:
                continue
            spelling.setdefault(key, shown)
            members = support.setdefault(key, [])
            if not members or members[-1] != k:
                members.append(k)
    if not support:
        return []
    keys = sorted(support)
    counts = np.fromiter((len(support[key]) for key in keys), dtype=np.float64, count=len(keys))
    strength = opinion_strength(counts)
    confidence = opinion_confidence(counts)
    out = [
        OpinionCandidate(
            topic=spelling[key],
            count=int(counts[i]),
            strength=float(strength[i]),
            confidence=float(confidence[i]),
            indices=tuple(support[key]),
            content=f"Recurring theme: {spelling[key]} (seen in {int(counts[i])} memories)",
        )
        for i, key in enumerate(keys)
        if confidence[i] >= min_confidence
    ]
    return sorted(out, key=lambda c: (-c.count, c.topic.casefold()))


@dataclass(frozen=True, slots=True)
class ObservationGroup:
    """Facts about one entity/subject summarised into an observation (indices: source positions)."""

    subject: str
    indices: tuple[int, ...]
    content: str


def observation_groups(
    subjects: Sequence[str | None],
    contents: Sequence[str],
    *,
    min_facts: int = OBSERVATION_MIN_FACTS,
) -> list[ObservationGroup]:
    """Subjects with >= 2 distinct facts -> "Summary of X: f1; f2; ..." (facts in input order).

    Subjects match case-insensitively (first spelling shown); facts without a subject are skipped; a
    repeated fact (same text ignoring case, surrounding space and a final period) is listed once but its
    memory is still a source. Groups come out in order of each subject's first fact.
    """
    if len(subjects) != len(contents):
        raise ValueError("subjects and contents must have the same length")
    groups: dict[str, tuple[str, list[int], list[str], set[str]]] = {}
    for k, (subject, content) in enumerate(zip(subjects, contents, strict=True)):
        if subject is None or not subject.strip():
            continue
        key = subject.strip().casefold()
        _, members, facts, seen = groups.setdefault(key, (subject.strip(), [], [], set()))
        members.append(k)
        fact = content.strip().rstrip(".").strip()
        if fact and fact.casefold() not in seen:
            seen.add(fact.casefold())
            facts.append(fact)
    return [
        ObservationGroup(subject=shown, indices=tuple(members), content=f"Summary of {shown}: {'; '.join(facts)}")
        for shown, members, facts, _ in groups.values()
        if len(facts) >= min_facts
    ]
