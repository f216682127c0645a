"""Time cues: a question about *when* wants the memory that says when.

"When did Caroline go to the support group?" is answered by the turn "I went to a support group
yesterday": the turn dates the event (relative to its session's time, which the memory carries as
``created_at``), and a turn that merely mentions the support group does not. ``asks_when`` recognises such
a question; ``says_when`` marks the texts that carry a time expression (a relative day, a weekday, a
month, a year, "ago", "last week", a clock time).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["asks_when", "says_when"]

_ASKS_WHEN = re.compile(
    r"\bwhen\b|\bwhat (?:date|day|month|year|time)\b|\bwhich (?:date|day|month|year|week)\b|\bhow long ago\b",
    re.IGNORECASE,
)
# "May" counts only capitalised: "may" is far more often the verb.
_MONTHS = "january|february|march|april|(?-i:May)|june|july|august|september|october|november|december"
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_SAYS_WHEN = re.compile(
    rf"\b(?:yesterday|today|tonight|tomorrow|recently|ago|weekend|{_MONTHS}|{_DAYS}|"
    r"(?:last|next|this|past) (?:night|week|month|year|weekend|summer|winter|spring|autumn|fall|"
    rf"{_DAYS})|(?:19|20)\d\d|\d{{1,2}}:\d\d|\d{{1,2}} ?(?:am|pm))\b",
    re.IGNORECASE,
)


def asks_when(query: str) -> bool:
    """True when the query asks for a time: when, what date/day/month/year, which week, how long ago."""
    return _ASKS_WHEN.search(query) is not None


def says_when(texts: Sequence[str]) -> npt.NDArray[np.bool_]:
    """For each text, True when it carries a time expression."""
    return np.fromiter((_SAYS_WHEN.search(t) is not None for t in texts), dtype=np.bool_, count=len(texts))
