"""The MCP resources through the SDK's ClientSession: a memory by URI (read as the REST GET reads it, a
retrieval that warms it up) and a workspace's HOT rules; members only, another workspace not found."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from mcp import ClientSession
from mcp.shared.exceptions import MCPError

from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, RetrievalEvent, Workspace
from memories.signalbus import LocalSignalBus
from smartmemory_site.mcp.resources import hot_rules_uri, memory_uri

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.api]


async def remember(workspace: Workspace, user: Any, content: str, **fields: Any) -> Memory:
    item = MemoryInput(content=content, **fields)
    return await sync_to_async(services.memory_create)(workspace=workspace, actor=user, item=item)


async def read(session: ClientSession, uri: str) -> Any:
    result = await session.read_resource(uri)
    (content,) = result.contents
    assert content.uri == uri and content.mime_type == "application/json"
    return json.loads(content.text)  # type: ignore[union-attr]


async def test_the_templates_and_each_workspaces_hot_rules_are_listed(
    connect: Connect, user: Any, workspace: Workspace, other_workspace: Workspace
) -> None:
    await sync_to_async(services.workspace_create)(owner=user, slug="beta", name="Beta")
    async with connect(user) as session:
        listed = (await session.list_resources()).resources
        templates = (await session.list_resource_templates()).resource_templates
    assert [r.uri for r in listed] == [hot_rules_uri("acme"), hot_rules_uri("beta")]  # not "other": not a member
    assert {t.uri_template for t in templates} == {
        "smartmemory://workspaces/{workspace}/memories/{memory_id}",
        "smartmemory://workspaces/{workspace}/rules/hot",
    }


async def test_a_memory_read_by_uri_is_the_rest_json_and_counts_as_a_retrieval(
    connect: Connect, user: Any, workspace: Workspace, fresh_signal_bus: LocalSignalBus
) -> None:
    memory = await remember(workspace, user, "We picked JWT", memory_type="decision")
    async with connect(user) as session:
        body = await read(session, memory_uri("acme", str(memory.id)))
    assert (body["id"], body["content"], body["memory_type"], body["workspace"]) == (
        str(memory.id),
        "We picked JWT",
        "decision",
        "acme",
    )
    await sync_to_async(fresh_signal_bus.flush)()
    event = await sync_to_async(RetrievalEvent.objects.get)(memory=memory)
    assert event.source == "get"
    await sync_to_async(memory.refresh_from_db)()
    assert memory.activation_boost_count == 1


async def test_hot_rules_are_the_active_hot_strategies_only(connect: Connect, user: Any, workspace: Workspace) -> None:
    hot = await remember(workspace, user, "Always run the migrations first", memory_type="strategy", tier="hot")
    await remember(workspace, user, "Prefer small commits", memory_type="strategy", tier="warm")
    await remember(workspace, user, "A hot fact, not a rule", tier="hot")
    old = await remember(workspace, user, "Deploy on Fridays", memory_type="strategy", tier="hot")
    await sync_to_async(services.memory_archive)(workspace=workspace, memory=old, actor=user)
    async with connect(user) as session:
        body = await read(session, hot_rules_uri("acme"))
    assert body["workspace"] == "acme"
    assert [r["id"] for r in body["rules"]] == [str(hot.id)]


async def test_another_workspaces_resources_are_not_found(
    connect: Connect, user: Any, workspace: Workspace, other_workspace: Workspace
) -> None:
    stranger = await sync_to_async(lambda: other_workspace.memberships.get().user)()
    theirs = await remember(other_workspace, stranger, "their secret")
    async with connect(user) as session:
        for uri in (memory_uri("other", str(theirs.id)), hot_rules_uri("other"), memory_uri("acme", str(theirs.id))):
            with pytest.raises(MCPError) as refused:
                await session.read_resource(uri)
            assert refused.value.data["error"] == "not_found" and refused.value.data["status"] == 404
            assert "their secret" not in json.dumps(refused.value.data)


async def test_an_unknown_uri_is_not_found_naming_the_shapes(connect: Connect, user: Any, workspace: Workspace) -> None:
    async with connect(user) as session:
        with pytest.raises(MCPError) as refused:
            await session.read_resource("smartmemory://workspaces/acme/secrets")
    assert refused.value.data["field"] == "uri"
    assert "rules/hot" in refused.value.data["detail"]


async def test_a_bound_connection_lists_and_reads_only_its_workspace(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    await sync_to_async(services.workspace_create)(owner=user, slug="beta", name="Beta")
    async with connect(user, workspace="acme") as session:
        listed = (await session.list_resources()).resources
        with pytest.raises(MCPError):
            await session.read_resource(hot_rules_uri("beta"))
    assert [r.uri for r in listed] == [hot_rules_uri("acme")]
