"""memories.live: pushes from synchronous threads reach the sockets of the server's event loop at once."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from channels.layers import get_channel_layer

from memories import live


def test_a_push_from_another_thread_wakes_the_server_loop_at_once(settings: Any) -> None:
    """With the in-memory layer, a group_send from a flusher or worker thread runs on the server's loop:
    put from another loop, the message sat in the queue until the loop woke for something else."""
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    loop = asyncio.new_event_loop()
    ready, reached = threading.Event(), threading.Event()
    arrived: list[float] = []

    async def socket(scope: Any, receive: Any, send: Any) -> None:
        layer = get_channel_layer()
        assert layer is not None
        channel = await layer.new_channel()
        await layer.group_add("ws.1.activation", channel)
        ready.set()
        await layer.receive(channel)
        arrived.append(time.monotonic())
        reached.set()
        # A server's loop goes on after a push (the sender's own tasks finish on it).
        await asyncio.Event().wait()

    def serve() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # the test's end cancels the waiting socket
            loop.run_until_complete(live.RemembersLoop(socket)({}, None, None))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        assert ready.wait(5)
        sent = time.monotonic()
        live.group_send("ws.1.activation", {"type": "activation.changed", "items": []})
        assert reached.wait(3), "the message never reached the waiting socket"
        assert arrived[0] - sent < 0.5
    finally:
        if server.is_alive():
            for task in asyncio.all_tasks(loop):
                loop.call_soon_threadsafe(task.cancel)
            server.join(timeout=5)
        loop.close()
        live._server_loop = None
