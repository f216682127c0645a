"""PooledSyncThreads: HTTP requests reuse a fixed set of threads for their synchronous work."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from asgiref.sync import SyncToAsync, sync_to_async
from django.core.handlers.asgi import ASGIHandler

from smartmemory_site.threadpool import PooledSyncThreads, SyncChainASGIHandler


class RecordingApp:
    """An ASGI app whose request handling, like Django's, does thread-sensitive synchronous work."""

    def __init__(self, hold: float = 0.0) -> None:
        self.threads: list[int] = []
        self.hold = hold
        self.running = 0
        self.peak = 0
        self._lock = threading.Lock()

    def _work(self) -> None:
        with self._lock:
            self.running += 1
            self.peak = max(self.peak, self.running)
        threading.Event().wait(self.hold)
        self.threads.append(threading.get_ident())
        with self._lock:
            self.running -= 1

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await sync_to_async(self._work)()
        await sync_to_async(self._work)()


def run_loop(main: Coroutine[Any, Any, None]) -> None:
    """asyncio.run on a thread of its own, as a server's event loop is (the browser tests leave an event
    loop running in the test thread)."""
    with ThreadPoolExecutor(max_workers=1) as loop_thread:
        loop_thread.submit(asyncio.run, main).result()


async def _noop_receive() -> dict[str, Any]:
    return {"type": "http.disconnect"}


async def _noop_send(message: dict[str, Any]) -> None:
    return None


def test_sequential_requests_run_on_the_same_long_lived_thread() -> None:
    app = RecordingApp()
    pool = PooledSyncThreads(app, size=1)

    async def main() -> None:
        for _ in range(3):
            await pool({"type": "http"}, _noop_receive, _noop_send)

    run_loop(main())
    pool.shutdown()
    assert len(app.threads) == 6
    assert len(set(app.threads)) == 1
    assert threading.get_ident() not in app.threads


def test_one_request_at_a_time_keeps_using_the_most_recently_freed_thread() -> None:
    app = RecordingApp()
    pool = PooledSyncThreads(app, size=4)

    async def main() -> None:
        for _ in range(5):
            await pool({"type": "http"}, _noop_receive, _noop_send)

    run_loop(main())
    pool.shutdown()
    assert len(set(app.threads)) == 1


def test_concurrent_requests_never_exceed_the_pool_size() -> None:
    app = RecordingApp(hold=0.02)
    pool = PooledSyncThreads(app, size=2)

    async def main() -> None:
        await asyncio.gather(*(pool({"type": "http"}, _noop_receive, _noop_send) for _ in range(6)))

    run_loop(main())
    pool.shutdown()
    assert len(app.threads) == 12
    assert app.peak == 2
    assert len(set(app.threads)) == 2


def test_a_request_that_fails_gives_its_thread_back() -> None:
    calls: list[int] = []

    async def failing(scope: dict[str, Any], receive: Any, send: Any) -> None:
        calls.append(await sync_to_async(threading.get_ident)())
        raise RuntimeError("view crashed")

    pool = PooledSyncThreads(failing, size=1)

    async def main() -> None:
        for _ in range(2):
            with pytest.raises(RuntimeError, match="view crashed"):
                await pool({"type": "http"}, _noop_receive, _noop_send)

    run_loop(main())
    pool.shutdown()
    assert len(calls) == 2 and calls[0] == calls[1]


def test_other_scopes_pass_straight_through() -> None:
    seen: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        seen.append(scope["type"])

    pool = PooledSyncThreads(app, size=1)
    run_loop(pool({"type": "lifespan"}, _noop_receive, _noop_send))
    pool.shutdown()
    assert seen == ["lifespan"]


def test_a_pool_needs_at_least_one_thread() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        PooledSyncThreads(RecordingApp(), size=0)


# -- SyncChainASGIHandler ----------------------------------------------------------------------------


def _http_scope(path: str) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


@pytest.mark.parametrize("sync_chain", [True, False])
def test_a_request_crosses_to_a_thread_a_fixed_few_times_with_the_sync_chain(
    transactional_db: None, monkeypatch: pytest.MonkeyPatch, sync_chain: bool
) -> None:
    """Django's own handler builds its middleware chain for async calls, and each synchronous middleware
    then crosses to a thread for its request hook and again for its response hook; the sync chain runs
    the middleware and view in one crossing (plus the request_started signal and closing the response).
    The response is the same either way."""
    crossings = 0
    original = SyncToAsync.__call__

    async def counted(self: SyncToAsync, *args: Any, **kwargs: Any) -> Any:
        nonlocal crossings
        crossings += 1
        return await original(self, *args, **kwargs)

    handler = SyncChainASGIHandler() if sync_chain else ASGIHandler()
    pool = PooledSyncThreads(handler, size=1)
    sent: list[dict[str, Any]] = []
    received = False

    async def receive() -> dict[str, Any]:
        nonlocal received
        if not received:
            received = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(60)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    run_loop(pool(_http_scope("/healthz"), receive, send))
    pool.shutdown()
    assert sent[0]["status"] == 200 and b'"status": "ok"' in sent[1]["body"]
    assert (b"X-Frame-Options", b"DENY") in sent[0]["headers"]  # the middleware ran
    if sync_chain:
        assert crossings == 3
    else:
        assert crossings > 10
