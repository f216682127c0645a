"""The MCP tools through the SDK's ClientSession: each answers what its REST call answers and counts the same
(retrieval events, origins and audit rows naming the caller, roles, isolation, rate limits); bad arguments
are tool errors in the REST API's error shape, with nothing written."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import jsonschema
import pytest
from asgiref.sync import sync_to_async
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from rest_framework.test import APIClient

from evolution import engine_inputs
from evolution.models import Outcome, Proposal
from history.models import EvolutionRecord
from memories import services
from memories.inputs import MemoryInput
from memories.models import Memory, RetrievalEvent, Role, Workspace
from memories.signalbus import LocalSignalBus
from smartmemory_site.mcp import tools
from smartmemory_site.mcp.server import SERVER_ERROR
from surfacing import services as surfacing_services
from surfacing.models import SessionPin

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio, pytest.mark.api]

WRITE_TOOLS = {"add_memory", "ingest_conversation", "record_outcome", "record_correction", "add_reflection"}
VALID_WRITES: dict[str, dict[str, Any]] = {
    "add_memory": {"content": "Deploys go through Kamal"},
    "ingest_conversation": {
        "sessions": [{"started_at": "2026-01-02T09:00:00Z", "turns": [{"speaker": "ana", "text": "We use Kamal"}]}]
    },
    "record_outcome": {"task_type": "deploy", "result": "success"},
    "record_correction": {"what_i_did_wrong": "used scp", "what_i_should_do": "use Kamal", "context": "deploy"},
    "add_reflection": {"context": "deploy", "reflection": "scp was slow", "lesson": "use Kamal"},
}


async def call(session: ClientSession, name: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """(is_error, the JSON) of one tool call: one text block holding the REST body."""
    result = await session.call_tool(name, arguments)
    assert len(result.content) == 1 and result.content[0].type == "text"
    body = json.loads(result.content[0].text)
    assert result.structured_content is None  # the JSON once, as text
    return result.is_error, body


async def ok(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, body = await call(session, name, **arguments)
    assert not is_error, body
    return body


async def refused(session: ClientSession, name: str, **arguments: Any) -> dict[str, Any]:
    is_error, body = await call(session, name, **arguments)
    assert is_error, body
    assert "Traceback" not in json.dumps(body)
    return body


def counts(workspace: Workspace) -> tuple[int, ...]:
    return (
        Memory.objects.filter(workspace=workspace).count(),
        Outcome.objects.filter(workspace=workspace).count(),
        EvolutionRecord.objects.filter(workspace=workspace).count(),
        SessionPin.objects.count(),
    )


@pytest.fixture
def remember(workspace: Workspace, user: Any) -> Callable[..., Any]:
    async def make(content: str, ws: Workspace | None = None, **fields: Any) -> Memory:
        item = MemoryInput(content=content, **fields)
        return await sync_to_async(services.memory_create)(workspace=ws or workspace, actor=user, item=item)

    return make


# -- listing ------------------------------------------------------------------------------------------


async def test_every_tool_is_listed_with_a_typed_schema_and_approving_is_not_one(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    async with connect(user) as session:
        listed = (await session.list_tools()).tools
    assert [t.name for t in listed] == [spec.name for spec in tools.TOOLS]
    assert {t.name for t in listed} == {
        "get_working_context",
        "search_memories",
        "add_memory",
        "ingest_conversation",
        "pin_memory",
        "unpin_memory",
        "record_outcome",
        "record_correction",
        "add_reflection",
        "memory_history",
        "list_proposals",
    }
    for tool in listed:
        schema = tool.input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert schema["required"][0] == "workspace"
        assert all("type" in prop for prop in schema["properties"].values()), tool.name
        assert tool.annotations is not None and tool.annotations.destructive_hint is False
    by_name = {t.name: t for t in listed}
    assert by_name["list_proposals"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert by_name["add_memory"].annotations.read_only_hint is False  # type: ignore[union-attr]
    assert by_name["get_working_context"].input_schema["properties"]["k"]["maximum"] == 100
    assert not {name for name in by_name if "approve" in name or "reject" in name}


async def test_the_valid_examples_fit_the_schemas(connect: Connect, user: Any, workspace: Workspace) -> None:
    async with connect(user) as session:
        schemas = {t.name: t.input_schema for t in (await session.list_tools()).tools}
    for name, arguments in VALID_WRITES.items():
        jsonschema.validate({"workspace": "acme", **arguments}, schemas[name])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"workspace": "acme", "content": "x", "colour": "red"}, schemas["add_memory"])


async def test_the_engine_tools_take_the_rest_bodies(connect: Connect, user: Any, workspace: Workspace) -> None:
    """record_outcome, record_correction and add_reflection are documented by the REST bodies, nested context
    included: what a client validates against is what the tool checks."""
    async with connect(user) as session:
        schemas = {t.name: t.input_schema for t in (await session.list_tools()).tools}
    bodies = {
        "record_outcome": engine_inputs.OutcomeIn,
        "record_correction": engine_inputs.CorrectionIn,
        "add_reflection": engine_inputs.ReflectionIn,
    }
    for name, body in bodies.items():
        assert set(schemas[name]["properties"]) == {"workspace", *body.model_fields}, name
        required = [field for field, info in body.model_fields.items() if info.is_required()]
        assert schemas[name]["required"] == ["workspace", *required], name
    outcome = {"workspace": "acme", "task_type": "deploy", "result": "fail", "context": {"lesson": "pin it"}}
    jsonschema.validate(outcome, schemas["record_outcome"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**outcome, "context": {"mood": "grim"}}, schemas["record_outcome"])


# -- reads --------------------------------------------------------------------------------------------


async def test_working_context_is_the_rest_answer_and_counts_its_retrievals(
    connect: Connect,
    user: Any,
    workspace: Workspace,
    remember: Callable[..., Any],
    api: APIClient,
    fresh_signal_bus: LocalSignalBus,
) -> None:
    decision = await remember("We picked JWT for authentication", memory_type="decision")
    await remember("The office plant needs water")
    async with connect(user) as session:
        body = await ok(session, "get_working_context", workspace="acme", query="why JWT?", session_id="s1", k=5)
    answer = await sync_to_async(api.post)("/api/v1/workspaces/acme/context/", {"query": "why JWT?"}, format="json")
    rest = answer.json()
    assert set(body) == set(rest)
    assert [i["id"] for i in body["items"]] == [i["id"] for i in rest["items"]]
    first = body["items"][0]
    assert first["id"] == str(decision.id)
    assert set(first) == {"id", "content", "memory_type", "score", "score_breakdown", "provenance"}
    assert {"activation", "relevance", "recency", "centrality", "anchor_forced"} <= set(first["score_breakdown"])
    assert first["provenance"]["kind"] in {"lexical", "semantic"}
    assert isinstance(body["drift_warnings"], list)

    await sync_to_async(fresh_signal_bus.flush)()
    events = await sync_to_async(list)(RetrievalEvent.objects.filter(memory=decision, source="context"))
    assert len(events) == 2  # one by MCP, one by REST
    assert {e.session_id for e in events} == {"s1", ""}


async def test_search_answers_memories_with_scores_and_records_the_search(
    connect: Connect, user: Any, workspace: Workspace, remember: Callable[..., Any], fresh_signal_bus: LocalSignalBus
) -> None:
    decision = await remember("We picked JWT for authentication")
    async with connect(user) as session:
        body = await ok(session, "search_memories", workspace="acme", query="JWT authentication", k=3)
    assert body["results"][0]["id"] == str(decision.id) and 0 < body["results"][0]["score"] <= 1
    assert body["results"][0]["workspace"] == "acme" and "activation" in body["results"][0]
    await sync_to_async(fresh_signal_bus.flush)()
    event = await sync_to_async(RetrievalEvent.objects.get)(memory=decision)
    assert event.source == "search" and str(event.result_set) == body["result_set"]


async def test_memory_history_lists_the_record_that_names_who_wrote_in_another_name(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    async with connect(user) as session:
        written = await ok(session, "add_memory", workspace="acme", content="Bob prefers tea", origin="user:bob")
        history = await ok(session, "memory_history", workspace="acme", memory_id=written["id"])
    assert written["origin"] == "user:bob"
    (entry,) = history["results"]
    assert entry["evolver"] == "api" and entry["action"] == "import" and history["next"] is None
    record = await sync_to_async(EvolutionRecord.objects.get)(pk=entry["id"])
    assert record.actor_id == user.pk


async def test_list_proposals_shows_the_strategy_a_repeated_lesson_proposes(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    lesson = {"lesson": "run the migrations before the deploy"}
    async with connect(user) as session:
        for _ in range(3):
            recorded = await ok(
                session, "record_outcome", workspace="acme", task_type="deploy", result="fail", context=lesson
            )
        listed = await ok(session, "list_proposals", workspace="acme", status="pending")
    assert recorded["context"]["lesson"] == lesson["lesson"]
    assert [p["id"] for p in recorded["proposals"]["created"]] == [p["id"] for p in listed["results"]]
    (proposal,) = listed["results"]
    assert proposal["kind"] == "strategy" and proposal["status"] == "pending"
    assert await sync_to_async(Proposal.objects.filter(status="pending").count)() == 1


# -- writes -------------------------------------------------------------------------------------------


async def test_add_memory_stores_it_in_the_callers_name(connect: Connect, user: Any, workspace: Workspace) -> None:
    async with connect(user) as session:
        body = await ok(
            session,
            "add_memory",
            workspace="acme",
            content="Deploys go through Kamal",
            memory_type="decision",
            tags=["ops"],
        )
    memory = await sync_to_async(Memory.objects.get)(pk=body["id"])
    assert (memory.content, memory.memory_type, memory.tags, memory.origin) == (
        "Deploys go through Kamal",
        "decision",
        ["ops"],
        "api:alice",
    )
    assert body["origin"] == "api:alice" and body["workspace"] == "acme"


async def test_ingest_conversation_stores_one_episode_per_turn(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    sessions = [
        {
            "started_at": "2026-01-02T09:00:00Z",
            "turns": [{"speaker": "ana", "text": "We deploy with Kamal"}, {"speaker": "ben", "text": "Since March"}],
        }
    ]
    async with connect(user) as session:
        body = await ok(session, "ingest_conversation", workspace="acme", sessions=sessions)
    turns = await sync_to_async(lambda: [Memory.objects.get(pk=i) for i in body["ids"]])()
    assert [m.content for m in turns] == ["ana: We deploy with Kamal", "ben: Since March"]
    assert {m.memory_type for m in turns} == {"episodic"} and {m.origin for m in turns} == {"api:alice"}


async def test_pins_lift_a_memory_into_the_sessions_context_until_unpinned(
    connect: Connect, user: Any, workspace: Workspace, remember: Callable[..., Any], viewer: Any
) -> None:
    plant = await remember("The office plant needs water")
    router = {"mode": "router"}
    await sync_to_async(surfacing_services.settings_update)(workspace=workspace, actor=user, surfacing=router)
    # Pins are part of using a working context: a viewer may pin, as over REST.
    async with connect(viewer) as session:
        pin = await ok(session, "pin_memory", workspace="acme", session_id="s1", memory_id=str(plant.id), weight=2)
        context = await ok(session, "get_working_context", workspace="acme", query="deploy", session_id="s1")
        first = await ok(session, "unpin_memory", workspace="acme", session_id="s1", memory_id=str(plant.id))
        again = await ok(session, "unpin_memory", workspace="acme", session_id="s1", memory_id=str(plant.id))
    assert (pin["memory_id"], pin["weight"]) == (str(plant.id), 2.0) and pin["expires_at"].endswith("Z")
    item = next(i for i in context["items"] if i["id"] == str(plant.id))
    assert item["score_breakdown"]["session_pin_boost"] > 0
    assert (first["removed"], again["removed"]) == (True, False)
    assert await sync_to_async(SessionPin.objects.count)() == 0


async def test_a_correction_is_a_hot_memory_in_the_callers_name(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    async with connect(user) as session:
        correction = {**VALID_WRITES["record_correction"], "topic": "deploys"}
        body = await ok(session, "record_correction", workspace="acme", **correction)
    assert (body["memory_type"], body["tier"], body["origin"], body["subject"]) == (
        "correction",
        "hot",
        "api:alice",
        "deploys",
    )
    assert body["content"] == "use Kamal"


async def test_a_reflection_is_stored_with_its_three_lines(connect: Connect, user: Any, workspace: Workspace) -> None:
    async with connect(user) as session:
        body = await ok(session, "add_reflection", workspace="acme", **VALID_WRITES["add_reflection"])
    memory = await sync_to_async(Memory.objects.get)(pk=body["id"])
    assert memory.memory_type == "reflection" and memory.metadata["reflection"]["lesson"] == "use Kamal"


# -- permissions, isolation, bad arguments ------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(WRITE_TOOLS))
async def test_a_viewer_is_refused_every_write_and_nothing_is_written(
    connect: Connect, workspace: Workspace, viewer: Any, name: str
) -> None:
    before = await sync_to_async(counts)(workspace)
    async with connect(viewer) as session:
        body = await refused(session, name, workspace="acme", **VALID_WRITES[name])
    assert (body["error"], body["status"], body["field"]) == ("forbidden", 403, "workspace")
    assert "viewer" in body["detail"]
    assert await sync_to_async(counts)(workspace) == before


@pytest.mark.parametrize("name", [spec.name for spec in tools.TOOLS])
async def test_another_workspace_is_not_found_whatever_the_tool(
    connect: Connect, user: Any, workspace: Workspace, other_workspace: Workspace, name: str
) -> None:
    arguments = {"query": "x", "session_id": "s", "memory_id": "00000000-0000-0000-0000-000000000000"}
    arguments.update(VALID_WRITES.get(name, {}))
    spec = tools.TOOLS_BY_NAME[name]
    arguments = {k: v for k, v in arguments.items() if k in spec.properties}
    before = await sync_to_async(counts)(other_workspace)
    async with connect(user) as session:
        other = await refused(session, name, workspace="other", **arguments)
        missing = await refused(session, name, workspace="no-such-place", **arguments)
    assert other == {"error": "not_found", "detail": "workspace 'other' not found", "field": "workspace", "status": 404}
    assert missing["detail"] == "workspace 'no-such-place' not found"
    assert await sync_to_async(counts)(other_workspace) == before


async def test_a_memory_of_another_workspace_is_not_found(
    connect: Connect, user: Any, workspace: Workspace, other_workspace: Workspace, remember: Callable[..., Any]
) -> None:
    theirs = await remember("their secret", ws=other_workspace)
    async with connect(user) as session:
        pin = await refused(session, "pin_memory", workspace="acme", session_id="s", memory_id=str(theirs.id))
        history = await refused(session, "memory_history", workspace="acme", memory_id=str(theirs.id))
    assert (pin["error"], pin["field"], pin["status"]) == ("not_found", "memory_id", 404)
    assert history["error"] == "not_found" and "their secret" not in json.dumps([pin, history])


BAD_ARGUMENTS = [
    ("add_memory", {}, "content", "content: this field is required"),
    ("add_memory", {"content": 5}, "content", "content: expected a string"),
    ("add_memory", {"content": "x", "tags": "ops"}, "tags", "tags: expected a list of strings"),
    ("add_memory", {"content": "x", "colour": "red"}, "colour", None),
    ("add_memory", {"content": "x", "confidence": 2}, "confidence", "confidence: must be between 0 and 1"),
    ("get_working_context", {"query": "x", "k": 0}, "k", None),
    ("get_working_context", {"query": "x", "k": "5"}, "k", None),
    ("get_working_context", {"k": 5}, "query", "query: this field is required"),
    ("get_working_context", {"query": "x", "strategy": "psychic"}, "strategy", None),
    ("search_memories", {"query": "  "}, "query", "query: must not be blank"),
    ("ingest_conversation", {"sessions": []}, "sessions", "sessions: expected a non-empty list of sessions"),
    ("ingest_conversation", {"sessions": [{"turns": [{"speaker": "a", "text": "b"}]}]}, "sessions[0].started_at", None),
    ("record_outcome", {"task_type": "deploy", "result": "maybe"}, "result", None),
    ("record_correction", {"what_i_did_wrong": "x", "what_i_should_do": "y"}, "context", None),
    ("add_reflection", {"context": "x", "reflection": "y", "lesson": 3}, "lesson", "lesson: expected a string"),
    ("pin_memory", {"session_id": "s", "memory_id": "not-a-uuid"}, "memory_id", None),
    ("memory_history", {"memory_id": "not-a-uuid"}, "memory_id", None),
    ("memory_history", {"memory_id": "00000000-0000-0000-0000-000000000000", "limit": "ten"}, "limit", None),
    ("list_proposals", {"status": "bogus"}, "status", None),
    ("list_proposals", {"limit": 501}, "limit", None),
]


@pytest.mark.parametrize(("name", "arguments", "field", "detail"), BAD_ARGUMENTS)
async def test_bad_arguments_are_a_tool_error_naming_the_field_and_nothing_is_written(
    connect: Connect,
    user: Any,
    workspace: Workspace,
    name: str,
    arguments: dict[str, Any],
    field: str,
    detail: str | None,
) -> None:
    before = await sync_to_async(counts)(workspace)
    async with connect(user) as session:
        body = await refused(session, name, workspace="acme", **arguments)
    assert body["error"] in {"invalid", "unknown_strategy", "not_found"} or body["error"].startswith("invalid")
    assert body["field"] == field and body["detail"].startswith(f"{field}: ")
    if detail is not None:
        assert body["detail"] == detail
    assert body["status"] in {400, 404}
    assert await sync_to_async(counts)(workspace) == before


async def test_the_same_bad_body_gets_the_same_error_over_rest_and_mcp(
    connect: Connect, user: Any, workspace: Workspace, api: APIClient
) -> None:
    bad = {"task_type": "deploy", "result": "success", "context": {"lesson": "x", "mood": "grim"}}
    rest = (await sync_to_async(api.post)("/api/v1/workspaces/acme/outcomes/", bad, format="json")).json()
    async with connect(user) as session:
        body = await refused(session, "record_outcome", workspace="acme", **bad)
    assert body == {**rest, "status": 400}


async def test_a_missing_or_mistyped_workspace_is_a_tool_error(
    connect: Connect, user: Any, workspace: Workspace
) -> None:
    async with connect(user) as session:
        missing = await refused(session, "list_proposals")
        mistyped = await refused(session, "list_proposals", workspace=7)
    assert (missing["field"], missing["detail"]) == ("workspace", "workspace: this field is required")
    assert (mistyped["field"], mistyped["error"]) == ("workspace", "invalid")


async def test_an_unknown_tool_is_a_protocol_error(connect: Connect, user: Any, workspace: Workspace) -> None:
    async with connect(user) as session:
        with pytest.raises(MCPError, match="unknown tool 'approve_proposal'"):
            await session.call_tool("approve_proposal", {"workspace": "acme"})


async def test_writes_count_against_the_callers_write_rate(
    connect: Connect, user: Any, workspace: Workspace, settings: Any
) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "write": (2, 60)}
    async with connect(user) as session:
        await ok(session, "add_memory", workspace="acme", content="one")
        # Reads are not writes, as search and context over REST.
        await ok(session, "search_memories", workspace="acme", query="one")
        await ok(session, "add_memory", workspace="acme", content="two")
        body = await refused(session, "add_memory", workspace="acme", content="three")
    assert (body["error"], body["status"]) == ("throttled", 429) and 1 <= body["retry_after"] <= 60
    assert body["detail"].startswith("Request was throttled.")
    assert await sync_to_async(Memory.objects.filter(workspace=workspace).count)() == 2


async def test_an_unexpected_failure_is_a_server_error_without_a_traceback(
    connect: Connect, user: Any, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("disk on fire at /var/secret/path")

    monkeypatch.setattr(services, "conversation_ingest", broken)
    async with connect(user) as session:
        body = await refused(session, "ingest_conversation", workspace="acme", **VALID_WRITES["ingest_conversation"])
    assert body == SERVER_ERROR
    assert "secret" not in json.dumps(body)


# -- a connection bound to one workspace (mcp_stdio) --------------------------------------------------


async def test_a_bound_connection_defaults_to_its_workspace_and_knows_no_other(
    connect: Connect, user: Any, workspace: Workspace, make_user: Callable[..., Any]
) -> None:
    await sync_to_async(services.workspace_create)(owner=user, slug="second", name="Second")
    async with connect(user, workspace="acme") as session:
        schemas = {t.name: t.input_schema for t in (await session.list_tools()).tools}
        written = await ok(session, "add_memory", content="Bound to acme")
        elsewhere = await refused(session, "add_memory", workspace="second", content="not here")
    assert "workspace" not in schemas["add_memory"]["required"]
    assert written["workspace"] == "acme"
    assert (elsewhere["error"], elsewhere["status"]) == ("not_found", 404)
    second = await sync_to_async(Workspace.objects.get)(slug="second")
    assert await sync_to_async(Memory.objects.filter(workspace=second).count)() == 0


async def test_an_editor_may_write_but_a_removed_member_is_not_found(
    connect: Connect, workspace: Workspace, member: Callable[[str], Any]
) -> None:
    editor = await sync_to_async(member)(Role.EDITOR)
    async with connect(editor) as session:
        await ok(session, "add_memory", workspace="acme", content="from the editor")
        await sync_to_async(workspace.memberships.filter(user=editor).delete)()
        gone = await refused(session, "add_memory", workspace="acme", content="after removal")
    assert gone["error"] == "not_found"
