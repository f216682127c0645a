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


def test_an_inline_write_triggers_the_counters_and_a_page_load_does_not(
    browser: Client, workspace: Workspace, make_memory: Any
) -> None:
    memory = make_memory("archive me")
    url = f"/w/{workspace.slug}/memories/{memory.id}/archive/"
    inline = browser.post(url, headers={"HX-Request": "true", "HX-Target": f"row-{memory.id}"})
    assert inline.status_code == 200
    assert inline["HX-Trigger"] == "counts-changed"
    plain = browser.post(url)
    assert plain.status_code == 302 and "HX-Trigger" not in plain
    read = browser.get(f"/w/{workspace.slug}/?type=fact", headers=FRAGMENT)
    assert "HX-Trigger" not in read


def test_the_event_joins_the_events_a_view_named() -> None:
    from django.http import HttpResponse

    from smartmemory_site.htmx_cache import add_trigger

    named = HttpResponse(headers={"HX-Trigger": "saved"})
    add_trigger(named, "counts-changed")
    assert named["HX-Trigger"] == "saved, counts-changed"
    add_trigger(named, "counts-changed")
    assert named["HX-Trigger"] == "saved, counts-changed"
    detailed = HttpResponse(headers={"HX-Trigger": '{"saved": {"id": 1}}'})
    add_trigger(detailed, "counts-changed")
    assert detailed["HX-Trigger"] == '{"saved": {"id": 1}, "counts-changed": null}'


def test_the_counts_fragment_holds_every_counter_out_of_band_in_one_query(
    browser: Client, workspace: Workspace, django_assert_max_num_queries: Any
) -> None:
    # session, user, membership and workspace, the grouped count
    with django_assert_max_num_queries(4):
        html = browser.get(f"/w/{workspace.slug}/evolution/counts/", headers={"HX-Request": "true"}).content.decode()
    for counter in ("nav-count-proposals", "subnav-count-proposals", "tab-count-pending", "tab-count-decided"):
        assert f'id="{counter}"' in html
    assert html.count('hx-swap-oob="true"') == 5
