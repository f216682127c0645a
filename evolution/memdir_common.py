"""What the export and the import of the memory-evolution directory share: the evolver of the record that
keeps a workspace's lineage, the UTC day of a moment, a section of a memory's metadata, the ids an export derives
for a rule, a one-line text field of a payload, and the decay-score keys of corrections (``correction:<date>#<n>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any, Final

from evolution.algorithms import memdir
from evolution.engine_inputs import one_line
from memories.models import Memory, MemoryType

LINEAGE_EVOLVER: Final = "memdir"
#: The memory types a directory holds as rules (a preference with ``kind: preference``).
RULE_TYPES: Final = (MemoryType.STRATEGY, MemoryType.PREFERENCE)
"""Evolver name of the import record that keeps a workspace's lineage (the first import names its origin)."""


def utc_day(moment: datetime) -> date:
    """The UTC calendar day of ``moment`` (the directory's dates are UTC days)."""
    return moment.astimezone(UTC).date()


def meta_section(memory: Memory, key: str) -> dict[str, Any]:
    """``memory.metadata[key]`` when it is an object, else an empty dict."""
    value = memory.metadata.get(key) if isinstance(memory.metadata, dict) else None
    return value if isinstance(value, dict) else {}


def derived_rule_ids(memory: Memory) -> tuple[str, str]:
    """The ids an export gives a rule that has no stored directory id of its own (a rule made here, by an
    approval): ``R-`` and the first 12 hex digits of the memory's id, or all 32 when the short one is taken.
    An import recognises both as this rule, so a directory exported here and imported back adds nothing."""
    return f"R-{memory.id.hex[:12]}", f"R-{memory.id.hex}"


def text_field(payload: Mapping[str, Any], key: str) -> str:
    """``payload[key]`` on one line when it is a string, else the empty string."""
    value = payload.get(key)
    return one_line(value) if isinstance(value, str) else ""


def correction_keys(corrections: Sequence[memdir.Correction]) -> list[str]:
    """``correction:<date>#<n>`` of each correction, n counting that day's corrections in order from 1."""
    seen: dict[date, int] = {}
    keys: list[str] = []
    for c in corrections:
        seen[c.date] = seen.get(c.date, 0) + 1
        keys.append(f"correction:{c.date.isoformat()}#{seen[c.date]}")
    return keys
