"""The memory list's search: best match first by default, ranked pages, prefixes, query counts (both backends)."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import InvalidInput
from memories import fts_stats, selectors, services
from memories.algorithms.fts import tsquery_expression
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace
from memories.selectors import RELEVANCE, MemoryFilters

pytestmark = [pytest.mark.django_db, pytest.mark.api]

LIST = "/w/acme/"
API = "/api/v1/workspaces/acme/memories/"


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def no_kept_counts() -> None:
    fts_stats.forget()


def rows_in(html: str) -> list[str]:
    return re.findall(r'<tr id="row-([0-9a-f-]{36})"', html)


def create(workspace: Workspace, contents: list[str], *, start_days_ago: int = 30, **fields: Any) -> list[Memory]:
    """Memories in list order of age: the first is the oldest (one hour apart)."""
    base = timezone.now() - timedelta(days=start_days_ago)
    items = [MemoryInput(content=c, created_at=base + timedelta(hours=i), **fields) for i, c in enumerate(contents)]
    return services.memories_create(workspace=workspace, actor=None, items=items)


def ranked(workspace: Workspace, q: str, limit: int = 500, **filters: Any) -> list[uuid.UUID]:
    page = selectors.memory_list(
        workspace=workspace, filters=MemoryFilters(q=q, **filters), ordering=RELEVANCE, limit=limit
    )
    return [m.id for m in page.results]


def walk(workspace: Workspace, q: str, limit: int, **filters: Any) -> list[list[uuid.UUID]]:
    """Every page of a ranked list, following next cursors."""
    pages: list[list[uuid.UUID]] = []
    cursor = None
    while True:
        page = selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(q=q, **filters), ordering=RELEVANCE, cursor=cursor, limit=limit
        )
        pages.append([m.id for m in page.results])
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor


def test_a_search_of_several_words_lists_the_memory_holding_all_of_them_first(workspace: Workspace) -> None:
    old_best, session, cookie, unrelated = create(
        workspace,
        [
            "JWT in a session cookie: the login design we settled on",
            "The session store moved to redis",
            "Cookie banner copy for the site",
            "Lunch is at noon",
        ],
    )
    order = ranked(workspace, "jwt session cookie")
    assert order[0] == old_best.id
    assert set(order) == {old_best.id, session.id, cookie.id}
    # Newest first is still there for whoever asks for it.
    newest = selectors.memory_list(
        workspace=workspace, filters=MemoryFilters(q="jwt session cookie"), ordering="-created"
    )
    assert [m.id for m in newest.results] == [cookie.id, session.id, old_best.id]
    assert unrelated.id not in order


def test_more_occurrences_of_a_rare_word_rank_higher(workspace: Workspace) -> None:
    once, twice, common = create(
        workspace,
        [
            "kafka is one of the queues we run",
            "kafka kafka: the queue we run for billing events",
            "the queue we run for email",
        ],
    )
    assert ranked(workspace, "kafka queue") == [twice.id, once.id, common.id]


@pytest.mark.parametrize("others", [0, 60])
def test_best_match_orders_as_ranked_retrieval_does_whoever_else_shares_the_index(
    workspace: Workspace, other_workspace: Workspace, others: int
) -> None:
    """Another workspace's rows change the index's statistics, not this workspace's order."""
    _graded(workspace, 14)
    create(other_workspace, [f"lag lag lag elsewhere {i}" for i in range(others)])
    fts_stats.forget()
    retrieval = selectors.lexical_search(workspace=workspace, query="lag", limit=50, statuses=None)
    listed = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q="lag"), ordering=RELEVANCE)
    # Equal scores may come in either order from the two; the scores themselves are the same.
    by_id = dict(retrieval)
    assert {m.id for m in listed.results} == set(by_id)
    scores = [by_id[m.id] for m in listed.results]
    assert scores == sorted(scores, reverse=True)
    assert [score for _, score in retrieval] == pytest.approx(scores, rel=1e-9)


def test_best_match_is_the_default_order_of_a_search_and_newest_first_without_one(workspace: Workspace) -> None:
    assert selectors.default_ordering(MemoryFilters(q="jwt session")) == RELEVANCE
    assert selectors.default_ordering(MemoryFilters(q="?!")) == selectors.DEFAULT_ORDERING
    assert selectors.default_ordering(MemoryFilters()) == selectors.DEFAULT_ORDERING
    older, newer = create(workspace, ["plain note one", "plain note two"])
    # Asked for by name with nothing to rank by, the list is newest first, and so are its cursors.
    page = selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering=RELEVANCE, limit=1)
    assert [m.id for m in page.results] == [newer.id]
    assert page.next_cursor is not None
    second = selectors.memory_list(
        workspace=workspace, filters=MemoryFilters(), ordering="-created", cursor=page.next_cursor, limit=1
    )
    assert [m.id for m in second.results] == [older.id]


def _graded(workspace: Workspace, count: int) -> list[Memory]:
    """``count`` matches of "lag" with every score from best to worst, and ties among them."""
    contents = [" ".join(["lag"] * (1 + i % 6) + ["filler"] * (i % 9)) + f" note {i}" for i in range(count)]
    create(workspace, [f"unrelated {i}" for i in range(5)], start_days_ago=40)
    return create(workspace, contents)


@pytest.mark.parametrize("limit", [1, 4, 7])
def test_paging_a_ranked_list_visits_every_match_once_in_rank_order(workspace: Workspace, limit: int) -> None:
    matches = _graded(workspace, 23)
    whole = ranked(workspace, "lag")
    pages = walk(workspace, "lag", limit)
    flat = [mid for page in pages for mid in page]
    assert flat == whole
    assert sorted(flat) == sorted(m.id for m in matches)
    assert all(0 < len(page) <= limit for page in pages)
    assert len(flat) == len(set(flat))


def test_paging_back_from_a_ranked_page_gives_the_pages_before_it(workspace: Workspace) -> None:
    _graded(workspace, 17)
    pages = walk(workspace, "lag", 5)
    filters = MemoryFilters(q="lag")
    last = selectors.memory_list(workspace=workspace, filters=filters, ordering=RELEVANCE, limit=5)
    cursors = [last.next_cursor]
    for _ in range(len(pages) - 2):
        last = selectors.memory_list(
            workspace=workspace, filters=filters, ordering=RELEVANCE, cursor=cursors[-1], limit=5
        )
        cursors.append(last.next_cursor)
    final = selectors.memory_list(workspace=workspace, filters=filters, ordering=RELEVANCE, cursor=cursors[-1], limit=5)
    assert [m.id for m in final.results] == pages[-1]
    back = [[m.id for m in final.results]]
    previous = final.previous_cursor
    while previous is not None:
        page = selectors.memory_list(
            workspace=workspace, filters=filters, ordering=RELEVANCE, cursor=previous, limit=5, backward=True
        )
        back.insert(0, [m.id for m in page.results])
        previous = page.previous_cursor
    assert back == pages


def test_a_ranked_list_keeps_the_other_filters(workspace: Workspace) -> None:
    facts = create(workspace, [f"lag lag fact {i}" for i in range(6)], memory_type="fact")
    create(workspace, [f"lag decision {i}" for i in range(6)], memory_type="decision")
    archived = create(workspace, ["lag lag lag archived"], memory_type="fact")[0]
    services.memory_archive(workspace=workspace, actor=None, memory=archived)
    pages = walk(workspace, "lag", 4, memory_type="fact", status="active")
    assert sorted(mid for page in pages for mid in page) == sorted(m.id for m in facts)


def test_a_ranked_cursor_is_refused_by_the_date_orders_and_theirs_by_it(workspace: Workspace) -> None:
    _graded(workspace, 4)
    page = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q="lag"), ordering=RELEVANCE, limit=2)
    assert page.next_cursor is not None
    with pytest.raises(InvalidInput):
        selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(q="lag"), ordering="-created", cursor=page.next_cursor
        )
    dated = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q="lag"), ordering="-created", limit=2)
    assert dated.next_cursor is not None
    with pytest.raises(InvalidInput):
        selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(q="lag"), ordering=RELEVANCE, cursor=dated.next_cursor
        )


def test_beyond_the_ranked_depth_the_memories_holding_every_word_still_come_first(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "RANK_DEPTH", 6)
    monkeypatch.setattr(selectors, "RANK_EVERY_DEPTH", 3)
    both = create(workspace, [f"zeppelin hangar {i}" for i in range(3)], start_days_ago=60)
    create(workspace, [f"hangar doors {i}" for i in range(12)])
    page = selectors.memory_list(
        workspace=workspace, filters=MemoryFilters(q="zeppelin hangar"), ordering=RELEVANCE, limit=50
    )
    assert not page.ranked_all
    # The newest 6 matches and the 3 that hold both words (older than all of those).
    assert len(page.results) == 9
    assert {m.id for m in page.results[:3]} == {m.id for m in both}
    small = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q="zeppelin"), ordering=RELEVANCE)
    assert small.ranked_all


# -- prefixes: the words a term begins ------------------------------------------------------------


PREFIX_TEXTS = [
    "We run RabbitMQ for jobs",
    "Rabbits eat carrots",
    "The runner finished first",
    "Running late again",
    "A rune stone",
    "We released it on Monday",
    "The release train",
    "A decision was made",
    "Decisions, decisions",
    "A kafka note",
]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("Rabbit", {"We run RabbitMQ for jobs", "Rabbits eat carrots"}),
        ("rabbitmq", {"We run RabbitMQ for jobs"}),
        ("running", {"We run RabbitMQ for jobs", "The runner finished first", "Running late again", "A rune stone"}),
        ("release", {"We released it on Monday", "The release train"}),
        ("decision", {"A decision was made", "Decisions, decisions"}),
        ("ka", set()),
    ],
)
def test_every_order_finds_the_words_a_term_begins(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch, query: str, expected: set[str]
) -> None:
    create(workspace, PREFIX_TEXTS)
    for common in (1000, 1):
        # 1: every search is "common" and walks the list's index (the page's plans), 1000: it gathers.
        monkeypatch.setattr(selectors, "_COMMON_MIN", common)
        for ordering in (RELEVANCE, "-created", "created"):
            for probes in (True, False):
                page = selectors.memory_list(
                    workspace=workspace,
                    filters=MemoryFilters(q=query),
                    ordering=ordering,
                    limit=50,
                    plan_probes=probes,
                )
                assert {m.content for m in page.results} == expected, (ordering, probes, common)


def test_a_prefix_is_searched_as_the_indexed_words_it_begins(workspace: Workspace) -> None:
    create(workspace, PREFIX_TEXTS)
    if connection.vendor != "sqlite":
        # PostgreSQL's GIN index serves the prefix itself.
        assert tsquery_expression(["rabbit", "ka"], prefix=True) == "rabbit | rabbit:* | ka"
        return
    clauses, added = selectors._list_clauses(["rabbit", "running", "decision", "ka", "real-time"])
    assert clauses == [
        '"rabbit" OR "rabbitmq"',
        '"running" OR "rune" OR "runner"',
        # "decis" is the stem of "decision" but a word of its own stems to "deci": kept a prefix query.
        '"decision"',
        '"ka"',
        '"real-time"',
    ]
    assert added == ["rabbitmq", "rune", "runner"]


def test_a_prefix_beginning_too_many_words_stays_a_prefix_query(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(workspace, PREFIX_TEXTS)
    monkeypatch.setattr(selectors, "_PREFIX_TERMS_MAX", 2)
    if connection.vendor == "sqlite":
        assert selectors._list_clauses(["running"])[0] == ['"running" OR "running"*']
        # Common enough to walk the list's index: the match set is built once, never probed row by row.
        monkeypatch.setattr(selectors, "_COMMON_MIN", 1)
        assert selectors._fts_plan('"running" OR "running"*') == "walk_in"
        assert selectors._fts_plan('"running"') == "walk_exists"
    page = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q="running"), plan_probes=True)
    assert len(page.results) == 4


# -- the page and the REST list ---------------------------------------------------------------------


def test_the_page_lists_best_matches_first_without_javascript_and_pages_them(
    browser: Client, workspace: Workspace
) -> None:
    matches = _graded(workspace, 60)
    html = browser.get(LIST, {"q": "lag"}).content.decode()
    assert "Best matches first." in html
    assert '<option value="" selected>Best match or newest</option>' in html
    first = rows_in(html)
    assert len(first) == 50
    next_url = re.search(r'id="next-page" rel="next" href="([^"]+)"', html)
    assert next_url is not None
    second = rows_in(browser.get(next_url.group(1).replace("&amp;", "&")).content.decode())
    expected = [str(mid) for mid in ranked(workspace, "lag")]
    assert first + second == expected
    assert sorted(expected) == sorted(str(m.id) for m in matches)
    # The date order is one choice away, with every match.
    dated = rows_in(browser.get(LIST, {"q": "lag", "ordering": "-created"}).content.decode())
    assert dated == [str(m.id) for m in reversed(matches)][:50]


def test_the_page_says_when_a_search_had_more_matches_than_were_ranked(
    browser: Client, workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors, "RANK_DEPTH", 4)
    _graded(workspace, 8)
    html = browser.get(LIST, {"q": "lag"}).content.decode()
    assert "among the newest 4 matches" in html
    assert "sort by date to list every match" in html


def test_the_rest_list_ranks_a_search_unless_an_order_is_named(api: APIClient, workspace: Workspace) -> None:
    best, other = create(workspace, ["the kafka kafka consumer lag", "kafka notes"])
    body = api.get(API, {"q": "kafka lag"}).json()
    assert [r["id"] for r in body["results"]] == [str(best.id), str(other.id)]
    dated = api.get(API, {"q": "kafka lag", "ordering": "-created"}).json()
    assert [r["id"] for r in dated["results"]] == [str(other.id), str(best.id)]
    cursor_walk: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"q": "kafka", "limit": 1, **({"cursor": cursor} if cursor else {})}
        page = api.get(API, params).json()
        cursor_walk += [r["id"] for r in page["results"]]
        cursor = page["next"]
        if not cursor:
            break
    assert sorted(cursor_walk) == sorted([str(best.id), str(other.id)])
    assert api.get(API, {"q": "kafka", "ordering": "bogus"}).status_code == 400


def _warm(call: Callable[[], Any]) -> None:
    """The first search of a process reads the index's totals (kept afterwards, fts_stats)."""
    call()


def test_a_ranked_page_costs_the_same_queries_for_few_and_many_matches(
    browser: Client, workspace: Workspace, django_assert_num_queries: Any
) -> None:
    create(workspace, [f"kafka lag note {i}" for i in range(3)])
    _warm(lambda: browser.get(LIST, {"q": "kafka lag"}))
    # session, user, membership+workspace, navigation workspaces, pending proposals; then the search:
    # SQLite: the prefixes' words, the ranking, the index's newest row (its statistics); PostgreSQL: the
    # planner's estimate of the matches (it sizes the window of newest rows), the ranking; both: the ids
    # passing the filters, the page's rows.
    search = 5 if connection.vendor == "sqlite" else 4
    with django_assert_num_queries(5 + search):
        assert len(rows_in(browser.get(LIST, {"q": "kafka lag"}).content.decode())) == 3
    create(workspace, [f"kafka lag note {i}" for i in range(80)], start_days_ago=20)
    # The index grew by more than its statistics allow: they are read again once.
    _warm(lambda: browser.get(LIST, {"q": "kafka lag"}))
    with django_assert_num_queries(5 + search):
        html = browser.get(LIST, {"q": "kafka lag", "type": "semantic", "tag": ""}).content.decode()
    assert len(rows_in(html)) == 50
    cursor = re.search(r"cursor=([A-Za-z0-9_-]+)&(?:amp;)?page=\d+", html)
    assert cursor is not None
    with django_assert_num_queries(5 + search):
        second = browser.get(LIST, {"q": "kafka lag", "type": "semantic", "cursor": cursor.group(1), "page": 2})
    assert len(rows_in(second.content.decode())) == 33


def test_the_rest_list_ranks_in_a_fixed_number_of_queries(
    api: APIClient, workspace: Workspace, django_assert_num_queries: Any
) -> None:
    create(workspace, [f"kafka note {i}" for i in range(40)], tags=["infra"])
    _warm(lambda: api.get(API, {"q": "kafka"}))
    # token lookup, membership + workspace, then the search as on the page.
    search = 5 if connection.vendor == "sqlite" else 4
    wanted: list[dict[str, str | int]] = [
        {"q": "kafka", "limit": 1},
        {"q": "kafka", "limit": 40, "type": "semantic", "tag": "infra"},
    ]
    for params in wanted:
        with django_assert_num_queries(2 + search):
            response = api.get(API, params)
        assert len(response.json()["results"]) == params["limit"]
