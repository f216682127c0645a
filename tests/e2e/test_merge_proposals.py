"""A merge proposal in a real Chromium: `evolve --evolver DuplicateMerger` proposes it, a person approves it
on the proposals page, and the memory list shows the duplicate superseded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e

# Fixture types from tests/e2e/conftest.py (conftest modules are not importable under importlib mode).
E2EServer = Any
Workspace = Callable[..., dict[str, Any]]

KEEP = "Release builds are signed on the CI runner"
DUPLICATE = "release builds are signed on the CI runner!"
OTHER = "The staging database is reset every night"


def test_approving_a_merge_supersedes_the_duplicate_in_the_memory_list(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace(
        "merge-ws",
        memories=[
            {"content": KEEP, "memory_type": "fact", "created_at": "2025-05-01T09:00:00+00:00"},
            {"content": DUPLICATE, "memory_type": "fact", "created_at": "2025-05-02T09:00:00+00:00"},
            {"content": OTHER, "memory_type": "fact", "created_at": "2025-05-03T09:00:00+00:00"},
        ],
    )
    slug = ws["slug"]
    out = e2e_server.manage("evolve", "--workspace", slug, "--evolver", "DuplicateMerger", "--apply")
    assert "DuplicateMerger: ok" in out

    page.goto(f"/w/{slug}/evolution/proposals/")
    card = page.locator("article.k-merge")
    expect(card).to_have_count(1)
    expect(card).to_contain_text("Merge 2 near-duplicate fact memories")
    expect(card.locator("table.changes")).to_contain_text("superseded")
    expect(card.get_by_role("link", name=DUPLICATE)).to_have_count(2)
    card.get_by_role("button", name="Approve").click()
    expect(card).to_contain_text("approved by casey")

    page.goto(f"/w/{slug}/")
    active = page.locator("#memory-table")
    expect(active).to_contain_text(KEEP)
    expect(active).to_contain_text(OTHER)
    expect(active).not_to_contain_text(DUPLICATE)
    page.goto(f"/w/{slug}/?status=superseded")
    superseded = page.locator("#memory-table")
    expect(superseded).to_contain_text(DUPLICATE)
    expect(superseded).not_to_contain_text(OTHER)
