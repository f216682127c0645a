"""The query inspector pages: roles, dry reads, counted retrievals, what-if, saving, partial swaps."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from django.test import Client

from history.models import Action, EvolutionRecord
from memories import services as memory_services
from memories.models import RetrievalEvent, Role, Workspace
from memories.signalbus import LocalSignalBus
from surfacing.inspector import KNOBS as KNOB_LIST
from surfacing.settings import DEFAULTS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("stores")]

PAGE = "/w/demo/inspector/"
SAVE = "/w/demo/inspector/settings/"
QUERY = "Why did we pick JWT?"
HTMX = {"HX-Request": "true", "HX-Target": "inspector-results"}
HTMX_SAVE = {"HX-Request": "true", "HX-Target": "whatif-save"}
# What the page's form always sends besides the query: the knobs at their defaults.
KNOBS = {
    "whatif": "true",
    **{
        knob.key: ("true" if getattr(DEFAULTS, knob.key) else "false")
        if knob.kind == "bool"
        else f"{getattr(DEFAULTS, knob.key):g}"
        for knob in KNOB_LIST
    },
}


@pytest.fixture
def as_role(demo: Workspace, make_user: Callable[..., Any]) -> Callable[[str], Client]:
    def make(role: str) -> Client:
        person = make_user(f"{role}-person")
        memory_services.membership_set(workspace=demo, user=person, role=role)
        client = Client()
        client.force_login(person)
        return client

    return make


@pytest.fixture
def owner(as_role: Callable[[str], Client]) -> Client:
    return as_role(Role.OWNER)


def table_in(html: str, table: str) -> str:
    return html.split(f'id="{table}"', 1)[1].split("</table>", 1)[0]


def rows_in(html: str, table: str = "ranked") -> list[str]:
    return re.findall(r'<tr class="[di]row"[^>]*data-id="([0-9a-f-]{36})"', table_in(html, table))


def row_in(html: str, table: str, memory_id: str) -> str:
    return table_in(html, table).split(f'data-id="{memory_id}"', 1)[1].split("</tr>", 1)[0]


def reload(workspace: Workspace) -> Workspace:
    return Workspace.objects.get(pk=workspace.pk)


# -- access -----------------------------------------------------------------------------------------


def test_anonymous_visitor_is_sent_to_the_login_page(demo: Workspace) -> None:
    response = Client().get(PAGE)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_non_member_gets_404_on_the_page_and_the_save_endpoint(demo: Workspace, make_user: Callable[..., Any]) -> None:
    client = Client()
    client.force_login(make_user("eve"))
    page = client.get(PAGE, {"q": QUERY})
    assert page.status_code == 404
    assert b"Project Atlas" not in page.content
    assert client.post(SAVE, {"centrality_weight": "1.5"}).status_code == 404
    assert reload(demo).surfacing_settings == {}


def test_viewer_can_inspect_and_try_settings_but_sees_no_save_button(as_role: Callable[[str], Client]) -> None:
    viewer = as_role(Role.VIEWER)
    html = viewer.get(PAGE, {"q": QUERY, "mode": "router", **KNOBS, "centrality_weight": "1.5"}).content.decode()
    assert rows_in(html)
    assert f"Centrality weight: {DEFAULTS.centrality_weight:g} → <strong>1.5</strong>" in html
    assert 'id="save-settings"' not in html
    assert 'id="save-viewer-note"' in html


def test_viewer_gets_403_on_save_and_nothing_is_stored(demo: Workspace, as_role: Callable[[str], Client]) -> None:
    viewer = as_role(Role.VIEWER)
    assert viewer.post(SAVE, {"centrality_weight": "1.5"}).status_code == 403
    partial = viewer.post(SAVE, {"centrality_weight": "1.5"}, headers=HTMX_SAVE)
    assert partial.status_code == 403
    assert 'id="whatif-save"' in partial.content.decode()
    assert "only editors and owners" in partial.content.decode()
    assert reload(demo).surfacing_settings == {}


# -- running a query --------------------------------------------------------------------------------


def test_page_without_a_query_invites_one(owner: Client) -> None:
    html = owner.get(PAGE).content.decode()
    assert 'id="inspector-empty"' in html
    assert "dry read" in html
    assert 'hx-get="/w/demo/inspector/"' in html


def test_router_query_shows_strategy_bars_provenance_and_declined(owner: Client) -> None:
    response = owner.get(PAGE, {"q": QUERY, "mode": "router", "k": "8"})
    html = response.content.decode()
    assert response.status_code == 200
    assert "<code>deep:multi-hop</code>" in html
    assert "keyword:why" in html
    assert len(rows_in(html)) == 8
    assert html.count('class="sbar"') >= 8
    # the anchor: relevance 1 times its priors, + anchor 1
    assert re.search(r'aria-label="Score \d+\.\d{4} \(calibrated profile\) = relevance 1\.000 ', html)
    assert 'class="prov-kind pk-context"' in html and "at hop 1" in html
    assert re.search(r'<a href="/w/demo/memories/[0-9a-f-]{36}/" title="[^"]+">seed: ', html)
    assert len(rows_in(html, "declined-table")) > 0
    assert "low activation after decay" in html or "recency (old)" in html or "low relevance" in html


def test_a_query_is_a_dry_read_unless_counted(owner: Client, demo: Workspace, fresh_signal_bus: LocalSignalBus) -> None:
    owner.get(PAGE, {"q": QUERY, "mode": "router"})
    fresh_signal_bus.flush()
    assert not RetrievalEvent.objects.filter(workspace=demo).exists()


def test_count_as_retrieval_on_a_plain_get_asks_for_a_post_instead(
    owner: Client, demo: Workspace, fresh_signal_bus: LocalSignalBus
) -> None:
    html = owner.get(PAGE, {"q": QUERY, "record": "true"}).content.decode()
    fresh_signal_bus.flush()
    assert not RetrievalEvent.objects.filter(workspace=demo).exists()
    assert 'id="record-confirm"' in html
    assert 'name="record" value="true"' in html

    response = owner.post(PAGE, {"q": QUERY, "record": "true", "k": "5"})
    assert response.status_code == 302
    assert "record" not in response["Location"]
    assert parse_qs(urlparse(response["Location"]).query)["q"] == [QUERY]
    fresh_signal_bus.flush()
    assert RetrievalEvent.objects.filter(workspace=demo).count() == 5


def test_count_as_retrieval_from_htmx_records_once_and_clears_the_box(
    owner: Client, demo: Workspace, fresh_signal_bus: LocalSignalBus
) -> None:
    response = owner.get(PAGE, {"q": QUERY, "record": "true", "k": "4", **KNOBS}, headers=HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inspector-results"')
    assert "counted as a retrieval" in html
    assert 'id="record-toggle" hx-swap-oob="true"' in html
    assert 'id="id_record" value="true" checked' not in html
    assert "record=" not in response["HX-Replace-Url"]
    fresh_signal_bus.flush()
    assert RetrievalEvent.objects.filter(workspace=demo).count() == 4


def test_history_restore_never_counts_a_retrieval(
    owner: Client, demo: Workspace, fresh_signal_bus: LocalSignalBus
) -> None:
    owner.get(
        PAGE, {"q": QUERY, "record": "true"}, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )
    fresh_signal_bus.flush()
    assert not RetrievalEvent.objects.filter(workspace=demo).exists()


def test_htmx_request_gets_the_results_partial_and_a_clean_url(owner: Client) -> None:
    response = owner.get(PAGE, {"q": QUERY, **KNOBS}, headers=HTMX)
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="inspector-results"')
    assert "<html" not in html and 'id="inspector-form"' not in html
    assert response["HX-Replace-Url"].startswith(PAGE + "?")
    assert f"recency_time_constant_hours={DEFAULTS.recency_time_constant_hours:g}" in response["HX-Replace-Url"]


def test_what_if_reranks_without_saving(owner: Client, demo: Workspace) -> None:
    saved = rows_in(owner.get(PAGE, {"q": QUERY, "mode": "router", "k": "10", **KNOBS}).content.decode())
    html = owner.get(PAGE, {"q": QUERY, "mode": "router", "k": "10", **KNOBS, "recency_weight": "2"}).content.decode()
    assert rows_in(html) != saved
    assert f"Recency weight: {DEFAULTS.recency_weight:g} → <strong>2</strong>" in html
    assert 'name="recency_weight" value="2"' in html
    assert reload(demo).surfacing_settings == {}


def test_unticked_knob_checkbox_turns_the_setting_off(owner: Client) -> None:
    params = {**KNOBS}
    del params["ppr_enabled"]
    html = owner.get(PAGE, {"q": QUERY, "mode": "router", **params}).content.decode()
    assert "Personalized PageRank: on → <strong>off</strong>" in html
    assert "cen 0.00" in html and "cen 0.1" not in html


def test_side_by_side_marks_moves_new_and_dropped(owner: Client) -> None:
    html = owner.get(PAGE, {"q": QUERY, "compare": "true", "k": "5"}).content.decode()
    legacy, router = rows_in(html, "ranked-legacy"), rows_in(html, "ranked-router")
    assert len(legacy) == len(router) == 5
    for rank, mid in enumerate(router, start=1):
        row = row_in(html, "ranked-router", mid)
        if mid not in legacy:
            assert "chg-new" in row
        elif legacy.index(mid) + 1 > rank:
            assert "chg-up" in row and f"up {legacy.index(mid) + 1 - rank} from #{legacy.index(mid) + 1}" in row
        elif legacy.index(mid) + 1 < rank:
            assert "chg-down" in row
    dropped = [mid for mid in legacy if mid not in router]
    assert dropped
    for mid in dropped:
        assert "chg-dropped" in row_in(html, "ranked-legacy", mid)


def test_side_by_side_with_an_explicit_router_strategy_runs_legacy_on_fast_recency(owner: Client) -> None:
    html = owner.get(PAGE, {"q": QUERY, "compare": "true", "mode": "router", "strategy": "deep:multi-hop"}).content
    text = html.decode()
    assert "Legacy mode always runs fast:recency" in text
    assert rows_in(text, "ranked-legacy") and rows_in(text, "ranked-router")


def test_bad_input_is_a_400_that_names_the_field(owner: Client) -> None:
    response = owner.get(PAGE, {"q": QUERY, "k": "500"})
    assert response.status_code == 400
    assert 'class="f-field f-k invalid"' in response.content.decode()
    conflict = owner.get(PAGE, {"q": QUERY, "mode": "legacy", "strategy": "deep:multi-hop"})
    assert conflict.status_code == 400
    assert "legacy mode always runs fast:recency" in conflict.content.decode()
    setting = owner.get(PAGE, {"q": QUERY, **KNOBS, "centrality_weight": "99"})
    assert setting.status_code == 400
    assert "surfacing.centrality_weight: must be within [0.0, 10.0]" in setting.content.decode()


# -- saving -----------------------------------------------------------------------------------------


def test_editor_saves_what_if_settings_and_returns_to_the_inspection(
    demo: Workspace, as_role: Callable[[str], Client]
) -> None:
    editor = as_role(Role.EDITOR)
    back = f"{PAGE}?q=JWT"
    response = editor.post(SAVE, {"centrality_weight": "1.5", "ppr_enabled": "false", "mode": "router", "next": back})
    assert response.status_code == 302
    assert response["Location"] == back
    assert reload(demo).surfacing_settings == {"centrality_weight": 1.5, "ppr_enabled": False, "mode": "router"}
    assert EvolutionRecord.objects.filter(workspace=demo, action=Action.CONFIGURE).count() == 1
    html = editor.get(back).content.decode()
    assert "Saved as the workspace&#x27;s settings" in html
    assert "Workspace default (router)" in html


def test_htmx_save_answers_with_the_save_box(demo: Workspace, owner: Client) -> None:
    response = owner.post(SAVE, {"recency_time_constant_hours": "8760"}, headers=HTMX_SAVE)
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<div id="whatif-save"')
    assert f"Recency time constant {DEFAULTS.recency_time_constant_hours:g} h → 8760 h" in html
    assert 'id="knob-recency_time_constant_hours" hx-swap-oob="true"' in html
    assert 'id="knob-ppr_enabled"' not in html
    assert reload(demo).surfacing_settings == {"recency_time_constant_hours": 8760.0}


def test_save_refuses_an_invalid_value_and_stores_nothing(demo: Workspace, owner: Client) -> None:
    response = owner.post(SAVE, {"spread_depth": "9"}, headers=HTMX_SAVE)
    assert response.status_code == 400
    assert "surfacing.spread_depth" in response.content.decode()
    assert reload(demo).surfacing_settings == {}


def test_save_never_redirects_off_site(owner: Client) -> None:
    response = owner.post(SAVE, {"anchor_boost": "2", "next": "https://evil.example/"})
    assert response["Location"] == PAGE


def test_save_with_nothing_to_change_says_so(demo: Workspace, owner: Client) -> None:
    response = owner.post(SAVE, {}, headers=HTMX_SAVE)
    assert "Nothing to save" in response.content.decode()
    assert not EvolutionRecord.objects.filter(workspace=demo, action=Action.CONFIGURE).exists()


# -- query counts -----------------------------------------------------------------------------------


def test_query_counts_are_pinned(owner: Client, django_assert_max_num_queries: Any) -> None:
    """Session, user, membership, the shared navigation (``nav``: the workspace list and the section
    counts other apps add); the service's reads (the index's newest row, search, candidate rows with the
    anchors, graph generation, context rows, details, drift); one more set per compared mode. Nothing per
    row: k=50 costs what k=20 does."""
    nav = 3
    owner.get(PAGE, {"q": QUERY, "mode": "router"})  # warm the graph snapshot, as a running server has it
    with django_assert_max_num_queries(3 + nav):
        owner.get(PAGE)
    with django_assert_max_num_queries(9 + nav):
        owner.get(PAGE, {"q": QUERY, "mode": "router", **KNOBS}, headers=HTMX)
    with django_assert_max_num_queries(9 + nav):
        owner.get(PAGE, {"q": QUERY, "mode": "router", "k": "50", **KNOBS}, headers=HTMX)
    # legacy mode reads the context of its hits as well: its generation check and context rows; each mode
    # checks the index once
    with django_assert_max_num_queries(18 + nav):
        owner.get(PAGE, {"q": QUERY, "compare": "true", **KNOBS})
    with django_assert_max_num_queries(8 + nav):
        owner.post(SAVE, {"anchor_boost": "2"}, headers=HTMX_SAVE)
