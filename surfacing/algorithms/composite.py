"""Composite surfacing score: how activation, relevance, recency, centrality, anchors, pins and freshness
combine into one rank, and the per-item breakdown that explains it.

Router mode (seed 001):

    score = max(activation, floor) * relevance * recency * (1 + centrality_weight * centrality)
            + anchor_boost * is_anchor + pin_multiplier * pin_weight + freshness

Legacy mode: ``relevance * recency * max(activation, floor)``; no pins, freshness or centrality.

Mandatory rows (anchors in both modes; session pins in router mode) come first whatever their score.
All arrays are aligned by candidate; every function is vectorised and returns float64.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TypedDict

import numpy as np
import numpy.typing as npt

__all__ = [
    "CandidateSignals",
    "ScoreBreakdown",
    "ScoredCandidates",
    "SurfacingMode",
    "Weights",
    "freshness",
    "legacy_score",
    "pin_boost",
    "rank",
    "recency",
    "router_score",
    "score_candidates",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

UNKNOWN_AGE_RECENCY = 0.5


class SurfacingMode(StrEnum):
    LEGACY = "legacy"
    ROUTER = "router"


@dataclass(frozen=True)
class Weights:
    """Tunables of the composite score (a workspace's surfacing settings), defaulting to the seed values."""

    activation_floor: float = 0.05
    centrality_weight: float = 0.5
    pin_multiplier: float = 0.3
    freshness_max: float = 0.2
    freshness_window_hours: float = 24.0
    recency_time_constant_hours: float = 24.0
    anchor_boost: float = 1.0

    def __post_init__(self) -> None:
        for name in ("activation_floor", "centrality_weight", "pin_multiplier", "freshness_max", "anchor_boost"):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0.0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("freshness_window_hours", "recency_time_constant_hours"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} must be a finite number > 0, got {value}")


class ScoreBreakdown(TypedDict):
    """Per-item explanation returned by get_working_context (the API's ``score_breakdown``)."""

    activation: float
    relevance: float
    recency: float
    centrality: float
    anchor_forced: bool
    session_pin_boost: float
    freshness_boost: float


def _f64(values: npt.ArrayLike) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def recency(age_hours: npt.ArrayLike, time_constant_hours: float = 24.0) -> FloatArray:
    """``exp(-age_hours / time_constant_hours)`` in (0, 1]; unknown age (NaN) gives 0.5.

    Age is hours since ``updated_at`` (else ``created_at``); a negative age (clock skew) counts as 0.
    """
    age = _f64(age_hours)
    unknown = np.isnan(age)
    decayed = np.exp(-np.maximum(np.where(unknown, 0.0, age), 0.0) / time_constant_hours)
    return np.where(unknown, UNKNOWN_AGE_RECENCY, decayed)


def freshness(age_hours: npt.ArrayLike, window_hours: float = 24.0, max_boost: float = 0.2) -> FloatArray:
    """Additive boost for new items: ``max_boost * (1 - age / window)`` for ``0 <= age < window``, else 0.

    Unknown age (NaN) gives 0; a negative age counts as 0 (full boost).
    """
    age = np.maximum(_f64(age_hours), 0.0)
    fresh = age < window_hours  # False for NaN
    return np.where(fresh, max_boost * (1.0 - np.where(fresh, age, 0.0) / window_hours), 0.0)


def pin_boost(pin_weight: npt.ArrayLike, multiplier: float = 0.3) -> FloatArray:
    """Session pin additive: ``pin_weight * multiplier`` (0 for rows that are not pinned)."""
    return _f64(pin_weight) * multiplier


def legacy_score(
    activation: npt.ArrayLike, relevance: npt.ArrayLike, recency: npt.ArrayLike, floor: float = 0.05
) -> FloatArray:
    """Legacy composite: ``relevance * recency * max(activation, floor)``."""
    return _f64(relevance) * _f64(recency) * np.maximum(_f64(activation), floor)


def router_score(
    activation: npt.ArrayLike,
    relevance: npt.ArrayLike,
    recency: npt.ArrayLike,
    centrality: npt.ArrayLike,
    anchor: npt.ArrayLike,
    pin_boost: npt.ArrayLike,
    freshness: npt.ArrayLike,
    centrality_weight: float = 0.5,
    floor: float = 0.05,
) -> FloatArray:
    """Router composite: ``max(act, floor) * rel * rec * (1 + centrality_weight * centrality)`` plus the
    additive ``anchor`` (already scaled, e.g. 1.0 for an anchor), ``pin_boost`` and ``freshness``."""
    base = np.maximum(_f64(activation), floor) * _f64(relevance) * _f64(recency)
    return base * (1.0 + centrality_weight * _f64(centrality)) + _f64(anchor) + _f64(pin_boost) + _f64(freshness)


def rank(composite: npt.ArrayLike, mandatory: npt.ArrayLike) -> npt.NDArray[np.int64]:
    """Row order: mandatory rows first, then composite descending; ties keep index order (stable).

    NaN scores sort last within their group.
    """
    score = _f64(composite)
    must = np.asarray(mandatory, dtype=np.bool_)
    if score.shape != must.shape:
        raise ValueError(f"composite and mandatory must align, got {score.shape} and {must.shape}")
    # np.lexsort is stable: the last key is primary, equal keys keep their index order.
    return np.lexsort((-np.nan_to_num(score, nan=-np.inf), ~must)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class CandidateSignals:
    """Raw per-candidate inputs, aligned arrays of one length.

    ``activation``: decayed activation in [0, 1]; ``relevance``: fused query relevance in [0, 1];
    ``age_hours``: hours since updated/created (NaN unknown); ``centrality``: normalised PPR in [0, 1]
    (zeros unless deep:multi-hop); ``is_anchor``; ``is_pinned``; ``pin_weight``: the session pin weight
    (ignored where not pinned).
    """

    activation: FloatArray
    relevance: FloatArray
    age_hours: FloatArray
    centrality: FloatArray
    is_anchor: BoolArray
    is_pinned: BoolArray
    pin_weight: FloatArray

    def __post_init__(self) -> None:
        shapes = {name: np.shape(getattr(self, name)) for name in self.__dataclass_fields__}
        if len(set(shapes.values())) != 1:
            raise ValueError(f"candidate arrays must align: {shapes}")


@dataclass(frozen=True, eq=False)
class ScoredCandidates:
    """The composite score and every breakdown column as used (after mode rules and anchor overrides)."""

    composite: FloatArray
    activation: FloatArray
    relevance: FloatArray
    recency: FloatArray
    centrality: FloatArray
    anchor_forced: BoolArray
    session_pin_boost: FloatArray
    freshness_boost: FloatArray
    mandatory: BoolArray

    def order(self) -> npt.NDArray[np.int64]:
        """``rank`` of these candidates."""
        return rank(self.composite, self.mandatory)

    def breakdown(self, row: int) -> ScoreBreakdown:
        """JSON-ready explanation of one candidate's score."""
        return ScoreBreakdown(
            activation=float(self.activation[row]),
            relevance=float(self.relevance[row]),
            recency=float(self.recency[row]),
            centrality=float(self.centrality[row]),
            anchor_forced=bool(self.anchor_forced[row]),
            session_pin_boost=float(self.session_pin_boost[row]),
            freshness_boost=float(self.freshness_boost[row]),
        )


def score_candidates(
    signals: CandidateSignals, *, mode: SurfacingMode, weights: Weights | None = None
) -> ScoredCandidates:
    """Apply the seed's scoring rules for ``mode`` to all candidates at once.

    Anchors are forced in both modes: relevance and recency 1, ``anchor_forced`` True, mandatory; in
    router mode they also add ``anchor_boost``. Router mode adds pins (mandatory, ``pin_weight *
    pin_multiplier``), freshness and centrality; legacy mode reports those three as 0 and does not force
    pins. Activation in the breakdown is the value before the floor (the floor only applies inside the
    product).
    """
    w = weights or Weights()
    anchor = np.asarray(signals.is_anchor, dtype=np.bool_)
    activation = np.clip(np.nan_to_num(_f64(signals.activation), nan=0.0), 0.0, 1.0)
    relevance = np.where(anchor, 1.0, np.clip(np.nan_to_num(_f64(signals.relevance), nan=0.0), 0.0, 1.0))
    rec = np.where(anchor, 1.0, recency(signals.age_hours, w.recency_time_constant_hours))
    zeros = np.zeros_like(activation)
    if mode is SurfacingMode.LEGACY:
        composite = legacy_score(activation, relevance, rec, w.activation_floor)
        return ScoredCandidates(composite, activation, relevance, rec, zeros, anchor, zeros, zeros, anchor.copy())
    pinned = np.asarray(signals.is_pinned, dtype=np.bool_)
    centrality = np.clip(np.nan_to_num(_f64(signals.centrality), nan=0.0), 0.0, 1.0)
    pins = np.where(pinned, pin_boost(np.nan_to_num(_f64(signals.pin_weight), nan=0.0), w.pin_multiplier), 0.0)
    fresh = freshness(signals.age_hours, w.freshness_window_hours, w.freshness_max)
    composite = router_score(
        activation,
        relevance,
        rec,
        centrality,
        np.where(anchor, w.anchor_boost, 0.0),
        pins,
        fresh,
        centrality_weight=w.centrality_weight,
        floor=w.activation_floor,
    )
    return ScoredCandidates(composite, activation, relevance, rec, centrality, anchor, pins, fresh, anchor | pinned)
