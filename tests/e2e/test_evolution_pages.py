"""The evolution dashboard in a real Chromium against daphne: approve, reject, resolve, preview, apply,
revert, and the memory list following every step."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e

# Fixture types from tests/e2e/conftest.py (conftest modules are not importable under importlib mode).
E2EServer = Any
Workspace = Callable[..., dict[str, Any]]

SOURCES = [{"content": f"Dana said review answer {i} should be shorter", "memory_type": "episodic"} for i in range(3)]
SUMMARY = "Dana wants short review answers"
RULE = "Always check asarUnpack for renderer files"


def make_proposals(e2e_server: E2EServer, slug: str, source_ids: list[str]) -> dict[str, int]:
    """A pending summary of the sources and a pending strategy; returns their ids."""
    result: dict[str, int] = e2e_server.run(
        """
        from evolution import proposals
        from memories.models import Workspace
        ws = Workspace.objects.get(slug=params["slug"])
        summary, _ = proposals.proposal_create(
            workspace=ws, kind="summary", title="Summarize 3 stale review notes",
            rationale="Three episodes about Dana decayed below confidence 0.3; one fact can stand for them.",
            payload={"memory_type": "fact", "subject": "dana", "content": params["summary"], "confidence": 0.7,
                     "summarizes": params["ids"]},
            source_ids=params["ids"], created_by="SummaryEvolver")
        strategy, _ = proposals.proposal_create(
            workspace=ws, kind="strategy", title=params["rule"],
            rationale="The lesson was seen 3 times within 7 days.",
            payload={"key": "k1", "rule": params["rule"], "weight": 0.5, "task_type": "packaging",
                     "evidence": ["sensor:S-0001", "sensor:S-0002", "sensor:S-0003"]},
            dedupe_key="k1")
        result = {"summary": summary.pk, "strategy": strategy.pk}
        """,
        slug=slug,
        ids=source_ids,
        summary=SUMMARY,
        rule=RULE,
    )
    return result


def mark_page(page: Page) -> None:
    page.evaluate("window.__sameDocument = true")


def same_document(page: Page) -> bool:
    return bool(page.evaluate("window.__sameDocument === true"))


def memory_list(page: Page, slug: str) -> Any:
    page.goto(f"/w/{slug}/")
    return page.locator("#memory-table")


def test_approve_and_reject_proposals_and_the_memory_list_follows(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace, screenshot: Any
) -> None:
    ws = e2e_workspace("review-ws", memories=SOURCES)
    ids = make_proposals(e2e_server, ws["slug"], ws["ids"])
    expect(memory_list(page, ws["slug"])).not_to_contain_text(SUMMARY)
    expect(page.get_by_role("navigation", name="Workspace sections")).to_contain_text("Proposals 2")

    page.get_by_role("link", name="Proposals 2").click()
    summary = page.locator(f"#proposal-{ids['summary']}")
    expect(summary).to_contain_text("If you approve")
    expect(summary).to_contain_text(SUMMARY)
    expect(summary.locator("table.diff tbody tr")).to_have_count(3)
    expect(
        summary.locator("ul.sources").get_by_role("link", name="Dana said review answer 0 should be shorter")
    ).to_be_visible()
    screenshot(page, "evolution-proposals")
    mark_page(page)
    summary.get_by_role("button", name="Approve").click()
    expect(summary).to_contain_text("approved by casey")
    expect(page.locator("#messages")).to_contain_text(f"Proposal #{ids['summary']} approved")
    assert same_document(page), "approving must swap the card in place"
    expect(memory_list(page, ws["slug"])).to_contain_text(SUMMARY)

    page.goto(f"/w/{ws['slug']}/evolution/proposals/")
    strategy = page.locator(f"#proposal-{ids['strategy']}")
    strategy.get_by_label("Reason").fill("Too specific to one project")
    strategy.get_by_role("button", name="Reject").click()
    expect(strategy).to_contain_text("rejected by casey")
    expect(strategy).to_contain_text("Too specific to one project")
    expect(memory_list(page, ws["slug"])).not_to_contain_text(RULE)
    page.goto(f"/w/{ws['slug']}/evolution/proposals/")
    expect(page.locator("#proposal-queue")).to_contain_text("Nothing waits for you")


def test_a_second_tab_approving_the_same_proposal_is_told_it_was_already_done(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace("two-tabs-ws", memories=SOURCES)
    ids = make_proposals(e2e_server, ws["slug"], ws["ids"])
    other = page.context.new_page()
    for tab in (page, other):
        tab.goto(f"/w/{ws['slug']}/evolution/proposals/")
    page.locator(f"#proposal-{ids['summary']}").get_by_role("button", name="Approve").click()
    expect(page.locator(f"#proposal-{ids['summary']}")).to_contain_text("approved by casey")
    late = other.locator(f"#proposal-{ids['summary']}")
    late.get_by_role("button", name="Approve").click()
    expect(late.get_by_role("alert")).to_contain_text("was already approved by casey")
    expect(late.get_by_role("alert")).to_contain_text("Nothing was applied twice")
    expect(late.get_by_role("button", name="Approve")).to_have_count(0)
    count = e2e_server.run(
        "from memories.models import Memory\n"
        "result = Memory.objects.filter(workspace__slug=params['slug'], content=params['c']).count()",
        slug=ws["slug"],
        c=SUMMARY,
    )
    assert count == 1


def test_modify_then_approve_and_bulk_reject(page: Page, e2e_server: E2EServer, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace("modify-ws", memories=SOURCES)
    ids = make_proposals(e2e_server, ws["slug"], ws["ids"])
    page.goto(f"/w/{ws['slug']}/evolution/proposals/")
    card = page.locator(f"#proposal-{ids['summary']}")
    card.get_by_role("link", name="Modify then approve…").click()
    card.get_by_label("Summary").fill("Dana wants answers under 100 words")
    card.get_by_role("button", name="Approve my version").click()
    expect(card).to_contain_text("modified by casey")
    strategy = page.locator(f"#proposal-{ids['strategy']}")
    strategy.get_by_label(f"Select proposal #{ids['strategy']}").check()
    page.locator("#bulk-reason").fill("Not now")
    page.get_by_role("button", name="Reject selected").click()
    expect(page.locator("#messages")).to_contain_text(f"Rejected 1: #{ids['strategy']}.")
    expect(page.locator("#proposal-queue")).to_contain_text("Nothing waits for you")
    expect(memory_list(page, ws["slug"])).to_contain_text("Dana wants answers under 100 words")


def test_resolve_a_contradiction_and_revert_it(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace(
        "conflict-ws",
        memories=[
            {"content": "The deploy pipeline is green", "memory_type": "state", "subject": "deploy pipeline"},
            {"content": "The deploy pipeline is red", "memory_type": "state", "subject": "deploy pipeline"},
        ],
    )
    table = memory_list(page, ws["slug"])
    expect(table).to_contain_text("The deploy pipeline is green")
    page.goto(f"/w/{ws['slug']}/evolution/contradictions/")
    cluster = page.locator(".cluster")
    expect(cluster).to_contain_text("2 memories disagree")
    cluster.locator(f"#side-{ws['ids'][1]}").get_by_label("Keep this one").check()
    cluster.get_by_label("Note (optional)").fill("It turned red at noon")
    cluster.get_by_role("button", name="Keep the chosen one, supersede the others").click()
    expect(page.locator("#messages")).to_contain_text("Kept one memory and superseded 1")
    expect(page.locator("#contradictions-body")).to_contain_text("No contradictions")
    expect(page.locator(".curation-history")).to_contain_text("It turned red at noon")

    table = memory_list(page, ws["slug"])
    expect(table).to_contain_text("The deploy pipeline is red")
    expect(table).not_to_contain_text("The deploy pipeline is green")

    page.goto(f"/w/{ws['slug']}/evolution/contradictions/")
    page.locator(".curation-history").get_by_role("button", name="Revert").click()
    expect(page.locator("#messages")).to_contain_text("Reverted record")
    expect(page.locator(".cluster")).to_contain_text("2 memories disagree")
    expect(memory_list(page, ws["slug"])).to_contain_text("The deploy pipeline is green")


def test_preview_apply_and_revert_a_run(page: Page, e2e_workspace: Workspace, screenshot: Any) -> None:
    long_ago = (datetime.now(UTC) - timedelta(days=200)).isoformat()
    ws = e2e_workspace(
        "runs-ws",
        memories=[
            {"content": "Old episode: the 2019 offsite in Lisbon", "memory_type": "episodic", "created_at": long_ago},
            {"content": "Fresh episode: today's standup", "memory_type": "episodic"},
        ],
    )
    old = "Old episode: the 2019 offsite in Lisbon"
    expect(memory_list(page, ws["slug"])).to_contain_text(old)

    page.goto(f"/w/{ws['slug']}/evolution/runs/")
    for box in page.locator("#run-form input[name=evolvers]").all():
        box.uncheck()
    page.get_by_label("ExponentialDecay", exact=True).check()
    page.get_by_role("button", name="Preview (dry run)").click()
    body = page.locator("#run-body")
    expect(body).to_contain_text("What applying would change", timeout=20_000)
    expect(page.locator("#run-counts")).to_contain_text("archive")
    row = body.locator("table.diff tr", has_text="status")
    expect(row.locator("td.before")).to_have_text("active")
    expect(row.locator("td.after")).to_have_text("archived")
    expect(body.get_by_role("link", name=old)).to_be_visible()
    screenshot(page, "evolution-run-preview")
    preview_url = page.url
    expect(memory_list(page, ws["slug"])).to_contain_text(old)

    page.goto(preview_url)
    page.get_by_role("button", name="Apply these evolvers").click()
    expect(page.locator("#run-body")).to_contain_text("What changed", timeout=20_000)
    expect(page.locator("#run-status")).to_have_text("completed")
    applied_url = page.url
    assert applied_url != preview_url
    table = memory_list(page, ws["slug"])
    expect(table).not_to_contain_text(old)
    expect(table).to_contain_text("Fresh episode")

    page.goto(applied_url)
    page.get_by_role("button", name="Revert this run").click()
    expect(page.locator("#messages")).to_contain_text("Reverted the run")
    expect(page.locator("#run-status")).to_have_text("reverted")
    expect(memory_list(page, ws["slug"])).to_contain_text(old)
    page.goto(f"/w/{ws['slug']}/evolution/runs/")
    expect(page.locator("#run-table tbody tr")).to_have_count(2)


def test_run_progress_arrives_over_the_socket(page: Page, e2e_server: E2EServer, e2e_workspace: Workspace) -> None:
    """The body of a running run is replaced by what the socket sends, never by the polling fallback here."""
    ws = e2e_workspace("live-run-ws")
    run_id = e2e_server.run(
        """
        from evolution.models import EvolutionRun
        from memories.models import Workspace
        run = EvolutionRun.objects.create(workspace=Workspace.objects.get(slug=params["slug"]),
            evolvers=["ExponentialDecay", "HebbianCoRetrieval"],
            progress={"evolver": "ExponentialDecay", "index": 0, "done": 0, "total": 2})
        result = str(run.id)
        """,
        slug=ws["slug"],
    )
    polled: list[str] = []

    def refuse(route: Any) -> None:
        polled.append(route.request.url)
        route.abort()

    page.route("**/progress/", refuse)
    page.goto(f"/w/{ws['slug']}/evolution/runs/{run_id}/")
    expect(page.locator("#live-state")).to_have_text("live")
    expect(page.locator("#run-body")).to_contain_text("0 of 2 evolvers done")
    mark_page(page)
    e2e_server.run(
        """
        from django.utils import timezone
        from evolution.models import EvolutionRun
        EvolutionRun.objects.filter(id=params["id"]).update(
            status="completed", finished_at=timezone.now(), progress={"evolver": "", "done": 2, "total": 2},
            summary={"evolvers": [{"name": "ExponentialDecay", "status": "ok", "error": "", "records": 0,
                                   "seconds": 0.1, "stats": {}, "state": {}}], "counts": {"records": 0}})
        """,
        id=run_id,
    )
    # A new connection gets the run body as it is now (the consumer's first message); the runner's
    # progress events go the same way (tests/evolution/test_views.py sends one to the consumer).
    page.evaluate(
        """() => { const old = document.getElementById("run-live"); const fresh = old.cloneNode(true);
        old.remove(); document.body.appendChild(fresh); htmx.process(fresh); }"""
    )
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#run-body")).to_contain_text("No changes: every evolver found nothing to do")
    assert same_document(page) and not polled


def test_the_engine_page_previews_a_dream_and_exports(page: Page, e2e_workspace: Workspace) -> None:
    ws = e2e_workspace(
        "engine-ws", memories=[{"content": "Keep PRs small and reviewed", "memory_type": "strategy", "tier": "hot"}]
    )
    page.goto(f"/w/{ws['slug']}/evolution/engine/")
    expect(page.get_by_role("heading", name="World model")).to_be_visible()
    with page.expect_download() as download:
        page.get_by_role("link", name="Download export (zip)").click()
    assert download.value.suggested_filename == f"memory-evolution-{ws['slug']}.zip"
    page.get_by_role("button", name="Preview the dream").click()
    expect(page.get_by_role("heading", name="Dream preview")).to_be_visible()
    expect(page.locator("#dream-counts")).to_contain_text("1 rules and corrections scored")


def test_approve_and_apply_work_without_javascript(
    browser: Any, e2e_server: E2EServer, logged_in_state: dict[str, Any], e2e_workspace: Workspace
) -> None:
    long_ago = (datetime.now(UTC) - timedelta(days=200)).isoformat()
    old = "Old episode: the 2018 retro"
    ws = e2e_workspace(
        "nojs-evolution-ws", memories=[*SOURCES, {"content": old, "memory_type": "episodic", "created_at": long_ago}]
    )
    ids = make_proposals(e2e_server, ws["slug"], ws["ids"][:3])
    context = browser.new_context(base_url=e2e_server.url, storage_state=logged_in_state, java_script_enabled=False)
    context.set_default_timeout(10_000)
    page = context.new_page()
    try:
        page.goto(f"/w/{ws['slug']}/evolution/proposals/")
        page.locator(f"#proposal-{ids['summary']}").get_by_role("button", name="Approve").click()
        expect(page.locator("#messages")).to_contain_text(f"Proposal #{ids['summary']} approved")
        strategy = page.locator(f"#proposal-{ids['strategy']}")
        strategy.get_by_label("Reason").fill("Not for this team")
        strategy.get_by_role("button", name="Reject").click()
        expect(page.locator("#messages")).to_contain_text(f"Proposal #{ids['strategy']} rejected")
        expect(memory_list(page, ws["slug"])).to_contain_text(SUMMARY)

        page.goto(f"/w/{ws['slug']}/evolution/runs/")
        for box in page.locator("#run-form input[name=evolvers]").all():
            box.uncheck()
        page.get_by_label("ExponentialDecay", exact=True).check()
        page.get_by_role("button", name="Preview (dry run)").click()
        expect(page.locator("#run-body")).to_contain_text("What applying would change", timeout=20_000)
        page.get_by_role("button", name="Apply these evolvers").click()
        expect(page.locator("#run-body")).to_contain_text("What changed", timeout=20_000)
        expect(memory_list(page, ws["slug"])).not_to_contain_text(old)
    finally:
        context.close()


def _contrast_js() -> str:
    """The WCAG contrast checker of the memory browser's tests (test modules are not importable by name)."""
    spec = importlib.util.spec_from_file_location(
        "_memory_browser_e2e", Path(__file__).with_name("test_memory_browser.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(module._CONTRAST_JS)


def test_text_contrast_passes_wcag_aa_on_the_evolution_pages(
    page: Page, e2e_server: E2EServer, e2e_workspace: Workspace
) -> None:
    ws = e2e_workspace(
        "contrast-evolution-ws",
        memories=[
            *SOURCES,
            {"content": "The deploy pipeline is green", "memory_type": "state", "subject": "deploy pipeline"},
            {"content": "The deploy pipeline is red", "memory_type": "state", "subject": "deploy pipeline"},
        ],
    )
    ids = make_proposals(e2e_server, ws["slug"], ws["ids"][:3])
    e2e_server.run(
        """
        from evolution import proposals, services
        from memories.models import Workspace
        ws = Workspace.objects.get(slug=params["slug"])
        proposals.proposal_reject(workspace=ws, proposal_id=params["id"], actor=None, reason="not now")
        services.evolution_run(workspace=ws, actor=None, evolvers=["ExponentialDecay"], dry_run=True)
        """,
        slug=ws["slug"],
        id=ids["strategy"],
    )
    checker = _contrast_js()
    base = f"/w/{ws['slug']}/evolution"
    page.goto(base + "/runs/")
    page.locator("#run-table a").first.click()
    run_url = page.url
    for url in (
        base + "/proposals/",
        base + "/proposals/?status=decided",
        base + "/contradictions/",
        base + "/drift/",
        base + "/runs/",
        run_url,
        base + "/engine/",
    ):
        page.goto(url)
        failures = page.evaluate(checker)
        assert failures == [], f"{url}: {failures}"
