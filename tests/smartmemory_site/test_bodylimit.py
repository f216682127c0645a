"""Bodies over the limit are refused before they are read, in the API's error shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from asgiref.testing import ApplicationCommunicator

from smartmemory_site.bodylimit import BodyLimit

LIMIT, BULK = 1_000, 5_000
T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """asyncio.run on a thread of its own: the browser tests leave an event loop on the main thread."""
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


class Echo:
    """Reads the whole body, then answers 200 with its length (as Django does before any view runs)."""

    def __init__(self) -> None:
        self.called = False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.called = True
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": str(size).encode()})


def scope(path: str, length: int | None) -> dict[str, Any]:
    headers = [] if length is None else [(b"content-length", str(length).encode())]
    return {"type": "http", "method": "POST", "path": path, "headers": headers}


async def answer(app: Any, path: str, chunks: list[bytes], *, declare: bool = True) -> tuple[int, bytes]:
    total = sum(len(c) for c in chunks)
    talk = ApplicationCommunicator(app, scope(path, total if declare else None))
    for k, chunk in enumerate(chunks):
        await talk.send_input({"type": "http.request", "body": chunk, "more_body": k < len(chunks) - 1})
    start = await talk.receive_output(2)
    body = await talk.receive_output(2)
    return start["status"], body["body"]


def test_a_declared_length_over_the_limit_is_a_413_and_the_app_never_runs() -> None:
    inner = Echo()
    status, body = run(answer(BodyLimit(inner, max_bytes=LIMIT, max_bulk_bytes=BULK), "/api/v1/x/", [b"x" * 2000]))
    assert status == 413 and not inner.called
    assert json.loads(body) == {
        "error": "payload_too_large",
        "detail": f"body: larger than {LIMIT} bytes",
        "field": "body",
    }


def test_a_chunked_body_stops_being_read_once_it_passes_the_limit() -> None:
    inner = Echo()
    app = BodyLimit(inner, max_bytes=LIMIT, max_bulk_bytes=BULK)
    status, _ = run(answer(app, "/api/v1/x/", [b"x" * 600, b"x" * 600, b"x" * 600], declare=False))
    assert status == 413 and inner.called


def test_bulk_paths_take_the_larger_limit_and_small_bodies_pass() -> None:
    app = BodyLimit(Echo(), max_bytes=LIMIT, max_bulk_bytes=BULK)
    assert run(answer(app, "/api/v1/workspaces/a/memories/bulk/", [b"x" * 4000])) == (200, b"4000")
    assert run(answer(app, "/api/v1/workspaces/a/conversations/", [b"x" * 4000])) == (200, b"4000")
    assert run(answer(app, "/api/v1/workspaces/a/memories/", [b"x" * 4000]))[0] == 413
    assert run(answer(app, "/api/v1/workspaces/a/memories/", [b"x" * 10])) == (200, b"10")
