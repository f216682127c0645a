"""Decay-based relevance and HOT / WARM / COLD tier transitions of the engine's rules and corrections.

Relevance (dimensionless, >= 0)::

    relevance = base * exp(-0.03 * days_since_access) * log2(access_count + 1) * type_weight

``days_since_access`` is in days (fractional), ``access_count`` counts reads and writes, and the type
weight is 1.5 for a HOT rule, 0.8 for a WARM (or COLD) rule, 1.2 for a user correction and 1.0 for an
engine strategy.

Tier rules, evaluated per item in this order (the first that applies decides):

1. A user correction always sits in HOT. Its score still decays (so ``decay-scores.json`` stays honest
   about how stale it is) but the score never moves it: a user correction wins every conflict, the decay
   rule included. A correction found in WARM or COLD is put back into HOT.
2. Used 3 or more times in the last 7 days: promote to HOT (use beats any decay rule).
3. Score below 0.05: archive to COLD. An item demoted to WARM whose score at the WARM weight would be below
   0.05 goes straight to COLD, so running the rules twice at the same ``now`` changes nothing the second time.
4. Score below 0.2, or unused for 30 days: demote from HOT to WARM.

COLD items only come back through rule 2 (or a correction). Nothing is ever deleted: the only targets are
the three tiers, and every change carries a human-readable reason that the caller logs before applying it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import Final, overload

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

DECAY_RATE_PER_DAY: Final = 0.03
HOT_USES: Final = 3
HOT_WINDOW_DAYS: Final = 7
UNUSED_DAYS: Final = 30
WARM_THRESHOLD: Final = 0.2
COLD_THRESHOLD: Final = 0.05

TYPE_WEIGHTS: Final[Mapping[str, float]] = MappingProxyType(
    {"hot": 1.5, "warm": 0.8, "correction": 1.2, "engine_strategy": 1.0}
)

_SECONDS_PER_DAY: Final = 86_400.0


class Tier(StrEnum):
    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class ItemKind(StrEnum):
    """Where an item came from: a rule a person wrote (or approved as written) or an engine strategy."""

    RULE = "rule"
    ENGINE_STRATEGY = "engine_strategy"


@dataclass(frozen=True, slots=True)
class TierItem:
    """One tracked memory item as the decay job sees it.

    ``base`` is the item's base relevance (>= 0), ``access_count`` its number of accesses (0 is read as 1:
    an item was accessed once when it was written, and log2(0 + 1) = 0 would zero the score forever),
    ``last_access`` a timezone-aware datetime and ``uses_in_last_7d`` the accesses in the 7 days before now.
    """

    key: str
    tier: Tier
    kind: ItemKind
    base: float
    access_count: int
    last_access: datetime
    uses_in_last_7d: int
    is_correction: bool = False

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("key must not be empty")
        if not math.isfinite(self.base) or self.base < 0:
            raise ValueError(f"base must be a finite number >= 0, got {self.base!r}")
        if self.access_count < 0 or self.uses_in_last_7d < 0:
            raise ValueError("access_count and uses_in_last_7d must be >= 0")
        if self.last_access.tzinfo is None or self.last_access.utcoffset() is None:
            raise ValueError("last_access must be timezone-aware")
        if self.is_correction and self.kind is ItemKind.ENGINE_STRATEGY:
            raise ValueError("an engine strategy cannot be a user correction")


@dataclass(frozen=True, slots=True)
class TierChange:
    """A move of ``key`` from one tier to another, with the score that drove it and a sentence saying why."""

    key: str
    from_tier: Tier
    to_tier: Tier
    score: float
    reason: str


@overload
def relevance(base: float, days_since_access: float, access_count: float, type_weight: float) -> float: ...


@overload
def relevance(
    base: npt.ArrayLike,
    days_since_access: npt.ArrayLike,
    access_count: npt.ArrayLike,
    type_weight: npt.ArrayLike,
) -> FloatArray: ...


def relevance(
    base: npt.ArrayLike,
    days_since_access: npt.ArrayLike,
    access_count: npt.ArrayLike,
    type_weight: npt.ArrayLike,
) -> float | FloatArray:
    """Return ``base * exp(-0.03 * days) * log2(max(access_count, 1) + 1) * type_weight`` (broadcasting).

    Days before 0 (a clock a little ahead of ``now``) count as 0 so a score never exceeds its fresh value;
    an access count below 1 counts as 1 (see ``TierItem``). Scalars in give a float out, arrays an array.
    Raises ValueError for a negative or non-finite base or type weight.
    """
    b = np.asarray(base, dtype=np.float64)
    w = np.asarray(type_weight, dtype=np.float64)
    if not (np.all(np.isfinite(b)) and np.all(b >= 0)):
        raise ValueError("base must be finite and >= 0")
    if not (np.all(np.isfinite(w)) and np.all(w >= 0)):
        raise ValueError("type_weight must be finite and >= 0")
    days = np.maximum(np.asarray(days_since_access, dtype=np.float64), 0.0)
    count = np.maximum(np.asarray(access_count, dtype=np.float64), 1.0)
    score: FloatArray = b * np.exp(-DECAY_RATE_PER_DAY * days) * np.log2(count + 1.0) * w
    if score.ndim == 0:
        return float(score)
    return score


def type_weight(tier: Tier, kind: ItemKind, *, is_correction: bool) -> float:
    """Weight of an item: correction 1.2, engine strategy 1.0, else by tier (HOT 1.5, WARM and COLD 0.8)."""
    if is_correction:
        return TYPE_WEIGHTS["correction"]
    if kind is ItemKind.ENGINE_STRATEGY:
        return TYPE_WEIGHTS["engine_strategy"]
    return TYPE_WEIGHTS["hot"] if tier is Tier.HOT else TYPE_WEIGHTS["warm"]


def days_between(earlier: datetime, now: datetime) -> float:
    """Fractional days from ``earlier`` to ``now`` (negative when ``earlier`` is in the future)."""
    return (now - earlier).total_seconds() / _SECONDS_PER_DAY


def scores(items: Sequence[TierItem], now: datetime) -> FloatArray:
    """Relevance of every item at ``now`` with its current tier's type weight, as one vectorised call."""
    _require_aware(now)
    return _score_at(items, now, [type_weight(i.tier, i.kind, is_correction=i.is_correction) for i in items])


def tier_transitions(items: Sequence[TierItem], now: datetime) -> list[TierChange]:
    """Return the tier changes the rules in the module docstring make at ``now``, in input order.

    Items that stay where they are produce no entry. ``TierChange.score`` is the relevance at the item's
    current tier weight (the number the rules looked at). Raises ValueError when two items share a key,
    since a change names its item by key.
    """
    _require_aware(now)
    n = len(items)
    if n == 0:
        return []
    if len({i.key for i in items}) != n:
        raise ValueError("item keys must be unique")
    score = scores(items, now)
    # Computed with the same arithmetic a second run would use, so the WARM -> COLD check agrees bit for bit.
    score_if_warm = _score_at(
        items, now, [type_weight(Tier.WARM, i.kind, is_correction=i.is_correction) for i in items]
    )
    days = np.fromiter((days_between(i.last_access, now) for i in items), dtype=np.float64, count=n)
    uses = np.fromiter((i.uses_in_last_7d for i in items), dtype=np.int64, count=n)
    correction = np.fromiter((i.is_correction for i in items), dtype=bool, count=n)
    hot = np.fromiter((i.tier is Tier.HOT for i in items), dtype=bool, count=n)
    warm = np.fromiter((i.tier is Tier.WARM for i in items), dtype=bool, count=n)

    restore = correction & ~hot
    used = ~correction & (uses >= HOT_USES)
    promote = used & ~hot
    decays = ~correction & ~used
    leaves_hot = decays & hot & ((score < WARM_THRESHOLD) | (days >= UNUSED_DAYS))
    to_cold = (decays & warm & (score < COLD_THRESHOLD)) | (leaves_hot & (score_if_warm < COLD_THRESHOLD))
    to_warm = leaves_hot & ~to_cold

    changes: list[TierChange] = []
    for idx in np.flatnonzero(restore | promote | to_cold | to_warm).tolist():
        item = items[idx]
        s = float(score[idx])
        if restore[idx]:
            target, reason = Tier.HOT, _correction_reason(item, s)
        elif promote[idx]:
            target, reason = Tier.HOT, _promotion_reason(item, s)
        elif to_cold[idx]:
            target, reason = Tier.COLD, _archive_reason(item, s, float(score_if_warm[idx]), float(days[idx]))
        else:
            target, reason = Tier.WARM, _demotion_reason(item, s, float(days[idx]))
        changes.append(TierChange(key=item.key, from_tier=item.tier, to_tier=target, score=s, reason=reason))
    return changes


def _score_at(items: Sequence[TierItem], now: datetime, weights: Sequence[float]) -> FloatArray:
    n = len(items)
    return relevance(
        np.fromiter((i.base for i in items), dtype=np.float64, count=n),
        np.fromiter((days_between(i.last_access, now) for i in items), dtype=np.float64, count=n),
        np.fromiter((i.access_count for i in items), dtype=np.float64, count=n),
        np.asarray(weights, dtype=np.float64),
    )


def _require_aware(now: datetime) -> None:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be timezone-aware")


def _formula(item: TierItem, score: float, weight: float, days: float) -> str:
    return (
        f"relevance {score:.4f} = base {item.base:g} x exp(-0.03 x {max(days, 0.0):.1f} days) "
        f"x log2({max(item.access_count, 1)} + 1) x type weight {weight:g}"
    )


def _correction_reason(item: TierItem, score: float) -> str:
    return (
        f"User correction found in {item.tier.value.upper()}: corrections always stay in HOT whatever their "
        f"score (current relevance {score:.4f}), so it moves back to HOT."
    )


def _promotion_reason(item: TierItem, score: float) -> str:
    return (
        f"Used {item.uses_in_last_7d} times in the last {HOT_WINDOW_DAYS} days (threshold {HOT_USES}): "
        f"promoted from {item.tier.value.upper()} to HOT (current relevance {score:.4f})."
    )


def _archive_reason(item: TierItem, score: float, score_if_warm: float, days: float) -> str:
    weight = type_weight(item.tier, item.kind, is_correction=False)
    text = _formula(item, score, weight, days)
    if score >= COLD_THRESHOLD:
        text += (
            f"; once in WARM its weight {TYPE_WEIGHTS['warm']:g} would give {score_if_warm:.4f}, "
            f"below the archive threshold {COLD_THRESHOLD:g}"
        )
    else:
        text += f", below the archive threshold {COLD_THRESHOLD:g}"
    return (
        f"Archived from {item.tier.value.upper()} to COLD after {max(days, 0.0):.1f} days without access: "
        f"{text}. Nothing is deleted; the item stays in cold/archive."
    )


def _demotion_reason(item: TierItem, score: float, days: float) -> str:
    weight = type_weight(item.tier, item.kind, is_correction=False)
    causes: list[str] = []
    if score < WARM_THRESHOLD:
        causes.append(f"{_formula(item, score, weight, days)}, below the HOT threshold {WARM_THRESHOLD:g}")
    if days >= UNUSED_DAYS:
        causes.append(f"unused for {days:.1f} days (limit {UNUSED_DAYS})")
    return f"Demoted from HOT to WARM: {'; and '.join(causes)}."
