"""manage.py mcp_stdio for real: the SDK's stdio client spawns the command on the live site's database and
speaks MCP on its standard streams; what a call writes is read back through the live site's REST API."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

LiveSite = Any  # the live_site fixture's LiveSite (conftest modules are not importable)
ROOT = Path(__file__).resolve().parents[3]


@asynccontextmanager
async def stdio_session(site: LiveSite, *args: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=sys.executable, args=["manage.py", "mcp_stdio", *args], env={**site.env, **(env or {})}, cwd=ROOT
    )
    with (site.log_path.parent / "mcp_stdio.log").open("a") as errlog:
        async with stdio_client(server, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await session.call_tool(name, arguments)
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    return result.is_error, body


@pytest.mark.asyncio
async def test_a_local_agent_on_stdio_works_in_its_workspace_as_the_tokens_user(live_site: LiveSite) -> None:
    token = {"SMARTMEMORY_TOKEN": live_site.tokens["olga"]}
    async with stdio_session(live_site, "--workspace", "acme", env=token) as session:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        failed, context = await call(session, "get_working_context", query="why JWT?")
        assert not failed and context["items"][0]["content"] == "We picked JWT for authentication"
        failed, added = await call(session, "add_memory", content="Refresh tokens rotate on use")
        assert not failed
        failed, corrected = await call(
            session,
            "record_correction",
            what_i_did_wrong="kept refresh tokens forever",
            what_i_should_do="rotate refresh tokens on every use",
            context="auth review",
        )
        assert not failed
        failed, elsewhere = await call(session, "search_memories", workspace="other", query="plan")
        failed_bad, bad = await call(session, "add_memory", content="")
        (hot_rules,) = (await session.list_resources()).resources
    assert "workspace" not in tools["add_memory"].input_schema["required"]
    assert failed and (elsewhere["error"], elsewhere["status"]) == ("not_found", 404)
    assert failed_bad and (bad["error"], bad["field"], bad["detail"]) == (
        "invalid",
        "content",
        "content: must not be blank",
    )
    assert hot_rules.uri == "smartmemory://workspaces/acme/rules/hot"
    async with live_site.rest("olga") as rest:
        stored = (await rest.get(f"workspaces/acme/memories/{added['id']}/")).json()
        correction = (await rest.get(f"workspaces/acme/memories/{corrected['id']}/")).json()
    assert (stored["content"], stored["origin"]) == ("Refresh tokens rotate on use", "api:olga")
    assert (correction["memory_type"], correction["tier"]) == ("correction", "hot")


@pytest.mark.asyncio
async def test_as_a_viewer_named_by_user_the_writes_are_refused(live_site: LiveSite) -> None:
    async with live_site.rest("olga") as rest:
        before = len((await rest.get("workspaces/acme/memories/", params={"limit": 200})).json()["results"])
    async with stdio_session(live_site, "--workspace", "acme", "--user", "vic") as session:
        failed, forbidden = await call(session, "record_outcome", task_type="deploy", result="fail")
        failed_add, _ = await call(session, "add_memory", content="viewer was here")
        read_failed, found = await call(session, "search_memories", query="JWT")
    assert failed and failed_add and (forbidden["error"], forbidden["status"]) == ("forbidden", 403)
    assert not read_failed and found["results"]
    async with live_site.rest("olga") as rest:
        after = len((await rest.get("workspaces/acme/memories/", params={"limit": 200})).json()["results"])
    assert after == before


# -- refusals, in process (the command raises before it serves) -----------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workspace", "acme"], "name the caller with one of --token (or SMARTMEMORY_TOKEN) and --user"),
        (["--workspace", "acme", "--user", "alice", "--token", "x"], "name the caller with one of"),
        (["--workspace", "acme", "--token", "wrong"], "--token: Invalid token."),
        (["--workspace", "acme", "--user", "nobody"], "--user: no active user 'nobody'"),
        (["--workspace", "other", "--user", "alice"], "--workspace: workspace 'other' not found"),
    ],
)
def test_the_command_refuses_to_start_without_a_caller_who_may_read_the_workspace(
    workspace: Any, other_workspace: Any, args: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SMARTMEMORY_TOKEN", raising=False)
    with pytest.raises(CommandError, match=re.escape(message)):
        call_command("mcp_stdio", *args)
