"""Refuse request bodies over a size limit before they are read (413 in the API's error shape).

Django reads a request's whole body before any view runs, so a size check in a view or a middleware comes
after the bytes were received and buffered: an unauthenticated 100 MB POST cost its memory and time before
the 401. This ASGI wrapper answers at once when the declared Content-Length is over the limit, and, for a
body sent without one (chunked), stops reading when the bytes received pass it.

Limits: ``REQUEST_MAX_BYTES`` (4 MiB) for every request, ``REQUEST_MAX_BULK_BYTES`` (64 MiB) for the
paths that take many memories at once (``BULK_SUFFIXES``: bulk create, conversation import, memory
directory import).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Any, Any, Any], Awaitable[None]]

BULK_SUFFIXES = ("/memories/bulk/", "/conversations/", "/import/")


class BodyTooLarge(Exception):
    pass


def payload_too_large(limit: int) -> tuple[bytes, int]:
    body = json.dumps(
        {"error": "payload_too_large", "detail": f"body: larger than {limit} bytes", "field": "body"}
    ).encode()
    return body, 413


class BodyLimit:
    def __init__(self, app: ASGIApp, *, max_bytes: int, max_bulk_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.max_bulk_bytes = max_bulk_bytes

    def limit_for(self, path: str) -> int:
        return self.max_bulk_bytes if path.endswith(BULK_SUFFIXES) else self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(str(scope.get("path", "")))
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            await _answer(send, limit)
            return
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message.get("type") == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise BodyTooLarge
            return message

        async def tracked_send(message: Message) -> None:
            nonlocal started
            if message.get("type") == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, tracked_send)
        except BodyTooLarge:
            if not started:
                await _answer(send, limit)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def _answer(send: Send, limit: int) -> None:
    body, status = payload_too_large(limit)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
