"""The request bodies of the evolution API: ``Body``, the base of every evolution body (the engine's are
``evolution.engine_inputs``).

Each body is a ``core.schemas.RequestBody``: the one definition that validates a request and documents it in the
OpenAPI schema (and, for the engine's, the MCP tools' arguments). Every refusal is an ``InvalidInput`` naming the
field. What needs the database is the services' to check.
"""

from __future__ import annotations

from typing import Any

from core.schemas import RequestBody


class Body(RequestBody):
    """A body of the evolution API: an unknown field is refused naming the fields the body has."""

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if "unknown_field" not in cls.__dict__:
            cls.unknown_field = f"unknown field; expected {', '.join(sorted(cls.model_fields))}"
