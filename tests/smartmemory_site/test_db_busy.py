"""A request that found the database locked answers 503 with Retry-After, in the API's error shape under
/api/ and as a short page elsewhere, whether the lock timeout comes from a view or from a middleware; a
real lock held by another connection gives the same answer, and nothing is written."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection
from django.test import Client
from rest_framework.test import APIClient

from core.db_locks import RETRY_AFTER_SECONDS
from memories import services
from memories.models import Memory, Workspace

MEMORIES = "/api/v1/workspaces/acme/memories/"


def _locked(*args: Any, **kwargs: Any) -> Any:
    raise OperationalError("database is locked")


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
@pytest.mark.api
def test_an_api_write_that_waited_out_the_lock_is_a_503_with_retry_after_in_the_error_shape(
    api: APIClient, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "client_memories_create", _locked)
    response = api.post(MEMORIES, {"content": "a memory"}, format="json")
    assert response.status_code == 503
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    body = response.json()
    assert body["error"] == "database_busy" and "try again" in body["detail"]


@pytest.mark.django_db
@pytest.mark.api
def test_a_page_that_waited_out_the_lock_is_a_short_503_page_that_reloads_after_a_get(
    browser: Client, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services, "memory_create", _locked)
    posted = browser.post(f"/w/{workspace.slug}/memories/new/", {"content": "x", "memory_type": "semantic"})
    assert posted.status_code == 503 and posted["Retry-After"] == str(RETRY_AFTER_SECONDS)
    html = posted.content.decode()
    assert "The database is busy" in html and "nothing was changed" in html and 'http-equiv="refresh"' not in html


@pytest.mark.django_db
@pytest.mark.api
def test_a_lock_timeout_raised_by_a_middleware_is_a_503_not_a_500(
    user: Any, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session middleware saves the session after the view (a login): its error never reaches a view's
    exception handling, and Django's handler500 tells it apart."""
    from django.contrib.sessions.middleware import SessionMiddleware

    monkeypatch.setattr(SessionMiddleware, "process_request", lambda self, request: _locked())
    client = Client(raise_request_exception=False)
    page = client.get("/accounts/login/")
    assert page.status_code == 503 and page["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert 'http-equiv="refresh"' in page.content.decode()
    api = client.get(MEMORIES)
    assert api.status_code == 503 and api.json()["error"] == "database_busy"
    monkeypatch.setattr(SessionMiddleware, "process_request", lambda self, request: 1 / 0)
    assert client.get("/accounts/login/").status_code == 500


@pytest.fixture
def held_lock(workspace: Workspace) -> Iterator[None]:
    """Another connection holds the lock a memory write needs: SQLite's write lock (BEGIN IMMEDIATE on the
    shared test database), PostgreSQL's lock on the workspace row, with this connection waiting 0.3 s."""
    if connection.vendor == "sqlite":
        other = sqlite3.connect(connection.settings_dict["NAME"], uri=True, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
        return
    import psycopg

    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=False) as holder:
        holder.execute("SELECT id FROM memories_workspace WHERE id = %s FOR UPDATE", [workspace.pk])
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            (previous,) = cursor.fetchone()
            cursor.execute("SET lock_timeout = '300ms'")
        try:
            yield
        finally:
            holder.rollback()
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, false)", [previous])


@pytest.mark.django_db(transaction=True)
@pytest.mark.api
def test_a_write_behind_another_connections_lock_answers_503_and_writes_nothing(
    api: APIClient, workspace: Workspace, held_lock: None
) -> None:
    response = api.post(MEMORIES, {"content": "waits behind a lock"}, format="json")
    assert response.status_code == 503, response.content
    assert response["Retry-After"] == str(RETRY_AFTER_SECONDS)
    assert response.json()["error"] == "database_busy"
    assert not Memory.objects.filter(workspace=workspace).exists()
