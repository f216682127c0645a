"""Inputs of the engine: the bodies of POST outcomes/, corrections/ and reflections/ (and the commands that
record them), parsed and validated, and the memories a correction and a reflection are stored as.

Every bad field is an ``InvalidInput`` naming it (``context.lesson`` for a nested one). Free text bound for
the memory-evolution directory (task types, approaches, topics, correction and reflection fields) is kept on
one line: runs of whitespace become one space.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from core.errors import InvalidInput
from evolution.models import OutcomeResult
from memories.inputs import MemoryInput, origin_tier, parse_when, refuse_unstorable
from memories.models import MemoryType, Tier

DEFAULT_APPROACH: Final = "default"
# A correction without a topic: its subject stays empty so it collides with nothing.
DEFAULT_TOPIC: Final = "general"
# Reflections the dream writes carry this topic; their lessons are the engine's own output, never evidence.
DREAM_TOPIC: Final = "dream"

MAX_TASK_TYPE: Final = 120
MAX_APPROACH: Final = 200
MAX_TOPIC: Final = 200
MAX_TEXT: Final = 10_000

OUTCOME_FIELDS: Final = frozenset({"task_type", "result", "approach", "context", "created_at"})
OUTCOME_CONTEXT_FIELDS: Final = frozenset({"lesson", "issue", "solution"})
CORRECTION_FIELDS: Final = frozenset({"what_i_did_wrong", "what_i_should_do", "context", "topic", "created_at"})
REFLECTION_FIELDS: Final = frozenset({"context", "reflection", "lesson", "topic", "created_at"})
# Reviewer edits of a strategy proposal that approval accepts (the rest is what was reviewed).
STRATEGY_EDITABLE: Final = frozenset({"rule", "task_type", "title"})


def one_line(text: str) -> str:
    """``text`` with every run of whitespace (newlines included) collapsed to one space, stripped."""
    return " ".join(text.split())


def subject_key(text: str) -> str:
    """Case- and whitespace-insensitive form of a subject, as the slot policies compare them."""
    return one_line(text).casefold()


@dataclass(frozen=True)
class OutcomeInput:
    task_type: str
    result: str
    approach: str = DEFAULT_APPROACH
    lesson: str = ""
    issue: str = ""
    solution: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True)
class CorrectionInput:
    what_i_did_wrong: str
    what_i_should_do: str
    context: str
    topic: str = DEFAULT_TOPIC
    created_at: datetime | None = None


@dataclass(frozen=True)
class ReflectionInput:
    context: str
    reflection: str
    lesson: str
    topic: str | None = None
    created_at: datetime | None = None


def _object(raw: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{name}: expected a JSON object", field=name)
    return raw


def _no_unknown(data: Mapping[str, Any], allowed: frozenset[str], prefix: str = "") -> None:
    unknown = sorted(str(k) for k in data if k not in allowed)
    if unknown:
        name = f"{prefix}{unknown[0]}"
        raise InvalidInput(f"{name}: unknown field; expected {', '.join(sorted(allowed))}", field=name)


def _text(
    data: Mapping[str, Any], key: str, *, prefix: str = "", required: bool, max_len: int, single_line: bool
) -> str:
    name = f"{prefix}{key}"
    value = data.get(key)
    if value is None:
        if required:
            raise InvalidInput(f"{name}: this field is required", field=name)
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{name}: expected a string", field=name)
    cleaned = one_line(value) if single_line else value.strip()
    if required and not cleaned:
        raise InvalidInput(f"{name}: must not be blank", field=name)
    if len(cleaned) > max_len:
        raise InvalidInput(f"{name}: longer than {max_len} characters", field=name)
    refuse_unstorable(cleaned, name)
    return cleaned


def outcome_input(raw: Any) -> OutcomeInput:
    """Validate ``{task_type, result: success|fail, approach?, context?: {lesson?, issue?, solution?},
    created_at?}``; every bad field is an InvalidInput naming it."""
    data = _object(raw, "body")
    _no_unknown(data, OUTCOME_FIELDS)
    task_type = _text(data, "task_type", required=True, max_len=MAX_TASK_TYPE, single_line=True)
    result = data.get("result")
    if result is None:
        raise InvalidInput("result: this field is required", field="result")
    if result not in OutcomeResult.values:
        raise InvalidInput(f"result: {result!r} is not one of success, fail", field="result")
    approach = _text(data, "approach", required=False, max_len=MAX_APPROACH, single_line=True)
    context = data.get("context")
    lesson = issue = solution = ""
    if context is not None:
        ctx = _object(context, "context")
        _no_unknown(ctx, OUTCOME_CONTEXT_FIELDS, "context.")
        lesson = _text(ctx, "lesson", prefix="context.", required=False, max_len=MAX_TEXT, single_line=True)
        issue = _text(ctx, "issue", prefix="context.", required=False, max_len=MAX_TEXT, single_line=False)
        solution = _text(ctx, "solution", prefix="context.", required=False, max_len=MAX_TEXT, single_line=False)
    return OutcomeInput(
        task_type=task_type,
        result=str(result),
        approach=approach or DEFAULT_APPROACH,
        lesson=lesson,
        issue=issue,
        solution=solution,
        created_at=parse_when(data.get("created_at"), "created_at"),
    )


def _topic(data: Mapping[str, Any]) -> str:
    return _text(data, "topic", required=False, max_len=MAX_TOPIC, single_line=True)


def correction_input(raw: Any) -> CorrectionInput:
    """Validate ``{what_i_did_wrong, what_i_should_do, context, topic?, created_at?}``."""
    data = _object(raw, "body")
    _no_unknown(data, CORRECTION_FIELDS)
    return CorrectionInput(
        what_i_did_wrong=_text(data, "what_i_did_wrong", required=True, max_len=MAX_TEXT, single_line=True),
        what_i_should_do=_text(data, "what_i_should_do", required=True, max_len=MAX_TEXT, single_line=True),
        context=_text(data, "context", required=True, max_len=MAX_TEXT, single_line=True),
        topic=_topic(data) or DEFAULT_TOPIC,
        created_at=parse_when(data.get("created_at"), "created_at"),
    )


def reflection_input(raw: Any) -> ReflectionInput:
    """Validate ``{context, reflection, lesson, topic?, created_at?}``."""
    data = _object(raw, "body")
    _no_unknown(data, REFLECTION_FIELDS)
    return ReflectionInput(
        context=_text(data, "context", required=True, max_len=MAX_TEXT, single_line=True),
        reflection=_text(data, "reflection", required=True, max_len=MAX_TEXT, single_line=True),
        lesson=_text(data, "lesson", required=True, max_len=MAX_TEXT, single_line=True),
        topic=_topic(data) or None,
        created_at=parse_when(data.get("created_at"), "created_at"),
    )


# ---------------------------------------------------------------------------------------- stored as


def correction_subject(topic: str) -> str:
    """The subject a correction of ``topic`` claims: the topic itself, empty for the default topic."""
    return "" if subject_key(topic) in ("", DEFAULT_TOPIC) else one_line(topic)


def correction_memory_input(
    item: CorrectionInput, *, origin: str, tier: str = Tier.HOT, metadata: Mapping[str, Any] | None = None
) -> MemoryInput:
    """The memory a correction is stored as (see ``correction_record``); ``origin`` must be a person's."""
    if origin_tier(origin) != 1:
        raise InvalidInput("origin: a correction is authored by a person (user:, api:, cli:, import:)", field="origin")
    topic = item.topic or DEFAULT_TOPIC
    meta = {
        **(metadata or {}),
        "correction": {
            "what_i_did_wrong": item.what_i_did_wrong,
            "what_i_should_do": item.what_i_should_do,
            "context": item.context,
            "topic": topic,
        },
    }
    return MemoryInput(
        content=item.what_i_should_do,
        memory_type=MemoryType.CORRECTION,
        subject=correction_subject(topic),
        origin=origin,
        tier=tier,
        created_at=item.created_at,
        metadata=meta,
    )


def reflection_content(context: str, reflection: str, lesson: str) -> str:
    return f"CONTEXT: {context}\nREFLECTION: {reflection}\nLESSON: {lesson}"


def reflection_memory_input(
    item: ReflectionInput, *, origin: str = "", metadata: Mapping[str, Any] | None = None
) -> MemoryInput:
    """The memory a reflection is stored as (see ``reflection_record``)."""
    meta = {
        **(metadata or {}),
        "reflection": {
            "context": item.context,
            "reflection": item.reflection,
            "lesson": item.lesson,
            "topic": item.topic,
        },
    }
    return MemoryInput(
        content=reflection_content(item.context, item.reflection, item.lesson),
        memory_type=MemoryType.REFLECTION,
        origin=origin,
        created_at=item.created_at,
        metadata=meta,
    )
