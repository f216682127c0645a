"""GET /api/schema/ describes the REST contract as OpenAPI 3."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = [pytest.mark.django_db, pytest.mark.api]

CONTRACT = {
    "/api/v1/workspaces/": {"get", "post"},
    "/api/v1/workspaces/{ws}/memories/": {"get", "post"},
    "/api/v1/workspaces/{ws}/memories/bulk/": {"post"},
    "/api/v1/workspaces/{ws}/memories/{memory_id}/": {"get", "patch", "delete"},
    "/api/v1/workspaces/{ws}/memories/{memory_id}/edges/": {"get"},
    "/api/v1/workspaces/{ws}/edges/": {"post"},
    "/api/v1/workspaces/{ws}/conversations/": {"post"},
}


@pytest.fixture
def schema(client: Client) -> dict[str, Any]:
    response = client.get("/api/schema/", {"format": "json"})
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def test_the_schema_is_openapi_3_and_needs_no_login(schema: dict[str, Any]) -> None:
    assert schema["openapi"].startswith("3.")
    assert schema["info"]["title"] == "SmartMemory site API"


def test_every_contract_path_and_method_is_described(schema: dict[str, Any]) -> None:
    for path, methods in CONTRACT.items():
        assert path in schema["paths"], path
        assert methods <= set(schema["paths"][path]), (path, set(schema["paths"][path]))


def test_the_memory_shape_lists_the_contract_fields(schema: dict[str, Any]) -> None:
    memory = schema["components"]["schemas"]["MemoryOut"]["properties"]
    assert {
        "id",
        "workspace",
        "content",
        "memory_type",
        "subject",
        "tags",
        "origin",
        "confidence",
        "status",
        "tier",
        "compression_tier",
        "activation",
        "retention_score",
        "access_count",
        "created_at",
        "updated_at",
        "conflicts_with",
        "replace_log",
        "replace_count",
        "drift_flags",
        "summarizes",
        "summarized_by",
        "metadata",
    } <= set(memory)


def test_errors_are_documented_with_the_error_shape(schema: dict[str, Any]) -> None:
    create = schema["paths"]["/api/v1/workspaces/{ws}/memories/"]["post"]["responses"]
    assert {"201", "400", "403", "404"} <= set(create)
    ref = create["400"]["content"]["application/json"]["schema"]["$ref"]
    assert set(schema["components"]["schemas"][ref.rsplit("/", 1)[1]]["properties"]) >= {"error", "detail"}


def test_token_authentication_is_declared(schema: dict[str, Any]) -> None:
    assert "tokenAuth" in schema["components"]["securitySchemes"]


def test_conflicts_are_documented_where_they_happen(schema: dict[str, Any]) -> None:
    assert "409" in schema["paths"]["/api/v1/workspaces/"]["post"]["responses"]
    assert "409" in schema["paths"]["/api/v1/workspaces/{ws}/edges/"]["post"]["responses"]


# -- documented == returned -------------------------------------------------------------------------


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """A schema node with its $ref (and a one-branch allOf/oneOf, as drf-spectacular writes nullable
    references) followed."""
    while True:
        if "$ref" in node:
            node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        elif len(node.get("allOf", ())) == 1:
            node = node["allOf"][0]
        elif "oneOf" in node and len([n for n in node["oneOf"] if "$ref" in n]) == 1:
            node = next(n for n in node["oneOf"] if "$ref" in n)
        else:
            return node


def _mismatches(schema: dict[str, Any], node: dict[str, Any], value: Any, where: str) -> list[str]:
    """Where ``value`` (a real response) has keys the schema does not document, or lacks documented ones."""
    node = _resolve(schema, node)
    if isinstance(value, dict) and "properties" in node:
        documented, returned = set(node["properties"]), set(value)
        found = []
        # Fields documented as not required (a workspace's role, say) may be absent.
        missing = sorted((documented - returned) & set(node.get("required", documented)))
        if missing:
            found.append(f"{where}: documented but not returned: {missing}")
        if returned - documented:
            found.append(f"{where}: returned but not documented: {sorted(returned - documented)}")
        for key in documented & returned:
            found += _mismatches(schema, node["properties"][key], value[key], f"{where}.{key}")
        return found
    if isinstance(value, list) and value and "items" in node:
        return _mismatches(schema, node["items"], value[0], f"{where}[0]")
    return []


def _response_schema(schema: dict[str, Any], path: str, method: str, code: int) -> dict[str, Any]:
    content = schema["paths"][path][method]["responses"][str(code)]["content"]
    node: dict[str, Any] = content["application/json"]["schema"]
    return node


Call = tuple[str, str, str, dict[str, Any] | None, int]
"""(documented path, method, real path, body, expected status) of one API call."""


def _assert_documented(schema: dict[str, Any], api: Any, calls: list[Call]) -> None:
    """Make each call and compare what it returned with what the schema documents for that answer."""
    problems: list[str] = []
    for documented_path, method, real_path, body, code in calls:
        response = getattr(api, method)(real_path, body, format="json") if body else getattr(api, method)(real_path)
        assert response.status_code == code, (method, real_path, response.content)
        node = _response_schema(schema, documented_path, method, code)
        problems += _mismatches(schema, node, response.json(), f"{method.upper()} {documented_path}")
    assert problems == [], "\n".join(problems)


def test_every_memory_endpoint_returns_exactly_what_it_documents(
    schema: dict[str, Any], api: Any, workspace: Any
) -> None:
    base = "/api/v1/workspaces/acme/"
    calls: list[Call] = [
        ("/api/v1/workspaces/", "get", "/api/v1/workspaces/", None, 200),
        ("/api/v1/workspaces/", "post", "/api/v1/workspaces/", {"slug": "beta", "name": "Beta"}, 201),
    ]
    first = api.post(base + "memories/", {"content": "We picked JWT", "memory_type": "decision"}, format="json")
    second = api.post(base + "memories/", {"content": "Sticky sessions are off"}, format="json")
    assert first.status_code == second.status_code == 201
    one, two = first.json()["id"], second.json()["id"]
    calls += [
        ("/api/v1/workspaces/{ws}/memories/", "post", base + "memories/", {"content": "Tokens expire in 15 min"}, 201),
        ("/api/v1/workspaces/{ws}/memories/", "get", base + "memories/", None, 200),
        ("/api/v1/workspaces/{ws}/memories/{memory_id}/", "get", f"{base}memories/{one}/", None, 200),
        ("/api/v1/workspaces/{ws}/memories/{memory_id}/", "patch", f"{base}memories/{one}/", {"tags": ["auth"]}, 200),
        (
            "/api/v1/workspaces/{ws}/edges/",
            "post",
            base + "edges/",
            {"source": one, "target": two, "type": "RELATED"},
            201,
        ),
        ("/api/v1/workspaces/{ws}/memories/{memory_id}/edges/", "get", f"{base}memories/{one}/edges/", None, 200),
        ("/api/v1/workspaces/{ws}/memories/bulk/", "post", base + "memories/bulk/", {"items": [{"content": "a"}]}, 201),
        (
            "/api/v1/workspaces/{ws}/conversations/",
            "post",
            base + "conversations/",
            {"sessions": [{"started_at": "2026-01-02T10:00:00Z", "turns": [{"speaker": "ann", "text": "hi"}]}]},
            201,
        ),
        ("/api/v1/workspaces/{ws}/memories/{memory_id}/", "delete", f"{base}memories/{two}/", None, 200),
    ]
    _assert_documented(schema, api, calls)


def test_the_documented_inputs_are_the_fields_the_api_accepts(schema: dict[str, Any]) -> None:
    from memories.inputs import EDITABLE_FIELDS, MemoryIn

    def fields_of(path: str, method: str) -> set[str]:
        body = schema["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
        return set(_resolve(schema, body)["properties"])

    assert fields_of("/api/v1/workspaces/{ws}/memories/", "post") == set(MemoryIn.model_fields)
    assert fields_of("/api/v1/workspaces/{ws}/memories/{memory_id}/", "patch") == EDITABLE_FIELDS
    assert {"content", "tags", "valid_from", "valid_to", "metadata", "created_at"} <= EDITABLE_FIELDS | set(
        MemoryIn.model_fields
    )


def test_the_evolution_endpoints_document_the_bodies_they_parse(schema: dict[str, Any]) -> None:
    from evolution import engine_inputs, inputs, memdir_import

    def body_of(path: str, media: str = "application/json") -> tuple[str, set[str]]:
        node = schema["paths"][path]["post"]["requestBody"]["content"][media]["schema"]
        return node["$ref"].rsplit("/", 1)[1], set(_resolve(schema, node)["properties"])

    ws = "/api/v1/workspaces/{ws}/"
    bodies = {
        "outcomes/": engine_inputs.OutcomeIn,
        "corrections/": engine_inputs.CorrectionIn,
        "reflections/": engine_inputs.ReflectionIn,
        "evolution/runs/": inputs.RunIn,
        "engine/evolve/": inputs.EvolveIn,
        "dream/": inputs.DreamIn,
        "proposals/{proposal_id}/approve/": inputs.ProposalApproveIn,
        "proposals/{proposal_id}/reject/": inputs.ProposalRejectIn,
        "import/": memdir_import.ImportIn,
    }
    for path, body in bodies.items():
        assert body_of(ws + path) == (body.__name__, set(body.model_fields)), path
    assert body_of(ws + "import/", "multipart/form-data") == ("ImportUploadIn", {"file"})
    context = schema["components"]["schemas"]["OutcomeContextIn"]
    assert set(context["properties"]) == {"lesson", "issue", "solution"} and context["additionalProperties"] is False


def _request_bodies() -> dict[str, type[Any]]:
    from core.schemas import RequestBody

    found: dict[str, type[Any]] = {}
    stack = list(RequestBody.__subclasses__())
    while stack:
        model = stack.pop()
        found[model.__name__] = model
        stack.extend(model.__subclasses__())
    return found


def test_every_documented_request_body_is_the_model_that_validates_it(schema: dict[str, Any]) -> None:
    """A body documented by anything but the RequestBody its view parses with (a serializer kept for the
    schema, a hand-written dict) could say one thing and accept another: every JSON body of the API is a
    component generated from a RequestBody model, with exactly its fields."""
    models = _request_bodies()
    problems = []
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if content is None:
                continue
            ref = content["schema"].get("$ref", "")
            name = ref.rsplit("/", 1)[-1]
            if name not in models:
                problems.append(f"{method.upper()} {path}: documented by {name or content['schema']}")
                continue
            documented = set(schema["components"]["schemas"][name]["properties"])
            if documented != set(models[name].model_fields):
                problems.append(f"{method.upper()} {path}: {sorted(documented ^ set(models[name].model_fields))}")
    assert problems == [], "\n".join(problems)


def test_every_surfacing_endpoint_returns_exactly_what_it_documents(
    schema: dict[str, Any], api: Any, workspace: Any
) -> None:
    base = "/api/v1/workspaces/acme/"
    decision = api.post(base + "memories/", {"content": "We picked JWT", "memory_type": "decision"}, format="json")
    api.post(base + "memories/", {"content": "Answer in English", "memory_type": "anchor"}, format="json")
    reason = api.post(base + "memories/", {"content": "JWT needs no sticky sessions"}, format="json")
    one, two = decision.json()["id"], reason.json()["id"]
    api.post(base + "edges/", {"source": one, "target": two, "type": "RELATED"}, format="json")
    question = {"session_id": "s1", "query": "why did we pick JWT?", "k": 1, "explain": True}
    calls: list[Call] = [
        (
            "/api/v1/workspaces/{ws}/sessions/{sid}/pins/{memory_id}/",
            "put",
            f"{base}sessions/s1/pins/{two}/",
            {"weight": 2},
            200,
        ),
        ("/api/v1/workspaces/{ws}/context/", "post", base + "context/", {**question, "mode": "router"}, 200),
        ("/api/v1/workspaces/{ws}/context/", "post", base + "context/", {**question, "mode": "legacy"}, 200),
        ("/api/v1/workspaces/{ws}/search/", "post", base + "search/", {"query": "JWT", "k": 5}, 200),
        ("/api/v1/workspaces/{ws}/settings/", "get", base + "settings/", None, 200),
        (
            "/api/v1/workspaces/{ws}/settings/",
            "patch",
            base + "settings/",
            {"surfacing": {"candidate_multiplier": None}},
            200,
        ),
    ]
    _assert_documented(schema, api, calls)


def test_the_documented_surfacing_inputs_are_the_fields_the_api_accepts(schema: dict[str, Any]) -> None:
    from surfacing.inputs import ContextIn, SearchIn

    def fields_of(path: str) -> set[str]:
        body = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        return set(_resolve(schema, body)["properties"])

    assert fields_of("/api/v1/workspaces/{ws}/context/") == set(ContextIn.model_fields)
    assert fields_of("/api/v1/workspaces/{ws}/search/") == set(SearchIn.model_fields)


def test_the_run_list_and_a_run_return_exactly_what_they_document(
    schema: dict[str, Any], api: Any, workspace: Any, user: Any
) -> None:
    from evolution import services as evolution_services

    run = evolution_services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"])
    base = "/api/v1/workspaces/acme/evolution/runs/"
    calls: list[Call] = [
        # The list shows each run without its records (found by the schema fuzz: RunOut required them).
        ("/api/v1/workspaces/{ws}/evolution/runs/", "get", base, None, 200),
        ("/api/v1/workspaces/{ws}/evolution/runs/{run_id}/", "get", f"{base}{run.id}/", None, 200),
    ]
    _assert_documented(schema, api, calls)


def test_a_run_revert_returns_exactly_what_it_documents_done_or_queued(
    schema: dict[str, Any], api: Any, workspace: Any, user: Any, settings: Any
) -> None:
    """200 with the records undone when the request reverted the run, 202 with the revert's progress when it was
    queued for a worker (more records than EVOLUTION_REVERT_INLINE_RECORDS)."""
    from datetime import timedelta

    from django.utils import timezone

    from evolution import services as evolution_services
    from memories.inputs import MemoryInput
    from memories.services import memory_create

    old = timezone.now() - timedelta(days=200)
    memory_create(
        workspace=workspace,
        actor=user,
        item=MemoryInput(content="We picked JWT for the API", memory_type="episodic", created_at=old),
    )
    path = "/api/v1/workspaces/{ws}/evolution/runs/{run_id}/revert/"
    base = "/api/v1/workspaces/acme/evolution/runs/"
    first = evolution_services.evolution_run(
        workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=False
    )
    _assert_documented(schema, api, [(path, "post", f"{base}{first.id}/revert/", None, 200)])
    second = evolution_services.evolution_run(
        workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=False
    )
    settings.EVOLUTION_REVERT_INLINE_RECORDS = 0
    settings.EVOLUTION_WORKER = "external"
    _assert_documented(schema, api, [(path, "post", f"{base}{second.id}/revert/", None, 202)])


def test_the_memory_list_documents_every_filter_it_reads(schema: dict[str, Any]) -> None:
    import dataclasses

    from memories.selectors import MemoryFilters

    # The query names of MemoryFilters' fields (filters_from_query reads them); a new filter is documented too.
    renamed = {"memory_type": "type", "tags": "tag"}
    filters = {renamed.get(f.name, f.name) for f in dataclasses.fields(MemoryFilters)}
    listed = schema["paths"]["/api/v1/workspaces/{ws}/memories/"]["get"]["parameters"]
    documented = {p["name"] for p in listed if p["in"] == "query"}
    assert filters | {"ordering", "cursor", "limit"} == documented


def test_every_documented_read_returns_exactly_what_it_documents(
    schema: dict[str, Any], api: Any, user: Any, workspace: Any
) -> None:
    """Each GET of the schema, on a workspace where each list holds something, against what it documents; a GET
    added to the schema without a way here to fill its path fails this test until it is added."""
    from datetime import timedelta

    from django.utils import timezone

    from evolution import dream, engine, engine_inputs, services
    from evolution.models import Proposal
    from history.models import EvolutionRecord
    from memories.inputs import MemoryInput
    from memories.services import memory_create

    old = timezone.now() - timedelta(days=200)
    memory = memory_create(
        workspace=workspace,
        actor=user,
        item=MemoryInput(content="We picked JWT for the API", memory_type="episodic", created_at=old),
    )
    for days in (3.0, 2.0, 1.0):
        engine.outcome_record(
            workspace=workspace,
            item=engine_inputs.OutcomeInput(
                task_type="deploy",
                result="fail",
                lesson="Check the token before deploying",
                created_at=timezone.now() - timedelta(days=days),
            ),
        )
    run = services.evolution_run(workspace=workspace, actor=user, evolvers=["ExponentialDecay"], dry_run=True)
    record = EvolutionRecord.objects.filter(workspace=workspace).order_by("id").last()
    report = dream.dream_run(workspace=workspace)
    proposal = Proposal.objects.filter(workspace=workspace).order_by("id").last()
    assert record is not None and proposal is not None
    values = {
        "ws": "acme",
        "memory_id": str(memory.id),
        "run_id": str(run.id),
        "record_id": str(record.pk),
        "proposal_id": str(proposal.pk),
        "report_id": str(report.pk),
    }
    calls: list[Call] = []
    for path, operations in schema["paths"].items():
        if "get" not in operations or "200" not in operations["get"]["responses"]:
            continue
        content = operations["get"]["responses"]["200"].get("content", {})
        if "application/json" not in content:
            continue  # a file (the export as a zip, say)
        real = path
        for name, value in values.items():
            real = real.replace("{" + name + "}", value)
        assert "{" not in real, f"{path}: no value for its path parameters here; add one"
        calls.append((path, "get", real, None, 200))
    assert len(calls) >= 15
    _assert_documented(schema, api, calls)


def test_the_engine_and_evolution_writes_return_exactly_what_they_document(
    schema: dict[str, Any], api: Any, user: Any, workspace: Any
) -> None:
    base = "/api/v1/workspaces/acme/"
    ws = "/api/v1/workspaces/{ws}/"
    outcome = {"task_type": "deploy", "result": "fail", "approach": "push straight to production"}
    calls: list[Call] = [
        (ws + "outcomes/", "post", base + "outcomes/", outcome, 201),
        (ws + "outcomes/", "post", base + "outcomes/", outcome, 201),
        (ws + "outcomes/", "post", base + "outcomes/", outcome, 201),
        (
            ws + "corrections/",
            "post",
            base + "corrections/",
            {"topic": "editor", "what_i_did_wrong": "opened vim", "what_i_should_do": "use emacs", "context": "edit"},
            201,
        ),
        (
            ws + "reflections/",
            "post",
            base + "reflections/",
            {"context": "a deploy", "reflection": "it failed", "lesson": "pin the version"},
            201,
        ),
        (ws + "evolution/runs/", "post", base + "evolution/runs/", {"dry_run": True}, 202),
        (ws + "engine/evolve/", "post", base + "engine/evolve/", {}, 200),
    ]
    _assert_documented(schema, api, calls)


def test_query_parameters_are_documented_from_the_models_that_read_them() -> None:
    """A query parameter listed by hand (``OpenApiParameter("limit", int)``) beside the code that reads it can
    drift from it; query parameters are documented by ``core.openapi.parameters_of(Model)``, the model the view
    parses them with. Header and path parameters may still be written out."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    found = []
    for package in ("core", "graph", "history", "memories", "surfacing", "evolution", "smartmemory_site"):
        for path in sorted((root / package).rglob("*.py")):
            if path == root / "core" / "openapi.py" or "migrations" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if not (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "OpenApiParameter"):
                    continue
                places = [
                    a.attr for a in [*node.args, *(k.value for k in node.keywords)] if isinstance(a, ast.Attribute)
                ]
                if not {"HEADER", "PATH", "COOKIE"} & set(places):
                    found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []
