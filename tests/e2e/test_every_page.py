"""Every page of the site, found by walking the URL resolver, in Chromium at a desktop and a phone size.

PAGES names, for each route that answers a browser's GET with a page, the URL to open (the demo story plus a
proposal, an applied run and a stored dream, so that no page is its empty state); NOT_PAGES says why any other
route is none (a POST, a fragment, a file). A route in neither fails the first test with where to add it, so a
new page cannot skip the phone and select checks. The REST API and Django's admin are left out: they are no
pages of this site's templates.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import Page

pytestmark = pytest.mark.e2e

E2EServer = Any
Credentials = Any

WS = "every-page"

PAGES: dict[str, tuple[str, ...]] = {
    "memories:home": ("/",),
    "login": ("/accounts/login/",),
    "api-docs": ("/api/docs/",),
    "memories:list": ("/w/{ws}/", "/w/{ws}/?q=jwt+session+cookie", "/w/{ws}/?type=decision&ordering=-activation"),
    "memories:create": ("/w/{ws}/memories/new/",),
    "memories:detail": ("/w/{ws}/memories/{memory_id}/", "/w/{ws}/memories/{changed_id}/"),
    # Without JavaScript, Edit is the detail page with the form open (the GET redirects there).
    "memories:edit": ("/w/{ws}/memories/{memory_id}/edit/",),
    "surfacing:inspector": ("/w/{ws}/inspector/", "/w/{ws}/inspector/?q=why+did+we+pick+JWT&compare=on"),
    "evolution:proposals": ("/w/{ws}/evolution/proposals/", "/w/{ws}/evolution/proposals/?status=decided"),
    "evolution:proposal": ("/w/{ws}/evolution/proposals/{proposal_id}/",),
    # Without JavaScript, Modify is the proposal's page with the form open (the GET redirects there).
    "evolution:proposal-modify": ("/w/{ws}/evolution/proposals/{proposal_id}/modify/",),
    "evolution:contradictions": ("/w/{ws}/evolution/contradictions/",),
    "evolution:drift": ("/w/{ws}/evolution/drift/",),
    "evolution:runs": ("/w/{ws}/evolution/runs/",),
    "evolution:run": ("/w/{ws}/evolution/runs/{run_id}/",),
    "evolution:engine": ("/w/{ws}/evolution/engine/",),
    "evolution:dream-report": ("/w/{ws}/evolution/engine/dream/{report_id}/",),
}

_POST = "a form's POST (GET is refused or redirects to a page above)"
_FRAGMENT = "an htmx fragment inside a page above"
NOT_PAGES: dict[str, str] = {
    "healthz": "a JSON health check",
    "schema": "the OpenAPI schema (YAML)",
    "logout": _POST,
    "memories:bulk": _POST,
    "memories:activation": _FRAGMENT,
    "memories:count": _FRAGMENT,
    "memories:content": _FRAGMENT,
    "memories:archive": _POST,
    "memories:restore": _POST,
    "memories:pin": _POST,
    "memories:rehydrate": _POST,
    "memories:delete": _POST,
    "memories:graph": "the graph view's JSON",
    "memories:revert": _POST,
    "memories:token": _POST,
    "surfacing:inspector-save": _POST,
    "evolution:counts": _FRAGMENT,
    "evolution:proposals-bulk": _POST,
    "evolution:proposal-approve": _POST,
    "evolution:proposal-reject": _POST,
    "evolution:contradiction-resolve": _POST,
    "evolution:contradiction-edit": _POST,
    "evolution:drift-acknowledge": _POST,
    "evolution:run-start": _POST,
    "evolution:run-schedule": _POST,
    "evolution:run-progress": _FRAGMENT,
    "evolution:run-apply": _POST,
    "evolution:run-cancel": _POST,
    "evolution:run-revert": _POST,
    "evolution:record-revert": _POST,
    "evolution:engine-evolve": _POST,
    "evolution:engine-dream": _POST,
    "evolution:engine-export": "the export zip",
    "evolution:engine-import": _POST,
}

_ROUTES = """
import re
from django.urls import URLPattern, URLResolver, get_resolver

def walk(patterns, prefix="", namespace=()):
    for entry in patterns:
        if isinstance(entry, URLResolver):
            inner = (*namespace, entry.namespace) if entry.namespace else namespace
            yield from walk(entry.url_patterns, prefix + str(entry.pattern), inner)
        elif isinstance(entry, URLPattern):
            route = prefix + str(entry.pattern)
            yield ":".join((*namespace, entry.name or f"<unnamed {route}>")), route

result = {name: route for name, route in walk(get_resolver().url_patterns)
          if not name.startswith(("api:", "admin:"))}
"""


@pytest.fixture(scope="module")
def site(e2e_server: E2EServer, e2e_user: Credentials) -> dict[str, Any]:
    """The site's page routes (name -> route) and the ids that fill them, in a workspace with a bit of everything."""
    e2e_server.manage("load_demo", "--slug", WS, "--username", e2e_user.username)
    e2e_server.manage("evolve", "--workspace", WS, "--evolver", "ExponentialDecay", "--apply")
    e2e_server.manage("dream", "--workspace", WS)
    ids = e2e_server.run(
        """
        from evolution import proposals
        from evolution.models import DreamReport, EvolutionRun
        from history.models import EvolutionRecord, RecordLink
        from memories.models import Memory, Workspace
        ws = Workspace.objects.get(slug=params["slug"])
        proposal, _ = proposals.proposal_create(
            workspace=ws, kind="strategy", title="Check the token expiry before a release",
            rationale="Seen 3 times in 7 days.", dedupe_key="every-page",
            payload={"key": "every-page", "rule": "Check the token expiry before a release", "weight": 0.5,
                     "task_type": "deploy"})
        record = EvolutionRecord.objects.filter(workspace=ws).order_by("-pk").first()
        changed = RecordLink.objects.filter(record__workspace=ws).values_list("memory_id", flat=True).first()
        decision = Memory.objects.filter(workspace=ws, content__startswith="Decision").first()
        result = {
            "ws": ws.slug,
            "memory_id": str(decision.id),
            "changed_id": str(changed or decision.id),
            "proposal_id": proposal.pk,
            "run_id": str(EvolutionRun.objects.filter(workspace=ws).order_by("-started_at").first().id),
            "report_id": DreamReport.objects.filter(workspace=ws).order_by("-pk").first().pk,
            "record_id": record.pk if record else 1,
        }
        """,
        slug=WS,
    )
    routes: dict[str, str] = e2e_server.run(_ROUTES)
    return {"ids": ids, "routes": routes}


def page_urls(site: dict[str, Any]) -> list[str]:
    return [url.format(**site["ids"]) for urls in PAGES.values() for url in urls]


def test_every_page_route_is_listed_with_the_url_to_check(page: Page, site: dict[str, Any]) -> None:
    """A new route must be named in PAGES (checked below) or NOT_PAGES (with why); what NOT_PAGES says is true."""
    routes: dict[str, str] = site["routes"]
    unknown = sorted(set(routes) - set(PAGES) - set(NOT_PAGES))
    assert unknown == [], (
        f"routes the page checks do not know: {unknown}; add each to PAGES in tests/e2e/test_every_page.py "
        "with a URL that shows it with content, or to NOT_PAGES saying why it is no page"
    )
    gone = sorted((set(PAGES) | set(NOT_PAGES)) - set(routes))
    assert gone == [], f"listed in tests/e2e/test_every_page.py but no longer routes: {gone}"
    # A route said to be no page answers a GET with no page of the site (no layout, or a refusal or redirect).
    for name, why in NOT_PAGES.items():
        url = "/" + re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(site["ids"][m.group(1)]), routes[name])
        response = page.request.get(url, max_redirects=0)
        is_page = response.status == 200 and '<header class="topbar"' in response.text()
        assert not is_page, f"{name} ({url}) is listed as {why!r} but answers GET with a whole page"


def test_every_page_fits_a_phone_without_horizontal_scrolling(page: Page, site: dict[str, Any]) -> None:
    page.set_viewport_size({"width": 390, "height": 844})
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    overflowing, tall = [], []
    for url in page_urls(site):
        response = page.goto(url)
        assert response is not None and response.status == 200, f"{url} answered {response and response.status}"
        page.wait_for_load_state("load")
        width = int(page.evaluate("document.documentElement.scrollWidth"))
        if width > 390:
            culprits = page.evaluate(
                """() => [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391)
                    .slice(-3).map(e => e.tagName + '.' + e.className)"""
            )
            overflowing.append(f"{url}: {width} px ({culprits})")
        # The header and the evolution sub-nav leave most of the first screen to the page (they took ~300 and
        # ~460 px; now 74 and 157).
        chrome = page.evaluate(
            """() => Math.max(...[...document.querySelectorAll('header.topbar, nav.subnav')]
                .map(e => e.getBoundingClientRect().bottom + window.scrollY), 0)"""
        )
        header = page.evaluate("document.querySelector('header.topbar')?.getBoundingClientRect().height ?? 0")
        if chrome > 200 or header > 100:
            tall.append(f"{url}: {chrome:.0f} px, the header {header:.0f} px")
    assert overflowing == [], "pages wider than a 390 px phone: " + "; ".join(overflowing)
    assert tall == [], "the header (100 px) or header and sub-nav (200 px) take more of a phone: " + "; ".join(tall)
    assert errors == [], f"console errors: {errors}"


# For every option of every visible select: the width the select needs to show that option whole (a copy of
# the select, with the same classes and place in the document, holding only that option at its natural width)
# against the width it has. Chromium sizes an auto-width select to its option text, padding and arrow.
_CUT_OPTIONS_JS = """
() => {
  const cut = [];
  for (const select of document.querySelectorAll('select')) {
    const box = select.getBoundingClientRect();
    if (box.width === 0 || getComputedStyle(select).visibility === 'hidden' || select.multiple) continue;
    for (const option of select.options) {
      const probe = select.cloneNode(false);
      probe.removeAttribute('id');
      probe.removeAttribute('name');
      probe.style.cssText = 'width:auto;min-width:0;max-width:none;position:absolute;visibility:hidden;';
      probe.append(new Option(option.text));
      select.parentElement.append(probe);
      const needed = probe.getBoundingClientRect().width;
      probe.remove();
      if (needed > box.width + 0.5) {
        const label = select.labels && select.labels[0] ? select.labels[0].textContent.trim() : select.name;
        cut.push(`${label || select.id}: "${option.text}" needs ${needed.toFixed(0)} px, has ${box.width.toFixed(0)}`
          + (option.selected ? ' (selected)' : ''));
      }
    }
  }
  return cut;
}
"""


# 1024x768 too: the inspector's fixed columns cut an option between the desktop and the phone sizes.
@pytest.mark.parametrize("width,height", [(1440, 900), (1024, 768), (390, 844)])
def test_no_select_cuts_its_option_text(page: Page, site: dict[str, Any], width: int, height: int) -> None:
    """Every option of every select reads whole when chosen ("Auto (the router d" did not), at both sizes."""
    page.set_viewport_size({"width": width, "height": height})
    cut, checked = [], 0
    for url in page_urls(site):
        page.goto(url)
        page.wait_for_load_state("load")
        checked += page.locator("select").count()
        cut += [f"{url} {c}" for c in page.evaluate(_CUT_OPTIONS_JS)]
    assert checked > 10, f"only {checked} selects on the site's pages: is the check looking at the right pages?"
    assert cut == [], f"selects too narrow for their options at {width}x{height}:\n" + "\n".join(cut)
