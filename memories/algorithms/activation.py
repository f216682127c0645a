"""Activation: how warm a memory is, decayed at read time and nudged up by use.

Stored per memory: ``score`` (the value at ``last_boost_at``), ``last_boost_at``, ``half_life_hours`` and
``boost_count``. The stored score never decays in the database between boosts; every reader applies

    score(now) = clamp01(stored * exp(-ln 2 * hours_since_last_boost / half_life_hours))

so a memory untouched for one half-life reads at half its stored value. A half-life <= 0 means "decays
instantly" and reads as 0 (this rule is checked before the never-boosted rule). A memory that was never
boosted (``last_boost_at`` is None) reads as its stored value. A boost timestamp in the future (clock skew
between writers) is treated as "boosted just now" so skew can never amplify a score.

Boosts add to the *stored* value without decaying it first (``boosted``); the caller then sets
``last_boost_at = now`` and ``boost_count += 1``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

__all__ = [
    "ACTIVATION_FLOOR",
    "BOOST_CO_RETRIEVED",
    "BOOST_DIRECT",
    "BOOST_SURFACED",
    "DEFAULT_ACTIVATION",
    "DEFAULT_HALF_LIFE_HOURS",
    "boosted",
    "clamp01",
    "decayed_activation",
    "decayed_activation_array",
    "hours_since",
    "project_decay_curve",
    "replay_activation",
]

FloatArray = npt.NDArray[np.float64]

DEFAULT_ACTIVATION = 0.5
"""Score of a new memory."""
DEFAULT_HALF_LIFE_HOURS = 720.0
"""30 days: an untouched memory reads at half its stored score after this long."""
ACTIVATION_FLOOR = 0.05
"""Lowest activation used wherever activation multiplies a score, so a cold item can still surface."""
BOOST_DIRECT = 0.05
"""Added on direct retrieval (search, get)."""
BOOST_SURFACED = 0.02
"""Added when the memory is surfaced in a working context."""
BOOST_CO_RETRIEVED = 0.01
"""Added to a co-retrieved partner."""

_LN2 = math.log(2.0)


def clamp01(value: float) -> float:
    """Clamp ``value`` to [0, 1]; NaN becomes 0 so a corrupt score can never rank."""
    if math.isnan(value):
        return 0.0
    return min(1.0, max(0.0, value))


def hours_since(then: datetime | None, now: datetime) -> float:
    """Hours from ``then`` to ``now`` (timezone-aware datetimes); NaN when ``then`` is None.

    Negative when ``then`` is in the future; the decay functions treat that as 0.
    """
    if then is None:
        return math.nan
    return (now - then).total_seconds() / 3600.0


def decayed_activation(stored: float, last_boost_at: datetime | None, half_life_hours: float, now: datetime) -> float:
    """Activation read at ``now``: ``clamp01(stored * 2 ** (-hours_since_last_boost / half_life_hours))``.

    ``half_life_hours`` <= 0 gives 0; ``last_boost_at`` None gives ``clamp01(stored)``. Unitless, in [0, 1].
    """
    if half_life_hours <= 0.0:
        return 0.0
    if last_boost_at is None:
        return clamp01(stored)
    hours = max(0.0, hours_since(last_boost_at, now))
    return clamp01(stored * math.exp(-_LN2 * hours / half_life_hours))


def decayed_activation_array(
    stored: npt.ArrayLike, hours_since_boost: npt.ArrayLike, half_life_hours: npt.ArrayLike
) -> FloatArray:
    """Vectorised ``decayed_activation``; arrays broadcast together.

    ``hours_since_boost`` is NaN for memories never boosted (they read as their stored value); negative
    hours count as 0; ``half_life_hours`` <= 0 gives 0. Returns float64 in [0, 1].
    """
    s = np.asarray(stored, dtype=np.float64)
    h = np.asarray(hours_since_boost, dtype=np.float64)
    hl = np.asarray(half_life_hours, dtype=np.float64)
    never = np.isnan(h)
    dead = hl <= 0.0
    # Substitute safe values where the formula is not used so no warning (divide by zero, NaN) is raised.
    safe_h = np.where(never, 0.0, np.maximum(h, 0.0))
    safe_hl = np.where(dead, 1.0, hl)
    decayed = s * np.exp(-_LN2 * safe_h / safe_hl)
    out = np.where(dead, 0.0, decayed)
    result: FloatArray = np.clip(np.nan_to_num(out, nan=0.0), 0.0, 1.0)
    return result


def boosted(stored: float, delta: float) -> float:
    """New stored score after a boost: ``clamp01(stored + delta)``; the stored value is not decayed first."""
    return clamp01(stored + delta)


def project_decay_curve(
    stored: float, hours_since_boost: float | None, half_life_hours: float, days: int = 90
) -> FloatArray:
    """Activation on each of the next ``days`` days if the memory is not touched again (for a chart).

    Element ``i`` is the activation ``i`` days after now (element 0 is the value now), i.e.
    ``decayed_activation`` at ``hours_since_boost + 24 * i`` hours. A memory never boosted
    (``hours_since_boost`` None or NaN) has no decay clock, so its curve is flat at the stored value.
    """
    if days < 0:
        raise ValueError(f"days must be >= 0, got {days}")
    start = math.nan if hours_since_boost is None else float(hours_since_boost)
    hours = start + 24.0 * np.arange(days, dtype=np.float64)
    return decayed_activation_array(np.full(days, stored, dtype=np.float64), hours, half_life_hours)


def replay_activation(
    stored: float,
    last_boost_at: datetime | None,
    half_life_hours: float,
    boosts: Sequence[tuple[datetime, float]],
    start: datetime,
    end: datetime,
    *,
    samples_per_gap: int = 12,
) -> list[tuple[datetime, float]]:
    """Activation over [start, end] replayed from the stored state and the boosts that led to it (a chart).

    ``boosts`` are (time, delta) of the memory's boosts, any order. Walking back from ``stored`` (the score
    after the last boost), each boost's delta is taken off, which gives the stored score after every boost
    and before the first one; forward again, activation reads ``stored_i * 2 ** (-hours since boost i /
    half_life_hours)`` between boosts (``decayed_activation``), flat before the first (no decay clock yet)
    and jumping at each boost; the stored score decays from ``last_boost_at`` even when no known boost set it
    then, and a stored score dated after the last known boost (materialised by the decay sweep) is that
    boost's score decayed to then. Boosts after ``last_boost_at`` (not flushed yet) are left out. Returns
    (time, activation in [0, 1]) points in time order, ``samples_per_gap`` per stretch so curves read as
    curves; a boost gives two points at its time (before and after). Boosts the caller does not know of
    (older than its window) make the start read higher than it was, never the end.
    """
    if end < start:
        raise ValueError("end must not be before start")
    flushed = sorted(
        (t, float(d)) for t, d in boosts if last_boost_at is not None and t <= last_boost_at and t >= start
    )
    after: list[float] = []
    score = clamp01(stored)
    if flushed and last_boost_at is not None and last_boost_at > flushed[-1][0] and half_life_hours > 0.0:
        # The stored score dates from after the last known boost (the decay sweep materialised it and moved
        # last_boost_at to its own time): the score right after that boost is the stored one undecayed.
        hours = (last_boost_at - flushed[-1][0]).total_seconds() / 3600.0
        score = clamp01(score * math.exp(_LN2 * hours / half_life_hours))
    for _, delta in reversed(flushed):
        after.append(score)
        score = clamp01(score - delta)
    after.reverse()
    points: list[tuple[datetime, float]] = [(start, score)]
    clock: datetime | None = None  # time of the last boost so far
    level = score  # stored score so far

    def read(at: datetime) -> float:
        return level if clock is None else decayed_activation(level, clock, half_life_hours, at)

    def stretch(frm: datetime, to: datetime) -> None:
        if clock is not None and to > frm:
            step = (to - frm) / samples_per_gap
            points.extend((frm + step * i, read(frm + step * i)) for i in range(1, samples_per_gap))
        points.append((to, read(to)))

    cursor = start
    for (at, _), value in zip(flushed, after, strict=True):
        stretch(cursor, at)
        clock, level, cursor = at, value, at
        points.append((at, level))
    if last_boost_at is not None and (clock is None or clock < last_boost_at):
        # The stored score dates from last_boost_at even when no known boost explains it (set at creation or
        # by an import): it decays from then on.
        if last_boost_at > cursor:
            stretch(cursor, min(last_boost_at, end))
            cursor = min(last_boost_at, end)
        clock, level = last_boost_at, clamp01(stored)
    stretch(cursor, end)
    return points
