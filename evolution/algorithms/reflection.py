"""Patterns of the week the dream proposes as reflections for a person to confirm.

The dream already logs the task type failing most (or succeeding every time) on its own; these are the
patterns that need a person's judgement before they join the reflection log:

* **rate drop**: a task type whose success rate in the window (7 days up to ``now``) is at least
  ``min_drop`` (0.25) below its rate before the window, with at least ``min_outcomes`` (3) outcomes on each
  side. rate = successes / (successes + failures).
* **repeated issue**: the same issue (``engine.lesson_key`` of the issue text) in at least ``min_repeats`` (2)
  failed outcomes of the window; the lesson is the newest recorded solution of that issue, if any.

Reviews of engine strategies (task type ``engine_strategy_review``) are about the engine, not the work, and
are left out. Output: at most ``limit`` patterns, repeated issues first (more repeats first), then rate drops
(larger drop first).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from evolution.algorithms.engine import LESSON_WINDOW_DAYS, REVIEW_TASK_TYPE, Outcome, lesson_key

MIN_DROP = 0.25
MIN_OUTCOMES = 3
MIN_REPEATS = 2
MAX_PATTERNS = 2


@dataclass(frozen=True, slots=True)
class ReflectionPattern:
    """A reflection to propose: ``key`` identifies the pattern (the same pattern next day has the same key);
    ``evidence`` lists the refs of the outcomes it rests on."""

    key: str
    kind: str
    context: str
    reflection: str
    lesson: str
    evidence: tuple[str, ...]


def _pct(rate: float) -> str:
    return f"{rate * 100:.0f}%"


def rate_drops(
    outcomes: Iterable[Outcome],
    now: datetime,
    *,
    window_days: float = LESSON_WINDOW_DAYS,
    min_drop: float = MIN_DROP,
    min_outcomes: int = MIN_OUTCOMES,
) -> list[tuple[float, ReflectionPattern]]:
    """(drop, pattern) per task type whose recent success rate fell by >= min_drop (see module doc)."""
    since = now - timedelta(days=window_days)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # recent s, recent n, earlier s, earlier n
    refs: dict[str, list[str]] = defaultdict(list)
    for o in outcomes:
        if o.task_type == REVIEW_TASK_TYPE or o.at > now:
            continue
        c = counts[o.task_type]
        ok = int(o.result == "success")
        if o.at >= since:
            c[0] += ok
            c[1] += 1
            if o.ref:
                refs[o.task_type].append(o.ref)
        else:
            c[2] += ok
            c[3] += 1
    found: list[tuple[float, ReflectionPattern]] = []
    for task, (rs, rn, es, en) in sorted(counts.items()):
        if rn < min_outcomes or en < min_outcomes:
            continue
        recent, earlier = rs / rn, es / en
        drop = earlier - recent
        if drop < min_drop - 1e-12:
            continue
        found.append(
            (
                drop,
                ReflectionPattern(
                    key=f"rate-drop:{lesson_key(task)}",
                    kind="rate_drop",
                    context=task,
                    reflection=(
                        f"{task} succeeded {rs} of {rn} times ({_pct(recent)}) in the last {window_days:g} days, "
                        f"down from {es} of {en} ({_pct(earlier)}) before."
                    ),
                    lesson=f"Find out what changed for {task} this week before repeating what used to work.",
                    evidence=tuple(refs[task]),
                ),
            )
        )
    return found


def repeated_issues(
    outcomes: Iterable[Outcome],
    now: datetime,
    *,
    window_days: float = LESSON_WINDOW_DAYS,
    min_repeats: int = MIN_REPEATS,
) -> list[tuple[int, ReflectionPattern]]:
    """(repeats, pattern) per issue seen in >= min_repeats failed outcomes of the window (see module doc)."""
    since = now - timedelta(days=window_days)
    seen: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.task_type == REVIEW_TASK_TYPE or o.result != "fail" or not since <= o.at <= now:
            continue
        key = lesson_key(o.issue)
        if key:
            seen[key].append(o)
    found: list[tuple[int, ReflectionPattern]] = []
    for key, rows in sorted(seen.items()):
        if len(rows) < min_repeats:
            continue
        rows = sorted(rows, key=lambda o: o.at)
        issue = " ".join(rows[-1].issue.split())
        tasks = sorted({o.task_type for o in rows})
        solution = next((" ".join(o.solution.split()) for o in reversed(rows) if o.solution.strip()), "")
        lesson = (
            f"When {issue!r} comes up: {solution}"
            if solution
            else f"Find and record a fix for {issue!r} before the next {tasks[0]}."
        )
        found.append(
            (
                len(rows),
                ReflectionPattern(
                    key=f"issue:{key}",
                    kind="repeated_issue",
                    context=", ".join(tasks),
                    reflection=f"The issue {issue!r} made {len(rows)} tasks fail in the last {window_days:g} days.",
                    lesson=lesson,
                    evidence=tuple(o.ref for o in rows if o.ref),
                ),
            )
        )
    return found


def week_patterns(
    outcomes: Iterable[Outcome], now: datetime, *, window_days: float = LESSON_WINDOW_DAYS, limit: int = MAX_PATTERNS
) -> list[ReflectionPattern]:
    """At most `limit` patterns: repeated issues (most repeats first), then rate drops (largest first)."""
    rows = list(outcomes)
    issues = sorted(repeated_issues(rows, now, window_days=window_days), key=lambda p: (-p[0], p[1].key))
    drops = sorted(rate_drops(rows, now, window_days=window_days), key=lambda p: (-p[0], p[1].key))
    return [p for _, p in issues + drops][:limit]
