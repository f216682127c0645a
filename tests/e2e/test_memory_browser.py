"""The memory browser in a real Chromium against daphne: what a person does, click by click."""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
# Fixture types from tests/e2e/conftest.py (conftest modules are not importable under importlib mode).
E2EServer = Any
Credentials = Any

Workspace = Callable[..., dict[str, Any]]


def notes(count: int, **fields: Any) -> list[dict[str, Any]]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "content": f"Routine note number {i} about the deploy pipeline",
            "created_at": (start + timedelta(minutes=i)).isoformat(),
            **fields,
        }
        for i in range(count)
    ]


def row_ids(page: Page) -> list[str]:
    return [
        rid.removeprefix("row-")
        for rid in page.locator("#memory-table tbody tr.mrow").evaluate_all("rs => rs.map(r => r.id)")
    ]


def mark_page(page: Page) -> None:
    """Put a marker on window: it survives htmx swaps and disappears on a full page load."""
    page.evaluate("window.__sameDocument = true")


def same_document(page: Page) -> bool:
    return bool(page.evaluate("window.__sameDocument === true"))


STORY: list[dict[str, Any]] = [
    {"content": "Decision: we picked JWT access tokens with rotating refresh tokens", "memory_type": "decision"},
    {"content": "Incident: sticky sessions dropped at the load balancer", "memory_type": "event"},
    {"content": "RFC 7519 defines the JSON Web Token claims", "memory_type": "fact", "pinned": True},
    {"content": "Dana prefers short answers in reviews", "memory_type": "preference"},
]


def test_search_updates_the_results_in_place(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("search-ws", memories=STORY + notes(5))
    page.goto(f"/w/{ws['slug']}/")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(9)
    mark_page(page)
    page.get_by_label("Search").fill("refresh")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(1)
    expect(page.locator("#memory-table")).to_contain_text("we picked JWT access tokens")
    assert same_document(page), "search must swap the results, not reload the page"
    assert "q=refresh" in page.url
    # Stemmed full-text search: "tokens" also finds "JSON Web Token".
    page.get_by_label("Search").fill("tokens")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(2)
    page.get_by_label("Search").fill("zebra")
    expect(page.locator("#memory-results")).to_contain_text("No memories match")


def test_filter_by_type_and_pinned_and_sort(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("filter-ws", memories=STORY + notes(3))
    page.goto(f"/w/{ws['slug']}/")
    mark_page(page)
    page.get_by_label("Type", exact=True).select_option("decision")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(1)
    expect(page.locator("#memory-table")).to_contain_text("Decision: we picked JWT")
    page.get_by_label("Type", exact=True).select_option("")
    page.get_by_text("More filters").click()
    page.get_by_label("Pinned").select_option("true")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(1)
    expect(page.locator("#memory-table")).to_contain_text("RFC 7519")
    page.get_by_label("Pinned").select_option("")
    page.get_by_label("Sort").select_option("created")
    expect(page.locator("#memory-table tbody tr.mrow").first).to_contain_text("Routine note number 0")
    assert same_document(page)
    assert "ordering=created" in page.url


def test_paginate_forward_and_back_to_the_first_page(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("pages-ws", memories=notes(120))
    page.goto(f"/w/{ws['slug']}/?ordering=created")
    first = row_ids(page)
    assert len(first) == 50
    page.get_by_role("link", name="Next page →").click()
    expect(page.locator(".pager")).to_contain_text("Page 2")
    second = row_ids(page)
    page.get_by_role("link", name="Next page →").click()
    expect(page.locator(".pager")).to_contain_text("Page 3")
    third = row_ids(page)
    assert len(second) == 50 and len(third) == 20
    assert len(set(first) | set(second) | set(third)) == 120
    expect(page.get_by_role("link", name="Next page →")).to_have_count(0)
    assert "cursor=" in page.url and "ordering=created" in page.url
    page.get_by_role("link", name="← First page").click()
    expect(page.locator(".pager")).to_contain_text("Page 1")
    assert row_ids(page) == first
    # Back button: htmx restores the previous page of results.
    page.go_back()
    expect(page.locator(".pager")).to_contain_text("Page 3")


def test_keyboard_moves_selects_and_opens_rows(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("keys-ws", memories=STORY)
    page.goto(f"/w/{ws['slug']}/")
    page.locator("body").press("j")
    rows = page.locator("#memory-table tbody tr.mrow")
    expect(rows.nth(0)).to_be_focused()
    page.keyboard.press("j")
    expect(rows.nth(1)).to_be_focused()
    page.keyboard.press("ArrowDown")
    page.keyboard.press("k")
    expect(rows.nth(1)).to_be_focused()
    page.keyboard.press("x")
    expect(page.locator("#selected-count")).to_have_text("1 selected")
    expect(rows.nth(1).locator("input[name=ids]")).to_be_checked()
    page.keyboard.press("/")
    expect(page.get_by_label("Search")).to_be_focused()
    rows.nth(1).focus()
    target = rows.nth(1).locator("a.open").get_attribute("href")
    page.keyboard.press("Enter")
    page.wait_for_url(f"**{target}")
    expect(page.locator("h1")).to_contain_text("memory")


def test_edit_content_in_place(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("edit-ws", memories=[{**STORY[0], "origin": "import:wiki"}])
    page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
    expect(page.locator("#memory-content")).to_contain_text("import:wiki")
    mark_page(page)
    page.get_by_role("link", name="Edit", exact=True).click()
    editor = page.get_by_role("textbox", name="Edit content")
    expect(editor).to_be_focused()
    editor.fill("Decision: JWT access tokens, 15 minute expiry, rotating refresh tokens")
    page.get_by_role("button", name="Save").click()
    content = page.locator("#memory-content")
    expect(content).to_contain_text("15 minute expiry")
    expect(content).to_contain_text("user:casey")
    expect(content).to_contain_text("tier 1")
    expect(page.locator("#memory-history .tl-item").first).to_contain_text("update")
    assert same_document(page), "the edit must happen in place"
    page.reload()
    expect(page.locator("#memory-content")).to_contain_text("15 minute expiry")


def test_bulk_archive_then_revert_from_the_flash(page: Page, e2e_workspace: Workspace, screenshot: Any) -> None:
    ws = e2e_workspace("bulk-ws", memories=STORY + notes(2))
    page.goto(f"/w/{ws['slug']}/")
    rows = page.locator("#memory-table tbody tr.mrow")
    expect(rows).to_have_count(6)
    expect(page.get_by_role("button", name="Apply to selected…")).to_be_disabled()
    for i in range(3):
        rows.nth(i).locator("input[name=ids]").check()
    chosen = [rows.nth(i).get_attribute("id") for i in range(3)]
    expect(page.locator("#selected-count")).to_have_text("3 selected")
    page.get_by_label("Action", exact=True).select_option("archive")
    page.get_by_role("button", name="Apply to selected…").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("Archive 3 memories?")
    screenshot(page, "memory-list-bulk-confirm")
    dialog.get_by_role("button", name="Archive 3 memories").click()
    expect(page.locator("#messages")).to_contain_text("Archived 3 memories.")
    expect(rows).to_have_count(3)
    for rid in chosen:
        expect(page.locator(f"#{rid}")).to_have_count(0)
    page.locator("#messages").get_by_role("button", name="Revert").click()
    expect(page.locator("#messages")).to_contain_text("Reverted record")
    expect(rows).to_have_count(6)


def test_bulk_dialog_can_be_cancelled_with_escape(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("cancel-ws", memories=STORY)
    page.goto(f"/w/{ws['slug']}/")
    page.locator("#select-all").check()
    expect(page.locator("#selected-count")).to_have_text("4 selected")
    page.get_by_label("Action", exact=True).select_option("add_tag")
    page.locator("#bulk-tag").fill("reviewed")
    page.get_by_role("button", name="Apply to selected…").click()
    expect(page.get_by_role("dialog")).to_contain_text('Add the tag "reviewed" to 4 memories?')
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog")).to_have_count(0)
    expect(page.locator("#memory-table .tag", has_text="#reviewed")).to_have_count(0)


def test_rehydrate_restores_the_full_content(page: Page, e2e_server: E2EServer, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("rehydrate-ws", memories=[STORY[1]])
    e2e_server.run(
        """
        from memories.models import Memory
        Memory.objects.filter(id=params["id"]).update(
            content="Incident: sticky sessions…", compression_tier=1,
            snapshots=[{"tier": 0, "content": params["full"], "at": "2026-01-01T00:00:00+00:00"}],
        )
        """,
        id=ws["ids"][0],
        full=STORY[1]["content"],
    )
    page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
    expect(page.locator("#memory-compression h2")).to_have_text("Compression: summary")
    expect(page.locator("#memory-content .content-text")).to_have_text("Incident: sticky sessions…")
    page.get_by_role("button", name="Rehydrate to full content").click()
    expect(page.locator("#messages")).to_contain_text("Full content restored")
    expect(page.locator("#memory-content .content-text")).to_have_text(STORY[1]["content"])
    expect(page.locator("#memory-compression h2")).to_have_text("Compression: full")
    expect(page.locator("#memory-history .tl-item").first).to_contain_text("rehydrate")


def test_graph_view_renders_the_neighbourhood(page: Page, e2e_server: E2EServer, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("graph-ws", memories=STORY)
    e2e_server.run(
        """
        from memories import services
        from memories.models import Memory
        ws = Memory.objects.get(id=params["ids"][0]).workspace
        m = {str(x.id): x for x in Memory.objects.filter(workspace=ws)}
        a, b, c, d = (m[i] for i in params["ids"])
        services.edge_link(workspace=ws, source=a, target=b, edge_type="DERIVED_FROM")
        services.edge_link(workspace=ws, source=c, target=a, edge_type="RELATED")
        services.edge_link(workspace=ws, source=b, target=d, edge_type="MENTIONS")
        """,
        ids=ws["ids"],
    )
    page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
    graph = page.locator("#memory-graph")
    expect(graph).to_have_attribute("data-drawn", "true")
    expect(graph).to_have_attribute("data-nodes", "4")
    expect(graph.locator("canvas").first).to_be_visible()
    box = graph.bounding_box()
    assert box is not None and box["height"] >= 250
    expect(page.locator(".edge-type")).to_have_text(["DERIVED_FROM", "RELATED"])


def test_activation_bar_updates_live_over_the_websocket(
    page: Page, e2e_server: E2EServer, e2e_user: Credentials, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("live-ws", memories=STORY)
    target = ws["ids"][0]
    page.goto(f"/w/{ws['slug']}/")
    expect(page.locator("#live-state")).to_have_text("live")
    bar = page.locator(f"#act-{target}")
    before = float(bar.get_attribute("data-value") or "0")
    request = urllib.request.Request(
        f"{e2e_server.url}/api/v1/workspaces/{ws['slug']}/memories/{target}/",
        headers={"Authorization": f"Token {e2e_user.token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert json.loads(response.read())["id"] == target
    # The flusher runs every second and pushes the new bar; no reload happens.
    mark_page(page)
    expect(bar).not_to_have_attribute("data-value", f"{before:.4f}", timeout=8000)
    after = float(bar.get_attribute("data-value") or "0")
    assert after == pytest.approx(before + 0.05, abs=0.002)
    assert same_document(page)


def test_hard_delete_asks_for_the_first_words(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("delete-ws", memories=STORY[:2])
    page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
    page.get_by_label("Type Decision: we picked to confirm").fill("Decision")
    page.get_by_role("button", name="Delete permanently").click()
    expect(page.locator("#delete-error")).to_contain_text("Decision: we picked")
    page.get_by_label("Type Decision: we picked to confirm").fill("decision: we picked")
    page.get_by_role("button", name="Delete permanently").click()
    expect(page.locator("#messages")).to_contain_text("Deleted “Decision: we picked…” permanently")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(1)


def test_create_a_memory_from_the_form(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("create-ws")
    page.goto(f"/w/{ws['slug']}/")
    expect(page.locator(".empty-state")).to_contain_text("This workspace has no memories yet")
    page.get_by_role("link", name="New memory").click()
    page.get_by_label("Content").fill("Lee owns the gateway deny-list")
    page.get_by_label("Type").select_option("fact")
    page.get_by_label("Tags").fill("gateway, ownership")
    page.get_by_role("button", name="Save memory").click()
    expect(page.locator("#messages")).to_contain_text("Memory saved.")
    expect(page.locator("#memory-content")).to_contain_text("Lee owns the gateway deny-list")
    expect(page.locator("dl.meta")).to_contain_text("#gateway")


def test_empty_workspace_issues_a_token_and_shows_its_curl_line_once(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace, screenshot: Any
) -> None:
    ws = e2e_workspace("empty-ws")
    page.goto(f"/w/{ws['slug']}/")
    page.get_by_role("button", name="Create my API token and show the curl line").click()
    curl = page.locator("#curl-line")
    expect(curl).to_contain_text(f"/api/v1/workspaces/{ws['slug']}/memories/")
    match = re.search(r"Authorization: Token ([0-9a-f]{40})", curl.inner_text())
    assert match, curl.inner_text()
    page.get_by_role("button", name="Copy").click()
    expect(page.get_by_role("button", name="Copied")).to_be_visible()
    screenshot(page, "memory-list-empty-workspace")
    request = urllib.request.Request(
        f"{e2e_server.url}/api/v1/workspaces/{ws['slug']}/memories/",
        headers={"Authorization": f"Token {match.group(1)}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    page.reload()  # shown once: the key is stored only as its hash
    expect(page.locator("#curl-line")).to_have_count(0)
    expect(page.get_by_role("button", name="Create my API token and show the curl line")).to_be_visible()


def test_viewer_sees_memories_but_no_edit_controls(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("viewer-ws", memories=STORY, role="viewer")
    page.goto(f"/w/{ws['slug']}/")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(4)
    expect(page.locator("input[name=ids]")).to_have_count(0)
    expect(page.get_by_role("link", name="New memory")).to_have_count(0)
    page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
    expect(page.get_by_role("link", name="Edit", exact=True)).to_have_count(0)
    expect(page.get_by_role("button", name="Delete permanently")).to_have_count(0)


def test_screenshots_of_the_main_pages(
    page: Page, e2e_server: E2EServer, e2e_user: Credentials, screenshot: Callable[..., Path]
) -> None:
    e2e_server.manage("load_demo", "--slug", "demo", "--username", e2e_user.username)
    # An agent used the JWT thread this morning: its memories are warm, the rest has faded.
    used = e2e_server.run(
        """
        from memories.models import Memory
        wanted = ["Decision: we picked JWT", "Reference: RFC 7519", "The nginx load balancer",
                  "Open question from the JWT review", "Incident: users were logged out"]
        result = [str(m.id) for w in wanted for m in Memory.objects.filter(workspace__slug="demo",
                  content__startswith=w)[:1]]
        """
    )
    for rank, memory_id in enumerate(used):
        for _ in range(len(used) - rank):
            boost = urllib.request.Request(
                f"{e2e_server.url}/api/v1/workspaces/demo/memories/{memory_id}/",
                headers={"Authorization": f"Token {e2e_user.token}"},
            )
            urllib.request.urlopen(boost, timeout=10).close()
    page.goto("/w/demo/")
    expect(page.locator("#memory-table tbody tr.mrow").first).to_be_visible()
    expect(page.locator("#live-state")).to_have_text("live")
    screenshot(page, "memory-list")
    # The README shows the first screen of the demo's list, warmest memories first.
    page.get_by_label("Sort").select_option("-activation")
    expect(page).to_have_url(re.compile(r"ordering=-activation"))
    # The boosts are flushed every second; on a busy machine later: reload until they are.
    first = page.locator("#memory-table tbody tr.mrow").first
    for _ in range(20):
        if "Decision: we picked JWT" in (first.text_content() or ""):
            break
        page.wait_for_timeout(500)
        page.reload()
    expect(first).to_contain_text("Decision: we picked JWT")
    readme_shot = screenshot(page, "memory-list-readme", full_page=False)
    # The README's copy is refreshed on request only, so test runs leave the working tree clean.
    readme = ROOT / "docs" / "screenshots" / "memories.png"
    if os.environ.get("UPDATE_DOCS_SCREENSHOTS") or not readme.exists():
        readme.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(readme_shot, readme)
    page.goto("/w/demo/")

    page.get_by_label("Search").fill("JWT")
    expect(page).to_have_url(re.compile(r"q=JWT"))
    screenshot(page, "memory-list-search")

    decision = page.locator("#memory-table tbody tr.mrow", has_text="Decision").first.locator("a.open")
    decision.click()
    expect(page.locator("#memory-graph")).to_have_attribute("data-drawn", "true")
    screenshot(page, "memory-detail")

    page.get_by_role("link", name="Edit", exact=True).click()
    expect(page.get_by_role("textbox", name="Edit content")).to_be_focused()
    screenshot(page, "memory-detail-editing")

    page.goto("/w/demo/memories/new/")
    screenshot(page, "memory-create")

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto("/w/demo/")
    expect(page.locator("#memory-table tbody tr.mrow").first).to_be_visible()
    screenshot(page, "memory-list-mobile")


# Relative luminance and contrast ratio as WCAG 2.x defines them; the background is the first opaque
# background found walking up from the text's element (the stylesheet uses no background images).
_CONTRAST_JS = """
() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = (c) => {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = (el) => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a >= 0.99) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const failures = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const seen = new Set();
  while (walker.nextNode()) {
    const text = walker.currentNode.textContent.trim();
    const el = walker.currentNode.parentElement;
    if (!text || !el || seen.has(el)) continue;
    seen.add(el);
    const style = getComputedStyle(el);
    const box = el.getBoundingClientRect();
    if (style.visibility === 'hidden' || style.display === 'none' || box.width === 0 || box.height === 0) continue;
    if (el.closest('svg, .visually-hidden, [hidden], noscript, option')) continue;
    const fg = parse(style.color), bg = background(el);
    const l1 = lum(fg), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(style.fontSize), bold = parseInt(style.fontWeight) >= 700;
    const needed = (size >= 24 || (bold && size >= 18.66)) ? 3 : 4.5;
    if (ratio < needed) failures.push(`${text.slice(0, 40)} ${ratio.toFixed(2)} < ${needed}`);
  }
  return failures;
}
"""


def test_text_contrast_passes_wcag_aa_on_the_main_pages(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("contrast-ws", memories=STORY)
    for url in (f"/w/{ws['slug']}/", f"/w/{ws['slug']}/memories/{ws['ids'][0]}/", f"/w/{ws['slug']}/memories/new/"):
        page.goto(url)
        failures = page.evaluate(_CONTRAST_JS)
        assert failures == [], f"{url}: {failures}"
    # The checker itself catches faint grey text (#aaa on the page background #f6f7f9 is 2.17:1).
    page.evaluate("document.querySelector('main').insertAdjacentHTML('beforeend', '<p style=\"color:#aaa\">faint</p>')")
    assert page.evaluate(_CONTRAST_JS) == ["faint 2.17 < 4.5"]


def test_the_basics_work_without_javascript(
    browser: Any, e2e_server: E2EServer, logged_in_state: dict[str, Any], e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("nojs-ws", memories=STORY)
    context = browser.new_context(base_url=e2e_server.url, storage_state=logged_in_state, java_script_enabled=False)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        page.goto(f"/w/{ws['slug']}/")
        page.get_by_label("Search").fill("refresh")
        page.get_by_role("button", name="Apply", exact=True).click()
        page.wait_for_url("**q=refresh**")
        expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(1)
        page.goto(f"/w/{ws['slug']}/")
        # STORY[0] is not pinned; rows created together sort by id, so "the first row" could be the pinned one.
        page.locator(f"#memory-table tbody tr.mrow input[name=ids][value='{ws['ids'][0]}']").check()
        page.get_by_label("Action", exact=True).select_option("pin")
        page.get_by_role("button", name="Apply to selected…").click()
        expect(page.get_by_role("heading", name="Pin 1 memory?")).to_be_visible()
        page.get_by_role("button", name="Pin 1 memory").click()
        expect(page.locator("#messages")).to_contain_text("Pinned 1 memory.")
        page.locator("#messages").get_by_role("button", name="Revert").click()
        expect(page.locator("#messages")).to_contain_text("Reverted record")
        page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
        page.get_by_role("link", name="Edit", exact=True).click()
        page.get_by_role("textbox", name="Edit content").fill("Edited with JavaScript off")
        page.get_by_role("button", name="Save").click()
        expect(page.locator("#messages")).to_contain_text("Content saved.")
        expect(page.locator("#memory-content")).to_contain_text("Edited with JavaScript off")
    finally:
        context.close()
