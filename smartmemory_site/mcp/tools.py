"""The MCP tools: each one the adapter of one REST operation, over the same selectors and services.

A tool resolves the caller's access to the workspace first (a non-member's workspace is not found, a
viewer's write is forbidden, exactly as ``workspace_access`` answers the REST views), then checks the
argument names against its input schema, then hands the values to the validators and the service the REST
view calls, and renders the REST contract's JSON. Every value check is the shared validators' own, so a bad
argument is refused with the REST API's code, field and message, before anything is written.

The JSON Schemas describe the arguments to the client (types, ranges, choices); each is generated from the
request model the REST call parses with (``core.schemas.tool_schema``), so it documents exactly what is
checked, with the REST API's messages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from rest_framework import exceptions

from core.errors import DomainError, InvalidInput, NotFound
from core.schemas import RequestBody, parse, tool_schema
from core.throttles import throttle_hit
from evolution import engine, engine_inputs
from evolution import inputs as evolution_inputs
from evolution.api import memory_history_json
from evolution.api_engine import evolve_json, outcome_json
from evolution.api_proposals import proposal_page_json
from memories import inputs, services
from memories import selectors as memory_selectors
from memories.serializers import iso_z, memory_json
from surfacing import inputs as surfacing_inputs
from surfacing import services as surfacing_services
from surfacing.api import context_json, search_for, working_context_for

Json = dict[str, Any]

WORKSPACE = "workspace"
WRITE_SCOPE = "write"


class Throttled(DomainError):
    """The caller's writes reached the ``write`` rate (core.throttles): the REST API's 429."""

    status_code = 429
    code = "throttled"

    def __init__(self, wait: float) -> None:
        super().__init__(str(exceptions.Throttled(wait).detail))
        self.wait = wait


@dataclass(frozen=True)
class Caller:
    """Who calls: the token's user, and the workspace the connection is bound to (stdio), if any."""

    user: AbstractBaseUser
    workspace: str | None = None


Handler = Callable[[memory_selectors.WorkspaceAccess, AbstractBaseUser, Mapping[str, Any]], Json]


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    properties: Mapping[str, Json]
    required: tuple[str, ...]
    require: memory_selectors.Access
    # Counted against the caller's write rate, as the REST call is (search and context are reads).
    counts_as_write: bool
    read_only: bool
    idempotent: bool
    handler: Handler
    # Nested shapes the properties refer to ("#/$defs/SessionIn"), when they come from a request body.
    defs: Mapping[str, Json] = field(default_factory=dict)

    def input_schema(self, *, bound: bool) -> Json:
        """The JSON Schema of the arguments; ``workspace`` is optional on a connection bound to one."""
        workspace = {"type": "string", "description": "the workspace's slug"}
        if bound:
            workspace["description"] += " (default and only choice: the workspace this connection serves)"
        required = list(self.required) if bound else [WORKSPACE, *self.required]
        schema = {
            "type": "object",
            "properties": {WORKSPACE: workspace, **self.properties},
            "required": required,
            "additionalProperties": False,
        }
        if self.defs:
            schema["$defs"] = dict(self.defs)
        return schema


def workspace_slug(caller: Caller, arguments: Mapping[str, Any]) -> str:
    """The workspace a call names (or the connection's own); another one than a bound connection's is not
    found, like a workspace the caller is no member of."""
    slug = arguments.get(WORKSPACE, caller.workspace)
    if slug is None:
        raise InvalidInput(f"{WORKSPACE}: this field is required", field=WORKSPACE)
    if not isinstance(slug, str) or not slug:
        raise InvalidInput(f"{WORKSPACE}: expected a workspace slug", field=WORKSPACE)
    if caller.workspace is not None and slug != caller.workspace:
        raise NotFound(f"workspace {slug!r} not found", field=WORKSPACE)
    return slug


def call(spec: ToolSpec, caller: Caller, arguments: Mapping[str, Any]) -> Json:
    """Run one tool call: the write rate, access, argument names, then the tool's validators and service
    (the order of the REST API: DRF throttles before the view runs)."""
    if spec.counts_as_write:
        wait = throttle_hit(WRITE_SCOPE, f"user:{caller.user.pk}")
        if wait is not None:
            raise Throttled(wait)
    access = memory_selectors.workspace_access(
        user=caller.user, slug=workspace_slug(caller, arguments), require=spec.require
    )
    body = {k: v for k, v in arguments.items() if k != WORKSPACE}
    allowed = sorted(spec.properties)
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidInput(f"{unknown[0]}: unknown field; expected {', '.join(allowed)}", field=unknown[0])
    for name in spec.required:
        if name not in body:
            raise InvalidInput(f"{name}: this field is required", field=name)
    return spec.handler(access, caller.user, body)


# -- argument schemas -------------------------------------------------------------------------------


# The request bodies of the REST API document these tools' arguments too (id and workspace: an export's keys).
_MEMORY = tool_schema(inputs.MemoryIn, leave_out=frozenset({"id", WORKSPACE}))
_CONVERSATION = tool_schema(inputs.ConversationIn)


class PinArgs(RequestBody):
    """A pin tool's arguments: the REST call's path parameters and its body in one object."""

    session_id: surfacing_inputs.PinSession
    memory_id: inputs.MemoryRef
    weight: surfacing_inputs.PinWeight = 1.0


class UnpinArgs(RequestBody):
    session_id: surfacing_inputs.PinSession
    memory_id: inputs.MemoryRef


_CONTEXT = tool_schema(surfacing_inputs.ContextIn)
_SEARCH = tool_schema(surfacing_inputs.SearchIn)
_PIN = tool_schema(PinArgs)
_UNPIN = tool_schema(UnpinArgs)

# The engine's request bodies document its tools' arguments too.
_OUTCOME = tool_schema(engine_inputs.OutcomeIn)
_CORRECTION = tool_schema(engine_inputs.CorrectionIn)
_REFLECTION = tool_schema(engine_inputs.ReflectionIn)


class HistoryArgs(evolution_inputs.HistoryQuery):
    """memory_history's arguments: the REST call's path parameter and its query in one object."""

    memory_id: inputs.MemoryRef


_HISTORY = tool_schema(HistoryArgs)
_PROPOSALS = tool_schema(evolution_inputs.ProposalListQuery)


# -- handlers ---------------------------------------------------------------------------------------


def _working_context(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    return context_json(working_context_for(access.workspace, body))


def _search(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    return search_for(access.workspace, body)


def _add_memory(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    item = inputs.memory_input(body)
    (memory,) = services.client_memories_create(
        workspace=access.workspace, actor=user, items=[item], trusted=access.is_owner, bulk=False
    )
    return memory_json(memory, timezone.now(), workspace=access.workspace)


def _ingest(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    sessions = inputs.conversation_input(body)
    ids = services.conversation_ingest(workspace=access.workspace, actor=user, sessions=sessions)
    return {"ids": [str(i) for i in ids]}


def _pin(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    args = parse(PinArgs, body)
    memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=args.memory_id, field="memory_id")
    pin = surfacing_services.pin_put(
        workspace=access.workspace, session_id=args.session_id, memory=memory, weight=args.weight
    )
    return {
        "session_id": args.session_id,
        "memory_id": str(pin.memory_id),
        "weight": pin.weight,
        "expires_at": iso_z(pin.expires_at),
    }


def _unpin(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    args = parse(UnpinArgs, body)
    memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=args.memory_id, field="memory_id")
    removed = surfacing_services.pin_delete(workspace=access.workspace, session_id=args.session_id, memory=memory)
    return {"session_id": args.session_id, "memory_id": str(memory.id), "removed": removed}


def _outcome(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    recorded = engine.outcome_record(workspace=access.workspace, item=engine_inputs.outcome_input(body))
    return {**outcome_json(recorded.outcome), "proposals": evolve_json(recorded.evolved)}


def _correction(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    item = engine_inputs.correction_input(body)
    memory = engine.correction_record(workspace=access.workspace, actor=user, item=item)
    return memory_json(memory, timezone.now(), workspace=access.workspace)


def _reflection(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    item = engine_inputs.reflection_input(body)
    recorded = engine.reflection_record(workspace=access.workspace, actor=user, item=item)
    return memory_json(recorded.memory, timezone.now(), workspace=access.workspace)


def _history(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    return memory_history_json(access.workspace, body["memory_id"], body)


def _proposals(access: memory_selectors.WorkspaceAccess, user: AbstractBaseUser, body: Mapping[str, Any]) -> Json:
    return proposal_page_json(access.workspace, body)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        name="get_working_context",
        title="Get working context",
        description=(
            "The memories to work with for a query, ranked, each with its score breakdown (activation, relevance, "
            "recency, centrality, pins, anchors) and provenance (how it was found), plus drift warnings. "
            "Call it at the start of a task and when the task changes; the items it returns are warmed up."
        ),
        properties=_CONTEXT["properties"],
        required=_CONTEXT["required"],
        require="view",
        counts_as_write=False,
        read_only=False,
        idempotent=False,
        handler=_working_context,
    ),
    ToolSpec(
        name="search_memories",
        title="Search memories",
        description="Direct retrieval: the memories most relevant to a query, best first, with a score in [0, 1].",
        properties=_SEARCH["properties"],
        required=_SEARCH["required"],
        require="view",
        counts_as_write=False,
        read_only=False,
        idempotent=False,
        handler=_search,
    ),
    ToolSpec(
        name="add_memory",
        title="Add a memory",
        description="Store one memory (a fact, a decision, a preference, an observation...). Needs editor or owner.",
        properties=_MEMORY["properties"],
        required=_MEMORY["required"],
        defs=_MEMORY["$defs"],
        require="edit",
        counts_as_write=True,
        read_only=False,
        idempotent=False,
        handler=_add_memory,
    ),
    ToolSpec(
        name="ingest_conversation",
        title="Ingest a conversation",
        description=(
            "Store conversations: one episodic memory per turn, linked to its session and to the previous turn, "
            "with entity mentions. Returns the new ids in turn order. Needs editor or owner."
        ),
        properties=_CONVERSATION["properties"],
        required=_CONVERSATION["required"],
        defs=_CONVERSATION["$defs"],
        require="edit",
        counts_as_write=True,
        read_only=False,
        idempotent=False,
        handler=_ingest,
    ),
    ToolSpec(
        name="pin_memory",
        title="Pin a memory for a session",
        description="Keep a memory in the session's working context for 24 hours (any member may pin).",
        properties=_PIN["properties"],
        required=_PIN["required"],
        require="view",
        counts_as_write=True,
        read_only=False,
        idempotent=True,
        handler=_pin,
    ),
    ToolSpec(
        name="unpin_memory",
        title="Unpin a memory",
        description="Remove a session's pin; removed is false when there was none.",
        properties=_UNPIN["properties"],
        required=_UNPIN["required"],
        require="view",
        counts_as_write=True,
        read_only=False,
        idempotent=True,
        handler=_unpin,
    ),
    ToolSpec(
        name="record_outcome",
        title="Record a task outcome",
        description=(
            "Tell the engine how a task went (success or fail, the approach, the lesson). Its lesson may lead to a "
            "strategy proposal, which a person reviews. Needs editor or owner."
        ),
        properties=_OUTCOME["properties"],
        required=_OUTCOME["required"],
        defs=_OUTCOME["$defs"],
        require="edit",
        counts_as_write=True,
        read_only=False,
        idempotent=False,
        handler=_outcome,
    ),
    ToolSpec(
        name="record_correction",
        title="Record a correction",
        description=(
            "Store what was done wrong and what to do instead, as a HOT correction that wins its topic over older "
            "rules. Needs editor or owner."
        ),
        properties=_CORRECTION["properties"],
        required=_CORRECTION["required"],
        defs=_CORRECTION["$defs"],
        require="edit",
        counts_as_write=True,
        read_only=False,
        idempotent=False,
        handler=_correction,
    ),
    ToolSpec(
        name="add_reflection",
        title="Add a reflection",
        description=(
            "Store a reflection on a task and the lesson drawn; the dream weighs the lessons. Needs editor or owner."
        ),
        properties=_REFLECTION["properties"],
        required=_REFLECTION["required"],
        defs=_REFLECTION["$defs"],
        require="edit",
        counts_as_write=True,
        read_only=False,
        idempotent=False,
        handler=_reflection,
    ),
    ToolSpec(
        name="memory_history",
        title="Memory history",
        description="What the evolution engine and people did to a memory, newest first, with reasons.",
        properties=_HISTORY["properties"],
        required=_HISTORY["required"],
        require="view",
        counts_as_write=False,
        read_only=True,
        idempotent=True,
        handler=_history,
    ),
    ToolSpec(
        name="list_proposals",
        title="List proposals",
        description=(
            "The review queue: summaries, promotions, strategies and merges the engine proposes, oldest first. "
            "Read only: approving or rejecting is a person's decision, in the browser."
        ),
        properties=_PROPOSALS["properties"],
        required=_PROPOSALS["required"],
        require="view",
        counts_as_write=False,
        read_only=True,
        idempotent=True,
        handler=_proposals,
    ),
)

TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOLS}
