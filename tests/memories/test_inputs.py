"""Input validation: every rejection is an InvalidInput that names the offending field."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from core.errors import InvalidInput
from memories import inputs
from memories.inputs import (
    MAX_BULK_ITEMS,
    MAX_TAGS,
    bulk_input,
    conversation_input,
    edge_input,
    memory_input,
    memory_patch_input,
    origin_tier,
)

EDGE = {"source": "00000000-0000-0000-0000-000000000001", "target": "00000000-0000-0000-0000-000000000002"}


def field_of(call: Any, *args: Any, **kwargs: Any) -> str | None:
    with pytest.raises(InvalidInput) as info:
        call(*args, **kwargs)
    assert info.value.field is not None
    assert info.value.field in info.value.detail
    return info.value.field


def test_minimal_memory_gets_the_defaults() -> None:
    item = memory_input({"content": "We picked JWT"})
    assert item.content == "We picked JWT"
    assert item.memory_type == "semantic"
    assert item.tier == "warm"
    assert item.status == "active"
    assert item.confidence == 1.0
    assert item.tags == ()
    assert item.created_at is None
    assert item.metadata == {}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": "   "}, "content"),
        ({"content": 42}, "content"),
        ({"content": "x" * (inputs.MAX_CONTENT_CHARS + 1)}, "content"),
        ({"content": "x", "memory_type": "nonsense"}, "memory_type"),
        ({"content": "x", "tier": "lukewarm"}, "tier"),
        ({"content": "x", "status": "forgotten"}, "status"),
        ({"content": "x", "confidence": 1.5}, "confidence"),
        ({"content": "x", "confidence": -0.1}, "confidence"),
        ({"content": "x", "confidence": True}, "confidence"),
        ({"content": "x", "confidence": "high"}, "confidence"),
        ({"content": "x", "tags": "auth"}, "tags"),
        ({"content": "x", "tags": ["ok", 3]}, "tags"),
        ({"content": "x", "tags": ["ok", " "]}, "tags"),
        ({"content": "x", "tags": ["t" * 65]}, "tags"),
        ({"content": "x", "tags": [f"t{i}" for i in range(MAX_TAGS + 1)]}, "tags"),
        ({"content": "x", "origin": "nobody"}, "origin"),
        ({"content": "x", "origin": 7}, "origin"),
        ({"content": "x", "pinned": "yes"}, "pinned"),
        ({"content": "x", "created_at": "yesterday"}, "created_at"),
        ({"content": "x", "created_at": "2026-13-40T00:00:00Z"}, "created_at"),
        ({"content": "x", "created_at": 1700000000}, "created_at"),
        ({"content": "x", "valid_from": "2026-02-01T00:00:00Z", "valid_to": "2026-01-01T00:00:00Z"}, "valid_to"),
        ({"content": "x", "metadata": ["not", "an", "object"]}, "metadata"),
        ({"content": "x", "metadata": {"n": math.nan}}, "metadata"),
        ({"content": "x", "metadata": {"blob": "x" * (inputs.MAX_METADATA_BYTES + 1)}}, "metadata"),
        ({"content": "x", "colour": "red"}, "colour"),
        ({"content": "x", "subject": "s" * 201}, "subject"),
    ],
)
def test_bad_memory_fields_are_rejected_by_name(body: dict[str, Any], field: str) -> None:
    assert field_of(memory_input, body) == field


def test_a_body_that_is_not_an_object_is_rejected_as_body() -> None:
    assert field_of(memory_input, ["content"]) == "body"


def test_tags_are_stripped_and_deduplicated_in_order() -> None:
    assert memory_input({"content": "x", "tags": [" b", "a", "b ", "a"]}).tags == ("b", "a")


def test_a_naive_datetime_is_read_as_utc() -> None:
    item = memory_input({"content": "x", "created_at": "2026-01-31T09:00:00"})
    assert item.created_at == datetime(2026, 1, 31, 9, 0, tzinfo=UTC)


def test_an_offset_datetime_keeps_its_instant() -> None:
    item = memory_input({"content": "x", "created_at": "2026-01-31T10:00:00+01:00"})
    assert item.created_at == datetime(2026, 1, 31, 9, 0, tzinfo=UTC)


def test_id_and_workspace_are_accepted_and_ignored_so_exports_round_trip() -> None:
    item = memory_input({"content": "x", "id": "anything", "workspace": "acme"})
    assert item.content == "x"


@pytest.mark.parametrize(
    ("origin", "tier"),
    [
        ("user:alice", 1),
        ("cli:bob", 1),
        ("api:agent", 1),
        ("import:demo", 1),
        ("evolver:Summary", 2),
        ("engine:strategy", 3),
    ],
)
def test_origin_prefix_decides_the_origin_tier(origin: str, tier: int) -> None:
    assert origin_tier(origin) == tier


def test_bulk_errors_name_the_item_index_and_field() -> None:
    body = {"items": [{"content": "fine"}, {"content": "fine"}, {"content": "x", "tier": "boiling"}]}
    assert field_of(bulk_input, body) == "items[2].tier"


@pytest.mark.parametrize("items", [None, [], "many", [{"content": "x"}] * (MAX_BULK_ITEMS + 1)])
def test_bulk_needs_a_bounded_non_empty_list(items: Any) -> None:
    assert field_of(bulk_input, {"items": items}) == "items"


def test_bulk_keeps_item_order() -> None:
    parsed = bulk_input({"items": [{"content": f"m{i}"} for i in range(4)]})
    assert [p.content for p in parsed] == ["m0", "m1", "m2", "m3"]


def test_edge_types_are_normalised_to_upper_case() -> None:
    assert edge_input({**EDGE, "type": "related"}).type == "RELATED"
    assert edge_input({**EDGE, "type": " part_of "}).type == "PART_OF"


@pytest.mark.parametrize("value", [None, "", "LIKES", 3])
def test_unknown_edge_types_are_rejected_as_type(value: Any) -> None:
    assert field_of(edge_input, {**EDGE, "type": value}) == "type"


@pytest.mark.parametrize("missing", ["source", "target", "type"])
def test_an_edge_names_the_end_or_type_it_lacks(missing: str) -> None:
    body = {**EDGE, "type": "RELATED"}
    del body[missing]
    assert field_of(edge_input, body) == missing


def test_edge_weight_defaults_to_one_and_must_be_positive_and_bounded() -> None:
    assert edge_input({**EDGE, "type": "RELATED"}).weight == 1.0
    assert edge_input({**EDGE, "type": "RELATED", "weight": None}).weight == 1.0
    assert edge_input({**EDGE, "type": "RELATED", "weight": 2}).weight == 2.0
    for bad in (0, -1, 1001, "heavy", True, math.inf):
        assert field_of(edge_input, {**EDGE, "type": "RELATED", "weight": bad}) == "weight"


def test_conversation_is_parsed_in_order_with_refs() -> None:
    sessions = conversation_input(
        {
            "sessions": [
                {
                    "started_at": "2026-01-01T10:00:00Z",
                    "turns": [{"speaker": " Dana ", "text": "Hi", "ref": "d1:1"}, {"speaker": "Lee", "text": "Yo"}],
                }
            ]
        }
    )
    assert len(sessions) == 1
    assert sessions[0].started_at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert [(t.speaker, t.text, t.ref) for t in sessions[0].turns] == [("Dana", "Hi", "d1:1"), ("Lee", "Yo", "")]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "sessions"),
        ({"sessions": []}, "sessions"),
        ({"sessions": ["x"]}, "sessions[0]"),
        ({"sessions": [{"turns": [{"speaker": "a", "text": "b"}]}]}, "sessions[0].started_at"),
        ({"sessions": [{"started_at": None, "turns": [{"speaker": "a", "text": "b"}]}]}, "sessions[0].started_at"),
        ({"sessions": [{"started_at": "", "turns": [{"speaker": "a", "text": "b"}]}]}, "sessions[0].started_at"),
        ({"sessions": [{"started_at": "soon", "turns": [{"speaker": "a", "text": "b"}]}]}, "sessions[0].started_at"),
        ({"sessions": [{"started_at": "2026-01-01T00:00:00Z", "turns": []}]}, "sessions[0].turns"),
        (
            {"sessions": [{"started_at": "2026-01-01T00:00:00Z", "turns": [{"text": "b"}]}]},
            "sessions[0].turns[0].speaker",
        ),
        (
            {"sessions": [{"started_at": "2026-01-01T00:00:00Z", "turns": [{"speaker": "a", "text": " "}]}]},
            "sessions[0].turns[0].text",
        ),
        (
            {"sessions": [{"started_at": "2026-01-01T00:00:00Z", "turns": [{"speaker": "a", "text": "b", "ref": 5}]}]},
            "sessions[0].turns[0].ref",
        ),
    ],
)
def test_bad_conversations_are_rejected_by_path(body: dict[str, Any], field: str) -> None:
    assert field_of(conversation_input, body) == field


def test_conversation_turn_count_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inputs, "MAX_TURNS", 3)
    turns = [{"speaker": "a", "text": "b"}] * 2
    session = {"started_at": "2026-01-01T00:00:00Z", "turns": turns}
    assert len(conversation_input({"sessions": [session]})) == 1
    assert field_of(conversation_input, {"sessions": [session, session]}) == "sessions"


def test_patch_validates_each_field_as_on_create() -> None:
    changes = memory_patch_input({"content": "new", "tags": ["a", "a"], "valid_from": "2026-01-01T00:00:00Z"})
    assert changes == {"content": "new", "tags": ["a"], "valid_from": datetime(2026, 1, 1, tzinfo=UTC)}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "body"),
        ("content", "body"),
        ({"origin": "user:me"}, "origin"),
        ({"id": "x"}, "id"),
        ({"content": ""}, "content"),
        ({"confidence": 3}, "confidence"),
        ({"status": "asleep"}, "status"),
        ({"subject": None}, "subject"),
        ({"pinned": 1}, "pinned"),
        ({"valid_to": "never"}, "valid_to"),
        ({"valid_from": "2026-02-01T00:00:00Z", "valid_to": "2026-01-01T00:00:00Z"}, "valid_to"),
    ],
)
def test_bad_patches_are_rejected_by_name(body: Any, field: str) -> None:
    assert field_of(memory_patch_input, body) == field


@pytest.mark.parametrize(
    ("call", "body", "field"),
    [
        (memory_input, {"content": "a\x00b"}, "content"),
        (memory_input, {"content": "x", "subject": "\x00"}, "subject"),
        (memory_input, {"content": "x", "origin": "api:\x00"}, "origin"),
        (memory_input, {"content": "x", "tags": ["t\x00"]}, "tags"),
        (memory_input, {"content": "x", "metadata": {"k": ["deep", {"v": "\x00"}]}}, "metadata"),
        (memory_input, {"content": "x", "metadata": {"k\x00": 1}}, "metadata"),
        (memory_patch_input, {"subject": "\x00"}, "subject"),
        (
            conversation_input,
            {"sessions": [{"started_at": "2026-01-01T00:00:00Z", "turns": [{"speaker": "a\x00", "text": "b"}]}]},
            "sessions[0].turns[0].speaker",
        ),
    ],
)
def test_the_nul_character_is_refused_everywhere(call: Any, body: dict[str, Any], field: str) -> None:
    assert field_of(call, body) == field


def test_a_backslash_u_sequence_in_metadata_is_plain_text() -> None:
    assert memory_input({"content": "x", "metadata": {"k": "\\u0000"}}).metadata == {"k": "\\u0000"}
