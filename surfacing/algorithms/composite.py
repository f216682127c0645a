"""Composite surfacing score: how activation, relevance, recency, centrality, anchors, pins and freshness
combine into one rank, and the per-item breakdown that explains it.

Two scoring profiles share every signal:

``calibrated`` (the default of new workspaces): relevance decides, the other signals are bounded priors
that multiply it, so nothing without relevance is lifted and nothing relevant is buried::

    score = relevance * (1 + subject_weight * subject_match) * (1 + time_weight * time_cue)
                      * (1 + activation_weight * activation)
                      * (1 + recency_weight * recency + freshness)
                      * (1 + centrality_weight * centrality)
            + anchor_boost * is_anchor + pin_multiplier * pin_weight

``subject_match`` is query evidence beside relevance: the share of a memory's subject (what it is about:
"dana-editor", a turn's speaker) that the query names; ``time_cue`` is 1 for a memory that says when
(a time expression) when the query asks when. Each factor lies in [1, 1 + weight]: a memory
nobody used for a year keeps at least ``1 / (1 + w_a)`` of the score a warm one gets for the same
relevance, so fading shapes the order without hiding what a query asked for, and no product underflows.

``seed`` (the project's first composite, exactly as it was written; kept as a named profile for comparison
and for workspaces that chose it): router mode

    score = max(activation, floor) * relevance * recency * (1 + centrality_weight * centrality)
            + anchor_boost * is_anchor + pin_multiplier * pin_weight + freshness

and legacy mode ``relevance * recency * max(activation, floor)``. Its ``exp(-age / 24 h)`` recency
underflows to 0 for memories a few years old; rows whose products are equal (0 included) are ordered by
the same product computed in log space, which is the order the formula means.

Legacy mode drops pins, freshness and centrality in both profiles. Mandatory rows (anchors in both modes;
session pins in router mode) come first whatever their score. All arrays are aligned by candidate; every
function is vectorised and returns float64.
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
    "ScoreFactors",
    "ScoreProfile",
    "ScoredCandidates",
    "SurfacingMode",
    "Weights",
    "calibrated_score",
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
_TINY = 1e-300  # log() argument floor: keeps log(0) finite in the seed profile's log-space order


class SurfacingMode(StrEnum):
    LEGACY = "legacy"
    ROUTER = "router"


class ScoreProfile(StrEnum):
    CALIBRATED = "calibrated"
    SEED = "seed"


@dataclass(frozen=True)
class Weights:
    """Tunables of the composite score (a workspace's surfacing settings).

    ``Weights()`` is the seed profile with its own constants; ``activation_weight``, ``recency_weight``,
    ``subject_weight`` and ``time_weight`` are read by the calibrated profile only, ``activation_floor``
    by the seed profile only.
    """

    profile: ScoreProfile = ScoreProfile.SEED
    activation_floor: float = 0.05
    centrality_weight: float = 0.5
    pin_multiplier: float = 0.3
    freshness_max: float = 0.2
    freshness_window_hours: float = 24.0
    recency_time_constant_hours: float = 24.0
    anchor_boost: float = 1.0
    activation_weight: float = 0.0
    recency_weight: float = 0.0
    subject_weight: float = 0.0
    time_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in (
            "activation_floor",
            "centrality_weight",
            "pin_multiplier",
            "freshness_max",
            "anchor_boost",
            "activation_weight",
            "recency_weight",
            "subject_weight",
            "time_weight",
        ):
            value = getattr(self, name)
            if not np.isfinite(value) or value < 0.0:
                raise ValueError(f"{name} must be a finite number >= 0, got {value}")
        for name in ("freshness_window_hours", "recency_time_constant_hours"):
            value = getattr(self, name)
            if not np.isfinite(value) or value <= 0.0:
                raise ValueError(f"{name} must be a finite number > 0, got {value}")


class ScoreFactors(TypedDict):
    """The terms that really made one composite: ``score = base + anchor + pin (+ freshness, seed
    profile)``, ``base = relevance * subject * time * activation * recency * centrality`` (the factors as
    multiplied: the floored activation and the bare recency in the seed profile, which has no subject or
    time factor (1), the bounded ``1 + w * signal`` factors in the calibrated one). ``log_base`` is
    ``ln(base)`` when the base is too small to read (seed profile, old memories), else None."""

    profile: str
    relevance: float
    subject: float
    time: float
    activation: float
    recency: float
    centrality: float
    base: float
    log_base: float | None
    anchor: float
    pin: float
    freshness: float


class ScoreBreakdown(TypedDict):
    """Per-item explanation returned by get_working_context (the API's ``score_breakdown``): the raw
    signals both profiles read, and ``factors``, the terms the active profile multiplied and added."""

    activation: float
    relevance: float
    recency: float
    centrality: float
    anchor_forced: bool
    session_pin_boost: float
    freshness_boost: float
    subject_match: float
    time_cue: float
    factors: ScoreFactors


def _f64(values: npt.ArrayLike) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def recency(age_hours: npt.ArrayLike, time_constant_hours: float = 24.0) -> FloatArray:
    """``exp(-age_hours / time_constant_hours)`` in [0, 1]; unknown age (NaN) gives 0.5.

    Age is hours since ``updated_at`` (else ``created_at``); a negative age (clock skew) counts as 0.
    """
    age = _f64(age_hours)
    unknown = np.isnan(age)
    decayed = np.exp(-np.maximum(np.where(unknown, 0.0, age), 0.0) / time_constant_hours)
    return np.where(unknown, UNKNOWN_AGE_RECENCY, decayed)


def _log_recency(age_hours: npt.ArrayLike, time_constant_hours: float) -> FloatArray:
    """``ln(recency)`` without underflow: ``-age / time_constant`` (ln 0.5 for an unknown age)."""
    age = _f64(age_hours)
    unknown = np.isnan(age)
    return np.where(
        unknown, np.log(UNKNOWN_AGE_RECENCY), -np.maximum(np.where(unknown, 0.0, age), 0.0) / time_constant_hours
    )


def freshness(age_hours: npt.ArrayLike, window_hours: float = 24.0, max_boost: float = 0.2) -> FloatArray:
    """Boost for new items: ``max_boost * (1 - age / window)`` for ``0 <= age < window``, else 0.

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
    """Seed legacy composite: ``relevance * recency * max(activation, floor)``."""
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
    """Seed router composite: ``max(act, floor) * rel * rec * (1 + centrality_weight * centrality)`` plus
    the additive ``anchor`` (already scaled, e.g. 1.0 for an anchor), ``pin_boost`` and ``freshness``."""
    base = np.maximum(_f64(activation), floor) * _f64(relevance) * _f64(recency)
    return base * (1.0 + centrality_weight * _f64(centrality)) + _f64(anchor) + _f64(pin_boost) + _f64(freshness)


def calibrated_score(
    activation: npt.ArrayLike,
    relevance: npt.ArrayLike,
    recency: npt.ArrayLike,
    centrality: npt.ArrayLike,
    freshness: npt.ArrayLike,
    subject_match: npt.ArrayLike,
    time_cue: npt.ArrayLike,
    weights: Weights,
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray, FloatArray, FloatArray]:
    """Calibrated base score and its factors ``(base, f_subject, f_time, f_activation, f_recency,
    f_centrality)``: ``base = relevance * f_subject * f_time * f_activation * f_recency * f_centrality``
    with ``f_subject = 1 + subject_weight * subject_match``, ``f_time = 1 + time_weight * time_cue``,
    ``f_activation = 1 + activation_weight *
    activation``, ``f_recency = 1 + recency_weight * recency + freshness`` and ``f_centrality = 1 +
    centrality_weight * centrality``. Inputs in [0, 1]."""
    f_sub = 1.0 + weights.subject_weight * _f64(subject_match)
    f_time = 1.0 + weights.time_weight * _f64(time_cue)
    f_act = 1.0 + weights.activation_weight * _f64(activation)
    f_rec = 1.0 + weights.recency_weight * _f64(recency) + _f64(freshness)
    f_cen = 1.0 + weights.centrality_weight * _f64(centrality)
    return _f64(relevance) * f_sub * f_time * f_act * f_rec * f_cen, f_sub, f_time, f_act, f_rec, f_cen


def rank(
    composite: npt.ArrayLike, mandatory: npt.ArrayLike, tiebreak: npt.ArrayLike | None = None
) -> npt.NDArray[np.int64]:
    """Row order: mandatory rows first, then composite descending, then ``tiebreak`` descending (when
    given); remaining ties keep index order (stable). NaN scores sort last within their group.
    """
    score = _f64(composite)
    must = np.asarray(mandatory, dtype=np.bool_)
    if score.shape != must.shape:
        raise ValueError(f"composite and mandatory must align, got {score.shape} and {must.shape}")
    keys: list[npt.NDArray[np.generic]] = []
    if tiebreak is not None:
        keys.append(-np.nan_to_num(_f64(tiebreak), nan=-np.inf))
    keys += [-np.nan_to_num(score, nan=-np.inf), ~must]
    # np.lexsort is stable: the last key is primary, equal keys keep their index order.
    return np.lexsort(tuple(keys)).astype(np.int64)


@dataclass(frozen=True, eq=False)
class CandidateSignals:
    """Raw per-candidate inputs, aligned arrays of one length.

    ``activation``: decayed activation in [0, 1]; ``relevance``: fused query relevance in [0, 1];
    ``age_hours``: hours since updated/created (NaN unknown); ``centrality``: normalised PPR in [0, 1]
    (zeros unless deep:multi-hop); ``is_anchor``; ``is_pinned``; ``pin_weight``: the session pin weight
    (ignored where not pinned); ``subject_match``: share of the memory's subject the query names, in
    [0, 1] (None: no subject evidence); ``time_cue``: 1 where the memory says when and the query asks
    when (None: no time evidence).
    """

    activation: FloatArray
    relevance: FloatArray
    age_hours: FloatArray
    centrality: FloatArray
    is_anchor: BoolArray
    is_pinned: BoolArray
    pin_weight: FloatArray
    subject_match: FloatArray | None = None
    time_cue: FloatArray | None = None

    def __post_init__(self) -> None:
        shapes = {
            name: np.shape(getattr(self, name)) for name in self.__dataclass_fields__ if getattr(self, name) is not None
        }
        if len(set(shapes.values())) != 1:
            raise ValueError(f"candidate arrays must align: {shapes}")


@dataclass(frozen=True, eq=False)
class ScoredCandidates:
    """The composite score, every breakdown column as used (after mode rules and anchor overrides), and
    the factors the profile multiplied (``f_*``; ``log_base`` orders rows whose composites are equal)."""

    composite: FloatArray
    activation: FloatArray
    relevance: FloatArray
    recency: FloatArray
    centrality: FloatArray
    anchor_forced: BoolArray
    session_pin_boost: FloatArray
    freshness_boost: FloatArray
    mandatory: BoolArray
    profile: ScoreProfile
    subject_match: FloatArray
    time_cue: FloatArray
    f_subject: FloatArray
    f_time: FloatArray
    f_activation: FloatArray
    f_recency: FloatArray
    f_centrality: FloatArray
    base: FloatArray
    log_base: FloatArray
    anchor: FloatArray

    def order(self) -> npt.NDArray[np.int64]:
        """``rank`` of these candidates (ties of the composite broken by the base in log space)."""
        return rank(self.composite, self.mandatory, self.log_base)

    def breakdown(self, row: int) -> ScoreBreakdown:
        """JSON-ready explanation of one candidate's score."""
        base = float(self.base[row])
        log_base = float(self.log_base[row])
        # A base of no relevance at all has no meaningful log; one too small to read shows it.
        readable = base >= 1e-6 or self.relevance[row] <= 0.0
        seed = self.profile is ScoreProfile.SEED
        return ScoreBreakdown(
            activation=float(self.activation[row]),
            relevance=float(self.relevance[row]),
            recency=float(self.recency[row]),
            centrality=float(self.centrality[row]),
            anchor_forced=bool(self.anchor_forced[row]),
            session_pin_boost=float(self.session_pin_boost[row]),
            freshness_boost=float(self.freshness_boost[row]),
            subject_match=float(self.subject_match[row]),
            time_cue=float(self.time_cue[row]),
            factors=ScoreFactors(
                profile=self.profile.value,
                relevance=float(self.relevance[row]),
                subject=float(self.f_subject[row]),
                time=float(self.f_time[row]),
                activation=float(self.f_activation[row]),
                recency=float(self.f_recency[row]),
                centrality=float(self.f_centrality[row]),
                base=base,
                log_base=None if readable else log_base,
                anchor=float(self.anchor[row]),
                pin=float(self.session_pin_boost[row]),
                freshness=float(self.freshness_boost[row]) if seed else 0.0,
            ),
        )


def score_candidates(
    signals: CandidateSignals, *, mode: SurfacingMode, weights: Weights | None = None
) -> ScoredCandidates:
    """Apply the scoring rules of ``weights.profile`` for ``mode`` to all candidates at once.

    Anchors are forced in both modes: relevance and recency 1, ``anchor_forced`` True, mandatory; in
    router mode they also add ``anchor_boost``. Router mode adds pins (mandatory, ``pin_weight *
    pin_multiplier``), freshness and centrality; legacy mode reports those three as 0 and does not force
    pins. Activation in the breakdown is the decayed value before any floor or weight.
    """
    w = weights or Weights()
    anchor = np.asarray(signals.is_anchor, dtype=np.bool_)
    activation = np.clip(np.nan_to_num(_f64(signals.activation), nan=0.0), 0.0, 1.0)
    relevance = np.where(anchor, 1.0, np.clip(np.nan_to_num(_f64(signals.relevance), nan=0.0), 0.0, 1.0))
    rec = np.where(anchor, 1.0, recency(signals.age_hours, w.recency_time_constant_hours))
    zeros = np.zeros_like(activation)
    router = mode is SurfacingMode.ROUTER
    pinned = np.asarray(signals.is_pinned, dtype=np.bool_) if router else np.zeros_like(anchor)
    centrality = np.clip(np.nan_to_num(_f64(signals.centrality), nan=0.0), 0.0, 1.0) if router else zeros
    pins = np.where(pinned, pin_boost(np.nan_to_num(_f64(signals.pin_weight), nan=0.0), w.pin_multiplier), 0.0)
    fresh = freshness(signals.age_hours, w.freshness_window_hours, w.freshness_max) if router else zeros
    anchor_add = np.where(anchor, w.anchor_boost, 0.0) if router else zeros
    subject = zeros if signals.subject_match is None else np.clip(np.nan_to_num(_f64(signals.subject_match)), 0, 1)
    time_cue = zeros if signals.time_cue is None else np.clip(np.nan_to_num(_f64(signals.time_cue)), 0, 1)
    if w.profile is ScoreProfile.CALIBRATED:
        base, f_sub, f_time, f_act, f_rec, f_cen = calibrated_score(
            activation, relevance, rec, centrality, fresh, subject, time_cue, w
        )
        composite = base + anchor_add + pins
        with np.errstate(divide="ignore"):
            log_base = np.log(np.maximum(base, _TINY))
    else:
        f_sub = f_time = np.ones_like(activation)
        f_act = np.maximum(activation, w.activation_floor)
        f_cen = 1.0 + w.centrality_weight * centrality
        f_rec = rec
        base = f_act * relevance * rec * f_cen
        composite = base + anchor_add + pins + fresh
        log_rec = np.where(anchor, 0.0, _log_recency(signals.age_hours, w.recency_time_constant_hours))
        log_base = np.log(f_act) + np.log(np.maximum(relevance, _TINY)) + log_rec + np.log(f_cen)
    return ScoredCandidates(
        composite=composite,
        activation=activation,
        relevance=relevance,
        recency=rec,
        centrality=centrality,
        anchor_forced=anchor,
        session_pin_boost=pins,
        freshness_boost=fresh,
        mandatory=anchor | pinned,
        profile=w.profile,
        subject_match=subject,
        time_cue=time_cue,
        f_subject=f_sub,
        f_time=f_time,
        f_activation=f_act,
        f_recency=f_rec,
        f_centrality=f_cen,
        base=base,
        log_base=log_base,
        anchor=anchor_add,
    )
