"""The Content-Security-Policy in Chromium: it blocks injected script, and the pages it does not cover
elsewhere (the API docs, the admin's login) still work under it. Every other browser test fails on any
blocked resource too (the `page` fixture), so htmx swaps, sockets and the graph view are checked there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.e2e

E2EServer = Any  # from tests/e2e/conftest.py (conftest modules are not importable under importlib mode)


@pytest.fixture
def anonymous(browser: Browser, e2e_server: E2EServer) -> Iterator[tuple[Page, list[str]]]:
    """A logged-out page and the CSP reports Chromium writes to its console."""
    context = browser.new_context(base_url=e2e_server.url)
    page = context.new_page()
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    yield page, blocked
    context.close()


def test_pages_carry_the_policy_and_injected_script_does_not_run(anonymous: tuple[Page, list[str]]) -> None:
    page, blocked = anonymous
    response = page.goto("/accounts/login/")
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self' 'unsafe-eval'" in policy and "frame-ancestors 'none'" in policy
    # What an HTML injection would try: an inline handler, an inline script, a foreign script.
    page.evaluate(
        """() => {
        document.body.insertAdjacentHTML('beforeend', '<img src="/nothing.png" onerror="window.__ran = 1">');
        const inline = document.createElement('script');
        inline.textContent = 'window.__ran = 2';
        document.body.appendChild(inline);
        const foreign = document.createElement('script');
        foreign.src = 'https://example.org/x.js';
        document.body.appendChild(foreign);
    }"""
    )
    page.wait_for_timeout(300)
    assert page.evaluate("window.__ran") is None
    assert len(blocked) >= 3, blocked


def test_the_admin_login_works_under_the_policy(anonymous: tuple[Page, list[str]]) -> None:
    page, blocked = anonymous
    page.goto("/admin/login/")
    expect(page.get_by_label("Username")).to_be_visible()
    assert blocked == []


def test_the_api_docs_render_under_the_policy(page: Page) -> None:
    page.goto("/api/docs/")
    # Swagger UI builds the operation list from the schema in the browser: it ran, from our own files.
    expect(page.locator(".opblock").first).to_be_visible(timeout=20_000)
