"""The tools and resources bound to the MCP SDK's low-level server, for any transport.

Each call runs its synchronous work (the ORM, the services) in one thread-sensitive call, as a Django
request does: under the ASGI server that is one of the pooled request threads (``smartmemory_site.threadpool``),
under stdio asgiref's one thread. ``request_started`` and ``request_finished`` are sent around it, so the
database connections and caches are looked after as for a REST request.

A domain error (bad input, not found, forbidden, conflict, too many writes) is a tool result with ``isError``
whose JSON is the REST API's error body, ``{"error": code, "detail": ..., "field"?}``, plus the ``status``
the REST call would have answered (and ``retry_after``, in seconds, with a 429). Anything else is logged and
answered as a ``server_error``, without a traceback; services write in one transaction, so a failed call has
written nothing.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

import mcp_types as types
import orjson
from asgiref.sync import sync_to_async
from django.core import signals
from django.http import Http404
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from rest_framework.utils import encoders

from core.errors import DomainError
from smartmemory_site.mcp import resources, tools
from smartmemory_site.mcp.tools import Caller, Json

logger = logging.getLogger(__name__)

NAME = "smartmemory"
INSTRUCTIONS = (
    "Long-term memory for this agent. Start each task with get_working_context (what you are about to do, in "
    "words) and work with the items it returns; store what you learn with add_memory, whole conversations with "
    "ingest_conversation; when a person corrects you, record_correction; after a task, record_outcome and, when "
    "there is a lesson, add_reflection. Read the workspace's HOT rules resource before you start. Errors are "
    'JSON: {"error": code, "detail": message naming the argument, "field", "status"}.'
)

Identify = Callable[[ServerRequestContext[Any, Any]], Caller]

_fallback = encoders.JSONEncoder().default
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_NON_STR_KEYS


def error_json(exc: DomainError) -> Json:
    """The REST API's error body of ``exc`` and the status the REST call answers with."""
    body: Json = {"error": exc.code, "detail": exc.detail}
    if exc.field:
        body["field"] = exc.field
    body["status"] = exc.status_code
    if isinstance(exc, tools.Throttled):
        body["retry_after"] = math.ceil(exc.wait)
    return body


SERVER_ERROR: Json = {"error": "server_error", "detail": "the server could not complete this call", "status": 500}


def _encode(data: Json) -> bytes:
    """JSON bytes as the REST API renders them (orjson; DRF's encoder for anything else)."""
    return orjson.dumps(data, default=_fallback, option=_OPTIONS)


def _served(work: Callable[[], Json], what: str) -> tuple[bool, Json]:
    """Run ``work`` as one request: (True, its JSON) or (False, the error body)."""
    signals.request_started.send(sender=Server)
    try:
        return True, work()
    except DomainError as exc:
        return False, error_json(exc)
    except Http404 as exc:
        return False, {"error": "not_found", "detail": str(exc) or "not found", "status": 404}
    except Exception:
        logger.exception("MCP %s failed", what)
        return False, SERVER_ERROR
    finally:
        signals.request_finished.send(sender=Server)


def _tool_result(ok: bool, body: Json) -> types.CallToolResult:
    """The answer as one text block holding the REST body's JSON, which is what runtimes hand their model.

    No ``structuredContent`` copy: without an output schema it tells a client nothing the text does not,
    and it doubled every answer; the SDK validates and dumps it three times on the way out (0.55 ms of a
    20-item working context, measured) and a client parses it again."""
    return types.CallToolResult(content=[types.TextContent(text=_encode(body).decode())], is_error=not ok)


def _tool(spec: tools.ToolSpec, *, bound: bool) -> types.Tool:
    return types.Tool(
        name=spec.name,
        title=spec.title,
        description=spec.description,
        input_schema=spec.input_schema(bound=bound),
        annotations=types.ToolAnnotations(
            title=spec.title,
            read_only_hint=spec.read_only,
            destructive_hint=False,
            idempotent_hint=spec.idempotent,
            open_world_hint=False,
        ),
    )


def _version() -> str:
    try:
        return metadata.version("smartmemory-site")
    except metadata.PackageNotFoundError:
        return ""


def build_server(identify: Identify, *, bound: bool) -> Server[Any]:
    """The MCP server; ``identify`` names the caller of a request (from the transport: the HTTP request's
    token, or the stdio command's user); ``bound`` when every caller has one workspace (stdio)."""
    listing = types.ListToolsResult(tools=[_tool(spec, bound=bound) for spec in tools.TOOLS])

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return listing

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        spec = tools.TOOLS_BY_NAME.get(params.name)
        if spec is None:
            raise MCPError(types.INVALID_PARAMS, f"unknown tool {params.name!r}; see tools/list")
        caller = identify(ctx)
        arguments: Mapping[str, Any] = params.arguments or {}
        ok, body = await sync_to_async(_served, thread_sensitive=True)(
            lambda: tools.call(spec, caller, arguments), f"tool {spec.name}"
        )
        return _tool_result(ok, body)

    async def list_resources(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        caller = identify(ctx)
        ok, body = await sync_to_async(_served, thread_sensitive=True)(
            lambda: {"listed": resources.listed(caller)}, "resources/list"
        )
        if not ok:
            raise MCPError(types.INTERNAL_ERROR, str(body["detail"]), data=body)
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    uri=item.uri,
                    name=item.name,
                    title=item.title,
                    description=item.description,
                    mime_type=resources.MIME_TYPE,
                )
                for item in body["listed"]
            ]
        )

    async def list_resource_templates(
        ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        return types.ListResourceTemplatesResult(
            resource_templates=[
                types.ResourceTemplate(
                    uri_template=resources.MEMORY_TEMPLATE,
                    name="memory",
                    title="A memory",
                    description="One memory as the REST API shows it; reading it counts as a retrieval.",
                    mime_type=resources.MIME_TYPE,
                ),
                types.ResourceTemplate(
                    uri_template=resources.HOT_RULES_TEMPLATE,
                    name="hot-rules",
                    title="HOT rules",
                    description="The workspace's active HOT rules, newest first.",
                    mime_type=resources.MIME_TYPE,
                ),
            ]
        )

    async def read_resource(
        ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        caller = identify(ctx)
        uri = str(params.uri)
        ok, body = await sync_to_async(_served, thread_sensitive=True)(
            lambda: resources.read(caller, uri), "resources/read"
        )
        if not ok:
            code = types.INTERNAL_ERROR if body["status"] >= 500 else types.INVALID_PARAMS
            raise MCPError(code, str(body["detail"]), data=body)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=resources.MIME_TYPE, text=_encode(body).decode())]
        )

    return Server(
        NAME,
        version=_version(),
        title="SmartMemory",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )
