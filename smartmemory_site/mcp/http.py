"""``/mcp/``: the MCP server over Streamable HTTP, authenticated by the REST API's tokens.

``Authorization: Bearer <token>`` (or the REST API's ``Token <token>``) names the caller: the same token
lookup as the REST API (``memories.api_auth.TokenAuthentication``), the same inactive-user refusal, a 401 in
the API's error shape otherwise, and the same limit on failed token checks per address (a 429 before any
lookup). The workspace is chosen per call by its slug.

The transport is the SDK's, stateless with JSON responses: every POST carries one JSON-RPC message and is
answered in its response, so any process of a scaled install can serve any request and nothing is held
open between calls. Server-initiated streams (GET) and session ends (DELETE) do not exist then; they are
answered 405, as the protocol allows.

The app runs inside the pooled request threads (``smartmemory_site.threadpool``), so a tool call's ORM
work runs on a warm thread and counts against the same limit of concurrent requests as the REST API.
Daphne sends no ASGI lifespan events, so the SDK's session manager (one task group for the calls) is
started on the first request and lives as long as the event loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core import signals
from django.http import HttpRequest
from django.http.request import split_domain_port, validate_host
from mcp.server import ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from rest_framework import exceptions

from core.throttles import client_address, throttle_hit, throttle_wait
from memories.api_auth import FAILURE_SCOPE, TokenAuthentication
from smartmemory_site.mcp.server import build_server
from smartmemory_site.mcp.tools import Caller

logger = logging.getLogger(__name__)

PATHS = frozenset({"/mcp", "/mcp/"})
SCOPE_CALLER = "smartmemory.mcp.caller"
KEYWORDS = (b"bearer", b"token")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]


def _identify(ctx: ServerRequestContext[Any, Any]) -> Caller:
    request = ctx.request
    caller = request.scope.get(SCOPE_CALLER) if request is not None else None
    if not isinstance(caller, Caller):  # only reachable if the app is mounted without McpHttp in front
        raise RuntimeError("MCP request without an authenticated caller")
    return caller


def _header(scope: Scope, name: bytes) -> bytes | None:
    for key, value in scope.get("headers", ()):
        if key.lower() == name:
            return bytes(value)
    return None


def bearer_key(scope: Scope) -> str | None:
    """The token of ``Authorization: Bearer <key>`` (or ``Token <key>``); None when there is none."""
    raw = _header(scope, b"authorization")
    if raw is None:
        return None
    parts = raw.split()
    if len(parts) != 2 or parts[0].lower() not in KEYWORDS:
        return None
    try:
        return parts[1].decode("ascii")
    except UnicodeDecodeError:
        return None


def address_of(scope: Scope) -> str:
    """The caller's address as the REST API's rate limits see it (REMOTE_ADDR, or the X-Forwarded-For entry
    of the trusted proxies: ``core.throttles.client_address``)."""
    request = HttpRequest()
    client = scope.get("client")
    request.META["REMOTE_ADDR"] = client[0] if client else ""
    forwarded = _header(scope, b"x-forwarded-for")
    if forwarded is not None:
        request.META["HTTP_X_FORWARDED_FOR"] = forwarded.decode("latin-1")
    return client_address(request)


@dataclass(frozen=True)
class Checked:
    """A token check: the user, or why not (the REST API's 401 detail), or the seconds to wait first."""

    user: AbstractBaseUser | None = None
    failure: str = ""
    wait: float | None = None


def check_token(key: str, address: str) -> Checked:
    """The active user whose token is ``key``, looked up as the REST API does; a failure counts against
    ``address``, and an address whose failures reached their rate is told to wait without a lookup."""
    signals.request_started.send(sender=McpHttp)
    try:
        wait = throttle_wait(FAILURE_SCOPE, address)
        if wait is not None:
            return Checked(wait=wait)
        try:
            user, _ = TokenAuthentication().authenticate_credentials(key)
        except exceptions.AuthenticationFailed as exc:
            throttle_hit(FAILURE_SCOPE, address)
            return Checked(failure=str(exc.detail))
        return Checked(user=user)
    finally:
        signals.request_finished.send(sender=McpHttp)


async def _answer(send: Send, status: int, body: dict[str, Any], headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    data = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})


def _allowed_hosts() -> list[str]:
    """Django's rule (HttpRequest.get_host): ALLOWED_HOSTS, and the local names when DEBUG leaves it empty."""
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = [".localhost", "127.0.0.1", "[::1]"]
    return allowed


class McpHttp:
    """The ASGI application behind ``/mcp/``."""

    def __init__(self) -> None:
        self.server = build_server(_identify, bound=False)
        self._managers: dict[asyncio.AbstractEventLoop, tuple[StreamableHTTPSessionManager, asyncio.Event]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def _run(self, manager: StreamableHTTPSessionManager, ready: asyncio.Event) -> None:
        try:
            async with manager.run():
                ready.set()
                await asyncio.Event().wait()
        except Exception:
            logger.exception("the MCP session manager stopped")
            raise

    async def _manager(self) -> StreamableHTTPSessionManager:
        """The session manager of the running event loop, started on its first request.

        One per loop: a manager's task group belongs to the loop it runs in (a server has one; a test
        that drives the app from several loops gets one each)."""
        loop = asyncio.get_running_loop()
        if loop not in self._managers:
            # Host checks are Django's (ALLOWED_HOSTS, below), not the SDK's DNS-rebinding settings.
            manager = StreamableHTTPSessionManager(app=self.server, json_response=True, stateless=True)
            ready = asyncio.Event()
            self._managers = {k: v for k, v in self._managers.items() if not k.is_closed()}
            self._managers[loop] = (manager, ready)
            # A context of its own: the manager outlives the request that happened to start it.
            task = loop.create_task(
                self._run(manager, ready), name="mcp-session-manager", context=contextvars.Context()
            )
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        manager, ready = self._managers[loop]
        await ready.wait()
        return manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("method") != "POST":
            await _answer(
                send,
                405,
                {"error": "method_not_allowed", "detail": "POST one JSON-RPC message (stateless Streamable HTTP)"},
                ((b"allow", b"POST"),),
            )
            return
        host = (_header(scope, b"host") or b"").decode("latin-1")
        domain, _port = split_domain_port(host)
        if not domain or not validate_host(domain, _allowed_hosts()):
            await _answer(send, 400, {"error": "bad_request", "detail": f"host {host!r} is not allowed"})
            return
        key = bearer_key(scope)
        if key is None:
            await _answer(
                send,
                401,
                {
                    "error": "not_authenticated",
                    "detail": "Authentication credentials were not provided: send Authorization: Bearer <API token>",
                },
                ((b"www-authenticate", b'Bearer realm="api"'),),
            )
            return
        checked = await sync_to_async(check_token, thread_sensitive=True)(key, address_of(scope))
        if checked.wait is not None:
            await _answer(
                send,
                429,
                {
                    "error": "throttled",
                    "detail": f"too many failed token checks from this address; retry in {checked.wait:.0f} s",
                },
                ((b"retry-after", str(math.ceil(checked.wait)).encode()),),
            )
            return
        if checked.user is None:
            await _answer(
                send,
                401,
                {"error": "authentication_failed", "detail": checked.failure},
                ((b"www-authenticate", b'Bearer realm="api", error="invalid_token"'),),
            )
            return
        manager = await self._manager()
        await manager.handle_request({**scope, SCOPE_CALLER: Caller(user=checked.user)}, receive, send)


def with_mcp(app: ASGIApp) -> ASGIApp:
    """``app`` with ``/mcp/`` (and ``/mcp``) answered by the MCP server."""
    mcp = McpHttp()

    async def routed(scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") == "http" and scope.get("path") in PATHS:
            await mcp(scope, receive, send)
        else:
            await app(scope, receive, send)

    return routed
