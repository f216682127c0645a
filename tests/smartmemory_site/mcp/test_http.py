"""/mcp/ for real: the SDK's ClientSession over Streamable HTTP against daphne serving the site's ASGI app,
the REST API's tokens as bearer; what a call writes is read back through the REST API. Then the token
check itself (in process): the same failures limit per address as the REST API."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from django.core.management import call_command
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from smartmemory_site.mcp.http import address_of, check_token

LiveSite = Any  # the live_site fixture's LiveSite (conftest modules are not importable)

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@asynccontextmanager
async def mcp_session(site: LiveSite, username: str, keyword: str = "Bearer") -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"{keyword} {site.tokens[username]}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(site.url + "/mcp/", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    result = await session.call_tool(name, arguments)
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert result.structured_content is None  # the JSON once, as text
    return result.is_error, body


async def acme_memories(site: LiveSite) -> list[dict[str, Any]]:
    async with site.rest("olga") as rest:
        response = await rest.get("workspaces/acme/memories/", params={"limit": 200})
    assert response.status_code == 200
    results: list[dict[str, Any]] = response.json()["results"]
    return results


@pytest.mark.asyncio
async def test_an_agent_session_over_http_gets_context_adds_and_corrects(live_site: LiveSite) -> None:
    async with mcp_session(live_site, "olga") as session:
        tools = {t.name for t in (await session.list_tools()).tools}
        failed, context = await call(session, "get_working_context", workspace="acme", query="why JWT?", k=5)
        assert not failed and context["items"][0]["content"] == "We picked JWT for authentication"
        assert "score_breakdown" in context["items"][0] and "provenance" in context["items"][0]
        failed, added = await call(session, "add_memory", workspace="acme", content="Tokens expire after 15 minutes")
        assert not failed
        failed, corrected = await call(
            session,
            "record_correction",
            workspace="acme",
            what_i_did_wrong="said tokens last an hour",
            what_i_should_do="tokens expire after 15 minutes",
            context="auth question",
            topic="token lifetime",
        )
        assert not failed and corrected["tier"] == "hot"
    assert len(tools) == 11
    stored = {m["id"]: m for m in await acme_memories(live_site)}
    assert stored[added["id"]]["origin"] == "api:olga"
    assert stored[corrected["id"]]["memory_type"] == "correction"
    # The context call's boost reaches the database within the site's flush interval (1 s), as over REST.
    jwt = context["items"][0]["id"]
    for _ in range(50):
        async with live_site.rest("olga") as rest:
            if (await rest.get(f"workspaces/acme/memories/{jwt}/")).json()["activation"]["boost_count"] >= 1:
                break
        await asyncio.sleep(0.2)
    else:
        raise AssertionError("the context call's boost never reached the memory")


@pytest.mark.asyncio
async def test_every_tool_answers_over_http(live_site: LiveSite) -> None:
    memory_id = (await acme_memories(live_site))[0]["id"]
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_working_context", {"query": "authentication"}),
        ("search_memories", {"query": "authentication"}),
        ("add_memory", {"content": "The API lives under /api/v1/"}),
        (
            "ingest_conversation",
            {"sessions": [{"started_at": "2026-01-05T10:00:00Z", "turns": [{"speaker": "a", "text": "hi"}]}]},
        ),
        ("pin_memory", {"session_id": "http-1", "memory_id": memory_id}),
        ("unpin_memory", {"session_id": "http-1", "memory_id": memory_id}),
        ("record_outcome", {"task_type": "answer", "result": "success"}),
        ("record_correction", {"what_i_did_wrong": "a", "what_i_should_do": "b", "context": "c"}),
        ("add_reflection", {"context": "a", "reflection": "b", "lesson": "c"}),
        ("memory_history", {"memory_id": memory_id}),
        ("list_proposals", {}),
    ]
    async with mcp_session(live_site, "olga", keyword="Token") as session:
        listed = {t.name for t in (await session.list_tools()).tools}
        for name, arguments in calls:
            failed, body = await call(session, name, workspace="acme", **arguments)
            assert not failed, (name, body)
        (hot_rules,) = (await session.list_resources()).resources
        rules = await session.read_resource(hot_rules.uri)
        memory = await session.read_resource(f"smartmemory://workspaces/acme/memories/{memory_id}")
    assert listed == {name for name, _ in calls}
    assert json.loads(rules.contents[0].text)["workspace"] == "acme"  # type: ignore[union-attr]
    assert json.loads(memory.contents[0].text)["id"] == memory_id  # type: ignore[union-attr]


@pytest.mark.asyncio
async def test_a_viewer_token_is_refused_writes_and_another_workspace_is_not_found(live_site: LiveSite) -> None:
    before = len(await acme_memories(live_site))
    async with mcp_session(live_site, "vic") as session:
        failed, forbidden = await call(session, "add_memory", workspace="acme", content="viewer was here")
        assert failed and (forbidden["error"], forbidden["status"]) == ("forbidden", 403)
        failed, readable = await call(session, "search_memories", workspace="acme", query="JWT")
        assert not failed and readable["results"]
        failed, hidden = await call(session, "search_memories", workspace="other", query="plan")
        assert failed and hidden == {
            "error": "not_found",
            "detail": "workspace 'other' not found",
            "field": "workspace",
            "status": 404,
        }
    assert len(await acme_memories(live_site)) == before


@pytest.mark.asyncio
async def test_malformed_arguments_are_a_tool_error_and_nothing_is_written(live_site: LiveSite) -> None:
    before = len(await acme_memories(live_site))
    async with mcp_session(live_site, "olga") as session:
        failed, body = await call(session, "add_memory", workspace="acme", content=["not", "text"], tags="x")
        assert failed and (body["error"], body["field"], body["status"]) == ("invalid", "content", 400)
        failed, body = await call(session, "ingest_conversation", workspace="acme", sessions=[{"turns": []}])
        assert failed and body["field"] == "sessions[0].started_at"
        assert "Traceback" not in json.dumps(body)
    assert len(await acme_memories(live_site)) == before


@pytest.mark.asyncio
async def test_without_a_valid_token_mcp_answers_401_and_only_post_is_served(live_site: LiveSite) -> None:
    async with httpx2.AsyncClient(base_url=live_site.url, timeout=30) as http:
        missing = await http.post("/mcp/", json=INITIALIZE, headers=MCP_HEADERS)
        wrong = await http.post("/mcp/", json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": "Bearer nope"})
        good = {**MCP_HEADERS, "Authorization": f"Bearer {live_site.tokens['olga']}"}
        opened = await http.post("/mcp/", json=INITIALIZE, headers=good)
        stream = await http.get("/mcp/", headers=good)
        foreign_host = await http.post("/mcp/", json=INITIALIZE, headers={**good, "Host": "evil.example"})
    assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"] == "not_authenticated"
    assert wrong.status_code == 401 and wrong.json() == {"error": "authentication_failed", "detail": "Invalid token."}
    assert opened.status_code == 200 and opened.json()["result"]["serverInfo"]["name"] == "smartmemory"
    assert stream.status_code == 405 and stream.headers["allow"] == "POST"
    assert foreign_host.status_code == 400


# -- the token check, in process ------------------------------------------------------------------------


# Transactional: a token check is a request of its own, whose end closes a connection left inside a
# transaction (Django's request_finished handler), as the test's would be otherwise.
@pytest.mark.django_db(transaction=True)
@pytest.mark.api
def test_failed_token_checks_are_limited_per_address_as_over_rest(make_user: Any, settings: Any, capsys: Any) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "token_failure": (2, 60)}
    make_user("olga")
    call_command("create_api_token", "olga")
    key = capsys.readouterr().out.split()[-1]
    assert check_token(key, "10.0.0.1").user is not None
    assert check_token("wrong", "10.0.0.1").failure == "Invalid token."
    assert check_token("wrong", "10.0.0.1").wait is None
    throttled = check_token(key, "10.0.0.1")
    assert throttled.user is None and throttled.wait is not None and 1 <= throttled.wait <= 60
    assert check_token(key, "10.0.0.2").user is not None  # another address is not held back


def test_the_address_is_the_sockets_unless_a_trusted_proxy_forwarded_it(settings: Any) -> None:
    scope = {"client": ("10.0.0.7", 5000), "headers": [(b"x-forwarded-for", b"203.0.113.9")]}
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 0}
    assert address_of(scope) == "10.0.0.7"
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    assert address_of(scope) == "203.0.113.9"
