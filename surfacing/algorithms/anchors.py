"""Anchor drift warnings.

Anchors are memories of type ``anchor`` that every working context force-includes. Because they are
returned whatever the query, a stale anchor misleads every caller, so get_working_context reports, in
band, anchors that may no longer be true:

- ``conflict``: the anchor is in an unresolved conflict (``conflicts_with`` is not empty);
- ``drift_flag``: an evolver annotated it with drift flags (e.g. a preference that keeps changing);
- ``superseded``: a newer memory superseded it (``superseded_by`` is set);
- ``newer_subject``: another memory about the same subject was updated after the anchor
  (the caller passes the newest such memory's ``updated_at`` and id).

Warnings come in anchor order and, per anchor, in the order above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

__all__ = ["AnchorInfo", "DriftKind", "DriftWarning", "anchor_drift_warnings", "describe_duration"]


class DriftKind(StrEnum):
    CONFLICT = "conflict"
    DRIFT_FLAG = "drift_flag"
    SUPERSEDED = "superseded"
    NEWER_SUBJECT = "newer_subject"


@dataclass(frozen=True)
class AnchorInfo:
    """What the drift check needs to know about one anchor (timezone-aware datetimes)."""

    id: str
    updated_at: datetime
    subject: str | None = None
    conflicts_with: tuple[str, ...] = ()
    drift_flags: tuple[str, ...] = ()
    superseded_by: str | None = None
    newest_same_subject_at: datetime | None = None
    newest_same_subject_id: str | None = None


@dataclass(frozen=True)
class DriftWarning:
    """One reason to distrust an anchor; ``related_ids`` are the other memories involved."""

    anchor_id: str
    kind: DriftKind
    message: str
    related_ids: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """JSON-ready form for the API's ``drift_warnings``."""
        return {
            "anchor_id": self.anchor_id,
            "kind": self.kind.value,
            "message": self.message,
            "related_ids": list(self.related_ids),
        }


def describe_duration(delta: timedelta) -> str:
    """Coarse human wording of a duration: ``"3 days"``, ``"1 hour"``, ``"12 minutes"``, ``"moments"``."""
    seconds = delta.total_seconds()
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        count = int(seconds // size)
        if count >= 1:
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return "moments"


def _plural(count: int, word: str, plural: str) -> str:
    return f"{count} {word if count == 1 else plural}"


def _warnings_for(anchor: AnchorInfo, now: datetime) -> list[DriftWarning]:
    out: list[DriftWarning] = []
    if anchor.conflicts_with:
        ids = tuple(dict.fromkeys(anchor.conflicts_with))
        message = (
            f"anchor {anchor.id} conflicts with {_plural(len(ids), 'memory', 'memories')} "
            f"({', '.join(ids)}); resolve the conflict before relying on it"
        )
        out.append(DriftWarning(anchor.id, DriftKind.CONFLICT, message, ids))
    if anchor.drift_flags:
        message = f"anchor {anchor.id} is flagged for drift: {'; '.join(anchor.drift_flags)}"
        out.append(DriftWarning(anchor.id, DriftKind.DRIFT_FLAG, message))
    if anchor.superseded_by:
        message = f"anchor {anchor.id} has been superseded by memory {anchor.superseded_by}"
        out.append(DriftWarning(anchor.id, DriftKind.SUPERSEDED, message, (anchor.superseded_by,)))
    newer_at = anchor.newest_same_subject_at
    if anchor.subject and newer_at is not None and newer_at > anchor.updated_at:
        other = anchor.newest_same_subject_id
        who = f"memory {other}" if other else "a newer memory"
        ago = "just now" if newer_at >= now else f"{describe_duration(now - newer_at)} ago"
        message = (
            f"anchor {anchor.id} may be stale: {who} about subject '{anchor.subject}' was updated "
            f"{describe_duration(newer_at - anchor.updated_at)} after it ({ago})"
        )
        out.append(DriftWarning(anchor.id, DriftKind.NEWER_SUBJECT, message, (other,) if other else ()))
    return out


def anchor_drift_warnings(anchors: Sequence[AnchorInfo], now: datetime) -> list[DriftWarning]:
    """All drift warnings for ``anchors`` (an anchor listed twice is checked once). ``now`` words ages."""
    seen: set[str] = set()
    warnings: list[DriftWarning] = []
    for anchor in anchors:
        if anchor.id in seen:
            continue
        seen.add(anchor.id)
        warnings.extend(_warnings_for(anchor, now))
    return warnings
