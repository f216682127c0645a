"""A fixed pool of long-lived threads for Django's synchronous request handling under ASGI.

Django's ASGI handler runs each request's synchronous code (middleware, views, the ORM) in a thread of
its own that lives only as long as the request. Database connections are per thread, so every request
opened a new SQLite connection: its init_command PRAGMAs ran again and its page cache (64 MB) started
cold (measured on the 100k-memory surfacing benchmark over HTTP, p50 of a context request: legacy mode
47 -> 30 ms, deep:multi-hop 86 -> 67 ms with this pool). On PostgreSQL, CONN_MAX_AGE kept connections
open in threads that were already gone.

`PooledSyncThreads` wraps the HTTP application: each request borrows one of SYNC_WORKER_THREADS
single-thread executors and runs all its thread-sensitive work there (asgiref's ThreadSensitiveContext
with an executor), so connections and caches are reused across requests, and no more than the pool's
size of requests do synchronous work at once; further requests wait for a free thread (as in a
pre-forked WSGI server) instead of each starting one. WebSockets keep Channels' own handling.

`SyncChainASGIHandler` is Django's ASGI handler with its middleware chain built for synchronous calls.
Django's own handler builds the chain for async calls, and every synchronous middleware then crosses to
a thread and back for its request hook and again for its response hook: about 30 crossings for one
request through this project's middleware (~3 ms of the 3.6 ms a /healthz took in process, measured).
With the synchronous chain a request crosses once for its middleware and view, plus once each for the
request_started signal and closing the response.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.base import BaseHandler
from django.http import HttpRequest, HttpResponseBase

# Loose ASGI aliases: Django's, Channels' and asgiref's own annotations of the same callables disagree.
Scope = dict[str, Any]
Receive = Callable[..., Awaitable[Any]]
Send = Callable[..., Awaitable[None]]
Application = Callable[..., Awaitable[None]]


class PooledSyncThreads:
    """ASGI middleware: run each HTTP request's synchronous code on one of `size` persistent threads."""

    def __init__(self, app: Application, *, size: int) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.app = app
        self.size = size
        self._executors = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"django-sync-{k}") for k in range(size)
        ]
        # Created on first use: an asyncio queue belongs to the loop that first awaits it. Last in, first
        # out: the thread that finished most recently has the warmest connection and page cache, and a
        # lightly loaded server keeps using one thread instead of warming all of them in turn.
        self._idle: asyncio.LifoQueue[ThreadPoolExecutor] | None = None

    def _queue(self) -> asyncio.LifoQueue[ThreadPoolExecutor]:
        if self._idle is None:
            self._idle = asyncio.LifoQueue()
            for executor in self._executors:
                self._idle.put_nowait(executor)
        return self._idle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        idle = self._queue()
        executor = await idle.get()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.app(scope, receive, send)
        finally:
            idle.put_nowait(executor)

    def shutdown(self) -> None:
        """Stop the threads (tests; a server process simply exits)."""
        for executor in self._executors:
            executor.shutdown(wait=True)


class SyncChainASGIHandler(ASGIHandler):
    """Django's ASGI handler running the middleware chain and view in one thread-sensitive call.

    Everything else (reading the body, signals, streaming and sending the response, disconnects) is
    Django's. Async views still work: the synchronous chain runs them with async_to_sync.
    """

    def __init__(self) -> None:
        BaseHandler.__init__(self)
        self.load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = await sync_to_async(self.get_response, thread_sensitive=True)(request)
        return response


def sync_chain_asgi_application() -> SyncChainASGIHandler:
    """`django.core.asgi.get_asgi_application`, with the synchronous middleware chain."""
    django.setup(set_prefix=False)
    return SyncChainASGIHandler()
