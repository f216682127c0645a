"""Every browser path of the dashboard in a real Chromium: Back, live numbers, phones, offline docs, errors."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e

E2EServer = Any
Credentials = Any
Workspace = Callable[..., dict[str, Any]]


def notes(count: int, **fields: Any) -> list[dict[str, Any]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "content": f"Routine note number {i} about the export pipeline",
            "created_at": (start + timedelta(minutes=i)).isoformat(),
            **fields,
        }
        for i in range(count)
    ]


def assert_full_page(page: Page) -> None:
    """The page has its layout: the stylesheet applied, the header, the navigation and the filters."""
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.locator("nav.mainnav")).to_be_visible()
    expect(page.locator("#memory-filters")).to_be_visible()
    # site.css colours the top bar; without the stylesheet it would be transparent.
    assert page.evaluate("getComputedStyle(document.querySelector('header.topbar')).backgroundColor") == (
        "rgb(17, 36, 63)"
    )


def test_back_after_filtering_and_opening_a_row_shows_the_whole_page(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace(
        "back-ws",
        memories=[*notes(60, memory_type="decision"), {"content": "A fact about tokens", "memory_type": "fact"}],
    )
    page.goto(f"/w/{ws['slug']}/")
    page.get_by_label("Type", exact=True).select_option("decision")
    expect(page).to_have_url(re.compile(r"type=decision"))
    page.get_by_label("Search").fill("export")
    expect(page).to_have_url(re.compile(r"q=export"))
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(50)
    page.locator("#memory-table tbody tr.mrow a.open").first.click()
    expect(page.locator("#memory-content")).to_be_visible()
    page.go_back()
    assert_full_page(page)
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(50)
    expect(page.get_by_label("Search")).to_have_value("export")

    # The same after "Next page": the second page's URL was pushed by a swap.
    page.locator("#next-page").click()
    expect(page.locator(".pager")).to_contain_text("Page 2")
    page.locator("#memory-table tbody tr.mrow a.open").first.click()
    expect(page.locator("#memory-content")).to_be_visible()
    page.go_back()
    assert_full_page(page)
    expect(page.locator(".pager")).to_contain_text("Page 2")
    # A reload of the pushed URL is the full page too.
    page.reload()
    assert_full_page(page)
