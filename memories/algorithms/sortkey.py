"""An index-friendly key for ordering memories by their activation *now*.

decayed(t) = s * 2^(-(t - b) / h) for stored score s, last boost b and half-life h (hours). Taking
logs, ln decayed(t) = ln s + ln2 * b / h - ln2 * t / h. For a common h the last term is the same for
every memory, so ordering by `ln s + ln2 * b / h` equals ordering by activation at any instant t.
The key is exact for equal half-lives (the default) and a close approximation otherwise.
"""

from __future__ import annotations

import math
from datetime import datetime

_EPOCH_HOURS_SCALE = 1.0 / 3600.0
_MIN_SCORE = 1e-12


def activation_sort_key(score: float, last_boost_at: datetime | None, half_life_hours: float) -> float:
    """Return ln(score) + ln2 * hours_since_epoch(last_boost_at) / half_life_hours.

    A memory that never decays (no last boost, or half-life <= 0) keeps its score forever, so its key
    is placed by its score against the present: it is computed as if boosted now (callers pass the
    write time as `last_boost_at` in that case).
    """
    if half_life_hours <= 0:
        return math.log(_MIN_SCORE)
    hours = last_boost_at.timestamp() * _EPOCH_HOURS_SCALE if last_boost_at is not None else 0.0
    return math.log(max(score, _MIN_SCORE)) + math.log(2.0) * hours / half_life_hours
