"""Publish live events to WebSocket groups (after the writing transaction committed)."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction


def activation_group(workspace_id: int) -> str:
    return f"ws.{workspace_id}.activation"


def workspace_group(workspace_id: int) -> str:
    return f"ws.{workspace_id}.events"


def group_send(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is not None:
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
