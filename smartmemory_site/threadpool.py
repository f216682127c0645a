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
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import ThreadSensitiveContext

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
