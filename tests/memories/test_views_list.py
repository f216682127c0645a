"""The memory list page: search, filters, sort, keyset pages, partial swaps, empty states, roles."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone

from history.models import Action, EvolutionRecord
from memories.models import ApiToken, Memory, Role, Status, Workspace

# Also run on PostgreSQL by `make test`: the pages drive the bulk, revert and rehydrate services.
pytestmark = [pytest.mark.django_db, pytest.mark.api]

LIST = "/w/acme/"


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def rows_in(html: str) -> list[str]:
    return re.findall(r'<tr id="row-([0-9a-f-]{36})"', html)


def test_anonymous_visitor_is_sent_to_the_login_page(workspace: Workspace) -> None:
    response = Client().get(LIST)
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_login_page_renders_and_logs_in(user: Any, workspace: Workspace) -> None:
    client = Client()
    assert 'for="id_username"' in client.get("/accounts/login/").content.decode()
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice"})
    assert response.status_code == 302
    # One workspace: home goes straight to it.
    assert client.get("/").headers["Location"] == LIST


def test_logout_is_a_post_that_ends_the_session(browser: Client, workspace: Workspace) -> None:
    assert browser.post("/accounts/logout/").status_code == 302
    assert browser.get(LIST).status_code == 302


def test_non_member_gets_404_without_a_hint(workspace: Workspace, make_user: Callable[..., Any]) -> None:
    client = Client()
    client.force_login(make_user("eve"))
    response = client.get(LIST)
    assert response.status_code == 404
    assert b"Acme" not in response.content


def test_list_shows_memories_with_live_activation_bars(browser: Client, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("We picked JWT for the API", memory_type="decision")
    html = browser.get(LIST).content.decode()
    assert "We picked JWT for the API" in html
    assert f'id="act-{memory.id}"' in html
    assert 'ws-connect="/ws/workspaces/acme/activation/"' in html
    assert f"/w/acme/memories/activation/?id={memory.id}" in html


def test_search_matches_words_of_the_content(browser: Client, make_memory: Callable[..., Memory]) -> None:
    jwt = make_memory("We picked JWT access tokens")
    make_memory("The load balancer drops sticky sessions")
    ids = rows_in(browser.get(LIST, {"q": "tokens"}).content.decode())
    assert ids == [str(jwt.id)]


def test_filters_combine_type_pinned_origin_and_tag(browser: Client, make_memory: Callable[..., Memory]) -> None:
    wanted = make_memory("pinned fact", memory_type="fact", pinned=True, tags=("auth",), origin="import:wiki")
    make_memory("unpinned fact", memory_type="fact", tags=("auth",), origin="import:wiki")
    make_memory("pinned decision", memory_type="decision", pinned=True, tags=("auth",))
    make_memory("pinned fact other tag", memory_type="fact", pinned=True, tags=("ops",), origin="import:wiki")
    params = {"type": "fact", "pinned": "true", "origin": "import:", "tag": "auth"}
    assert rows_in(browser.get(LIST, params).content.decode()) == [str(wanted.id)]


def test_archived_memories_are_hidden_until_asked_for(browser: Client, make_memory: Callable[..., Memory]) -> None:
    make_memory("active one")
    archived = make_memory("archived one", status=Status.ARCHIVED)
    assert str(archived.id) not in rows_in(browser.get(LIST).content.decode())
    assert str(archived.id) in rows_in(browser.get(LIST, {"status": "any"}).content.decode())
    assert rows_in(browser.get(LIST, {"status": "archived"}).content.decode()) == [str(archived.id)]


def test_compression_tier_and_conflict_filters(browser: Client, make_memory: Callable[..., Memory]) -> None:
    compressed = make_memory("compressed")
    Memory.objects.filter(pk=compressed.pk).update(compression_tier=1)
    conflicted = make_memory("conflicted")
    Memory.objects.filter(pk=conflicted.pk).update(conflicts_with=[str(compressed.id)])
    assert rows_in(browser.get(LIST, {"compression_tier": "1"}).content.decode()) == [str(compressed.id)]
    assert rows_in(browser.get(LIST, {"has_conflicts": "true"}).content.decode()) == [str(conflicted.id)]


def test_date_range_includes_the_whole_to_day(browser: Client, make_memory: Callable[..., Memory]) -> None:
    day = datetime(2026, 3, 10, tzinfo=UTC)
    make_memory("before", created_at=day - timedelta(hours=1))
    morning = make_memory("morning", created_at=day + timedelta(hours=1))
    evening = make_memory("evening", created_at=day + timedelta(hours=23, minutes=59))
    make_memory("after", created_at=day + timedelta(days=1, minutes=1))
    html = browser.get(LIST, {"created_after": "2026-03-10", "created_before": "2026-03-10"}).content.decode()
    assert set(rows_in(html)) == {str(morning.id), str(evening.id)}


def test_sort_by_activation_now_puts_the_warmest_first(browser: Client, make_memory: Callable[..., Memory]) -> None:
    now = timezone.now()
    cold = make_memory("boosted long ago", created_at=now - timedelta(days=200))
    warm = make_memory("boosted just now", created_at=now - timedelta(days=300))
    from memories.algorithms.sortkey import activation_sort_key

    Memory.objects.filter(pk=warm.pk).update(
        activation_last_boost_at=now, activation_sort_key=activation_sort_key(0.5, now, 720.0)
    )
    assert rows_in(browser.get(LIST, {"ordering": "-activation"}).content.decode()) == [str(warm.id), str(cold.id)]
    assert rows_in(browser.get(LIST, {"ordering": "activation"}).content.decode()) == [str(cold.id), str(warm.id)]


def test_keyset_pages_walk_every_memory_once_and_keep_filters(
    browser: Client, make_memory: Callable[..., Memory]
) -> None:
    base = timezone.now() - timedelta(days=10)
    made = {str(make_memory(f"note {i}", created_at=base + timedelta(minutes=i)).id) for i in range(120)}
    make_memory("a decision that the type filter drops", memory_type="decision")
    seen: list[str] = []
    url = LIST + "?type=semantic"
    pages = 0
    while url:
        html = browser.get(url).content.decode()
        seen.extend(rows_in(html))
        pages += 1
        found = re.search(r'id="next-page" rel="next" href="([^"]+)"', html)
        url = found.group(1).replace("&amp;", "&") if found else ""
        if url:
            assert "type=semantic" in url
    assert pages == 3
    assert len(seen) == len(set(seen)) == 120
    assert set(seen) == made


def test_htmx_request_for_the_results_gets_only_that_partial(
    browser: Client, make_memory: Callable[..., Memory]
) -> None:
    make_memory("partial please")
    response = browser.get(LIST, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="memory-results")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="memory-results"')
    assert "<html" not in html
    assert "partial please" in html


def test_htmx_history_restore_gets_the_full_page(browser: Client, make_memory: Callable[..., Memory]) -> None:
    make_memory("full please")
    response = browser.get(
        LIST, HTTP_HX_REQUEST="true", HTTP_HX_TARGET="memory-results", HTTP_HX_HISTORY_RESTORE_REQUEST="true"
    )
    assert "<html" in response.content.decode()


def test_invalid_filter_is_a_400_that_names_the_field(browser: Client, workspace: Workspace) -> None:
    response = browser.get(LIST, {"type": "nonsense"})
    assert response.status_code == 400
    html = response.content.decode()
    assert "Some filters are not valid" in html
    assert 'id="id_type-error"' in html


def test_bad_cursor_is_a_400_with_the_reason(browser: Client, workspace: Workspace) -> None:
    response = browser.get(LIST, {"cursor": "garbage"})
    assert response.status_code == 400
    assert "cursor" in response.content.decode()


def test_list_query_count_does_not_grow_with_rows(
    browser: Client, make_memory: Callable[..., Memory], django_assert_num_queries: Any
) -> None:
    for i in range(3):
        make_memory(f"few {i}", tags=("t",))
    # session, user, membership+workspace, navigation workspaces, pending proposals, the page of memories.
    with django_assert_num_queries(6):
        browser.get(LIST)
    for i in range(60):
        make_memory(f"many {i}", tags=("t",))
    with django_assert_num_queries(6):
        assert len(rows_in(browser.get(LIST).content.decode())) == 50


def test_the_recently_accessed_list_pages_with_one_query_of_rows_and_one_more_where_the_never_accessed_begin(
    browser: Client, workspace: Workspace, user: Any, django_assert_num_queries: Any
) -> None:
    from memories import services
    from memories.inputs import MemoryInput

    seen = services.memories_create(
        workspace=workspace, actor=user, items=[MemoryInput(content=f"seen {i}") for i in range(120)]
    )
    base = timezone.now() - timedelta(days=1)
    for i, memory in enumerate(seen):
        Memory.objects.filter(id=memory.id).update(last_accessed=base + timedelta(minutes=i))
    never = services.memories_create(
        workspace=workspace, actor=user, items=[MemoryInput(content=f"never {i}") for i in range(30)]
    )

    def next_cursor(html: str) -> str:
        """The cursor of the "next page" link (the page's own cursor appears in other links too)."""
        found = re.search(r"cursor=([A-Za-z0-9_-]+)&(?:amp;)?page=\d+", html)
        assert found is not None
        return found.group(1)

    first = browser.get(LIST, {"ordering": "-accessed"}).content.decode()
    # As on the first page: session, user, membership+workspace, navigation, pending proposals, the rows.
    with django_assert_num_queries(6):
        second = browser.get(LIST, {"ordering": "-accessed", "cursor": next_cursor(first)}).content.decode()
    assert rows_in(second) == [str(m.id) for m in reversed(seen[20:70])]
    # The last 20 accessed memories, then the never-accessed ones (newest id first) from one more query.
    with django_assert_num_queries(7):
        third = browser.get(LIST, {"ordering": "-accessed", "cursor": next_cursor(second)}).content.decode()
    tail = sorted((str(m.id) for m in never), reverse=True)
    assert rows_in(third) == [str(m.id) for m in reversed(seen[:20])] + tail


def test_new_workspace_teaches_the_curl_line_with_a_token_created_on_demand_and_shown_once(
    browser: Client, workspace: Workspace, user: Any
) -> None:
    html = browser.get(LIST).content.decode()
    assert "This workspace has no memories yet" in html
    assert "Create my API token" in html
    response = browser.post("/w/acme/token/")
    assert response.status_code == 302
    html = browser.get(LIST).content.decode()
    shown = re.search(r"Authorization: Token ([0-9a-f]{40})", html)
    assert shown, html
    key = shown.group(1)
    assert "http://testserver/api/v1/workspaces/acme/memories/" in html
    assert not ApiToken.objects.filter(digest=key).exists() and ApiToken.objects.get(user=user).prefix == key[:8]
    api = Client(HTTP_AUTHORIZATION=f"Token {key}")
    assert api.get("/api/v1/workspaces/").status_code == 200
    # Shown once: the next render offers a new token instead of the old key.
    html = browser.get(LIST).content.decode()
    assert key not in html and "Create my API token" in html
    assert EvolutionRecord.objects.filter(workspace=workspace, action=Action.GRANT, evolver="tokens").count() == 1
    browser.post("/w/acme/token/")
    assert EvolutionRecord.objects.filter(workspace=workspace, action=Action.GRANT, evolver="tokens").count() == 2
    assert ApiToken.objects.filter(user=user, revoked_at__isnull=True).count() == 2


def test_filtered_empty_result_offers_to_clear_filters(browser: Client, make_memory: Callable[..., Memory]) -> None:
    make_memory("something")
    html = browser.get(LIST, {"q": "zebra"}).content.decode()
    assert "No memories match" in html
    assert "has no memories yet" not in html


def test_viewer_sees_the_list_without_edit_controls(
    workspace: Workspace, viewer: Any, make_memory: Callable[..., Memory]
) -> None:
    make_memory("visible to viewers")
    client = Client()
    client.force_login(viewer)
    html = client.get(LIST).content.decode()
    assert "visible to viewers" in html
    assert 'name="ids"' not in html
    assert "New memory" not in html
    assert ">Archive<" not in html
    assert client.post("/w/acme/token/").status_code == 403


def test_activation_poll_returns_out_of_band_bars_of_this_workspace_only(
    browser: Client, make_memory: Callable[..., Memory], other_workspace: Workspace
) -> None:
    from memories import services
    from memories.inputs import MemoryInput

    mine = make_memory("mine")
    foreign = services.memory_create(workspace=other_workspace, actor=None, item=MemoryInput(content="theirs"))
    html = browser.get(f"/w/acme/memories/activation/?id={mine.id}&id={foreign.id}&id=nonsense").content.decode()
    assert f'id="act-{mine.id}"' in html
    assert 'hx-swap-oob="true"' in html
    assert str(foreign.id) not in html


def test_navigation_links_every_section_even_before_it_exists(browser: Client, workspace: Workspace) -> None:
    html = browser.get(LIST).content.decode()
    nav = html[html.index('<nav class="mainnav"') : html.index("</nav>")]
    for section in ("Memories", "Inspector", "Proposals", "Contradictions", "Drift", "Runs"):
        assert section in nav
    assert 'aria-current="page">Memories' in nav


def test_workspace_switcher_goes_to_the_chosen_workspace(browser: Client, user: Any, workspace: Workspace) -> None:
    from memories import services

    services.workspace_create(owner=user, slug="second", name="Second")
    assert browser.get("/").status_code == 200
    assert browser.get("/", {"ws": "second"})["Location"] == "/w/second/"
    html = browser.get(LIST).content.decode()
    assert '<option value="second">Second · owner</option>' in html


def test_editor_role_gets_edit_controls(
    workspace: Workspace, member: Callable[[str], Any], make_memory: Callable[..., Memory]
) -> None:
    make_memory("editable")
    client = Client()
    client.force_login(member(Role.EDITOR))
    html = client.get(LIST).content.decode()
    assert 'name="ids"' in html
    assert "New memory" in html


def test_type_and_search_filters_cost_a_fixed_number_of_probe_queries(
    browser: Client, make_memory: Callable[..., Memory], django_assert_num_queries: Any
) -> None:
    make_memory("kafka decision", memory_type="decision")
    # SQLite: one plan probe for the type, and for the search the words its prefixes begin and its plan
    # probe (PostgreSQL's planner needs none). The best-match order is tests/memories/test_list_search.py's.
    with django_assert_num_queries(6 + (3 if connection.vendor == "sqlite" else 0)):
        html = browser.get(LIST, {"type": "decision", "q": "kafka", "ordering": "-created"}).content.decode()
    assert "kafka decision" in html


@pytest.mark.parametrize(("word", "plan"), [("zebra", "gather"), ("redis", "walk_in"), ("kafka", "walk_exists")])
def test_every_search_plan_pages_exactly_like_the_plain_filter(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, word: str, plan: str
) -> None:
    """bench-pages picks plans by a word's share of all memories; small thresholds reach each one here."""
    from memories import selectors, services
    from memories.inputs import MemoryInput

    monkeypatch.setattr(selectors, "_COMMON_MIN", 4)
    base = timezone.now() - timedelta(days=3)
    counts = {"kafka": 30, "redis": 6, "zebra": 2}
    items = [
        MemoryInput(
            content=f"{w} note {i}",
            memory_type="decision" if i % 2 else "fact",
            created_at=base + timedelta(minutes=7 * i + len(w)),
        )
        for w, n in counts.items()
        for i in range(n)
    ]
    items += [MemoryInput(content=f"filler {i}", created_at=base) for i in range(22)]
    services.memories_create(workspace=workspace, actor=None, items=items)
    if connection.vendor == "sqlite":
        assert selectors._fts_plan(f'"{word}"') == plan

    def walk(probes: bool, ordering: str, **filters: Any) -> list[uuid.UUID]:
        found, cursor = [], None
        while True:
            page = selectors.memory_list(
                workspace=workspace,
                filters=selectors.MemoryFilters(q=word, **filters),
                ordering=ordering,
                cursor=cursor,
                limit=4,
                plan_probes=probes,
            )
            found += [m.id for m in page.results]
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    for ordering in ("-created", "created", "-activation"):
        for filters in ({}, {"memory_type": "decision"}):
            expected = walk(False, ordering, **filters)
            assert walk(True, ordering, **filters) == expected
            assert len(expected) == counts[word] // (2 if filters else 1)


def test_a_common_type_walks_the_ordering_index_and_a_rare_one_keeps_its_own(
    workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memories import selectors

    monkeypatch.setattr(selectors, "_COMMON_MIN", 4)
    for i in range(20):
        make_memory(f"decision {i}", memory_type="decision")
    make_memory("a goal", memory_type="goal")
    common = str(
        selectors.memory_queryset(
            workspace=workspace, filters=selectors.MemoryFilters(memory_type="decision"), plan_probes=True
        ).query
    )
    rare = str(
        selectors.memory_queryset(
            workspace=workspace, filters=selectors.MemoryFilters(memory_type="goal"), plan_probes=True
        ).query
    )
    if connection.vendor == "sqlite":
        assert '+"memories_memory"."memory_type"' in common
    assert '+"memories_memory"."memory_type"' not in rare
    page = selectors.memory_list(
        workspace=workspace, filters=selectors.MemoryFilters(memory_type="decision"), limit=50, plan_probes=True
    )
    assert len(page.results) == 20


def test_the_pager_counts_the_matches_and_pages_back(browser: Client, make_memory: Callable[..., Memory]) -> None:
    for i in range(120):
        make_memory(f"paged {i}")
    first = browser.get(LIST).content.decode()
    assert "Page 1 · 1–50" in first and "Previous page" not in first
    count = browser.get(f"{LIST}memories/count/", {"q": "paged"}, headers={"HX-Request": "true"}).content.decode()
    assert count == '<span id="memory-total"> of 120 memories</span>'
    second_url = re.search(r'id="next-page" rel="next" href="([^"]+)"', first).group(1).replace("&amp;", "&")
    second = browser.get(second_url).content.decode()
    assert "Page 2 · 51–100" in second
    third_url = re.search(r'id="next-page" rel="next" href="([^"]+)"', second).group(1).replace("&amp;", "&")
    third = browser.get(third_url).content.decode()
    assert "Page 3 · 101–120" in third
    back_url = re.search(r'id="previous-page" rel="prev" href="([^"]+)"', third).group(1).replace("&amp;", "&")
    assert "before=" in back_url
    back = browser.get(back_url).content.decode()
    assert "Page 2 · 51–100" in back
    assert rows_in(back) == rows_in(second)
