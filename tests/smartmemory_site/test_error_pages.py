"""The site's own 404 and 500 pages: styled, with a way on."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from memories.models import Workspace

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_a_missing_page_is_the_site_s_own_page_with_navigation(browser: Client, workspace: Workspace) -> None:
    response = browser.get(f"/w/{workspace.slug}/memories/00000000-0000-0000-0000-000000000000/")
    assert response.status_code == 404
    html = response.content.decode()
    assert 'class="topbar"' in html and "site.css" in html and "Your workspaces" in html


def test_the_server_error_page_renders_without_a_request() -> None:
    from django.template.loader import render_to_string

    html = render_to_string("500.html")
    assert "Something went wrong" in html and "site.css" in html and 'href="/"' in html
