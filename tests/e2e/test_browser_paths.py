"""Every browser path of the dashboard in a real Chromium: Back, live numbers, phones, offline docs, errors."""

from __future__ import annotations

import itertools
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


def test_the_api_docs_render_offline(page: Page, e2e_server: E2EServer) -> None:
    """Swagger UI comes from our own static files: with every other host unreachable the docs still render."""
    elsewhere: list[str] = []

    def offline(route: Any) -> None:
        url = route.request.url
        if url.startswith(e2e_server.url):
            route.continue_()
        else:
            elsewhere.append(url)
            route.abort("internetdisconnected")

    page.context.route("**/*", offline)
    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("SmartMemory site API")
    expect(page.locator(".swagger-ui .opblock").first).to_be_visible()
    assert page.locator(".swagger-ui .opblock").count() > 20
    assert elsewhere == [], f"the docs asked other hosts: {elsewhere}"


def page_width(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def assert_no_horizontal_overflow(page: Page, what: str) -> None:
    width = page.viewport_size["width"] if page.viewport_size else 0
    scroll = page_width(page)
    assert scroll <= width, f"{what}: the page is {scroll} px wide in a {width} px viewport"


def test_drift_flags_and_metadata_are_shown_as_wrapped_key_values(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace(
        "flag-ws",
        memories=[
            {
                "content": "Dana prefers dark mode",
                "memory_type": "preference",
                "subject": "theme",
                "metadata": {"source": {"tool": "settings-sync", "path": "/a/very/long/" + "segment/" * 40}},
            }
        ],
    )
    e2e_server.run(
        """
        from memories.models import Memory
        m = Memory.objects.get(id=params["id"])
        m.drift_flags = [{"reason": "preference_drift", "replaces_in_window": 4, "window_days": 30.0,
            "first_replace_at": "2026-01-02T10:00:00+00:00", "last_replace_at": "2026-01-20T10:00:00+00:00",
            "flagged_at": "2026-01-21T10:00:00+00:00", "values": ["light " * 30, "dark " * 30]}]
        m.save(update_fields=["drift_flags"])
        """,
        id=ws["ids"][0],
    )
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"/w/{ws['slug']}/memories/{ws['ids'][0]}/")
        flags = page.locator("dl.meta .kv-box.warn")
        expect(flags).to_have_count(1)
        expect(flags.locator("dt", has_text="replaces_in_window")).to_be_visible()
        expect(page.locator("dl.meta")).not_to_contain_text("{'reason'")
        expect(page.locator("dl.meta .kv-box", has_text="settings-sync")).to_be_visible()
        assert_no_horizontal_overflow(page, f"memory detail at {width} px")


def test_importing_the_engine_export_back_adds_no_second_rule(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace(
        "roundtrip-ws",
        memories=[
            {"content": "Always run the linter before pushing", "memory_type": "strategy", "tier": "hot"},
            {"content": "Prefer small pull requests", "memory_type": "strategy", "tier": "warm"},
        ],
    )
    page.goto(f"/w/{ws['slug']}/evolution/engine/")
    rules = page.locator("table.rules tbody tr")
    expect(rules).to_have_count(2)
    with page.expect_download() as download:
        page.get_by_role("link", name="Download export (zip)").click()
    path = download.value.path()
    page.locator("#id_file").set_input_files(str(path))
    page.get_by_role("button", name="Import", exact=True).click()
    expect(page.locator("#messages")).to_contain_text("Imported nothing new")
    expect(rules).to_have_count(2)
    expect(page.locator("table.rules")).not_to_contain_text("import:memory-evolution")


def test_the_drift_timeline_shows_when_each_value_was_true(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    now = datetime.now(UTC)
    days = (25, 15, 8, 2)
    ws = e2e_workspace(
        "drift-time-ws",
        memories=[
            {
                "content": f"Dana prefers theme number {i}",
                "memory_type": "preference",
                "subject": "theme",
                "created_at": (now - timedelta(days=d)).isoformat(),
            }
            for i, d in enumerate(days)
        ],
    )
    e2e_server.manage("evolve", "--workspace", ws["slug"], "--evolver", "PreferenceDriftDetector", "--apply")
    page.goto(f"/w/{ws['slug']}/evolution/drift/")
    card = page.locator("article.drift").first
    expected = [f"{now - timedelta(days=d):%Y-%m-%d}" for d in (2, 8, 15)]
    expect(card.locator(".timeline time")).to_have_count(3)
    shown = [t[:10] for t in card.locator(".timeline time").all_inner_texts()]
    assert shown == expected, f"the timeline shows {shown}, the values changed on {expected}"
    # The flag's window runs from the first change to the last, days apart, not within one minute.
    expect(card.locator(".msg.warning")).to_contain_text(f"between {expected[-1]}")
    expect(card.locator(".msg.warning")).to_contain_text(f"and {expected[0]}")


def boost(e2e_server: E2EServer, credentials: Credentials, slug: str, memory_id: str) -> None:
    """One direct read through the API: the signal bus boosts the memory (+0.05) and counts an access."""
    request = urllib.request.Request(
        f"{e2e_server.url}/api/v1/workspaces/{slug}/memories/{memory_id}/",
        headers={"Authorization": f"Token {credentials.token}"},
    )
    urllib.request.urlopen(request, timeout=10).close()


def console_errors(page: Page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors


def test_a_live_push_updates_every_figure_of_a_memory_page_without_console_errors(
    page: Page, e2e_server: E2EServer, e2e_user: Credentials, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("live-detail-ws", memories=notes(26))
    target, others = ws["ids"][0], ws["ids"][1:]
    errors = console_errors(page)
    page.goto(f"/w/{ws['slug']}/memories/{target}/")
    expect(page.locator(f"#act-big-{target}")).to_be_visible()
    number = page.locator(f"#act-big-{target}").inner_text()
    expect(page.locator(f"#act-stored-{target}")).to_contain_text("0 boosts")
    expect(page.locator(f"#accessed-{target}")).to_have_text("0 times")
    page.wait_for_function("window.smLive === true")
    # Every other memory of the workspace moves too: their figures are in the same push.
    for memory_id in [target, *others]:
        boost(e2e_server, e2e_user, ws["slug"], memory_id)
    expect(page.locator(f"#act-stored-{target}")).to_contain_text("1 boost.", timeout=8000)
    expect(page.locator(f"#accessed-{target}")).to_contain_text("1 time, last")
    assert page.locator(f"#act-big-{target}").inner_text() != number
    bar = float(page.locator(f"#act-{target}").get_attribute("data-value") or "0")
    assert float(page.locator(f"#act-big-{target}").inner_text()) == pytest.approx(bar, abs=0.001)
    page.wait_for_timeout(1500)  # a later flush may push once more
    assert errors == [], f"console errors during the live push: {errors}"


def pending_proposals(e2e_server: E2EServer, slug: str, count: int) -> list[int]:
    ids: list[int] = e2e_server.run(
        """
        from evolution import proposals
        from memories.models import Workspace
        ws = Workspace.objects.get(slug=params["slug"])
        result = []
        for i in range(params["count"]):
            p, _ = proposals.proposal_create(
                workspace=ws, kind="strategy", title=f"Rule {i}", rationale="Seen 3 times in 7 days.",
                payload={"key": f"k{i}", "rule": f"Always do step {i} first", "weight": 0.5, "task_type": "deploy"},
                dedupe_key=f"k{i}")
            result.append(p.pk)
        """,
        slug=slug,
        count=count,
    )
    return ids


def test_counters_follow_inline_approve_reject_and_drift_actions(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("counters-ws", memories=[{"content": "Dana prefers tabs", "memory_type": "preference"}])
    ids = pending_proposals(e2e_server, ws["slug"], 3)
    page.goto(f"/w/{ws['slug']}/evolution/proposals/")
    nav = page.locator("#nav-count-proposals")
    expect(nav).to_have_text("3")
    expect(page.locator("#tab-count-pending")).to_have_text("3")
    expect(page.locator("#tab-count-decided")).to_have_text("0")
    page.locator(f"#proposal-{ids[0]}").get_by_role("button", name="Approve").click()
    expect(page.locator(f"#proposal-{ids[0]}")).to_contain_text("approved by casey")
    expect(nav).to_have_text("2")
    expect(page.locator("#subnav-count-proposals")).to_have_text("2")
    expect(page.locator("#tab-count-pending")).to_have_text("2")
    expect(page.locator("#tab-count-decided")).to_have_text("1")
    card = page.locator(f"#proposal-{ids[1]}")
    card.get_by_label("Reason").fill("Not for this team")
    card.get_by_role("button", name="Reject").click()
    expect(card).to_contain_text("rejected by casey")
    expect(nav).to_have_text("1")
    expect(page.locator("#tab-count-decided")).to_have_text("2")

    memory_id = ws["ids"][0]
    e2e_server.run(
        """
        from memories.models import Memory
        m = Memory.objects.get(id=params["id"])
        m.subject = "indent"
        m.replace_count = 3
        m.drift_flags = [{"reason": "preference[indent] changed 3x in last 30d", "replaces_in_window": 3,
            "window_days": 30.0, "first_replace_at": "2026-01-02T10:00:00+00:00",
            "last_replace_at": "2026-01-20T10:00:00+00:00", "flagged_at": "2026-01-21T10:00:00+00:00"}]
        m.save(update_fields=["subject", "replace_count", "drift_flags"])
        """,
        id=memory_id,
    )
    page.goto(f"/w/{ws['slug']}/evolution/drift/")
    summary = page.locator("#drift-summary")
    expect(summary).to_contain_text("1 open")
    page.locator(f"#drift-{memory_id}").get_by_role("button", name="Pin the current value").click()
    expect(page.locator(f"#drift-{memory_id}")).to_contain_text("acknowledged")
    expect(summary).to_contain_text("acknowledged")
    expect(summary).not_to_contain_text("1 open")
    expect(summary.locator(".pin")).to_have_text("pinned")


def test_the_history_chart_of_a_memory_used_today_tells_its_story(
    page: Page, e2e_server: E2EServer, e2e_user: Credentials, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("chart-ws", memories=[{"content": "Decision: cache the token keys for an hour"}])
    memory_id = ws["ids"][0]
    for _ in range(6):
        boost(e2e_server, e2e_user, ws["slug"], memory_id)
        page.wait_for_timeout(1100)  # one flush each: six boosts at six moments
    page.goto(f"/w/{ws['slug']}/memories/{memory_id}/")
    expect(page.locator(f"#act-stored-{memory_id}")).to_contain_text("6 boosts")
    chart = page.locator("svg.chart", has=page.locator("title", has_text="Activation and retention over time"))
    points = chart.locator("polyline.s-act:not(.proj)").get_attribute("points") or ""
    pairs = [tuple(map(float, p.split(","))) for p in points.split()]
    assert len({y for _, y in pairs}) >= 6, f"the activation line has no story: {points}"
    xs = [x for x, _ in pairs]
    assert max(xs) - min(xs) > 200, "the memory's life is squeezed into the chart's edge"
    expect(chart.locator("polyline.proj")).to_have_count(1)
    expect(chart.locator("line.marker")).to_have_count(6)
    boxes = [box for box in (t.bounding_box() for t in chart.locator("text.xlab").all()) if box]
    assert len(boxes) >= 2
    for left, right in itertools.pairwise(boxes):
        assert left["x"] + left["width"] <= right["x"], "two x labels overlap"
    assert "now" in chart.locator("text.xlab").all_text_contents()


@pytest.fixture
def demo(e2e_server: E2EServer, e2e_user: Credentials) -> str:
    """The demo workspace (loaded once per server); returns the page of its first Decision memory."""
    e2e_server.manage("load_demo", "--slug", "demo", "--username", e2e_user.username)
    memory_id: str = e2e_server.run(
        """
        from memories.models import Memory
        result = str(Memory.objects.filter(workspace__slug="demo", content__startswith="Decision").first().id)
        """
    )
    return f"/w/demo/memories/{memory_id}/"


def test_flash_messages_read_well_with_revert_inside_and_errors_have_navigation(
    page: Page, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("flash-ws", memories=notes(3))
    page.goto(f"/w/{ws['slug']}/")
    page.locator("#select-all").check()
    page.get_by_label("Action", exact=True).select_option("add_tag")
    page.locator("#bulk-tag").fill("reviewed")
    page.get_by_role("button", name="Apply to selected…").click()
    page.locator("#bulk-dialog").get_by_role("button").first.click()
    box = page.locator("#messages .msg").first
    expect(box).to_contain_text('Added the tag "reviewed" to 3 memories.')
    expect(box.get_by_role("button", name="Revert")).to_be_visible()

    response = page.goto(f"/w/{ws['slug']}/memories/00000000-0000-0000-0000-000000000000/")
    assert response is not None and response.status == 404
    expect(page.locator("header.topbar")).to_be_visible()
    expect(page.get_by_role("heading", name="Not found")).to_be_visible()
    page.get_by_role("link", name="Your workspaces").click()
    # The home page, or straight to the workspace when it is the person's only one.
    expect(page).to_have_url(re.compile(rf"//[^/]+/(w/{ws['slug']}/)?$"))
    expect(page.locator("header.topbar")).to_be_visible()


def test_next_page_scrolls_to_the_list_top_shows_the_total_and_pages_back(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("pager-ws", memories=notes(120))
    page.goto(f"/w/{ws['slug']}/?ordering=created")
    expect(page.locator("#memory-total")).to_have_text(" of 120 memories")
    first = page.locator("#memory-table tbody tr.mrow").first.get_attribute("id")
    page.locator("#next-page").scroll_into_view_if_needed()
    assert page.evaluate("window.scrollY") > 500
    page.locator("#next-page").click()
    expect(page.locator(".pager")).to_contain_text("Page 2 · 51–100")
    expect(page.locator("#memory-total")).to_have_text(" of 120 memories")
    top = page.evaluate("document.getElementById('memory-results').getBoundingClientRect().top")
    assert -5 <= top <= 100, f"after Next the list starts {top} px from the top of the window"
    second = page.locator("#memory-table tbody tr.mrow").first.get_attribute("id")
    page.locator("#next-page").click()
    expect(page.locator(".pager")).to_contain_text("Page 3 · 101–120")
    page.get_by_role("link", name="← Previous page").click()
    expect(page.locator(".pager")).to_contain_text("Page 2 · 51–100")
    assert page.locator("#memory-table tbody tr.mrow").first.get_attribute("id") == second
    page.get_by_role("link", name="← Previous page").click()
    expect(page.locator(".pager")).to_contain_text("Page 1 · 1–50")
    assert page.locator("#memory-table tbody tr.mrow").first.get_attribute("id") == first


def test_list_search_matches_the_beginning_of_a_word(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace(
        "prefix-ws",
        memories=[{"content": f"RabbitMQ queue {i} backs up at night"} for i in range(5)]
        + [{"content": "Kafka keeps the audit stream"}],
    )
    page.goto(f"/w/{ws['slug']}/")
    page.get_by_label("Search").fill("Rabbit")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(5)
    page.get_by_label("Search").fill("rabbitmq")
    expect(page.locator("#memory-table tbody tr.mrow")).to_have_count(5)


SCREENSHOTS = {
    # The README's memories.png (warmest first) is test_memory_browser's; this one shows a search's best matches.
    "memory-search": "/w/demo/?q=JWT+session+refresh",
    "inspector": "/w/demo/inspector/?q=why+did+we+pick+JWT",
    "proposals": "/w/demo/evolution/proposals/",
    "contradictions": "/w/demo/evolution/contradictions/",
    "drift": "/w/demo/evolution/drift/",
    "runs": "/w/demo/evolution/runs/",
    "engine": "/w/demo/evolution/engine/",
}


def test_screenshots_of_the_main_pages_at_desktop_size(page: Page, demo: str, screenshot: Any) -> None:
    """1440x900 shots of every main page; docs/screenshots is refreshed with UPDATE_DOCS_SCREENSHOTS=1."""
    page.set_viewport_size({"width": 1440, "height": 900})
    errors = console_errors(page)
    docs = ROOT / "docs" / "screenshots"
    for name, url in (*SCREENSHOTS.items(), ("memory-detail", demo)):
        page.goto(url)
        page.wait_for_load_state("load")
        expect(page.locator("header.topbar")).to_be_visible()
        assert_no_horizontal_overflow(page, name)
        shot = screenshot(page, f"desktop-{name}", full_page=False)
        if os.environ.get("UPDATE_DOCS_SCREENSHOTS"):
            docs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(shot, docs / f"{name}.png")
    assert errors == [], f"console errors: {errors}"


def test_a_server_error_is_the_site_s_own_page_with_a_way_on(page: Page, e2e_server: E2EServer, demo: str) -> None:
    """A page whose query fails (here its table is gone for a moment) is the styled 500 page, not Django's bare one."""
    moved = "ALTER TABLE evolution_dreamreport RENAME TO {}"
    code = "from django.db import connection\nconnection.cursor().execute(params['sql'])"
    e2e_server.run(code, sql=moved.format("e2e_dreamreport_away"))
    try:
        response = page.goto("/w/demo/evolution/engine/")
        assert response is not None and response.status == 500
        expect(page.get_by_role("heading", name="Something went wrong")).to_be_visible()
        assert page.evaluate("getComputedStyle(document.querySelector('header.topbar')).backgroundColor") == (
            "rgb(17, 36, 63)"
        )
    finally:
        e2e_server.run(code, sql="ALTER TABLE e2e_dreamreport_away RENAME TO evolution_dreamreport")
    page.get_by_role("link", name="Your workspaces").click()
    expect(page).to_have_url(re.compile(r"//[^/]+/(w/[^/]+/)?$"))
    expect(page.locator("header.topbar form.ws-switch")).to_be_visible()


def test_a_refused_revert_links_to_the_later_change_that_blocks_it(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("blocked-ws", memories=[{"content": "Decision: rotate the signing keys every year"}])
    memory_id = ws["ids"][0]
    records = e2e_server.run(
        """
        from django.contrib.auth import get_user_model
        from history.models import RecordLink
        from memories import services
        from memories.models import Memory
        user = get_user_model().objects.get(username="casey")
        for text in ("every quarter", "every month"):
            m = Memory.objects.get(id=params["id"])
            services.memory_update(workspace=m.workspace, memory=m, actor=user,
                                   changes={"content": "Decision: rotate the signing keys " + text})
        result = list(RecordLink.objects.filter(memory_id=params["id"]).order_by("record_id")
                      .values_list("record_id", flat=True))
        """,
        id=memory_id,
    )
    first, later = records[-2], records[-1]
    page.goto(f"/w/{ws['slug']}/memories/{memory_id}/")
    page.get_by_role("button", name=re.compile(rf"^Revert record {first} ")).click()
    refusal = page.locator("#messages .msg.error")
    expect(refusal).to_contain_text(f"by record {later}")
    refusal.get_by_role("link", name=f"Open record {later}").click()
    expect(page).to_have_url(re.compile(rf"/memories/{memory_id}/#record-{later}$"))
    expect(page.locator(f"#record-{later}")).to_be_in_viewport()


# Words of the history tables that Chromium laid out over two lines although they fit their column on one
# ("Befo re"), and runs of base64 (an embedding) shown as text.
_BROKEN_WORDS_JS = """
() => {
  const broken = [], blobs = [];
  for (const cell of document.querySelectorAll('table.changes th, table.changes td')) {
    if (/[A-Za-z0-9+\\/=]{60,}/.test(cell.textContent)) blobs.push(cell.textContent.slice(0, 60));
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const node = walker.currentNode;
      for (const m of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const lines = new Set([...range.getClientRects()].filter(r => r.width > 0).map(r => Math.round(r.top)));
        // A token longer than about a column is allowed to break (break-word); a word that fits is not.
        if (lines.size > 1 && m[0].length <= 24) broken.push(m[0]);
      }
    }
  }
  return {broken, blobs};
}
"""


def test_history_tables_keep_words_whole_and_name_embedding_blobs_by_size(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("history-table-ws", memories=[{"content": "Decision: deploy the gateway on Tuesdays"}])
    memory_id = ws["ids"][0]
    e2e_server.run(
        """
        import base64, os
        from django.contrib.auth import get_user_model
        from history.models import EvolutionRecord
        from memories import services
        from memories.models import Memory
        m = Memory.objects.get(id=params["id"])
        services.memory_update(workspace=m.workspace, memory=m, actor=get_user_model().objects.get(username="casey"),
                               changes={"content": "Decision: deploy the gateway on Wednesdays after the review"})
        # Records written before embeddings left them held the vector as base64.
        record = EvolutionRecord.objects.filter(links__memory_id=params["id"]).latest("pk")
        record.before[params["id"]]["embedding"] = base64.b64encode(os.urandom(1536)).decode()
        record.after[params["id"]]["embedding"] = base64.b64encode(os.urandom(1536)).decode()
        record.save(update_fields=["before", "after"])
        """,
        id=memory_id,
    )
    for width, height in ((1440, 900), (390, 844)):
        page.set_viewport_size({"width": width, "height": height})
        page.goto(f"/w/{ws['slug']}/memories/{memory_id}/")
        table = page.locator("table.changes").first
        expect(table).to_contain_text("Wednesdays")
        expect(table).to_contain_text("binary data, 1,536 bytes")
        found = page.evaluate(_BROKEN_WORDS_JS)
        assert found["blobs"] == [], f"base64 shown as text at {width} px: {found['blobs']}"
        assert found["broken"] == [], f"words broken over two lines at {width} px: {found['broken']}"
        assert_no_horizontal_overflow(page, f"memory history at {width} px")


def test_a_multi_word_search_lists_the_memory_holding_every_word_first(page: Page, e2e_workspace: Workspace) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    newer = [f"The {w} settings moved to the new gateway" for w in ("jwt", "session", "cookie") for _ in range(4)]
    ws = e2e_workspace(
        "relevance-ws",
        memories=[
            {"content": "We sign a JWT and keep it in a session cookie", "created_at": start.isoformat()},
            *(
                {"content": text, "created_at": (start + timedelta(days=1 + i)).isoformat()}
                for i, text in enumerate(newer)
            ),
        ],
    )
    page.goto(f"/w/{ws['slug']}/")
    page.get_by_label("Search").fill("jwt session cookie")
    expect(page).to_have_url(re.compile(r"q=jwt"))
    rows = page.locator("#memory-table tbody tr.mrow")
    expect(rows.first).to_contain_text("We sign a JWT and keep it in a session cookie")
    expect(page.locator("#rank-note")).to_contain_text("Best matches first")
    # Newest first is one choice away and puts the oldest memory last.
    page.get_by_label("Sort").select_option("-created")
    expect(rows.last).to_contain_text("We sign a JWT and keep it in a session cookie")


def test_a_dream_that_proposes_counts_its_proposal_among_those_waiting(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("dream-count-ws", memories=[{"content": "Deploys run on Tuesdays"}])
    pending_proposals(e2e_server, ws["slug"], 2)
    e2e_server.run(
        """
        from datetime import timedelta
        from django.utils import timezone
        from evolution.models import Outcome
        from memories.models import Workspace
        ws = Workspace.objects.get(slug=params["slug"])
        for days in (1, 2):  # the same failure twice in a week: the dream proposes a reflection
            Outcome.objects.create(workspace=ws, task_type="deploy", result="fail", issue="disk full",
                                   solution="prune old images", created_at=timezone.now() - timedelta(days=days))
        """,
        slug=ws["slug"],
    )
    page.goto(f"/w/{ws['slug']}/evolution/engine/")
    expect(page.locator("#nav-count-proposals")).to_have_text("2")
    page.locator("#dream-run").click()
    expect(page.locator(".dream-counts")).to_contain_text("3 proposals waiting")
    expect(page.locator("#nav-count-proposals")).to_have_text("3")
    page.goto(f"/w/{ws['slug']}/evolution/engine/")
    expect(page.get_by_role("link", name="3 proposals wait")).to_be_visible()
