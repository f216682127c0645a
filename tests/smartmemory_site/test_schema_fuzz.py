"""Schemathesis over every operation of the OpenAPI schema that /api/schema/ serves, against the site's own
WSGI application in this process (no network): no input is a server error, and every answer has the shape
the schema documents for its status (status codes, content types, bodies).

The caller is an editor of a workspace that holds one row of each kind a path names; path parameters are
drawn from those ids or from what Schemathesis generates, and so are an edge's ``source`` and ``target``,
so that the calls reach past "not found". A case may also carry text no database stores (U+0000) in one of
its strings: PostgreSQL refuses it, so the module's run on PostgreSQL (it is an ``api`` test) finds the
inputs that forget to check. Generation is seeded and bounded (SCHEMA_FUZZ_EXAMPLES examples an operation,
10 unless set, besides Schemathesis' coverage cases) so that the run time and the cases are the same each
run.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import strategies as st

from memories import tokens
from memories.models import Role

pytestmark = [pytest.mark.django_db, pytest.mark.api]

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": 20,
        "generation": {
            "max-examples": int(os.environ.get("SCHEMA_FUZZ_EXAMPLES", "10")),
            "deterministic": True,
            # Valid and invalid inputs both: an invalid one must be a 4xx in the error shape, not a 500.
            "mode": "all",
            "database": "none",
        },
        "phases": {"stateful": {"enabled": False}},
        # The test's fixtures are the database the cases need; Hypothesis warns of any function-scoped one.
        "suppress-health-check": ["all"],
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", get_wsgi_application(), config=CONFIG)
CHECKS = [
    schemathesis.checks.not_a_server_error,
    schemathesis.checks.status_code_conformance,
    schemathesis.checks.content_type_conformance,
    schemathesis.checks.response_schema_conformance,
]


@pytest.fixture
def editor(user: Any, workspace: Any, member: Callable[[str], Any], populated: Any) -> Iterator[tuple[Any, str]]:
    """The populated workspace and the API key of one of its editors.

    A WSGI request ends by closing the database connection (Django's request_finished handler), which would
    end the test's transaction; Django's test client unhooks that handler for its requests, and so does this.
    """
    world = populated(workspace, user, "s-acme")
    key = tokens.api_token_create(user=member(Role.EDITOR)).key
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield world, key
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _ids(world: Any) -> dict[str, list[str]]:
    """The rows of the workspace that each path parameter may name."""
    return {
        "memory_id": list(world.memory_ids),
        "goal_id": [world.goal_id],
        "run_id": [world.run_id],
        "record_id": list(world.record_ids),
        "proposal_id": [world.proposal_id],
        "report_id": [world.report_id],
        "sid": [world.session_id],
    }


@schema.parametrize()
@schema.given(data=st.data())
def test_no_input_is_a_server_error_and_every_answer_is_documented(
    case: Any, data: Any, editor: tuple[Any, str]
) -> None:
    world, key = editor
    ids = _ids(world)
    for name, generated in dict(case.path_parameters or {}).items():
        if name == "ws":
            case.path_parameters[name] = world.slug
        elif name in ids:
            case.path_parameters[name] = data.draw(st.sampled_from([*ids[name], generated]), label=name)
    if isinstance(case.body, dict):
        for name in ("source", "target"):
            if name in case.body:
                case.body[name] = data.draw(st.sampled_from([*world.memory_ids, case.body[name]]), label=name)
    _plant_hostile_text(case, data)
    case.call_and_validate(headers={"Authorization": f"Token {key}"}, checks=CHECKS)


HOSTILE = ("bad \x00 byte", "\x00")
"""Text a database may not store (PostgreSQL's text and jsonb cannot hold U+0000), which a random string
seldom is: each case may carry one in a string it sends. (A lone surrogate cannot be sent: the client encodes
text as UTF-8 first; the hostile-input tests send it as a JSON escape.)"""


def _strings(node: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every string in a JSON value (dict keys and list indexes)."""
    if isinstance(node, str):
        yield path
    elif isinstance(node, dict):
        for key, child in node.items():
            yield from _strings(child, (*path, key))
    elif isinstance(node, list):
        for index, child in enumerate(node):
            yield from _strings(child, (*path, index))


def _plant_hostile_text(case: Any, data: Any) -> None:
    """Replace one string of the body, the query or the path (drawn, or none) with hostile text."""
    sources = {"body": case.body, "query": case.query or {}, "path": case.path_parameters or {}}
    places = [("body", p) for p in _strings(case.body) if p]
    places += [("query", (name,)) for name, value in sources["query"].items() if isinstance(value, str)]
    places += [("path", (name,)) for name in sources["path"] if name != "ws"]
    chosen = data.draw(st.sampled_from([None, *places]), label="hostile place")
    if chosen is None:
        return
    where, path = chosen
    parent = sources[where]
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = data.draw(st.sampled_from(HOSTILE), label="hostile text")
