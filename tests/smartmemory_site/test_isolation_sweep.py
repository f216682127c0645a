"""Every URL pattern of the site keeps one workspace's data from another's users.

The sweep walks the URL resolver (the REST API, the pages, the admin), fills each pattern's parameters with
the ids of workspace B (its memories, run, records, proposal, dream report, goal, session), and sends every
method as the owner of workspace A, who is no member of B. At B's own URL each answer is a 403, 404 or 405
that shows none of B's content. At A's URL naming B's rows (in the path, or in a body that lists ids) the
answer is the one for ids that exist nowhere, so B's rows are neither reached nor told apart from missing
ones. B's rows are unchanged afterwards. Then B's owner makes the same calls, which must not be refused: the
ids and bodies are ones the route accepts, so a refusal above came from the membership check and not from
a bad request.

The WebSocket routes (smartmemory_site.routing) are swept too: a stranger's socket is not accepted, B's
owner's is. A pattern the sweep does not know fails with a message saying where to add it, so a new route
cannot skip it. /mcp/ is no URL pattern (the ASGI router serves it beside Django); its tools make one REST
call each, through the views swept here.
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections, models
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from memories import services, tokens
from memories.models import ApiToken, Membership, Workspace
from memories.signalbus import LocalSignalBus
from smartmemory_site.routing import websocket_urlpatterns

pytestmark = [pytest.mark.django_db, pytest.mark.api]

SECRET = "Zq7Bravo"
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
REFUSED = {403, 404, 405}

Body = Callable[[Any], dict[str, Any]]
"""The request body for a world's ids: JSON for the API, form fields (and files) for the pages."""


@dataclass(frozen=True)
class Route:
    """How a member calls a route: the methods it takes and their bodies (None: no body)."""

    calls: dict[str, Body | None]
    ids_in_body: bool = False  # the body names B's rows: sent under A's workspace too


def _body(**fields: Any) -> Body:
    return lambda w: fields


def _no_body() -> dict[str, Body | None]:
    return {"POST": None}


def _import_zip(w: Any) -> dict[str, Any]:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        archive.writestr("hot/memory.md", "- an imported rule\n")
    return {"file": SimpleUploadedFile("memdir.zip", data.getvalue(), content_type="application/zip")}


SESSION = {"started_at": "2026-01-02T10:00:00Z", "turns": [{"speaker": "ann", "text": "hi"}]}
OUTCOME = {"task_type": "deploy", "result": "success", "approach": "blue-green", "context": {"lesson": "wait"}}

# -- the REST API (token authentication) ------------------------------------------------------------------
API_ROUTES: dict[str, Route] = {
    "api:memories": Route({"GET": None, "POST": _body(content="a new memory")}),
    "api:memories-bulk": Route({"POST": _body(items=[{"content": "a bulk memory"}])}),
    "api:memory": Route({"GET": None, "PATCH": _body(tags=["changed"]), "DELETE": None}),
    "api:memory-edges": Route({"GET": None}),
    "api:memory-history": Route({"GET": None}),
    "api:edges": Route(
        {"POST": lambda w: {"source": w.memory_ids[1], "target": w.memory_ids[2], "type": "RELATED"}},
        ids_in_body=True,
    ),
    "api:conversations": Route({"POST": _body(sessions=[SESSION])}),
    "api:evolution-runs": Route({"GET": None, "POST": _body(evolvers=["ExponentialDecay"])}),
    "api:evolution-run": Route({"GET": None}),
    "api:evolution-run-cancel": Route(_no_body()),
    "api:evolution-run-revert": Route(_no_body()),
    "api:evolution-record": Route({"GET": None}),
    "api:evolution-record-revert": Route(_no_body()),
    "api:contradictions": Route({"GET": None}),
    "api:drift-flags": Route({"GET": None}),
    "api:goal-resolution-revert": Route(_no_body()),
    "api:proposals": Route({"GET": None}),
    "api:proposal": Route({"GET": None}),
    "api:proposal-approve": Route({"POST": _body()}),
    "api:proposal-reject": Route({"POST": _body(reason="not now")}),
    "api:outcomes": Route({"GET": None, "POST": _body(**OUTCOME)}),
    "api:corrections": Route(
        {"POST": _body(what_i_did_wrong="pushed to main", what_i_should_do="open a pull request", context="git")}
    ),
    "api:reflections": Route(
        {"POST": _body(context="a release", reflection="it went well", lesson="tag releases before building")}
    ),
    "api:engine-world-model": Route({"GET": None}),
    "api:engine-evolve": Route({"POST": _body()}),
    "api:dream": Route({"GET": None, "POST": _body(dry_run=True)}),
    "api:dream-report": Route({"GET": None}),
    "api:memdir-export": Route({"GET": None}),
    "api:memdir-import": Route({"POST": _body(files={"hot/memory.md": "- an imported rule\n"})}),
    "api:context": Route({"POST": lambda w: {"query": "why JWT?", "session_id": w.session_id}}),
    "api:search": Route({"POST": _body(query="JWT")}),
    "api:settings": Route({"GET": None, "PATCH": _body(surfacing={"candidate_multiplier": None})}),
    "api:session-pin": Route({"PUT": _body(weight=3), "DELETE": None}),
}

# -- the pages (session login; CSRF is not what is tested here, so the test client does not enforce it) -----
PAGE_ROUTES: dict[str, Route] = {
    "memories:list": Route({"GET": None}),
    "memories:create": Route({"GET": None, "POST": _body(content="a new memory", memory_type="semantic")}),
    "memories:bulk": Route(
        {"POST": lambda w: {"ids": [w.memory_ids[1]], "action": "archive", "confirm": "true"}}, ids_in_body=True
    ),
    "memories:activation": Route({"GET": None}),
    "memories:count": Route({"GET": None}),
    "memories:detail": Route({"GET": None}),
    "memories:content": Route({"GET": None}),
    "memories:edit": Route({"GET": None, "POST": _body(content="edited content")}),
    "memories:archive": Route(_no_body()),
    "memories:restore": Route(_no_body()),
    "memories:pin": Route({"POST": _body(pinned="true")}),
    "memories:rehydrate": Route(_no_body()),
    "memories:delete": Route({"POST": lambda w: {"confirm_text": f"{w.secret} We picked"}}),
    "memories:graph": Route({"GET": None}),
    "memories:revert": Route(_no_body()),
    "memories:token": Route(_no_body()),
    "surfacing:inspector": Route({"GET": None, "POST": _body(q="JWT")}),
    "surfacing:inspector-save": Route({"POST": _body(mode="router")}),
    "evolution:proposals": Route({"GET": None}),
    "evolution:counts": Route({"GET": None}),
    "evolution:proposals-bulk": Route(
        {"POST": lambda w: {"ids": [w.proposal_id], "decision": "reject", "reason": "not now"}},
        ids_in_body=True,
    ),
    "evolution:proposal": Route({"GET": None}),
    "evolution:proposal-approve": Route(_no_body()),
    "evolution:proposal-reject": Route({"POST": _body(reason="not now")}),
    "evolution:proposal-modify": Route(
        {"GET": None, "POST": lambda w: {f"p{w.proposal_id}-rule": "Check asarUnpack first"}}  # the form's prefix
    ),
    "evolution:contradictions": Route({"GET": None}),
    "evolution:contradiction-resolve": Route(
        {"POST": lambda w: {"ids": [w.memory_ids[0], w.memory_ids[1]], "action": "keep_both"}},
        ids_in_body=True,
    ),
    "evolution:contradiction-edit": Route({"POST": _body(content="edited content")}),
    "evolution:drift": Route({"GET": None}),
    "evolution:drift-acknowledge": Route(_no_body()),
    "evolution:runs": Route({"GET": None}),
    "evolution:run-start": Route({"POST": _body(evolvers=["ExponentialDecay"], mode="preview")}),
    "evolution:run-schedule": Route({"POST": _body(hours="0")}),
    "evolution:run": Route({"GET": None}),
    "evolution:run-progress": Route({"GET": None}),
    "evolution:run-apply": Route(_no_body()),
    "evolution:run-cancel": Route(_no_body()),
    "evolution:run-revert": Route(_no_body()),
    "evolution:record-revert": Route(_no_body()),
    "evolution:engine": Route({"GET": None}),
    "evolution:engine-evolve": Route(_no_body()),
    "evolution:engine-dream": Route({"POST": _body(dry_run="on")}),
    "evolution:dream-report": Route({"GET": None}),
    "evolution:engine-export": Route({"GET": None}),
    "evolution:engine-import": Route({"POST": _import_zip}),
}

# -- routes of no workspace: what A is shown must not name B ------------------------------------------------
GLOBAL_ROUTES: dict[str, dict[str, Body | None]] = {
    "healthz": {"GET": None},
    "schema": {"GET": None},
    "api-docs": {"GET": None},
    "login": {"GET": None},
    "logout": {"POST": None},
    "memories:home": {"GET": None},
    "api:workspaces": {"GET": None, "POST": lambda w: {"slug": w.slug, "name": "Mine"}},
}

ADMIN_PUBLIC = {"admin:login", "admin:logout", "admin:jsi18n"}
"""The admin's pages anyone may open: its login form, logging out, its JavaScript catalogue."""

# -- WebSocket routes (unnamed: known by their route) --------------------------------------------------------
SOCKET_ROUTES = {"ws/workspaces/<slug:ws>/activation/", "ws/workspaces/<slug:ws>/evolution/runs/<uuid:run_id>/"}

FILL: dict[str, Callable[[Any], str]] = {
    "memory_id": lambda w: w.memory_ids[0],
    "run_id": lambda w: w.run_id,
    "record_id": lambda w: w.record_ids[0],
    "proposal_id": lambda w: w.proposal_id,
    "report_id": lambda w: w.report_id,
    "goal_id": lambda w: w.goal_id,
    "sid": lambda w: w.session_id,
}
"""A path parameter, by name, filled with the id of one of B's rows."""

ADD_IT = (
    "add it to API_ROUTES, PAGE_ROUTES or GLOBAL_ROUTES in tests/smartmemory_site/test_isolation_sweep.py "
    "with the calls a member makes, so that its membership check is swept"
)


# -- walking the resolver -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    name: str
    route: str
    params: tuple[str, ...]


def _walk(patterns: list[Any], prefix: str = "", namespace: tuple[str, ...] = ()) -> Iterator[Pattern]:
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = (*namespace, entry.namespace) if entry.namespace else namespace
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            route = prefix + str(entry.pattern)
            params = _names(route)
            name = ":".join((*namespace, entry.name or f"<unnamed {route}>"))
            yield Pattern(name=name, route=route, params=params)


def _names(route: str) -> tuple[str, ...]:
    return tuple(a or b for a, b in re.findall(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>", route))


PATTERNS = list(_walk(get_resolver().url_patterns))
SITE = [p for p in PATTERNS if not p.name.startswith("admin:")]
ADMIN = [p for p in PATTERNS if p.name.startswith("admin:")]
SOCKETS = list(_walk(websocket_urlpatterns))


def _path(pattern: Pattern, values: dict[str, str]) -> str:
    """The URL of a pattern with its parameters filled (route converters and the admin's regex groups)."""

    def value(match: re.Match[str]) -> str:
        return values[match.group(1) or match.group(2)]

    path = re.sub(r"<(?:\w+:)?(\w+)>|\(\?P<(\w+)>[^)]*\)", value, pattern.route)
    return "/" + path.replace("^", "").replace("$", "")


# -- B's rows, to compare before and after --------------------------------------------------------------------


def _scoped(model: type[models.Model]) -> str | None:
    """The lookup from ``model`` to its workspace: the field itself, or through one foreign key."""
    names = {f.name: f for f in model._meta.get_fields() if f.concrete}
    if "workspace" in names:
        return "workspace"
    for f in names.values():
        related = f.related_model if f.is_relation and f.many_to_one else None
        if isinstance(related, type) and any(g.name == "workspace" for g in related._meta.get_fields()):
            return f"{f.name}__workspace"
    return None


def rows_of(workspace: Workspace) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every model that belongs to the workspace, the workspace row itself, and its members'
    accounts and API tokens."""
    members = Membership.objects.filter(workspace=workspace).values("user_id")
    found: dict[str, list[tuple[Any, ...]]] = {
        "workspace": list(Workspace.objects.filter(pk=workspace.pk).values_list()),
        "members": list(get_user_model().objects.filter(pk__in=members).order_by("pk").values_list()),
        "tokens": list(ApiToken.objects.filter(user_id__in=members).order_by("pk").values_list()),
    }
    for model in apps.get_models():
        lookup = _scoped(model)
        if lookup is not None:
            rows = model._default_manager.filter(**{lookup: workspace}).order_by("pk").values_list()
            found[model._meta.label] = [tuple(bytes(v) if isinstance(v, memoryview) else v for v in r) for r in rows]
    return found


# -- the sweep -----------------------------------------------------------------------------------------------


@dataclass
class Sides:
    alice: Any
    bravo_owner: Any
    acme: Any
    world: Any


@pytest.fixture
def sides(user: Any, workspace: Workspace, make_user: Callable[..., Any], populated: Any) -> Sides:
    """Alice owns acme (A); bob owns bravo (B), filled with one row of every kind, each naming SECRET."""
    bob = make_user("bob")
    bravo = services.workspace_create(owner=bob, slug="bravo", name=f"Bravo {SECRET}")
    world = populated(bravo, bob, "bravo-session", SECRET)
    return Sides(alice=user, bravo_owner=bob, acme=workspace, world=world)


def _client(pattern: Pattern, who: Any) -> Client:
    if pattern.route.startswith("api/"):
        api = APIClient()
        api.credentials(HTTP_AUTHORIZATION=f"Token {tokens.api_token_create(user=who).key}")
        return api
    client = Client()
    client.force_login(who)
    return client


def _send(client: Client, pattern: Pattern, method: str, path: str, body: dict[str, Any] | None) -> Any:
    if pattern.route.startswith("api/"):
        return client.generic(method, path, _json(body), content_type="application/json")
    if method == "GET":
        return client.get(path, body or {})
    if method == "POST":
        return client.post(path, body or {})
    return client.generic(method, path)


def _json(body: dict[str, Any] | None) -> str:
    return json.dumps(body or {})


def _shown(response: Any) -> str:
    content = b"".join(response.streaming_content) if response.streaming else response.content
    return content.decode("utf-8", "replace")


def _site_route(name: str) -> Route | None:
    return API_ROUTES.get(name) or PAGE_ROUTES.get(name)


def test_every_url_pattern_is_swept() -> None:
    known = {*API_ROUTES, *PAGE_ROUTES, *GLOBAL_ROUTES}
    names = {p.name for p in SITE}
    unknown = sorted(names - known)
    assert not unknown, f"URL patterns not in the isolation sweep: {unknown}; {ADD_IT}"
    assert sorted(known - names) == [], "the sweep lists routes the site no longer has: remove them"
    params = {name for p in [*SITE, *SOCKETS] for name in p.params} - {"ws"}
    assert params <= set(FILL), f"path parameters the sweep cannot fill: {sorted(params - set(FILL))}; add to FILL"
    sockets = {p.route for p in SOCKETS}
    assert sockets <= SOCKET_ROUTES, f"WebSocket routes not in the sweep: {sorted(sockets - SOCKET_ROUTES)}; add them"
    assert sockets >= SOCKET_ROUTES, "the sweep lists WebSocket routes the site no longer has: remove them"


def _ghost(world: Any) -> Any:
    """The world with every id replaced by one of the same kind that names no row anywhere."""
    return dataclasses.replace(
        world,
        memory_ids=tuple(str(uuid.uuid4()) for _ in world.memory_ids),
        goal_id=str(uuid.uuid4()),
        run_id=str(uuid.uuid4()),
        record_ids=tuple(str(987_650 + k) for k, _ in enumerate(world.record_ids)),
        proposal_id="987640",
        report_id="987630",
        session_id="ghost-session",
    )


def _blur(text: str, world: Any) -> str:
    """``text`` with the world's ids blurred, so that the answers about two worlds compare."""
    ids = {world.goal_id, world.run_id, world.proposal_id, world.report_id, world.session_id}
    for value in sorted(ids | {*world.memory_ids, *world.record_ids}, key=len, reverse=True):
        text = re.sub(rf"(?<![\w-]){re.escape(value)}(?![\w-])", "<id>", text)
    return text


def _answer(pattern: Pattern, response: Any, world: Any) -> tuple[Any, ...]:
    """What a response tells: its status, where it redirects, its flash messages, and an API's body (a page's
    body differs by its CSRF token)."""
    flashed = [_blur(str(m), world) for m in get_messages(response.wsgi_request)]
    body = _blur(_shown(response), world) if pattern.route.startswith("api/") else ""
    return response.status_code, _blur(response.get("Location", ""), world), flashed, body


@pytest.mark.parametrize("pattern", [p for p in SITE if p.name not in GLOBAL_ROUTES], ids=lambda p: p.name)
def test_a_user_of_another_workspace_neither_sees_nor_changes_it(
    pattern: Pattern, sides: Sides, fresh_signal_bus: LocalSignalBus
) -> None:
    route = _site_route(pattern.name)
    assert route is not None, f"{pattern.route} ({pattern.name}) is not in the isolation sweep; {ADD_IT}"
    assert "ws" in pattern.params, f"{pattern.name} has no workspace in its URL: move it to GLOBAL_ROUTES"
    world, ghost = sides.world, _ghost(sides.world)

    def path_of(w: Any, slug: str) -> str:
        ids = {name: FILL[name](w) for name in pattern.params if name != "ws"}
        return _path(pattern, {**ids, "ws": slug})

    def send(who: Any, method: str, w: Any, slug: str) -> Any:
        make = route.calls.get(method)
        client = clients[who]
        if not pattern.route.startswith("api/"):
            # A new session for each request, so that its flash messages are this request's only. (The same
            # client: a new one loads the middleware again, and WhiteNoise's scan of the static files is slow.)
            client.cookies.clear()
            client.force_login(who)
        return _send(client, pattern, method, path_of(w, slug), make(w) if make else None)

    clients = {who: _client(pattern, who) for who in (sides.alice, sides.bravo_owner)}
    before = rows_of(world.workspace)
    for method in METHODS:
        # At B's URL: refused, whatever the method, and nothing of B shown.
        response = send(sides.alice, method, world, world.slug)
        where = f"{method} {path_of(world, world.slug)} as a stranger to {world.slug}"
        assert response.status_code in REFUSED, f"{where}: {response.status_code} {_shown(response)[:300]}"
        assert SECRET not in _shown(response), f"{where} shows B's content"
        if method in route.calls:
            assert response.status_code != 405, f"{where}: 405, but the sweep says the route takes {method}"
        # At A's own URL, where A may do anything, naming B's rows (in the path or the body): answered exactly
        # as rows that exist nowhere, so B's are neither reached nor told apart from missing ones.
        if len(pattern.params) > 1 or route.ids_in_body:
            response = send(sides.alice, method, world, sides.acme.slug)
            where = f"{method} {path_of(world, sides.acme.slug)} naming {world.slug}'s rows"
            assert SECRET not in _shown(response), f"{where} shows B's content"
            if len(pattern.params) > 1:
                assert response.status_code in REFUSED, f"{where}: {response.status_code} {_shown(response)[:300]}"
            missing = send(sides.alice, method, ghost, sides.acme.slug)
            assert _answer(pattern, response, world) == _answer(pattern, missing, ghost), (
                f"{where} is answered otherwise than for rows that do not exist"
            )
    fresh_signal_bus.flush()  # a boost queued for one of B's memories would land now
    assert rows_of(world.workspace) == before, f"{pattern.name}: a stranger's requests changed B's rows"
    # B's owner makes the same calls: none is refused, so the refusals above were the membership check's.
    # DELETE last: it removes the row the other calls name.
    for method in sorted(route.calls, key=lambda m: m == "DELETE"):
        response = send(sides.bravo_owner, method, world, world.slug)
        assert response.status_code not in REFUSED and response.status_code < 500, (
            f"{method} {path_of(world, world.slug)} as B's owner: {response.status_code} {_shown(response)[:300]}; "
            "fix the route's entry so that a member's call is accepted"
        )


@pytest.mark.parametrize("name", sorted(GLOBAL_ROUTES))
def test_a_page_of_no_workspace_names_none_of_another_workspace(
    name: str, sides: Sides, fresh_signal_bus: LocalSignalBus
) -> None:
    (pattern,) = [p for p in SITE if p.name == name]
    world = sides.world
    before = rows_of(world.workspace)
    for method, make in GLOBAL_ROUTES[name].items():
        response = _send(
            _client(pattern, sides.alice), pattern, method, _path(pattern, {}), make(world) if make else None
        )
        assert response.status_code < 500, f"{method} {pattern.route}: {response.status_code}"
        assert SECRET not in _shown(response), f"{method} {pattern.route} shows B's content to a stranger"
    fresh_signal_bus.flush()
    assert rows_of(world.workspace) == before


def test_the_admin_lets_in_no_one_who_is_not_staff(sides: Sides) -> None:
    """Every admin pattern (one test: the admin is one rule, and one world serves them all)."""
    world = sides.world
    values = {"object_id": world.memory_ids[0], "content_type_id": "1", "id": "1", "app_label": "memories", "url": "x"}
    before = rows_of(world.workspace)
    client = Client()
    for pattern in ADMIN:
        path = _path(pattern, values)
        for method in ("GET", "POST"):
            client.force_login(sides.alice)  # the admin's logout page logs out
            response = client.generic(method, path)
            assert SECRET not in _shown(response), f"{method} {path} shows B's content to a user who is not staff"
            assert response.status_code < 500, f"{method} {path}: {response.status_code}"
            if pattern.name not in ADMIN_PUBLIC:
                assert response.status_code in (302, 404), f"{method} {path}: {response.status_code}"
                if response.status_code == 302:
                    assert response["Location"].startswith("/admin/login/"), response["Location"]
    assert rows_of(world.workspace) == before


@pytest.fixture
def in_memory_layer(settings: Any) -> None:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}


@pytest.mark.django_db(transaction=True)  # the consumers read the database from other threads
@pytest.mark.asyncio
@pytest.mark.parametrize("pattern", SOCKETS, ids=lambda p: p.route)
async def test_a_socket_of_another_workspace_is_not_accepted(
    pattern: Pattern, sides: Sides, in_memory_layer: None
) -> None:
    assert pattern.route in SOCKET_ROUTES, f"{pattern.route} is not in the isolation sweep; add it to SOCKET_ROUTES"
    world = sides.world
    ids = {name: FILL[name](world) for name in pattern.params if name != "ws"}
    app = URLRouter(websocket_urlpatterns)

    async def connects(user: Any, slug: str) -> bool:
        communicator = WebsocketCommunicator(app, _path(pattern, {**ids, "ws": slug}))
        communicator.scope["user"] = user
        connected, _ = await communicator.connect()
        await communicator.disconnect()
        return bool(connected)

    assert not await connects(sides.alice, world.slug), f"{pattern.route}: a stranger's socket was accepted"
    if ids:
        assert not await connects(sides.alice, sides.acme.slug), f"{pattern.route}: B's rows under A were accepted"
    assert await connects(sides.bravo_owner, world.slug), f"{pattern.route}: B's owner's socket was refused"
    await sync_to_async(connections.close_all)()
