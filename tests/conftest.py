"""Shared fixtures: users, workspaces with roles, token-authenticated API clients, a fresh signal bus."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from graph.bolt import Neo4jGraphStore
from graph.store import set_graph_store
from memories import services, tokens
from memories.inputs import MemoryInput
from memories.models import Memory, Role, Workspace
from memories.signalbus import LocalSignalBus, set_signal_bus
from memories.vectorindex import vector_index_clear

# Redis and FalkorDB for the tests marked `services`, started by pytest on 127.0.0.1 (tests/services.py,
# which also sets TEST_REDIS_URL and TEST_NEO4J_URI before any test module is imported).
pytest_plugins = ["tests.services"]

# The tests' embedder, unless the run names one: the hashing embedder is exact to the bit and fast; the site's
# default (minilm when installed) is tested by the tests that ask for it. Servers the tests start inherit it.
# Django read EMBEDDER before this file was imported: set it in the settings too, before any test module
# is collected (some read the site's embedder at import).
os.environ.setdefault("EMBEDDER", "hashing")
django_settings.EMBEDDER = os.environ["EMBEDDER"]


@pytest.fixture(autouse=True)
def fresh_signal_bus() -> Iterator[LocalSignalBus]:
    """Each test gets its own in-process bus; tests flush it explicitly instead of a thread."""
    bus = LocalSignalBus(interval=3600)
    set_signal_bus(bus)
    yield bus
    set_signal_bus(None)


@pytest.fixture(autouse=True)
def fresh_cache(settings: Any) -> None:
    """Each test gets an empty cache of its own, so rate-limit counters (core.throttles) never carry over
    from one test to the next, nor reach a Redis that REDIS_URL names."""
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": uuid.uuid4().hex}
    }


@pytest.fixture(autouse=True)
def runs_inline(settings: Any) -> None:
    """Queued evolution runs are worked by the caller before it answers (evolution.jobs' inline mode);
    the tests of the worker thread and of run_workers switch it back. No worker loop runs the scheduled
    jobs at the real clock behind a test's back: the scheduler's tests give it their own clock."""
    settings.EVOLUTION_WORKER = "inline"
    settings.SCHEDULER_ENABLED = False


@pytest.fixture
def make_user(db: None) -> Callable[..., Any]:
    def make(username: str = "alice") -> Any:
        return get_user_model().objects.create_user(username=username, password="pw-" + username)

    return make


@pytest.fixture
def user(make_user: Callable[..., Any]) -> Any:
    return make_user("alice")


@pytest.fixture
def workspace(user: Any) -> Workspace:
    return services.workspace_create(owner=user, slug="acme", name="Acme")


@pytest.fixture
def other_workspace(make_user: Callable[..., Any]) -> Workspace:
    stranger = make_user("mallory")
    return services.workspace_create(owner=stranger, slug="other", name="Other")


@pytest.fixture
def client_for() -> Callable[[Any], APIClient]:
    def make(u: Any) -> APIClient:
        client = APIClient()
        issued = tokens.api_token_create(user=u)
        client.credentials(HTTP_AUTHORIZATION=f"Token {issued.key}")
        return client

    return make


@pytest.fixture
def api(user: Any, client_for: Callable[[Any], APIClient]) -> APIClient:
    return client_for(user)


@pytest.fixture
def member(workspace: Workspace, make_user: Callable[..., Any]) -> Callable[[str], Any]:
    """Add a user with `role` to the workspace and return them."""

    def make(role: str) -> Any:
        u = make_user(f"{role}-user")
        services.membership_set(workspace=workspace, user=u, role=role)
        return u

    return make


@pytest.fixture
def viewer(member: Callable[[str], Any]) -> Any:
    return member(Role.VIEWER)


@pytest.fixture
def make_memory(workspace: Workspace, user: Any) -> Callable[..., Memory]:
    def make(content: str = "a memory", ws: Workspace | None = None, **fields: Any) -> Memory:
        return services.memory_create(
            workspace=ws or workspace, actor=user, item=MemoryInput(content=content, **fields)
        )

    return make


@pytest.fixture(autouse=True)
def fast_password_hashing(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def vector_index_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vectors")


@pytest.fixture(autouse=True)
def fresh_vector_indexes(settings: Any, vector_index_dir: Path) -> Iterator[None]:
    """No vector index outlives its test (a rolled-back workspace id comes back), and none is written to var/."""
    settings.VECTOR_INDEX_DIR = vector_index_dir
    vector_index_clear()
    yield
    vector_index_clear()


# -- the Bolt graph store (FalkorDB started by tests/services.py; tests marked `services`) -----------------


@pytest.fixture(scope="session")
def bolt(falkordb_server: Any) -> Iterator[Neo4jGraphStore]:
    """One driver for the whole run (FalkorDB wedges a connection after a driver closes another)."""
    store = Neo4jGraphStore(falkordb_server.uri)
    store.ping()
    yield store
    store.close()


@pytest.fixture
def neo(bolt: Neo4jGraphStore) -> Iterator[Neo4jGraphStore]:
    """A store in a namespace of its own; installed as the process's graph store only by `mirrored`."""
    store = Neo4jGraphStore(bolt.uri, namespace=f"t{uuid.uuid4().hex[:12]}_", driver=bolt.driver)
    yield store
    for key in store.workspace_keys():
        store.drop_workspace(key)
    assert store.workspace_keys() == []


@pytest.fixture
def mirrored(neo: Neo4jGraphStore) -> Iterator[Neo4jGraphStore]:
    set_graph_store(neo)
    yield neo
    set_graph_store(None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``postgres`` (PostgreSQL-only code) are deselected when the database is another: make
    test's PostgreSQL pass runs them (they are api tests too), so the SQLite pass neither runs nor skips them.
    Browser tests run last: Playwright's sync API keeps an event loop on the main thread for the rest of the
    session, where pytest-asyncio tests (the MCP client) could no longer start their own."""
    from django.conf import settings

    if "postgresql" not in settings.DATABASES["default"]["ENGINE"]:
        other = [item for item in items if item.get_closest_marker("postgres") is not None]
        if other:
            config.hook.pytest_deselected(items=other)
            items[:] = [item for item in items if item.get_closest_marker("postgres") is None]
    items.sort(key=lambda item: item.get_closest_marker("e2e") is not None)
