from __future__ import annotations

from datetime import UTC, datetime, timedelta

from evolution.algorithms.engine import REVIEW_TASK_TYPE, Outcome
from evolution.algorithms.reflection import rate_drops, repeated_issues, week_patterns

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)


def out(task: str, result: str, days_ago: float, *, issue: str = "", solution: str = "", ref: str = "") -> Outcome:
    return Outcome(
        task_type=task,
        approach="a",
        result=result,  # type: ignore[arg-type]
        lesson="",
        issue=issue,
        solution=solution,
        at=NOW - timedelta(days=days_ago),
        ref=ref or f"sensor:{task}-{days_ago}",
    )


def test_a_success_rate_that_fell_by_a_quarter_or_more_is_a_pattern() -> None:
    rows = [out("deploy", "success", 10 + k) for k in range(4)] + [
        out("deploy", r, k + 1) for k, r in enumerate(["success", "fail", "fail"])
    ]
    ((drop, pattern),) = rate_drops(rows, NOW)
    assert abs(drop - (1.0 - 1 / 3)) < 1e-6
    assert pattern.context == "deploy" and pattern.key == "rate-drop:deploy"
    assert (
        pattern.reflection == "deploy succeeded 1 of 3 times (33%) in the last 7 days, down from 4 of 4 (100%) before."
    )
    assert len(pattern.evidence) == 3


def test_a_small_drop_or_too_few_outcomes_is_no_pattern() -> None:
    # 4 of 5 before, 3 of 5 now: a drop of 0.2 (< 0.25).
    earlier = [out("t", r, 10 + k) for k, r in enumerate(["success"] * 4 + ["fail"])]
    recent = [out("t", r, 1 + k * 0.5) for k, r in enumerate(["success"] * 3 + ["fail"] * 2)]
    assert rate_drops(earlier + recent, NOW) == []
    few = [out("u", "success", 10), out("u", "fail", 1), out("u", "fail", 2), out("u", "fail", 3)]
    assert rate_drops(few, NOW) == []


def test_an_issue_failing_two_tasks_in_the_week_is_a_pattern_with_the_newest_solution_as_lesson() -> None:
    rows = [
        out("build", "fail", 3, issue="Disk full", solution="prune docker images"),
        out("deploy", "fail", 1, issue="disk  FULL!", solution="move logs to /var"),
        out("deploy", "fail", 9, issue="disk full"),
        out("deploy", "success", 1, issue="disk full"),
    ]
    ((repeats, pattern),) = repeated_issues(rows, NOW)
    assert repeats == 2 and pattern.key == "issue:disk full"
    assert pattern.context == "build, deploy"
    assert pattern.lesson == "When 'disk  FULL!' comes up: move logs to /var".replace("  ", " ")


def test_an_issue_without_a_solution_asks_for_one() -> None:
    rows = [out("build", "fail", 1, issue="flaky test"), out("build", "fail", 2, issue="flaky test")]
    ((_, pattern),) = repeated_issues(rows, NOW)
    assert pattern.lesson == "Find and record a fix for 'flaky test' before the next build."


def test_strategy_reviews_and_future_outcomes_are_left_out() -> None:
    rows = [out(REVIEW_TASK_TYPE, "fail", 1, issue="x"), out(REVIEW_TASK_TYPE, "fail", 2, issue="x")]
    rows += [out("b", "fail", -1, issue="y"), out("b", "fail", -2, issue="y")]
    assert week_patterns(rows, NOW) == []


def test_week_patterns_are_at_most_two_issues_first() -> None:
    rows = [out("deploy", "success", 10 + k) for k in range(4)] + [out("deploy", "fail", k + 1) for k in range(3)]
    for issue in ("a", "b", "c"):
        rows += [out("x", "fail", 1, issue=issue), out("x", "fail", 2, issue=issue)]
    got = week_patterns(rows, NOW)
    assert [p.kind for p in got] == ["repeated_issue", "repeated_issue"]
    assert [p.kind for p in week_patterns(rows, NOW, limit=5)][-1] == "rate_drop"
