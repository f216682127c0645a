"""The request bodies of surfacing (working context, search, session pins, settings) and the field kinds its
services check their arguments with.

A body is a ``core.schemas.RequestBody``: it validates the REST request and the MCP tool call, and documents
both. ``get_working_context`` and ``search`` are also called from Python (the inspector page, the evaluation
command), so they check their arguments with the same kinds (``check_value``): one definition of what a
``k`` or a ``query`` may be, whichever door the call came through.
"""

from __future__ import annotations

from typing import Annotated, Any

from core.schemas import Documented, Integer, Number, OneOf, RequestBody, Text
from surfacing.algorithms.composite import SurfacingMode
from surfacing.algorithms.router import Strategy

MAX_K = 100
MAX_QUERY_CHARS = 2_000
MAX_SESSION_CHARS = 128
PIN_WEIGHT_MAX = 10.0

K = Annotated[int, Integer(1, MAX_K, description="how many items at most")]
Query = Annotated[str, Text(MAX_QUERY_CHARS, blank=False, description="what the agent is working on, in words")]
SessionId = Annotated[
    str,
    Text(
        MAX_SESSION_CHARS,
        null=True,
        clean=str.strip,
        description="the agent's session id (its pins and retrieval events belong to it)",
    ),
]
PinSession = Annotated[
    str, Text(MAX_SESSION_CHARS, blank=False, clean=str.strip, description="the session the pin belongs to")
]
StrategyName = Annotated[
    str | None,
    OneOf(
        tuple(s.value for s in Strategy),
        optional=True,
        code="unknown_strategy",
        description="force a strategy instead of the router's choice",
    ),
]
ModeName = Annotated[
    str | None,
    OneOf(
        tuple(m.value for m in SurfacingMode),
        optional=True,
        code="unknown_mode",
        description="surfacing mode; default: the workspace's setting",
    ),
]
MaxTokens = Annotated[int, Integer(1, description="token budget of the items (anchors always fit)")] | None
PinWeight = Annotated[
    float,
    Number(
        0.0,
        PIN_WEIGHT_MAX,
        exclusive_minimum=True,
        null_as=1.0,
        description="how strongly the pin lifts the memory (default 1)",
    ),
]
SettingsGroup = Annotated[
    dict[str, Any] | None,
    Documented(
        {
            "type": "object",
            "additionalProperties": True,
            "nullable": True,
            "description": "keys to change; a null value resets that key to the default",
        }
    ),
]


class ContextIn(RequestBody):
    """POST context/: the working context for a query."""

    session_id: SessionId = ""
    query: Query
    k: K = 20
    max_tokens: MaxTokens = None
    strategy: StrategyName = None
    mode: ModeName = None
    explain: bool = False


class SearchIn(RequestBody):
    """POST search/: direct retrieval."""

    query: Query
    k: K = 10
    session_id: SessionId = ""


class PinIn(RequestBody):
    """PUT sessions/{sid}/pins/{memory_id}/."""

    weight: PinWeight = 1.0


class SettingsIn(RequestBody):
    """PATCH settings/: each group's keys are checked by the settings they change (surfacing.settings)."""

    surfacing: SettingsGroup = None
    evolution: SettingsGroup = None
