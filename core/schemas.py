"""Request bodies as pydantic models: one definition validates what a client sends and documents it.

Every JSON body the REST API and the MCP server accept is a ``RequestBody`` subclass. ``parse`` validates a
decoded body against it and turns pydantic's first error into the project's ``InvalidInput``, naming the
field the way every answer always has (``items[3].content: expected a string``); the OpenAPI document and the
MCP tools' input schemas are generated from the same class (``openapi_schema``), so what is documented is what
is checked.

Field types are ``Annotated`` with one of a few kinds (``Text``, ``OneOf``, ``Number``, ``Integer``,
``JsonObject``; ``When`` for a date-time). Each runs one small check before pydantic's own type check, so a
refusal reads as a sentence of ours, and carries the JSON schema that documents it. The models are strict: no
string becomes a number, no ``"yes"`` a boolean; unknown fields are refused.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, NoReturn, TypeVar

from django.utils.dateparse import parse_datetime
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from core.errors import InvalidInput

MAX_JSON_DEPTH = 32
"""Nesting of objects and lists in a free-form JSON field: deep enough for any real document, shallow enough
that no encoder or walker down the line (orjson stops at 255) recurses into trouble."""
MAX_BIGINT = 2**63 - 1
"""The largest integer a query parameter may hold (a database BIGINT)."""
_SURROGATE = re.compile("[\ud800-\udfff]")

Model = TypeVar("Model", bound="RequestBody")
QueryT = TypeVar("QueryT", bound="QueryParams")


class RequestBody(BaseModel):
    """A JSON body the API accepts: unknown fields refused, no coercion between JSON types."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, populate_by_name=False)

    unknown_field: ClassVar[str] = ""
    """How a field the body does not know is refused; by default it names the fields the body has (a PATCH
    says instead that the field cannot be changed)."""


class QueryParams(RequestBody):
    """The query parameters of a GET: every value arrives as text, which the field's kind reads (``Flag``,
    ``WholeNumber``); a parameter the model does not name is left alone (DRF's ``format``, a cache buster)."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


def reject(reason: str, code: str = "invalid") -> NoReturn:
    """Refuse a value from inside a field's validator: ``parse`` prefixes the field's path to ``reason`` and
    answers with the error ``code``."""
    raise PydanticCustomError(code, "{reason}", {"reason": reason})


def unstorable_reason(value: str) -> str | None:
    """Why no database column can hold ``value`` (None when one can)."""
    # PostgreSQL text and jsonb cannot hold U+0000, and no database stores half a UTF-16 pair (a lone
    # surrogate such as "\ud800", which JSON escapes can spell); refusing both keeps the backends alike.
    if "\x00" in value:
        return "must not contain the NUL character (U+0000)"
    if _SURROGATE.search(value):
        return "must be valid Unicode (a lone surrogate is not)"
    return None


# -- turning pydantic's errors into ours -----------------------------------------------------------------


def field_path(loc: Sequence[int | str], prefix: str = "", *, indexes: bool = True) -> str:
    """``("items", 3, "content")`` as ``items[3].content``; an empty location is the body itself. Without
    ``indexes`` a position in a list is left out (a repeated query parameter is named as itself)."""
    path = prefix.rstrip(".")
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]" if indexes else ""
        else:
            path = f"{path}.{part}" if path else str(part)
    return path or "body"


def _reason(error: Mapping[str, Any], model: type[RequestBody]) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if "reason" in ctx:
        return str(ctx["reason"])
    if kind == "extra_forbidden":
        return model.unknown_field or f"unknown field; expected {', '.join(sorted(model.model_fields))}"
    simple = {
        "missing": "this field is required",
        "string_type": "expected a string",
        "bool_type": "expected true or false",
        "int_type": "expected an integer",
        "float_type": "expected a number",
        "list_type": "expected a list",
        "dict_type": "expected a JSON object",
        "model_type": "expected a JSON object",
        "model_attributes_type": "expected a JSON object",
    }
    if kind in simple:
        return simple[kind]
    if kind == "too_short":
        return "expected a non-empty list" if ctx.get("min_length") == 1 else f"at least {ctx['min_length']} items"
    if kind == "too_long":
        return f"at most {ctx['max_length']} items"
    if kind == "string_too_long":
        return f"longer than {ctx['max_length']} characters"
    return str(error["msg"])


def parse(model: type[Model], data: Any, *, prefix: str = "", indexes: bool = True) -> Model:
    """Validate ``data`` (a decoded JSON body) as ``model``; a refusal is an ``InvalidInput`` naming the field
    (under ``prefix``, for a body nested in another; see ``field_path`` for ``indexes``)."""
    if not isinstance(data, Mapping):
        name = field_path((), prefix)
        raise InvalidInput(f"{name}: expected a JSON object", field=name)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        # An unknown field says most about a mistaken body (a typo, a client written for another version).
        error = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        name = field_path(error["loc"], prefix, indexes=indexes)
        raise _invalid(error, name, _owner(model, error["loc"])) from None


def _invalid(error: Mapping[str, Any], name: str, model: type[RequestBody]) -> InvalidInput:
    code = error["type"] if "reason" in (error.get("ctx") or {}) else "invalid"
    return InvalidInput(f"{name}: {_reason(error, model)}", code=code, field=name)


def _owner(model: type[RequestBody], loc: Sequence[int | str]) -> type[RequestBody]:
    """The nested model that holds the field at ``loc`` (whose ``unknown_field`` words a refusal)."""
    current = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = current.model_fields.get(str(part))
        inner = _model_in(field.annotation) if field is not None else None
        if inner is None:
            break
        current = inner
    return current


def nested_models(model: type[RequestBody]) -> list[type[RequestBody]]:
    """The request models ``model``'s fields hold, at any depth (not ``model`` itself)."""
    found: list[type[RequestBody]] = []
    stack = [model]
    while stack:
        for field in stack.pop().model_fields.values():
            for inner in _models_in(field.annotation):
                if inner not in found and inner is not model:
                    found.append(inner)
                    stack.append(inner)
    return found


def _models_in(annotation: Any) -> list[type[RequestBody]]:
    if isinstance(annotation, type) and issubclass(annotation, RequestBody):
        return [annotation]
    return [m for arg in getattr(annotation, "__args__", ()) for m in _models_in(arg)]


def _model_in(annotation: Any) -> type[RequestBody] | None:
    found = _models_in(annotation)
    return found[0] if found else None


# -- field kinds -----------------------------------------------------------------------------------------


class Kind(ABC):
    """Metadata of an ``Annotated`` field: ``check`` runs before pydantic's own type check (and may clean the
    value), ``json_schema`` documents the field."""

    @abstractmethod
    def check(self, value: Any) -> Any: ...

    def json_schema(self) -> dict[str, Any]:
        return {}

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.no_info_before_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return self.json_schema()


@dataclass(frozen=True, eq=False)
class Text(Kind):
    """A string of at most ``max_length`` characters (after ``clean``, e.g. ``str.strip``), storable in any
    database; ``blank=False`` refuses one of only spaces, ``null=True`` reads null as ""."""

    max_length: int
    blank: bool = True
    null: bool = False
    clean: Callable[[str], str] | None = None
    description: str | None = None

    def check(self, value: Any) -> Any:
        if value is None and self.null:
            return ""
        if not isinstance(value, str):
            return value  # pydantic's own check refuses it as "expected a string"
        cleaned = self.clean(value) if self.clean is not None else value
        if not self.blank and not cleaned.strip():
            reject("must not be blank")
        if len(cleaned) > self.max_length:
            reject(f"longer than {self.max_length} characters")
        problem = unstorable_reason(cleaned)
        if problem:
            reject(problem)
        return cleaned

    def json_schema(self) -> dict[str, Any]:
        return _described(
            {"type": "string", "maxLength": self.max_length}
            | ({} if self.blank else {"minLength": 1})
            | ({"nullable": True} if self.null else {}),
            self.description,
        )


@dataclass(frozen=True, eq=False)
class OneOf(Kind):
    """One of ``values`` (after ``normalise``, e.g. upper-casing an edge type); null reads as ``null_as`` when
    one is given, and null or "" as None when ``optional`` (the field's type is then ``str | None``)."""

    values: Sequence[str]
    null_as: str | None = None
    optional: bool = False
    normalise: Callable[[str], str] | None = None
    code: str = "invalid"
    description: str | None = None

    def check(self, value: Any) -> str | None:
        if value is None and self.null_as is not None:
            return self.null_as
        if self.optional and value in (None, ""):
            return None
        candidate = self.normalise(value) if self.normalise is not None and isinstance(value, str) else value
        if candidate not in self.values:
            reject(f"{value!r} is not one of {', '.join(self.values)}", self.code)
        return str(candidate)

    def json_schema(self) -> dict[str, Any]:
        nullable = {"nullable": True} if self.null_as is not None or self.optional else {}
        return _described({"type": "string", "enum": list(self.values)} | nullable, self.description)


@dataclass(frozen=True, eq=False)
class Number(Kind):
    """A finite JSON number in [minimum, maximum] (or (minimum, maximum]); ``reason`` words every refusal; null
    reads as ``null_as`` when one is given."""

    minimum: float
    maximum: float
    exclusive_minimum: bool = False
    reason: str | None = None
    out_of_range: str | None = None
    null_as: float | None = None
    description: str | None = None

    def check(self, value: Any) -> float:
        if value is None and self.null_as is not None:
            return self.null_as
        low = "(" if self.exclusive_minimum else "["
        refusal = self.reason or f"expected a number in {low}{self.minimum:g}, {self.maximum:g}]"
        if isinstance(value, bool) or not isinstance(value, int | float):
            reject(refusal)
        number = float(value)
        below = number <= self.minimum if self.exclusive_minimum else number < self.minimum
        if below or not number <= self.maximum:  # NaN fails both comparisons
            reject(self.out_of_range or refusal)
        return number

    def json_schema(self) -> dict[str, Any]:
        # OpenAPI 3.0 writes an exclusive bound as a flag beside the bound.
        extra = {"exclusiveMinimum": True} if self.exclusive_minimum else {}
        if self.null_as is not None:
            extra["nullable"] = True
        return _described(
            {"type": "number", "minimum": self.minimum, "maximum": self.maximum} | extra, self.description
        )


@dataclass(frozen=True, eq=False)
class Integer(Kind):
    """A JSON integer in [minimum, maximum] (no maximum when None; true and false are not numbers here)."""

    minimum: int
    maximum: int | None = None
    description: str | None = None

    def check(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            reject("expected an integer")
        if self.maximum is None and value < self.minimum:
            reject(f"must be at least {self.minimum}")
        if self.maximum is not None and not self.minimum <= value <= self.maximum:
            reject(f"must be between {self.minimum} and {self.maximum}")
        return int(value)

    def json_schema(self) -> dict[str, Any]:
        bounds = {"minimum": self.minimum} | ({"maximum": self.maximum} if self.maximum is not None else {})
        return _described({"type": "integer"} | bounds, self.description)


@dataclass(frozen=True, eq=False)
class JsonObject(Kind):
    """A free-form JSON object of at most ``max_bytes`` encoded, every key and string storable, nested at most
    MAX_JSON_DEPTH deep; null is an empty object."""

    max_bytes: int
    description: str | None = None

    def check(self, value: Any) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            reject("expected a JSON object")
        # Depth and storable text first: the encoder below recurses.
        check_json_tree(value)
        try:
            encoded = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            reject("must be plain JSON (no NaN or non-JSON values)")
        if len(encoded.encode()) > self.max_bytes:
            reject(f"larger than {self.max_bytes} bytes")
        return value

    def json_schema(self) -> dict[str, Any]:
        return _described({"type": "object", "additionalProperties": True, "nullable": True}, self.description)


@dataclass(frozen=True, eq=False)
class Items(Kind):
    """A non-empty list of at most ``max_items`` ``noun`` (each item checked by the list's item type)."""

    noun: str
    max_items: int | None = None

    def check(self, value: Any) -> Any:
        if not isinstance(value, list) or not value:
            reject(f"expected a non-empty list of {self.noun}")
        if self.max_items is not None and len(value) > self.max_items:
            reject(f"at most {self.max_items} {self.noun} per request")
        return value

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema["minItems"] = 1
        if self.max_items is not None:
            json_schema["maxItems"] = self.max_items
        return json_schema


@dataclass(frozen=True, eq=False)
class Documented(Kind):
    """A field pydantic checks by its type alone, documented by ``schema``."""

    schema: Mapping[str, Any]

    def check(self, value: Any) -> Any:
        return value

    def json_schema(self) -> dict[str, Any]:
        return dict(self.schema)


@dataclass(frozen=True, eq=False)
class Flag(Kind):
    """A query parameter read as true (1, true, yes, on) or false (0, false, no, off); blank is not given."""

    description: str | None = None

    def check(self, value: Any) -> bool | None:
        if value is None or isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text == "":
            return None
        if text in {"1", "true", "yes", "on"}:
            return True
        if text in {"0", "false", "no", "off"}:
            return False
        reject("expected true or false")

    def json_schema(self) -> dict[str, Any]:
        return _described({"type": "boolean"}, self.description)


@dataclass(frozen=True, eq=False)
class WholeNumber(Kind):
    """A query parameter read as an integer in [minimum, maximum] (at most a database BIGINT); blank is not
    given."""

    minimum: int = 0
    maximum: int = MAX_BIGINT
    description: str | None = None

    def check(self, value: Any) -> int | None:
        if value is None or value == "":
            return None
        text = str(value).strip()
        if isinstance(value, bool) or len(text) > 20 or not text.lstrip("-").isdigit():
            reject("expected an integer")
        number = int(text)
        if not self.minimum <= number <= self.maximum:
            reject(f"must be between {self.minimum} and {self.maximum}")
        return number

    def json_schema(self) -> dict[str, Any]:
        return _described({"type": "integer", "minimum": self.minimum, "maximum": self.maximum}, self.description)


def _described(schema: dict[str, Any], description: str | None) -> dict[str, Any]:
    return schema | {"description": description} if description else schema


def parse_when(value: Any, name: str) -> datetime | None:
    """An ISO 8601 date-time as an aware UTC datetime (naive text counts as UTC); None for null or "".

    For a query parameter or a command's argument; a body field is a ``When``. A time the database cannot
    hold (past year 9999 once moved to UTC, say "9999-12-31T23:59:59-14:00") is refused naming the field,
    like one that does not parse."""
    try:
        return _when(value)
    except PydanticCustomError as exc:
        reason = exc.context["reason"] if exc.context else exc.message()
        raise InvalidInput(f"{name}: {reason}", field=name) from None


def _when(value: Any) -> datetime | None:
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
        reject("expected an ISO 8601 date-time such as 2026-01-31T09:00:00Z")
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        return parsed.astimezone(UTC)
    except OverflowError:
        reject("out of range (years 1 to 9999 in UTC)")


def _moment(value: Any) -> datetime:
    when = _when(value)
    if when is None:
        reject("this field is required")
    return when


When = Annotated[
    datetime | None,
    BeforeValidator(_when),
    WithJsonSchema({"type": "string", "format": "date-time", "nullable": True}),
]
"""An optional ISO 8601 date-time, read as UTC when it names no offset; null or "" is no time."""

Moment = Annotated[datetime, BeforeValidator(_moment), WithJsonSchema({"type": "string", "format": "date-time"})]
"""A required ISO 8601 date-time (null and "" are refused as missing)."""


def check_json_tree(value: Any) -> None:
    """Walk a JSON value without recursion: every key and string storable, nesting within MAX_JSON_DEPTH."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, str):
            problem = unstorable_reason(node)
            if problem:
                reject(problem)
        elif isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                reject(f"nested deeper than {MAX_JSON_DEPTH} levels")
            if isinstance(node, dict):
                for key, child in node.items():
                    if isinstance(key, str):
                        problem = unstorable_reason(key)
                        if problem:
                            reject(problem)
                    stack.append((child, depth + 1))
            else:
                stack.extend((child, depth + 1) for child in node)


def check_value(kind: Any, value: Any, name: str) -> Any:
    """``value`` validated as one field of type ``kind`` (an ``Annotated`` alias), outside any body: for
    a reviewer's edit of a proposal's payload, say, checked as the same field of a memory is."""
    # Keyed by identity: the kinds are module constants, and their schemas (dicts) make them unhashable.
    held = _adapters.get(id(kind))
    if held is None:
        held = _adapters[id(kind)] = (kind, TypeAdapter(kind, config=ConfigDict(strict=True)))
    adapter = held[1]
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise _invalid(exc.errors(include_url=False, include_input=False)[0], name, RequestBody) from None


_adapters: dict[int, tuple[Any, TypeAdapter[Any]]] = {}


# -- documentation ---------------------------------------------------------------------------------------


class OpenApi30(GenerateJsonSchema):
    """pydantic's JSON Schema in the OpenAPI 3.0 dialect the API document is written in: an optional value is
    ``nullable`` rather than a union with ``{"type": "null"}``, and no titles repeat the field names."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        inner = self.generate_inner(schema["schema"])
        if "$ref" in inner:
            # A nested body that may be null; its type beside the reference, for clients that read an
            # argument's type without following references (MCP clients do).
            return {"type": "object", "allOf": [inner], "nullable": True}
        return {**inner, "nullable": True}

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        # A PATCH field defaults to None only to tell "not sent" apart; that is no default a client can send.
        json_schema = super().default_schema(schema)
        if "default" in json_schema and json_schema["default"] is None and not json_schema.get("nullable"):
            del json_schema["default"]
        return json_schema


def tool_schema(model: type[RequestBody], *, leave_out: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The JSON schema of ``model``'s fields for an MCP tool's arguments: ``properties``, ``required`` and the
    nested models under ``$defs`` (fields in ``leave_out`` are not arguments of the tool)."""
    schema = _json_schema_dialect(
        model.model_json_schema(ref_template="#/$defs/{model}", schema_generator=OpenApi30, mode="validation")
    )
    return {
        "properties": {k: v for k, v in schema["properties"].items() if k not in leave_out},
        "required": tuple(k for k in schema.get("required", ()) if k not in leave_out),
        "$defs": schema.get("$defs", {}),
    }


def _json_schema_dialect(node: Any) -> Any:
    """An OpenAPI 3.0 schema in plain JSON Schema (what MCP clients read): ``nullable`` becomes a "null" type,
    an exclusive bound flag becomes the bound itself."""
    if isinstance(node, list):
        return [_json_schema_dialect(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: _json_schema_dialect(value) for key, value in node.items()}
    if converted.pop("nullable", False):
        if "type" not in converted:
            return {"anyOf": [converted, {"type": "null"}]}
        converted["type"] = [converted["type"], "null"]
    if converted.get("exclusiveMinimum") is True:
        converted["exclusiveMinimum"] = converted.pop("minimum")
    return converted


def parse_query(model: type[QueryT], params: Any) -> QueryT:
    """Validate a GET's query parameters (a ``QueryDict`` or a plain mapping) as ``model``: a list field takes
    every value given for its name, any other field the last one."""
    data: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        if _is_list(field.annotation):
            values = params.getlist(name) if hasattr(params, "getlist") else params.get(name)
            if values:
                data[name] = list(values) if isinstance(values, list | tuple) else [values]
        elif params.get(name) is not None:
            data[name] = params.get(name)
    return parse(model, data, indexes=False)


def _is_list(annotation: Any) -> bool:
    origin = getattr(annotation, "__origin__", None)
    if origin in (list, tuple):
        return True
    return any(_is_list(arg) for arg in getattr(annotation, "__args__", ()) if arg is not type(None))


def query_parameters(model: type[QueryParams]) -> list[dict[str, Any]]:
    """Each query parameter of ``model`` as ``{name, schema, description, required, many}``: what an
    ``OpenApiParameter`` needs to document it."""
    schema = openapi_schema(model)
    required = set(schema.get("required", ()))
    documented = []
    for name, node in schema["properties"].items():
        node = dict(node)
        description = node.pop("description", "")
        node.pop("default", None)
        many = node.get("type") == "array"
        documented.append(
            {
                "name": name,
                "schema": node["items"] if many else node,
                "description": description,
                "required": name in required,
                "many": many,
            }
        )
    return documented


def openapi_schema(model: type[RequestBody], *, ref_template: str = "#/components/schemas/{model}") -> dict[str, Any]:
    """The JSON schema of ``model`` as a request body, its nested models under ``$defs``."""
    schema: dict[str, Any] = model.model_json_schema(
        ref_template=ref_template, schema_generator=OpenApi30, mode="validation"
    )
    schema.pop("title", None)
    return schema
