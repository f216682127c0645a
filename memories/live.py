"""Publish live events to WebSocket groups (after the writing transaction committed)."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction


def activation_group(workspace_id: int) -> str:
    return f"ws.{workspace_id}.activation"


def workspace_group(workspace_id: int) -> str:
    return f"ws.{workspace_id}.events"


# The event loop the server runs its sockets on (set by `RemembersLoop` when a socket connects).
_server_loop: asyncio.AbstractEventLoop | None = None


class RemembersLoop:
    """ASGI middleware in front of the WebSocket app: remembers the server's event loop for `group_send`."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> Any:
        global _server_loop
        _server_loop = asyncio.get_running_loop()
        return await self.app(scope, receive, send)


def group_send(group: str, message: dict[str, Any]) -> None:
    """Send `message` to `group` from synchronous code (a request thread, the flusher, a worker thread).

    With the in-memory channel layer (no REDIS_URL) the send runs on the server's own event loop: the
    layer's queues belong to that loop, and a put made from another thread's loop (what async_to_sync
    runs) completes the waiting socket's future without waking the loop, so the push waited for the
    loop's next timer: daphne's one-second application check (measured: boost-to-browser p50 1.5 s with
    a 1 s flush, ~1 s more than the flush accounts for). A channel layer over the network (Redis) has no
    such tie and goes through async_to_sync as before.
    """
    layer = get_channel_layer()
    if layer is None:
        return
    loop = _server_loop
    if isinstance(layer, InMemoryChannelLayer) and loop is not None and loop.is_running():
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        if current is not loop:
            asyncio.run_coroutine_threadsafe(layer.group_send(group, message), loop).result(timeout=10)
            return
    async_to_sync(layer.group_send)(group, message)


def activation_changed(changed: dict[int, list[tuple[str, float]]]) -> None:
    """Tell every page watching a workspace which memories' stored activation moved."""
    for workspace_id, items in changed.items():
        group_send(
            activation_group(workspace_id),
            {"type": "activation.changed", "items": [[mid, score] for mid, score in items]},
        )


def workspace_event(workspace_id: int, event: str, payload: dict[str, Any]) -> None:
    group_send(workspace_group(workspace_id), {"type": "workspace.event", "event": event, "payload": payload})


def workspace_event_on_commit(workspace_id: int, event: str, payload: dict[str, Any]) -> None:
    """``workspace_event`` once the writing transaction has committed (at once outside one); a failure to
    publish is logged by Django and never undoes the write."""
    transaction.on_commit(lambda: workspace_event(workspace_id, event, payload), robust=True)


ACCESS_CHANGED = "access.changed"
"""Message type of a membership change: open sockets of the workspace check again who may listen."""


def access_changed(workspace_id: int) -> None:
    """Tell every socket of a workspace (activation bars and run progress) to check its member again."""
    for group in (activation_group(workspace_id), workspace_group(workspace_id)):
        group_send(group, {"type": ACCESS_CHANGED})
