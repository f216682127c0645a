"""The query inspector in a real Chromium against daphne: run, read, compare, tune, save.

Each test gets its own copy of the demo workspace (memories.demo: the "why did we pick JWT" story with
its graph), so saved settings and counted retrievals never leak between tests.
"""

from __future__ import annotations

import json
import math
import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

pytestmark = pytest.mark.e2e

# Fixture types from tests/e2e/conftest.py (conftest modules are not importable under importlib mode).
E2EServer = Any
Credentials = Any

QUERY = "Why did we pick JWT?"
RECENCY_SLIDER = "#k-recency_time_constant_hours-slider"


@pytest.fixture
def demo(e2e_server: E2EServer, e2e_user: Credentials, request: pytest.FixtureRequest) -> Callable[..., str]:
    """Load the demo story into a fresh workspace with `e2e_user` as `role`; return its slug."""

    def make(role: str = "owner") -> str:
        slug = "insp-" + str(request.node.name).removeprefix("test_").replace("_", "-")[:40]
        e2e_server.run(
            """
            from django.contrib.auth import get_user_model
            from memories import services
            from memories.demo import demo_load
            workspace = demo_load(slug=params["slug"]).workspace
            user = get_user_model().objects.get(username=params["username"])
            services.membership_set(workspace=workspace, user=user, role=params["role"])
            """,
            slug=slug,
            username=e2e_user.username,
            role=role,
        )
        return slug

    return make


def ranked_ids(page: Page, table: str = "#ranked") -> list[str]:
    return list(page.locator(f"{table} tbody tr").evaluate_all("rs => rs.map(r => r.dataset.id)"))


def run_query(page: Page, slug: str, query: str = QUERY, mode: str = "router", k: int = 10) -> None:
    page.goto(f"/w/{slug}/inspector/")
    page.get_by_label("Query", exact=True).fill(query)
    page.get_by_label("k", exact=True).fill(str(k))
    page.get_by_label("Mode").select_option(mode)
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#ranked tbody tr").first).to_be_visible()


def mark_page(page: Page) -> None:
    page.evaluate("window.__sameDocument = true")


def same_document(page: Page) -> bool:
    return bool(page.evaluate("window.__sameDocument === true"))


def api_context(server: E2EServer, token: str, slug: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{server.url}/api/v1/workspaces/{slug}/context/",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        data: dict[str, Any] = json.loads(response.read())
    return data


def test_a_query_shows_score_bars_strategy_and_provenance_paths(
    page: Page, demo: Callable[..., str], screenshot: Callable[[Page, str], Any]
) -> None:
    slug = demo()
    page.goto(f"/w/{slug}/inspector/")
    expect(page.locator("#dry-note")).to_contain_text("dry read")
    expect(page.get_by_role("link", name="Inspector")).to_have_attribute("aria-current", "page")
    run_query(page, slug)

    expect(page.locator("#strategy-used")).to_contain_text("deep:multi-hop")
    expect(page.locator("#reasons")).to_contain_text("keyword:why")
    expect(page.locator("#read-kind")).to_contain_text("dry")
    assert int(page.locator("#tokens-used").inner_text()) > 0
    rows = page.locator("#ranked tbody tr")
    assert rows.count() >= 5
    # Every row has a stacked bar whose text alternative carries the arithmetic.
    bars = page.locator("#ranked .sbar")
    assert bars.count() == rows.count()
    label = bars.first.get_attribute("aria-label") or ""
    assert label.startswith("Score ") and "activation" in label and "recency" in label
    # The anchor is forced first: its bar has the anchor segment.
    first = rows.first
    expect(first.locator(".badge.forced")).to_be_visible()
    expect(first.locator(".seg-anchor")).to_have_count(1)
    # A memory lifted by the hit that links to it names the edge and hop, with a clickable path from the seed.
    walked = page.locator("#ranked tbody tr", has=page.locator(".pk-context")).first
    expect(walked.locator(".prov-how")).to_contain_text("hop")
    seed_link = walked.locator("ol.path a").first
    expect(seed_link).to_contain_text("seed:")
    expect(page.locator("#declined-h")).to_be_visible()
    assert page.locator("#declined-table tbody tr").count() > 0
    expect(page.locator("#declined-table .factor").first).not_to_be_empty()
    screenshot(page, "inspector-router")

    seed_link.click()
    page.wait_for_url(f"**/w/{slug}/memories/**")
    expect(page.locator("#memory-content")).to_be_visible()


def test_side_by_side_shows_rank_changes_between_legacy_and_router(
    page: Page, demo: Callable[..., str], screenshot: Callable[[Page, str], Any]
) -> None:
    slug = demo()
    run_query(page, slug)
    mark_page(page)
    page.get_by_label("Side by side: legacy and router").check()
    expect(page.locator("#compare-legacy")).to_be_visible()
    expect(page.locator("#compare-router")).to_be_visible()
    assert same_document(page), "the comparison should swap in without a page load"
    legacy = ranked_ids(page, "#ranked-legacy")
    router = ranked_ids(page, "#ranked-router")
    assert legacy and router and legacy != router
    # Every router row says how it moved against legacy; every legacy row where it went.
    router_marks = page.locator("#ranked-router td.chg").evaluate_all("cs => cs.map(c => c.className)")
    assert len(router_marks) == len(router)
    assert any("chg-new" in m or "chg-up" in m or "chg-down" in m for m in router_marks)
    for rank, mid in enumerate(router, start=1):
        cell = page.locator(f"#ranked-router tr[data-id='{mid}'] td.chg")
        if mid not in legacy:
            expect(cell).to_contain_text("new")
        else:
            before = legacy.index(mid) + 1
            symbol = "▲" if before > rank else "▼" if before < rank else "="
            expect(cell).to_contain_text(symbol)
    dropped = [mid for mid in legacy if mid not in router]
    for mid in dropped:
        expect(page.locator(f"#ranked-legacy tr[data-id='{mid}'] td.chg")).to_contain_text("dropped")
    screenshot(page, "inspector-compare")
    page.get_by_label("Side by side: legacy and router").uncheck()
    expect(page.locator("#compare")).to_have_count(0)
    expect(page.locator("#ranked")).to_be_visible()


def test_moving_a_slider_reranks_live_without_saving(
    page: Page, demo: Callable[..., str], screenshot: Callable[[Page, str], Any]
) -> None:
    slug = demo()
    run_query(page, slug)
    mark_page(page)
    before = ranked_ids(page)
    # A heavy recency weight with a one-day time constant puts today's working notes above the decision
    # thread of six weeks ago.
    page.locator("#k-recency_weight").fill("2")
    page.locator(RECENCY_SLIDER).fill(str(math.log10(24)))
    expect(page.locator("#o-recency_time_constant_hours")).to_have_text("24 h")
    expect(page.locator("#whatif-save")).to_contain_text("Recency time constant: 720 h → 24 h")
    expect(page.locator("#whatif-save")).to_contain_text("Recency weight: 0.1 → 2")
    page.wait_for_function(
        "before => JSON.stringify([...document.querySelectorAll('#ranked tbody tr')].map(r => r.dataset.id))"
        " !== JSON.stringify(before)",
        arg=before,
    )
    assert same_document(page)
    assert "recency_time_constant_hours=24" in page.url and "recency_weight=2" in page.url
    expect(page.locator("#knob-recency_time_constant_hours")).to_have_class("knob changed")
    screenshot(page, "inspector-whatif")
    # Nothing was saved: the API still runs with the defaults.
    settings = page.request.get(f"/api/v1/workspaces/{slug}/settings/").json()
    assert settings["surfacing"]["recency_time_constant_hours"] == 720.0
    assert settings["surfacing"]["recency_weight"] == 0.1


def test_saved_settings_are_used_by_the_api(
    page: Page, demo: Callable[..., str], e2e_server: E2EServer, e2e_user: Credentials
) -> None:
    slug = demo()
    run_query(page, slug)
    page.locator("#k-centrality_weight").fill("1.5")
    page.get_by_label("Personalized PageRank").uncheck()
    expect(page.locator("#whatif-save")).to_contain_text("Centrality weight: 0.2 → 1.5")
    expect(page.locator("#whatif-save")).to_contain_text("Personalized PageRank: on → off")
    page.locator("#save-settings").click()
    expect(page.locator("#whatif-save")).to_contain_text("Saved as the workspace's settings")
    # The knobs now show the new values as saved, without a page load.
    expect(page.locator("#h-centrality_weight .saved")).to_have_text("1.5")
    expect(page.locator("#knob-centrality_weight")).to_have_class("knob")
    expect(page.locator("#k-centrality_weight")).to_have_value("1.5")
    context = api_context(e2e_server, e2e_user.token, slug, {"query": QUERY, "mode": "router"})
    assert context["settings"]["centrality_weight"] == 1.5
    assert context["settings"]["ppr_enabled"] is False
    assert all(item["score_breakdown"]["centrality"] == 0.0 for item in context["items"])
    # The page agrees: reloading shows the new values as saved, with nothing left to save.
    page.reload()
    expect(page.locator("#h-centrality_weight .saved")).to_have_text("1.5")
    expect(page.locator("#whatif-save")).to_contain_text("saved settings")


def test_a_viewer_can_try_settings_but_not_save_them(page: Page, demo: Callable[..., str]) -> None:
    slug = demo("viewer")
    run_query(page, slug)
    page.locator("#k-centrality_weight").fill("1.5")
    expect(page.locator("#whatif-save")).to_contain_text("Centrality weight: 0.2 → 1.5")
    expect(page.locator("#save-viewer-note")).to_be_visible()
    expect(page.locator("#save-settings")).to_have_count(0)
    csrf = next(c["value"] for c in page.context.cookies() if c["name"] == "csrftoken")
    response = page.request.post(
        f"/w/{slug}/inspector/settings/", form={"centrality_weight": "1.5"}, headers={"X-CSRFToken": csrf}
    )
    assert response.status == 403


def test_counting_a_retrieval_boosts_once_and_clears_the_box(
    page: Page, demo: Callable[..., str], e2e_server: E2EServer
) -> None:
    slug = demo()
    run_query(page, slug)
    page.get_by_label("Count as retrieval").check()
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#read-kind")).to_contain_text("counted as a retrieval")
    expect(page.get_by_label("Count as retrieval")).not_to_be_checked()
    assert "record" not in page.url
    returned = len(ranked_ids(page))
    deadline = time.monotonic() + 10
    events = 0
    while time.monotonic() < deadline:
        events = e2e_server.run(
            """
            from memories.models import RetrievalEvent
            result = RetrievalEvent.objects.filter(workspace__slug=params["slug"]).count()
            """,
            slug=slug,
        )
        if events:
            break
        time.sleep(0.5)
    assert events == returned
    # The next run is a dry read again.
    page.get_by_role("button", name="Run", exact=True).click()
    expect(page.locator("#read-kind")).to_contain_text("dry")


def test_the_basic_query_works_without_javascript(
    browser: Browser, e2e_server: E2EServer, logged_in_state: dict[str, Any], demo: Callable[..., str]
) -> None:
    slug = demo()
    context = browser.new_context(
        base_url=e2e_server.url,
        storage_state=logged_in_state,  # type: ignore[arg-type]
        java_script_enabled=False,
    )
    try:
        page = context.new_page()
        page.goto(f"/w/{slug}/inspector/")
        page.get_by_label("Query", exact=True).fill(QUERY)
        page.get_by_label("Mode").select_option("router")
        page.get_by_role("button", name="Run", exact=True).click()
        page.wait_for_url(f"**/w/{slug}/inspector/?*")
        expect(page.locator("#ranked tbody tr").first).to_be_visible()
        expect(page.locator("#strategy-used")).to_contain_text("deep:multi-hop")
        # Ticking "count as retrieval" without JavaScript asks for a confirmed POST instead of counting.
        page.get_by_label("Count as retrieval").check()
        page.get_by_role("button", name="Run", exact=True).click()
        expect(page.locator("#read-kind")).to_contain_text("dry")
        page.get_by_role("button", name="Count this query as a retrieval").click()
        expect(page.locator("#messages")).to_contain_text("Counted as a retrieval")
        assert "record" not in page.url
    finally:
        context.close()
