"""core.schemas: request bodies that validate with our wording and document themselves."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import pytest
from django.http import QueryDict

from core.errors import InvalidInput
from core.schemas import (
    MAX_JSON_DEPTH,
    Flag,
    Integer,
    Items,
    JsonObject,
    Number,
    OneOf,
    QueryParams,
    RequestBody,
    Text,
    When,
    WholeNumber,
    check_value,
    field_path,
    openapi_schema,
    parse,
    parse_query,
    query_parameters,
    tool_schema,
)


class Line(RequestBody):
    text: Annotated[str, Text(10, blank=False, clean=str.strip)]
    weight: Annotated[float, Number(0.0, 5.0, exclusive_minimum=True, null_as=1.0)] = 1.0


class Page(RequestBody):
    title: Annotated[str, Text(20, null=True)] = ""
    kind: Annotated[str | None, OneOf(("a", "b"), optional=True, code="unknown_kind")] = None
    lines: Annotated[list[Line], Items("lines", 3)]
    meta: Annotated[dict[str, Any], JsonObject(100)] = {}
    at: When = None
    count: Annotated[int, Integer(1, 9)] = 1


class Listing(QueryParams):
    tag: list[Annotated[str, Text(10)]] = []
    flag: Annotated[bool | None, Flag()] = None
    limit: Annotated[int | None, WholeNumber(1, 100, description="how many")] = None


def refusal(model: type[RequestBody], data: Any) -> InvalidInput:
    with pytest.raises(InvalidInput) as info:
        parse(model, data)
    return info.value


def test_a_location_reads_as_the_path_a_client_wrote() -> None:
    assert field_path(("lines", 2, "text")) == "lines[2].text"
    assert field_path(()) == "body"
    assert field_path(("text",), "items[0].") == "items[0].text"
    assert field_path(("tag", 1), indexes=False) == "tag"


def test_a_valid_body_is_cleaned_and_defaulted() -> None:
    page = parse(Page, {"lines": [{"text": "  hi  ", "weight": None}], "at": "2026-01-31T10:00:00+01:00"})
    assert page.lines[0].text == "hi"
    assert page.lines[0].weight == 1.0
    assert page.at == datetime(2026, 1, 31, 9, tzinfo=UTC)
    assert page.kind is None and page.title == "" and page.count == 1


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({}, "lines", "this field is required"),
        ({"lines": []}, "lines", "expected a non-empty list of lines"),
        ({"lines": [{"text": "x"}] * 4}, "lines", "at most 3 lines per request"),
        ({"lines": ["x"]}, "lines[0]", "expected a JSON object"),
        ({"lines": [{"text": "   "}]}, "lines[0].text", "must not be blank"),
        ({"lines": [{"text": 3}]}, "lines[0].text", "expected a string"),
        ({"lines": [{"text": "x" * 11}]}, "lines[0].text", "longer than 10 characters"),
        ({"lines": [{"text": "a\x00"}]}, "lines[0].text", "U+0000"),
        ({"lines": [{"text": "\ud800"}]}, "lines[0].text", "lone surrogate"),
        ({"lines": [{"text": "x", "weight": 0}]}, "lines[0].weight", "(0, 5]"),
        ({"lines": [{"text": "x", "weight": True}]}, "lines[0].weight", "expected a number"),
        ({"lines": [{"text": "x"}], "count": "2"}, "count", "expected an integer"),
        ({"lines": [{"text": "x"}], "count": 10}, "count", "between 1 and 9"),
        ({"lines": [{"text": "x"}], "at": "soon"}, "at", "ISO 8601"),
        ({"lines": [{"text": "x"}], "at": "9999-12-31T23:59:59-14:00"}, "at", "out of range"),
        ({"lines": [{"text": "x"}], "meta": []}, "meta", "expected a JSON object"),
        ({"lines": [{"text": "x"}], "meta": {"k": "x" * 100}}, "meta", "larger than 100 bytes"),
        ({"lines": [{"text": "x"}], "title": 5}, "title", "expected a string"),
    ],
)
def test_each_refusal_names_the_field_in_our_words(data: Any, field: str, words: str) -> None:
    error = refusal(Page, data)
    assert error.field == field
    assert error.detail.startswith(f"{field}: ")
    assert words in error.detail
    assert error.code == "invalid"


def test_nesting_deeper_than_the_bound_is_refused_without_recursion() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_JSON_DEPTH + 5):
        node["k"] = {}
        node = node["k"]
    error = refusal(Page, {"lines": [{"text": "x"}], "meta": deep})
    assert error.field == "meta" and str(MAX_JSON_DEPTH) in error.detail


def test_an_unknown_field_is_named_before_any_other_mistake() -> None:
    error = refusal(Page, {"lines": [], "colour": "red"})
    assert error.field == "colour"
    assert error.detail == "colour: unknown field; expected at, count, kind, lines, meta, title"


def test_a_body_that_is_not_an_object_is_the_body_s_fault() -> None:
    assert refusal(Page, ["x"]).field == "body"
    with pytest.raises(InvalidInput) as info:
        parse(Line, "x", prefix="items[2].")
    assert info.value.field == "items[2]"


def test_a_choice_answers_with_its_own_error_code() -> None:
    error = refusal(Page, {"lines": [{"text": "x"}], "kind": "c"})
    assert error.code == "unknown_kind"
    assert error.detail == "kind: 'c' is not one of a, b"
    assert parse(Page, {"lines": [{"text": "x"}], "kind": ""}).kind is None


def test_one_field_is_checked_outside_a_body_with_the_same_words() -> None:
    assert check_value(Annotated[int, Integer(1, 9)], 3, "k") == 3
    with pytest.raises(InvalidInput) as info:
        check_value(Annotated[int, Integer(1, 9)], 0, "k")
    assert info.value.detail == "k: must be between 1 and 9"


def test_query_parameters_arrive_as_text_and_are_read_by_their_kind() -> None:
    query = parse_query(Listing, QueryDict("tag=a&tag=b&flag=yes&limit=20&format=json"))
    assert (query.tag, query.flag, query.limit) == (["a", "b"], True, 20)
    empty = parse_query(Listing, QueryDict("flag=&limit="))
    assert (empty.tag, empty.flag, empty.limit) == ([], None, None)


@pytest.mark.parametrize(
    ("text", "field"),
    [("flag=maybe", "flag"), ("limit=ten", "limit"), ("limit=0", "limit"), ("limit=99999999999999999999", "limit")],
)
def test_a_bad_query_parameter_is_named(text: str, field: str) -> None:
    with pytest.raises(InvalidInput) as info:
        parse_query(Listing, QueryDict(text))
    assert info.value.field == field


def test_a_repeated_query_parameter_is_named_without_a_position() -> None:
    with pytest.raises(InvalidInput) as info:
        parse_query(Listing, QueryDict("tag=ok&tag=" + "x" * 11))
    assert info.value.field == "tag"


def test_the_openapi_schema_is_the_3_0_dialect() -> None:
    schema = openapi_schema(Page)
    assert schema["required"] == ["lines"]
    assert schema["additionalProperties"] is False
    assert schema["properties"]["at"] == {"type": "string", "format": "date-time", "nullable": True, "default": None}
    assert schema["properties"]["lines"]["minItems"] == 1 and schema["properties"]["lines"]["maxItems"] == 3
    weight = schema["$defs"]["Line"]["properties"]["weight"]
    assert weight["exclusiveMinimum"] is True and weight["minimum"] == 0.0
    assert "title" not in schema["properties"]["title"]


def test_the_tool_schema_is_plain_json_schema() -> None:
    schema = tool_schema(Page, leave_out=frozenset({"meta"}))
    assert "meta" not in schema["properties"]
    assert schema["required"] == ("lines",)
    assert schema["properties"]["at"]["type"] == ["string", "null"]
    weight = schema["$defs"]["Line"]["properties"]["weight"]
    assert weight["exclusiveMinimum"] == 0.0 and "minimum" not in weight


def test_query_parameters_document_each_field_once() -> None:
    documented = {p["name"]: p for p in query_parameters(Listing)}
    assert set(documented) == {"tag", "flag", "limit"}
    assert documented["tag"]["many"] and documented["tag"]["schema"]["type"] == "string"
    assert documented["limit"]["schema"] == {"type": "integer", "minimum": 1, "maximum": 100}
    assert documented["limit"]["description"] == "how many"
