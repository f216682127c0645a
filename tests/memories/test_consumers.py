"""Open sockets follow membership: a member removed (or logged out) stops receiving the workspace's
pushes, and the socket is closed with 4403."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.db import connections
from django.urls import path

from memories import consumers, services
from memories.consumers import ActivationConsumer
from memories.inputs import MemoryInput
from memories.live import activation_group
from memories.models import Membership, Role, Workspace

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


@pytest.fixture
def in_memory_layer(settings: Any) -> Iterator[None]:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    yield


def socket(user: Any, session: SessionStore | None = None) -> WebsocketCommunicator:
    app = URLRouter([path("ws/workspaces/<slug:ws>/activation/", ActivationConsumer.as_asgi())])
    communicator = WebsocketCommunicator(app, "/ws/workspaces/acme/activation/")
    communicator.scope["user"] = user
    if session is not None:
        communicator.scope["session"] = session
    return communicator


async def push(workspace: Workspace, memory_id: str) -> None:
    layer = get_channel_layer()
    assert layer is not None
    await layer.group_send(activation_group(workspace.pk), {"type": "activation.changed", "items": [[memory_id, 0.9]]})


async def member_with_memory(workspace: Workspace, make_user: Any) -> tuple[Any, str]:
    reader = await sync_to_async(make_user)("reader")
    await sync_to_async(services.membership_set)(workspace=workspace, user=reader, role=Role.VIEWER)
    owner = await sync_to_async(lambda: workspace.memberships.get(role=Role.OWNER).user)()
    memory = await sync_to_async(services.memory_create)(
        workspace=workspace, actor=owner, item=MemoryInput(content="We picked JWT")
    )
    return reader, str(memory.id)


async def test_a_removed_member_is_disconnected_at_once_and_gets_no_more_pushes(
    in_memory_layer: None, workspace: Workspace, make_user: Any
) -> None:
    reader, memory_id = await member_with_memory(workspace, make_user)
    communicator = socket(reader)
    connected, _ = await communicator.connect()
    assert connected
    await push(workspace, memory_id)
    assert f'id="act-{memory_id}"' in await communicator.receive_from(timeout=10)

    await sync_to_async(Membership.objects.filter(workspace=workspace, user=reader).delete)()
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}
    await sync_to_async(connections.close_all)()


async def test_a_logged_out_session_is_closed_on_the_next_push_after_the_recheck_interval(
    in_memory_layer: None, workspace: Workspace, make_user: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    reader, memory_id = await member_with_memory(workspace, make_user)
    session = SessionStore()
    await sync_to_async(session.create)()
    communicator = socket(reader, session)
    connected, _ = await communicator.connect()
    assert connected
    await sync_to_async(session.delete)()  # what logging out does to the session
    # Within the interval the socket still trusts its check (no query per push) ...
    await push(workspace, memory_id)
    assert f'id="act-{memory_id}"' in await communicator.receive_from(timeout=10)
    # ... once it has passed, the next push checks again and closes instead of sending.
    monkeypatch.setattr(consumers, "ACCESS_RECHECK_SECONDS", 0.0)
    await push(workspace, memory_id)
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": consumers.CLOSE_FORBIDDEN}
    await sync_to_async(connections.close_all)()


async def test_a_member_whose_role_changes_keeps_listening(
    in_memory_layer: None, workspace: Workspace, make_user: Any
) -> None:
    reader, memory_id = await member_with_memory(workspace, make_user)
    communicator = socket(reader)
    connected, _ = await communicator.connect()
    assert connected
    await sync_to_async(services.membership_set)(workspace=workspace, user=reader, role=Role.EDITOR)
    await push(workspace, memory_id)
    assert f'id="act-{memory_id}"' in await communicator.receive_from(timeout=10)
    await communicator.disconnect()
    await sync_to_async(connections.close_all)()
