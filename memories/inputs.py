"""Validate JSON input for memories, edges and conversations into typed values.

One validator serves the REST API, the management commands and the demo loader, so every entry
point rejects the same bad input with the same message naming the offending field.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from core.errors import InvalidInput
from memories.models import EdgeType, MemoryType, Status, Tier

MAX_CONTENT_CHARS = 100_000
MAX_TAGS = 32
MAX_TAG_CHARS = 64
MAX_METADATA_BYTES = 64 * 1024
MAX_BULK_ITEMS = 5_000
MAX_TURNS = 20_000
MAX_METADATA_DEPTH = 32
"""Nesting of objects and lists in metadata: deep enough for any real document, shallow enough that no
encoder or walker down the line (orjson stops at 255) recurses into trouble."""
MAX_INT = 2**63 - 1
"""The largest integer a query parameter may hold (a database BIGINT)."""
_SURROGATE = re.compile("[\ud800-\udfff]")

ORIGIN_PREFIXES_TIER1 = ("user:", "cli:", "api:", "import:")


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
    """Refuse text no database column can hold, naming the field: every free-text input passes here."""
    # PostgreSQL text and jsonb cannot hold U+0000, and no database stores half a UTF-16 pair (a lone
    # surrogate such as "\ud800", which JSON escapes can spell); refusing both here keeps backends alike.
    if "\x00" in value:
        raise InvalidInput(f"{name}: must not contain the NUL character (U+0000)", field=name)
    if _SURROGATE.search(value):
        raise InvalidInput(f"{name}: must be valid Unicode (a lone surrogate is not)", field=name)


def _check_json_tree(value: Any, name: str) -> None:
    """Walk a JSON value without recursion: every key and string storable, nesting within
    MAX_METADATA_DEPTH."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            refuse_unstorable(node, name)
        elif isinstance(node, dict | list):
            if depth > MAX_METADATA_DEPTH:
                raise InvalidInput(f"{name}: nested deeper than {MAX_METADATA_DEPTH} levels", field=name)
            if isinstance(node, dict):
                for key, child in node.items():
                    if isinstance(key, str):
                        refuse_unstorable(key, name)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in node)


def _require_mapping(value: Any, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{name}: expected a JSON object", field=name)
    return value


def _string(data: Mapping[str, Any], key: str, prefix: str, *, max_len: int, required: bool = False) -> str:
    name = f"{prefix}{key}"
    value = data.get(key)
    if value is None:
        if required:
            raise InvalidInput(f"{name}: this field is required", field=name)
        return ""
    if not isinstance(value, str):
        raise InvalidInput(f"{name}: expected a string", field=name)
    if required and not value.strip():
        raise InvalidInput(f"{name}: must not be blank", field=name)
    if len(value) > max_len:
        raise InvalidInput(f"{name}: longer than {max_len} characters", field=name)
    refuse_unstorable(value, name)
    return value


def parse_when(value: Any, name: str) -> datetime | None:
    """An ISO 8601 date-time as an aware UTC datetime (naive text counts as UTC); None for null or "".

    A time the database cannot hold (past year 9999 once moved to UTC, say "9999-12-31T23:59:59-14:00")
    is refused naming the field, like one that does not parse."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        parsed: datetime | None = value
    elif isinstance(value, str) and len(value) <= 64:
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    else:
        parsed = None
    if parsed is None:
        raise InvalidInput(f"{name}: expected an ISO 8601 date-time such as 2026-01-31T09:00:00Z", field=name)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(f"{name}: out of range (years 1 to 9999 in UTC)", field=name) from None


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


def _choice(data: Mapping[str, Any], key: str, prefix: str, choices: list[str], default: str) -> str:
    name = f"{prefix}{key}"
    value = data.get(key, default)
    if value is None:
        return default
    if value not in choices:
        raise InvalidInput(f"{name}: {value!r} is not one of {', '.join(choices)}", field=name)
    return str(value)


def validate_tags(value: Any, name: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise InvalidInput(f"{name}: expected a list of strings", field=name)
    if len(value) > MAX_TAGS:
        raise InvalidInput(f"{name}: at most {MAX_TAGS} tags", field=name)
    cleaned: list[str] = []
    for tag in value:
        tag = tag.strip()
        if not tag:
            raise InvalidInput(f"{name}: tags must not be blank", field=name)
        if len(tag) > MAX_TAG_CHARS:
            raise InvalidInput(f"{name}: a tag is longer than {MAX_TAG_CHARS} characters", field=name)
        refuse_unstorable(tag, name)
        if tag not in cleaned:
            cleaned.append(tag)
    return tuple(cleaned)


def validate_metadata(value: Any, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidInput(f"{name}: expected a JSON object", field=name)
    # Depth and storable text first: the encoder below recurses.
    _check_json_tree(value, name)
    try:
        encoded = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise InvalidInput(f"{name}: must be plain JSON (no NaN or non-JSON values)", field=name) from None
    if len(encoded.encode()) > MAX_METADATA_BYTES:
        raise InvalidInput(f"{name}: larger than {MAX_METADATA_BYTES} bytes", field=name)
    return value


def validate_confidence(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name}: expected a number between 0 and 1", field=name)
    if not 0.0 <= float(value) <= 1.0:
        raise InvalidInput(f"{name}: must be between 0 and 1", field=name)
    return float(value)


def validate_content(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{name}: expected a string", field=name)
    if not value.strip():
        raise InvalidInput(f"{name}: must not be blank", field=name)
    if len(value) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"{name}: longer than {MAX_CONTENT_CHARS} characters", field=name)
    refuse_unstorable(value, name)
    return value


KNOWN_MEMORY_FIELDS = frozenset(
    {
        "content",
        "memory_type",
        "subject",
        "tags",
        "origin",
        "confidence",
        "tier",
        "status",
        "pinned",
        "created_at",
        "valid_from",
        "valid_to",
        "metadata",
    }
)


def memory_input(raw: Any, *, prefix: str = "") -> MemoryInput:
    data = _require_mapping(raw, prefix.rstrip(".") or "body")
    unknown = sorted(set(data) - KNOWN_MEMORY_FIELDS - {"id", "workspace"})
    if unknown:
        name = f"{prefix}{unknown[0]}"
        raise InvalidInput(f"{name}: unknown field", field=name)
    if "content" not in data:
        raise InvalidInput(f"{prefix}content: this field is required", field=f"{prefix}content")
    content = validate_content(data["content"], f"{prefix}content")
    pinned = data.get("pinned", False)
    if not isinstance(pinned, bool):
        raise InvalidInput(f"{prefix}pinned: expected true or false", field=f"{prefix}pinned")
    origin = _string(data, "origin", prefix, max_len=120)
    if origin and ":" not in origin:
        raise InvalidInput(
            f"{prefix}origin: expected a prefix such as user:, api:, import:, evolver:",
            field=f"{prefix}origin",
        )
    status = _choice(data, "status", prefix, [Status.ACTIVE, Status.ARCHIVED], Status.ACTIVE)
    item = MemoryInput(
        content=content,
        memory_type=_choice(data, "memory_type", prefix, list(MemoryType.values), MemoryType.SEMANTIC),
        subject=_string(data, "subject", prefix, max_len=200).strip(),
        tags=validate_tags(data.get("tags"), f"{prefix}tags"),
        origin=origin,
        confidence=validate_confidence(data.get("confidence", 1.0), f"{prefix}confidence"),
        tier=_choice(data, "tier", prefix, list(Tier.values), Tier.WARM),
        status=status,
        pinned=pinned,
        created_at=parse_when(data.get("created_at"), f"{prefix}created_at"),
        valid_from=parse_when(data.get("valid_from"), f"{prefix}valid_from"),
        valid_to=parse_when(data.get("valid_to"), f"{prefix}valid_to"),
        metadata=validate_metadata(data.get("metadata"), f"{prefix}metadata"),
    )
    if item.valid_from and item.valid_to and item.valid_to < item.valid_from:
        raise InvalidInput(f"{prefix}valid_to: earlier than valid_from", field=f"{prefix}valid_to")
    return item


def bulk_input(raw: Any) -> list[MemoryInput]:
    data = _require_mapping(raw, "body")
    items = data.get("items")
    if not isinstance(items, list) or not items:
        raise InvalidInput("items: expected a non-empty list of memories", field="items")
    if len(items) > MAX_BULK_ITEMS:
        raise InvalidInput(f"items: at most {MAX_BULK_ITEMS} memories per request", field="items")
    return [memory_input(item, prefix=f"items[{i}].") for i, item in enumerate(items)]


def edge_type_input(value: Any, name: str = "type") -> str:
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{name}: expected one of {', '.join(EdgeType.values)}", field=name)
    normalised = value.strip().upper()
    if normalised not in EdgeType.values:
        raise InvalidInput(f"{name}: {value!r} is not one of {', '.join(EdgeType.values)}", field=name)
    return normalised


def weight_input(value: Any, name: str = "weight") -> float:
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 < float(value) <= 1000.0:
        raise InvalidInput(f"{name}: expected a number in (0, 1000]", field=name)
    return float(value)


def memory_ref(value: Any, name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError):
        raise InvalidInput(f"{name}: {value!r} is not a memory id (a UUID)", field=name) from None


def conversation_input(raw: Any) -> list[SessionInput]:
    data = _require_mapping(raw, "body")
    sessions = data.get("sessions")
    if not isinstance(sessions, list) or not sessions:
        raise InvalidInput("sessions: expected a non-empty list of sessions", field="sessions")
    parsed: list[SessionInput] = []
    total = 0
    for s_index, session in enumerate(sessions):
        prefix = f"sessions[{s_index}]."
        s = _require_mapping(session, prefix.rstrip("."))
        if "started_at" not in s:
            raise InvalidInput(f"{prefix}started_at: this field is required", field=f"{prefix}started_at")
        started = parse_when(s.get("started_at"), f"{prefix}started_at")
        if started is None:
            # null or "" parse to "no time"; a session needs one because its turns take it as created_at.
            raise InvalidInput(f"{prefix}started_at: this field is required", field=f"{prefix}started_at")
        turns_raw = s.get("turns")
        if not isinstance(turns_raw, list) or not turns_raw:
            raise InvalidInput(f"{prefix}turns: expected a non-empty list of turns", field=f"{prefix}turns")
        turns: list[TurnInput] = []
        for t_index, turn in enumerate(turns_raw):
            t_prefix = f"{prefix}turns[{t_index}]."
            t = _require_mapping(turn, t_prefix.rstrip("."))
            turns.append(
                TurnInput(
                    speaker=_string(t, "speaker", t_prefix, max_len=120, required=True).strip(),
                    text=validate_content(t.get("text"), f"{t_prefix}text"),
                    ref=_string(t, "ref", t_prefix, max_len=120),
                )
            )
        total += len(turns)
        if total > MAX_TURNS:
            raise InvalidInput(f"sessions: at most {MAX_TURNS} turns per request", field="sessions")
        parsed.append(
            SessionInput(
                started_at=started,
                turns=tuple(turns),
                session_id=_string(s, "session_id", prefix, max_len=128),
            )
        )
    return parsed


EDITABLE_FIELDS = frozenset(
    {
        "content",
        "memory_type",
        "subject",
        "tags",
        "confidence",
        "tier",
        "pinned",
        "metadata",
        "status",
        "valid_from",
        "valid_to",
    }
)


def _one_of(value: Any, name: str, choices: list[str]) -> str:
    if value not in choices:
        raise InvalidInput(f"{name}: {value!r} is not one of {', '.join(choices)}", field=name)
    return str(value)


def _subject(value: Any, name: str) -> str:
    if not isinstance(value, str) or len(value) > 200:
        raise InvalidInput(f"{name}: expected a string of at most 200 characters", field=name)
    refuse_unstorable(value, name)
    return value.strip()


def _flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name}: expected true or false", field=name)
    return value


_PATCH_VALIDATORS: dict[str, Any] = {
    "content": validate_content,
    "memory_type": lambda v, n: _one_of(v, n, list(MemoryType.values)),
    "subject": _subject,
    "tags": lambda v, n: list(validate_tags(v, n)),
    "confidence": validate_confidence,
    "tier": lambda v, n: _one_of(v, n, list(Tier.values)),
    "pinned": _flag,
    "metadata": validate_metadata,
    "status": lambda v, n: _one_of(v, n, list(Status.values)),
    "valid_from": parse_when,
    "valid_to": parse_when,
}


def memory_patch_input(raw: Any) -> dict[str, Any]:
    """Validate a partial update: only editable fields, each checked as on create."""
    data = _require_mapping(raw, "body")
    if not data:
        raise InvalidInput("body: expected at least one field to change", field="body")
    unknown = sorted(set(data) - EDITABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{unknown[0]}: this field cannot be changed", field=unknown[0])
    changes = {name: _PATCH_VALIDATORS[name](value, name) for name, value in data.items()}
    if changes.get("valid_from") and changes.get("valid_to") and changes["valid_to"] < changes["valid_from"]:
        raise InvalidInput("valid_to: earlier than valid_from", field="valid_to")
    return changes
