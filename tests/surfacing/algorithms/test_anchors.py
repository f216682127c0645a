from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from surfacing.algorithms.anchors import (
    AnchorInfo,
    DriftKind,
    DriftWarning,
    anchor_drift_warnings,
    describe_duration,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
LAST_WEEK = NOW - timedelta(days=7)


def test_a_clean_anchor_raises_no_warning() -> None:
    assert anchor_drift_warnings([AnchorInfo("a1", LAST_WEEK, subject="db")], NOW) == []


def test_conflicting_anchor_is_reported_with_its_partners() -> None:
    [warning] = anchor_drift_warnings([AnchorInfo("a1", LAST_WEEK, conflicts_with=("m2", "m3", "m2"))], NOW)
    assert warning.kind is DriftKind.CONFLICT
    assert warning.related_ids == ("m2", "m3")
    assert warning.message == "anchor a1 conflicts with 2 memories (m2, m3); resolve the conflict before relying on it"


def test_single_conflict_uses_the_singular() -> None:
    [warning] = anchor_drift_warnings([AnchorInfo("a1", LAST_WEEK, conflicts_with=("m2",))], NOW)
    assert "with 1 memory (m2)" in warning.message


def test_drift_flags_are_quoted_in_the_message() -> None:
    flags = ("preference[editor] changed 3x in last 30d", "preference[theme] changed 4x in last 30d")
    [warning] = anchor_drift_warnings([AnchorInfo("a1", LAST_WEEK, drift_flags=flags)], NOW)
    assert warning.kind is DriftKind.DRIFT_FLAG
    assert warning.message == f"anchor a1 is flagged for drift: {flags[0]}; {flags[1]}"


def test_superseded_anchor_names_its_successor() -> None:
    [warning] = anchor_drift_warnings([AnchorInfo("a1", LAST_WEEK, superseded_by="m9")], NOW)
    assert warning == DriftWarning("a1", DriftKind.SUPERSEDED, "anchor a1 has been superseded by memory m9", ("m9",))


def test_a_newer_memory_on_the_same_subject_makes_the_anchor_suspect() -> None:
    anchor = AnchorInfo(
        "a1",
        LAST_WEEK,
        subject="db",
        newest_same_subject_at=NOW - timedelta(hours=5),
        newest_same_subject_id="m7",
    )
    [warning] = anchor_drift_warnings([anchor], NOW)
    assert warning.kind is DriftKind.NEWER_SUBJECT
    assert warning.related_ids == ("m7",)
    assert warning.message == (
        "anchor a1 may be stale: memory m7 about subject 'db' was updated 6 days after it (5 hours ago)"
    )


@pytest.mark.parametrize(
    ("subject", "newer_at"),
    [
        ("db", LAST_WEEK),  # same instant is not newer
        ("db", LAST_WEEK - timedelta(days=1)),
        (None, NOW),  # no subject slot, nothing to compare
        ("db", None),
    ],
)
def test_same_subject_memory_that_is_not_newer_is_ignored(subject: str | None, newer_at: datetime | None) -> None:
    anchor = AnchorInfo("a1", LAST_WEEK, subject=subject, newest_same_subject_at=newer_at)
    assert anchor_drift_warnings([anchor], NOW) == []


def test_newer_subject_without_id_or_from_the_future_still_reads_well() -> None:
    anchor = AnchorInfo("a1", LAST_WEEK, subject="db", newest_same_subject_at=NOW + timedelta(minutes=3))
    [warning] = anchor_drift_warnings([anchor], NOW)
    assert warning.related_ids == ()
    assert warning.message.endswith("a newer memory about subject 'db' was updated 7 days after it (just now)")


def test_warnings_follow_anchor_order_then_kind_order_and_repeat_anchors_count_once() -> None:
    a1 = AnchorInfo(
        "a1",
        LAST_WEEK,
        subject="s",
        conflicts_with=("m1",),
        drift_flags=("f",),
        superseded_by="m2",
        newest_same_subject_at=NOW,
    )
    a2 = AnchorInfo("a2", LAST_WEEK, superseded_by="m3")
    warnings = anchor_drift_warnings([a2, a1, a2], NOW)
    assert [(w.anchor_id, w.kind) for w in warnings] == [
        ("a2", DriftKind.SUPERSEDED),
        ("a1", DriftKind.CONFLICT),
        ("a1", DriftKind.DRIFT_FLAG),
        ("a1", DriftKind.SUPERSEDED),
        ("a1", DriftKind.NEWER_SUBJECT),
    ]


def test_warning_serialises_for_the_api() -> None:
    warning = DriftWarning("a1", DriftKind.SUPERSEDED, "msg", ("m2",))
    assert warning.as_dict() == {"anchor_id": "a1", "kind": "superseded", "message": "msg", "related_ids": ["m2"]}


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(days=1), "1 day"),
        (timedelta(days=3, hours=20), "3 days"),
        (timedelta(hours=1, minutes=59), "1 hour"),
        (timedelta(minutes=12), "12 minutes"),
        (timedelta(seconds=59), "moments"),
    ],
)
def test_durations_are_worded_coarsely(delta: timedelta, text: str) -> None:
    assert describe_duration(delta) == text
