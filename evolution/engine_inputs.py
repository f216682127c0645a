"""Inputs of the engine: the bodies of POST outcomes/, corrections/ and reflections/ (the MCP tools record_outcome,
record_correction and add_reflection take the same), the values they become, and the memories a correction and
a reflection are stored as.

Each body is a ``core.schemas.RequestBody`` (``OutcomeIn``, ``CorrectionIn``, ``ReflectionIn``): the one definition
that validates it, documents it in the OpenAPI schema and gives the MCP tools their arguments. Every bad field is
an ``InvalidInput`` naming it (``context.lesson`` for a nested one). Free text bound for the memory-evolution
directory (task types, approaches, topics, correction and reflection fields) is kept on one line: runs of
whitespace become one space. Services take the frozen dataclasses, which code elsewhere builds directly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Final

from pydantic import Field

from core.errors import InvalidInput
from core.schemas import OneOf, RequestBody, Text, When, parse
from evolution.models import OutcomeResult
from memories.inputs import MemoryInput, origin_tier
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


# -------------------------------------------------------------------------------------------- bodies


def _line(max_length: int, description: str) -> Text:
    """Optional text kept on one line; null is none."""
    return Text(max_length, null=True, clean=one_line, description=description)


def _required_line(max_length: int, description: str) -> Text:
    """Required text kept on one line, not blank."""
    return Text(max_length, blank=False, clean=one_line, description=description)


class OutcomeContextIn(RequestBody):
    """What the task taught; every part optional."""

    lesson: Annotated[str, _line(MAX_TEXT, "what to do next time")] = ""
    issue: Annotated[str, Text(MAX_TEXT, null=True, clean=str.strip, description="what went wrong")] = ""
    solution: Annotated[str, Text(MAX_TEXT, null=True, clean=str.strip, description="what fixed it")] = ""


class OutcomeIn(RequestBody):
    """How a task went (POST outcomes/, the record_outcome tool)."""

    task_type: Annotated[str, _required_line(MAX_TASK_TYPE, "the kind of task")]
    result: Annotated[str, OneOf(tuple(OutcomeResult.values), description="how it went")]
    approach: Annotated[str, _line(MAX_APPROACH, "how it was done")] = DEFAULT_APPROACH
    context: OutcomeContextIn | None = None
    created_at: When = Field(None, description="when it happened, for history recorded later")

    def value(self) -> OutcomeInput:
        context = self.context or OutcomeContextIn()
        return OutcomeInput(
            task_type=self.task_type,
            result=self.result,
            approach=self.approach or DEFAULT_APPROACH,
            lesson=context.lesson,
            issue=context.issue,
            solution=context.solution,
            created_at=self.created_at,
        )


class CorrectionIn(RequestBody):
    """What was done wrong and what to do instead (POST corrections/, the record_correction tool)."""

    what_i_did_wrong: Annotated[str, _required_line(MAX_TEXT, "the mistake")]
    what_i_should_do: Annotated[str, _required_line(MAX_TEXT, "the right way")]
    context: Annotated[str, _required_line(MAX_TEXT, "where it happened")]
    topic: Annotated[str, _line(MAX_TOPIC, "the subject the correction wins")] = DEFAULT_TOPIC
    created_at: When = Field(None, description="when it was corrected")

    def value(self) -> CorrectionInput:
        return CorrectionInput(
            what_i_did_wrong=self.what_i_did_wrong,
            what_i_should_do=self.what_i_should_do,
            context=self.context,
            topic=self.topic or DEFAULT_TOPIC,
            created_at=self.created_at,
        )


class ReflectionIn(RequestBody):
    """A reflection on a task and its lesson (POST reflections/, the add_reflection tool)."""

    context: Annotated[str, _required_line(MAX_TEXT, "the task reflected on")]
    reflection: Annotated[str, _required_line(MAX_TEXT, "what was noticed")]
    lesson: Annotated[str, _required_line(MAX_TEXT, "the lesson drawn")]
    topic: Annotated[str, _line(MAX_TOPIC, "the subject")] = ""
    created_at: When = Field(None, description="when it was written")

    def value(self) -> ReflectionInput:
        return ReflectionInput(
            context=self.context,
            reflection=self.reflection,
            lesson=self.lesson,
            topic=self.topic or None,
            created_at=self.created_at,
        )


# ---------------------------------------------------------------------------------------- entry points


def outcome_input(raw: Any) -> OutcomeInput:
    return parse(OutcomeIn, raw).value()


def correction_input(raw: Any) -> CorrectionInput:
    return parse(CorrectionIn, raw).value()


def reflection_input(raw: Any) -> ReflectionInput:
    return parse(ReflectionIn, raw).value()


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
