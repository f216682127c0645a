"""The request bodies of memories, edges and conversations, and the typed values they become.

Each body is a ``core.schemas.RequestBody``: the one definition that validates a request (REST, MCP, the
management commands and the demo loader all parse through it) and documents it in the OpenAPI schema and
the MCP tools' input schemas. Every refusal is an ``InvalidInput`` naming the offending field
(``items[3].content``). Services take the frozen dataclasses below, which code elsewhere builds directly.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BeforeValidator, Field, ValidationInfo, WithJsonSchema, field_validator

from core import schemas
from core.errors import InvalidInput
from core.schemas import (
    MAX_JSON_DEPTH,
    Documented,
    Flag,
    Items,
    JsonObject,
    Kind,
    Moment,
    Number,
    OneOf,
    QueryParams,
    RequestBody,
    Text,
    When,
    WholeNumber,
    parse,
    parse_query,
    reject,
)
from memories.models import CompressionTier, EdgeType, MemoryType, Status, Tier
from memories.selectors import ORDERINGS, RELEVANCE, MemoryFilters

MAX_CONTENT_CHARS = 100_000
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_METADATA_BYTES = 64 * 1024
MAX_BULK_ITEMS = 5_000
MAX_TURNS = 20_000
MAX_QUERY_CHARS = 2_000
"""A list search's words (the same bound as a working-context query)."""
MAX_METADATA_DEPTH = MAX_JSON_DEPTH
MAX_INT = 2**63 - 1
"""The largest integer a query parameter may hold (a database BIGINT)."""

ORIGIN_PREFIXES_TIER1 = ("user:", "cli:", "api:", "import:")
_SLUG = re.compile(r"[-a-zA-Z0-9_]+")
NOT_SENT: Any = None
"""The default of a PATCH field: never validated, so a field left out is told apart from any value sent."""


@dataclass(frozen=True)
class MemoryInput:
    content: str
    memory_type: str = MemoryType.SEMANTIC
    subject: str = ""
    tags: tuple[str, ...] = ()
    origin: str = ""
    confidence: float = 1.0
    tier: str = Tier.WARM
    status: str = Status.ACTIVE
    pinned: bool = False
    created_at: datetime | None = None
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnInput:
    speaker: str
    text: str
    ref: str = ""


@dataclass(frozen=True)
class SessionInput:
    started_at: datetime
    turns: tuple[TurnInput, ...]
    session_id: str = ""


def origin_tier(origin: str) -> int:
    """1 = written by a person or their tools; 2 = derived by an evolver; 3 = proposed by the engine."""
    if origin.startswith(ORIGIN_PREFIXES_TIER1):
        return 1
    if origin.startswith("engine:"):
        return 3
    return 2


def refuse_unstorable(value: str, name: str) -> None:
    """Refuse text no database column can hold, naming the field: free text outside a body passes here."""
    problem = schemas.unstorable_reason(value)
    if problem:
        raise InvalidInput(f"{name}: {problem}", field=name)


def parse_when(value: Any, name: str) -> datetime | None:
    """An ISO 8601 date-time (a query parameter, a command's argument) as an aware UTC datetime; None for null
    or "". Refused naming ``name`` as a body's ``When`` field would be."""
    return schemas.parse_when(value, name)


def int_param(raw: Any, name: str, *, minimum: int = 0) -> int | None:
    """A query parameter as an integer in [minimum, MAX_INT]; None when absent or blank."""
    if raw is None or raw == "":
        return None
    text = str(raw).strip()
    if len(text) > 20 or not text.lstrip("-").isdigit():
        raise InvalidInput(f"{name}: expected an integer", field=name)
    value = int(text)
    if not minimum <= value <= MAX_INT:
        raise InvalidInput(f"{name}: must be between {minimum} and {MAX_INT}", field=name)
    return value


# -- field kinds ------------------------------------------------------------------------------------------


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        reject("expected a list of strings")
    if len(value) > MAX_TAGS:
        reject(f"at most {MAX_TAGS} tags")
    cleaned: list[str] = []
    for tag in value:
        tag = tag.strip()
        if not tag:
            reject("tags must not be blank")
        if len(tag) > MAX_TAG_CHARS:
            reject(f"a tag is longer than {MAX_TAG_CHARS} characters")
        problem = schemas.unstorable_reason(tag)
        if problem:
            reject(problem)
        if tag not in cleaned:
            cleaned.append(tag)
    return tuple(cleaned)


def _origin(value: str) -> str:
    if value and ":" not in value:
        reject("expected a prefix such as user:, api:, import:, evolver:")
    return value


Content = Annotated[str, Text(MAX_CONTENT_CHARS, blank=False, description="the memory's text")]
Subject = Annotated[str, Text(200, clean=str.strip, description="what the memory is about (slot policies)")]
Tags = Annotated[
    tuple[str, ...],
    BeforeValidator(_tags),
    WithJsonSchema(
        {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
            "maxItems": MAX_TAGS,
            "nullable": True,
            "description": "labels; blanks refused, spaces trimmed, repeats dropped",
        }
    ),
]
Origin = Annotated[
    str,
    Text(120, null=True, description="who wrote it: user:, cli:, api:, import: (a person), evolver:, engine:"),
    AfterValidator(_origin),
]
Confidence = Annotated[
    float, Number(0.0, 1.0, reason="expected a number between 0 and 1", out_of_range="must be between 0 and 1")
]
Metadata = Annotated[
    dict[str, Any],
    JsonObject(MAX_METADATA_BYTES, description=f"free-form JSON: {MAX_METADATA_BYTES} bytes, {MAX_JSON_DEPTH} levels"),
]
Ignored = Annotated[Any, Documented({"description": "ignored: an exported memory can be sent back as it is"})]
MemoryRef = Annotated[str, Documented({"type": "string", "format": "uuid", "description": "a memory's id"})]
MEMORY_TYPES = tuple(MemoryType.values)
TIERS = tuple(Tier.values)


def _slug(value: str) -> str:
    if not _SLUG.fullmatch(value):
        reject("letters, digits, hyphens and underscores only")
    return value


def _valid_to_after_from(value: datetime | None, info: ValidationInfo) -> datetime | None:
    start = info.data.get("valid_from")
    if value is not None and start is not None and value < start:
        reject("earlier than valid_from")
    return value


# -- bodies ---------------------------------------------------------------------------------------------


class MemoryIn(RequestBody):
    """A memory to write (POST memories/, an item of memories/bulk/)."""

    content: Content
    memory_type: Annotated[str, OneOf(MEMORY_TYPES, null_as=MemoryType.SEMANTIC)] = MemoryType.SEMANTIC
    subject: Annotated[str, Text(200, null=True, clean=str.strip, description="what the memory is about")] = ""
    tags: Tags = ()
    origin: Origin = ""
    confidence: Confidence = 1.0
    tier: Annotated[str, OneOf(TIERS, null_as=Tier.WARM)] = Tier.WARM
    status: Annotated[str, OneOf((Status.ACTIVE, Status.ARCHIVED), null_as=Status.ACTIVE)] = Status.ACTIVE
    pinned: bool = False
    created_at: When = None
    valid_from: When = None
    valid_to: When = None
    metadata: Metadata = Field(default_factory=dict)
    id: Ignored = None
    workspace: Ignored = None

    _valid_to = field_validator("valid_to")(_valid_to_after_from)

    def value(self) -> MemoryInput:
        return MemoryInput(
            content=self.content,
            memory_type=self.memory_type,
            subject=self.subject,
            tags=self.tags,
            origin=self.origin,
            confidence=self.confidence,
            tier=self.tier,
            status=self.status,
            pinned=self.pinned,
            created_at=self.created_at,
            valid_from=self.valid_from,
            valid_to=self.valid_to,
            metadata=self.metadata,
        )


class BulkIn(RequestBody):
    items: Annotated[list[MemoryIn], Items("memories", MAX_BULK_ITEMS)]


class MemoryPatchIn(RequestBody):
    """A partial update: any of the editable fields, each checked as on create; others cannot be changed."""

    unknown_field: ClassVar[str] = "this field cannot be changed"

    # The defaults only tell a field not sent apart (``changes`` reports the fields sent): a null sent is
    # checked by the field's type like any other value.
    content: Content = NOT_SENT
    memory_type: Annotated[str, OneOf(MEMORY_TYPES)] = NOT_SENT
    subject: Subject = NOT_SENT
    tags: Tags = NOT_SENT
    confidence: Confidence = NOT_SENT
    tier: Annotated[str, OneOf(TIERS)] = NOT_SENT
    pinned: bool = NOT_SENT
    metadata: Metadata = NOT_SENT
    status: Annotated[str, OneOf(tuple(Status.values))] = NOT_SENT
    valid_from: When = None
    valid_to: When = None

    _valid_to = field_validator("valid_to")(_valid_to_after_from)

    def changes(self) -> dict[str, Any]:
        given = {name: getattr(self, name) for name in self.model_fields_set}
        if "tags" in given:
            given["tags"] = list(given["tags"])
        return given


class TurnIn(RequestBody):
    speaker: Annotated[str, Text(120, blank=False, clean=str.strip)]
    text: Content
    ref: Annotated[str, Text(120, null=True, description="the turn's id in its source, kept in metadata")] = ""


class SessionIn(RequestBody):
    started_at: Moment
    turns: Annotated[list[TurnIn], Items("turns")]
    session_id: Annotated[str, Text(128, null=True)] = ""


class ConversationIn(RequestBody):
    sessions: Annotated[list[SessionIn], Items("sessions")]

    @field_validator("sessions")
    @classmethod
    def _bounded(cls, sessions: list[SessionIn]) -> list[SessionIn]:
        if sum(len(s.turns) for s in sessions) > MAX_TURNS:
            reject(f"at most {MAX_TURNS} turns per request")
        return sessions


class WorkspaceIn(RequestBody):
    slug: Annotated[str, Text(64, blank=False), AfterValidator(_slug)]
    name: Annotated[str, Text(200, blank=False, clean=str.strip)]


class EdgeIn(RequestBody):
    source: MemoryRef
    target: MemoryRef
    type: Annotated[str, OneOf(tuple(EdgeType.values), normalise=lambda v: v.strip().upper())]
    weight: Annotated[float, Number(0.0, 1000.0, exclusive_minimum=True, null_as=1.0)] = 1.0


class CompressionTierName(Kind):
    """A compression tier by name (full, summary, ...) or number, as the list filter reads it."""

    def __init__(self) -> None:
        self.names = {label.lower(): value for value, label in CompressionTier.choices}

    def check(self, value: Any) -> int | None:
        if value is None or value == "":
            return None
        key = str(value).lower()
        if key.isdigit() and int(key) in CompressionTier.values:
            return int(key)
        if key in self.names:
            return self.names[key]
        reject(f"{value!r} is not one of {', '.join(self.names)}")

    def json_schema(self) -> dict[str, Any]:
        return {"type": "string", "enum": list(self.names), "description": "how far the memory is compressed"}


class MemoryListQuery(QueryParams):
    """GET memories/ (and the memory browser's filters): which memories, in what order, which page."""

    type: Annotated[str | None, OneOf(MEMORY_TYPES, optional=True)] = None
    status: Annotated[str | None, OneOf(tuple(Status.values), optional=True)] = None
    tier: Annotated[str | None, OneOf(TIERS, optional=True)] = None
    compression_tier: Annotated[int | None, CompressionTierName()] = None
    origin: Annotated[str, Text(120, null=True, description="origins that start with this text")] = ""
    tag: list[Annotated[str, Text(MAX_TAG_CHARS)]] = Field(
        default_factory=list, description="memories that carry every tag given"
    )
    pinned: Annotated[bool | None, Flag()] = None
    has_conflicts: Annotated[bool | None, Flag()] = None
    created_after: When = None
    created_before: When = None
    q: Annotated[str, Text(MAX_QUERY_CHARS, null=True, clean=str.strip, description="words to search for")] = ""
    ordering: Annotated[
        str | None,
        OneOf(
            (*ORDERINGS, RELEVANCE),
            optional=True,
            description="created, updated, activation, retention or accessed (a leading - for descending), or "
            "relevance: best match of q first (the default when q has words to search for, else -created)",
        ),
    ] = None
    cursor: Annotated[str, Text(512, null=True, description="the next (or previous) of the page before")] = ""
    limit: Annotated[int | None, WholeNumber(1, 500, description="memories per page (default 50)")] = None

    def filters(self) -> MemoryFilters:
        return MemoryFilters(
            memory_type=self.type or "",
            status=self.status or "",
            tier=self.tier or "",
            compression_tier=self.compression_tier,
            origin=self.origin,
            pinned=self.pinned,
            has_conflicts=self.has_conflicts,
            created_after=self.created_after,
            created_before=self.created_before,
            q=self.q,
            tags=tuple(t for t in self.tag if t),
        )


class DeleteQuery(QueryParams):
    confirm: Annotated[bool | None, Flag(description="true deletes for good; otherwise the memory is archived")] = None


# -- entry points -----------------------------------------------------------------------------------------


def filters_from_query(params: Any) -> MemoryFilters:
    """The list filters of a query (the REST list's parameters, the memory browser's form)."""
    return parse_query(MemoryListQuery, params).filters()


def memory_input(raw: Any, *, prefix: str = "") -> MemoryInput:
    return parse(MemoryIn, raw, prefix=prefix).value()


def bulk_input(raw: Any) -> list[MemoryInput]:
    return [item.value() for item in parse(BulkIn, raw).items]


def conversation_input(raw: Any) -> list[SessionInput]:
    return [
        SessionInput(
            started_at=session.started_at,
            turns=tuple(TurnInput(speaker=t.speaker, text=t.text, ref=t.ref) for t in session.turns),
            session_id=session.session_id,
        )
        for session in parse(ConversationIn, raw).sessions
    ]


def memory_patch_input(raw: Any) -> dict[str, Any]:
    """Validate a partial update: only editable fields, each checked as on create."""
    if isinstance(raw, dict) and not raw:
        raise InvalidInput("body: expected at least one field to change", field="body")
    return parse(MemoryPatchIn, raw).changes()


EDITABLE_FIELDS = frozenset(MemoryPatchIn.model_fields)


def workspace_input(raw: Any) -> WorkspaceIn:
    return parse(WorkspaceIn, raw)


def edge_input(raw: Any) -> EdgeIn:
    return parse(EdgeIn, raw)


def validate_content(value: Any, name: str) -> str:
    return str(schemas.check_value(Content, value, name))


def validate_confidence(value: Any, name: str) -> float:
    return float(schemas.check_value(Confidence, value, name))


def validate_metadata(value: Any, name: str) -> dict[str, Any]:
    checked: dict[str, Any] = schemas.check_value(Metadata, value, name)
    return checked


def memory_ref(value: Any, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        raise InvalidInput(f"{name}: {value!r} is not a memory id (a UUID)", field=name) from None
