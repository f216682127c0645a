"""Fragments never stand in for a page: every page response varies on HX-Request, fragments are no-store."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.utils.cache import has_vary_header

from memories.models import Workspace

pytestmark = pytest.mark.django_db

FRAGMENT = {"HX-Request": "true", "HX-Target": "memory-results"}


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_full_page_varies_on_hx_request_and_may_be_cached(browser: Client, workspace: Workspace) -> None:
    response = browser.get(f"/w/{workspace.slug}/")
    assert response.status_code == 200
    assert has_vary_header(response, "HX-Request")
    assert "no-store" not in response.get("Cache-Control", "")


def test_a_fragment_varies_on_hx_request_and_is_never_stored(browser: Client, workspace: Workspace) -> None:
    response = browser.get(f"/w/{workspace.slug}/?type=decision", headers=FRAGMENT)
    assert response.status_code == 200
    assert b"<html" not in response.content  # the partial alone
    assert has_vary_header(response, "HX-Request")
    assert "no-store" in response["Cache-Control"]


def test_a_history_restore_gets_the_page_and_may_be_cached(browser: Client, workspace: Workspace) -> None:
    headers = {**FRAGMENT, "HX-History-Restore-Request": "true"}
    response = browser.get(f"/w/{workspace.slug}/?type=decision", headers=headers)
    assert b"<html" in response.content
    assert has_vary_header(response, "HX-Request")
    assert "no-store" not in response.get("Cache-Control", "")


def test_a_fragment_of_an_evolution_page_is_never_stored(browser: Client, workspace: Workspace) -> None:
    headers = {"HX-Request": "true", "HX-Target": "proposal-queue"}
    response = browser.get(f"/w/{workspace.slug}/evolution/proposals/", headers=headers)
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]


def test_the_api_is_left_as_it_is(api: Any, workspace: Workspace) -> None:
    response = api.get(f"/api/v1/workspaces/{workspace.slug}/memories/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert not has_vary_header(response, "HX-Request")
    assert "no-store" not in response.get("Cache-Control", "")
