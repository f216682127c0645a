"""Reads of the engine: the sensor (outcomes in recorded order, S-0001...), the world model, the lessons of
reflections, and the rules (memories of type strategy).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from evolution.algorithms import engine as algo
from evolution.engine_inputs import DEFAULT_APPROACH, DREAM_TOPIC, subject_key
from evolution.models import Outcome, OutcomeResult
from memories.models import Memory, MemoryType, Status, Tier, Workspace

# ------------------------------------------------------------------------------------------ sensor reads


def sensor_id(index: int) -> str:
    """Id of the ``index``-th (0-based) outcome of a workspace in recorded order: S-0001, S-0002, ...

    Recorded order is insertion order, so a reading keeps its id when an older one is recorded later
    (outcomes may carry a past ``created_at``) and the evidence refs of proposals stay true.
    """
    return f"S-{index + 1:04d}"


def outcomes_in_order(*, workspace: Workspace) -> list[Outcome]:
    """Every outcome of the workspace in recorded (insertion) order."""
    return list(Outcome.objects.filter(workspace=workspace).order_by("pk"))


def outcome_list(*, workspace: Workspace, after_id: int = 0, limit: int = 100) -> tuple[list[Outcome], int | None]:
    """A page of outcomes, newest first; the cursor is the last id (pass it as ``after_id``)."""
    limit = max(1, min(500, limit))
    rows = Outcome.objects.filter(workspace=workspace)
    if after_id:
        rows = rows.filter(pk__lt=after_id)
    page = list(rows.order_by("-pk")[: limit + 1])
    cursor = page[limit - 1].pk if len(page) > limit else None
    return page[:limit], cursor


def engine_outcomes(rows: Sequence[Outcome]) -> list[algo.Outcome]:
    """``rows`` (in recorded order) as the pure engine reads them, each ref ``sensor:<its sensor id>``."""
    return [
        algo.Outcome(
            task_type=o.task_type,
            approach=o.approach or DEFAULT_APPROACH,
            result="success" if o.result == OutcomeResult.SUCCESS else "fail",
            lesson=o.lesson,
            issue=o.issue,
            solution=o.solution,
            at=o.created_at,
            ref=f"sensor:{sensor_id(i)}",
        )
        for i, o in enumerate(rows)
    ]


@dataclass(frozen=True)
class WorldModelView:
    """Success statistics: ``approaches`` per (task_type, approach), ``task_types`` with their best approach."""

    approaches: list[dict[str, Any]]
    task_types: list[dict[str, Any]]
    outcomes: int

    def as_json(self) -> dict[str, Any]:
        return {"approaches": self.approaches, "task_types": self.task_types, "outcomes": self.outcomes}


def world_model_for(workspace: Workspace) -> WorldModelView:
    """The world model of every outcome recorded in ``workspace`` (rate = successes / (successes + failures))."""
    outcomes = engine_outcomes(outcomes_in_order(workspace=workspace))
    model = algo.world_model(outcomes)
    return WorldModelView(
        approaches=[
            {"task_type": t, "approach": a, "successes": s.successes, "failures": s.failures, "rate": s.rate}
            for (t, a), s in model.by_approach.items()
        ],
        task_types=[
            {
                "task_type": t,
                "successes": s.successes,
                "failures": s.failures,
                "rate": s.rate,
                "best_approach": algo.best_approach(model, t),
            }
            for t, s in model.by_task_type.items()
        ],
        outcomes=len(outcomes),
    )


# ------------------------------------------------------------------------------------------- reflections


def reflection_fields(memory: Memory) -> dict[str, Any] | None:
    """``metadata["reflection"]`` of a reflection memory when well formed, else None."""
    meta = memory.metadata.get("reflection") if isinstance(memory.metadata, dict) else None
    if not isinstance(meta, dict):
        return None
    if not all(isinstance(meta.get(k), str) and meta.get(k) for k in ("context", "reflection", "lesson")):
        return None
    return meta


def is_dream_reflection(memory: Memory) -> bool:
    meta = reflection_fields(memory)
    return meta is not None and isinstance(meta.get("topic"), str) and subject_key(meta["topic"]) == DREAM_TOPIC


def reflection_lessons(*, workspace: Workspace) -> tuple[list[algo.Lesson], dict[str, str]]:
    """Lessons of the workspace's active reflections (not the dream's log); refs ``reflection:<memory id>``."""
    lessons: list[algo.Lesson] = []
    ids: dict[str, str] = {}
    rows = Memory.objects.filter(workspace=workspace, memory_type=MemoryType.REFLECTION, status=Status.ACTIVE).only(
        "id", "metadata", "created_at"
    )
    for memory in rows:
        meta = reflection_fields(memory)
        if meta is None or is_dream_reflection(memory):
            continue
        ref = f"reflection:{memory.id}"
        ids[ref] = str(memory.id)
        lessons.append(algo.Lesson(text=meta["lesson"], at=memory.created_at, ref=ref, task_type=meta["context"]))
    return lessons, ids


# ------------------------------------------------------------------------------------------ rule reads


def strategy_rules(*, workspace: Workspace, statuses: Iterable[str] = (Status.ACTIVE,)) -> list[Memory]:
    """Rule memories (type strategy) of ``workspace`` with the given statuses, HOT first, newest first."""
    rows = Memory.objects.filter(workspace=workspace, memory_type=MemoryType.STRATEGY, status__in=list(statuses))
    order: dict[str, int] = {Tier.HOT: 0, Tier.WARM: 1, Tier.COLD: 2}
    return sorted(rows, key=lambda m: (order.get(m.tier, 3), -m.created_at.timestamp()))


def recent_window(now: datetime) -> tuple[datetime, datetime]:
    """The engine's "recent" window, the one lessons are counted in: the 7 days up to ``now``."""
    return now - timedelta(days=algo.LESSON_WINDOW_DAYS), now
