"""The full-text index follows every write, and natural-language queries never break the search."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from memories import fts_stats, selectors, services
from memories.algorithms.fts import fts5_expression, query_terms, tsquery_expression
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace
from memories.selectors import MemoryFilters

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def found(workspace: Workspace, query: str) -> set[uuid.UUID]:
    hits = {mid for mid, _ in selectors.lexical_search(workspace=workspace, query=query, limit=50, statuses=None)}
    listed = {
        m.id for m in selectors.memory_list(workspace=workspace, filters=MemoryFilters(q=query), limit=500).results
    }
    # The list also matches the words a term begins ("rabbit" finds "rabbitmq"); ranked retrieval does not.
    assert hits <= listed, "the list filter misses what ranked search finds"
    return hits


# -- the query parser (no database) ---------------------------------------------------------------


def test_query_terms_drop_punctuation_stop_words_and_repeats() -> None:
    assert query_terms("Why did we pick JWT? JWT, tokens!") == ["pick", "jwt", "tokens"]


def test_a_query_of_only_stop_words_keeps_them() -> None:
    assert query_terms("who is it?") == ["who", "is", "it"]


def test_fts5_terms_are_quoted_literals() -> None:
    assert fts5_expression(['a"b', "NEAR", "c*"]) == '"a""b" OR "NEAR" OR "c*"'


def test_tsquery_joins_the_parts_of_a_hyphenated_term_as_a_phrase() -> None:
    assert tsquery_expression(["real-time", "jwt"]) == "(real <-> time) | jwt"


# -- staying in sync ------------------------------------------------------------------------------


def test_a_new_memory_is_found_by_its_words(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("The nginx load balancer has no sticky sessions")
    make_memory("Lunch is at noon")
    assert found(workspace, "balancer") == {memory.id}
    assert found(workspace, "sessions") == {memory.id}


def test_memories_created_through_the_orm_are_indexed_too(workspace: Workspace) -> None:
    memory = Memory.objects.create(workspace=workspace, content="created by the ORM about zookeeper")
    assert found(workspace, "zookeeper") == {memory.id}


def test_an_edit_replaces_the_indexed_words(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("we deploy with ansible")
    services.memory_update(
        workspace=workspace, memory=memory, actor=user, changes={"content": "we deploy with terraform"}
    )
    assert found(workspace, "ansible") == set()
    assert found(workspace, "terraform") == {memory.id}


def test_a_queryset_update_of_content_is_followed(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("first wording with kafka")
    Memory.objects.filter(id=memory.id).update(content="second wording with rabbitmq")
    assert found(workspace, "kafka") == set()
    assert found(workspace, "rabbitmq") == {memory.id}


def test_the_stored_index_text_follows_the_content_of_each_write(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    """What ranking reads is stored, not re-parsed per query: PostgreSQL's generated search_vector column,
    SQLite's FTS5 row; either must equal the current content after an edit and a queryset update."""
    from django.db import connection

    memory = make_memory("first wording about kafka")
    services.memory_update(workspace=workspace, memory=memory, actor=user, changes={"content": "edited about nats"})
    other = make_memory("second memory about redis")
    Memory.objects.filter(id=other.id).update(content="updated about valkey")
    with connection.cursor() as cursor:
        for mid, content in ((memory.id, "edited about nats"), (other.id, "updated about valkey")):
            if connection.vendor == "postgresql":
                cursor.execute(
                    "SELECT search_vector = to_tsvector('english', %s), search_vector::text FROM memories_memory "
                    "WHERE id = %s",
                    [content, mid],
                )
                same, stored = cursor.fetchone()
                assert same, stored
            else:
                cursor.execute(
                    "SELECT f.content FROM memories_fts f JOIN memories_fts_map m ON m.fts_rowid = f.rowid "
                    "WHERE m.memory_id = %s",
                    [mid.hex],
                )
                assert cursor.fetchone()[0] == content


def test_a_deleted_memory_is_no_longer_found(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    gone = make_memory("grafana dashboards for latency")
    kept = make_memory("grafana alerts")
    services.memory_delete_hard(workspace=workspace, memory=gone, actor=user)
    assert found(workspace, "grafana") == {kept.id}
    Memory.objects.filter(id=kept.id).delete()
    assert found(workspace, "grafana") == set()


def test_a_replaced_index_row_does_not_shadow_other_memories(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    a = make_memory("alpha text")
    b = make_memory("beta text")
    services.memory_update(workspace=workspace, memory=a, actor=user, changes={"content": "gamma text"})
    services.memory_delete_hard(workspace=workspace, memory=a, actor=user)
    c = make_memory("delta text")
    assert found(workspace, "text") == {b.id, c.id}
    assert found(workspace, "beta") == {b.id}


def test_bulk_and_single_inserts_share_one_index(workspace: Workspace, user: Any) -> None:
    bulk = services.memories_create(
        workspace=workspace, actor=user, items=[MemoryInput(content=f"bulk item {i} about consul") for i in range(30)]
    )
    single = Memory.objects.create(workspace=workspace, content="single item about consul")
    more = services.memories_create(workspace=workspace, actor=user, items=[MemoryInput(content="late consul note")])
    assert found(workspace, "consul") == {m.id for m in bulk} | {single.id} | {more[0].id}


# -- queries people type --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "why did we pick JWT?",
        'JWT "quoted',
        "JWT AND (",
        "JWT*",
        "NEAR(JWT tokens)",
        "jwt: tokens; -expiry",
        "JWT's",
        "col:jwt",
        "^jwt",
        "jwt OR",
        "\\jwt/",
    ],
)
def test_queries_with_punctuation_and_operators_search_for_their_words(
    workspace: Workspace, make_memory: Callable[..., Memory], query: str
) -> None:
    memory = make_memory("Decision: we picked JWT access tokens with a short expiry")
    make_memory("Lunch is at noon")
    assert found(workspace, query) == {memory.id}


def test_a_query_of_only_stop_words_still_finds_them(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("Who is it that we are waiting for")
    make_memory("Deploy the gateway")
    assert found(workspace, "who is it?") == {memory.id}


def test_a_hyphenated_query_finds_the_hyphenated_text(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("The dashboard updates in real-time")
    make_memory("Real estate and time zones")
    assert memory.id in found(workspace, "real-time")
    assert found(workspace, "real-time updates") >= {memory.id}


def test_a_query_without_words_finds_nothing(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    make_memory("anything at all")
    assert selectors.lexical_search(workspace=workspace, query="?! -- ()", limit=10) == []


def test_accented_words_are_found_as_written(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("Zoë reviewed the café menu")
    make_memory("Zoe wrote the cafeteria plan")
    assert memory.id in found(workspace, "Zoë café")
    assert found(workspace, "café") >= {memory.id}


def test_a_possessive_searches_for_its_word() -> None:
    assert query_terms("JWT's expiry, Dana\u2019s editor") == ["jwt", "expiry", "dana", "editor"]


def test_a_contraction_stays_one_phrase() -> None:
    assert query_terms("don't rotate") == ["don't", "rotate"]
    assert tsquery_expression(["don't"]) == "(don <-> t)"


# -- ranking one workspace among several (one shared index, each workspace's own statistics) -------


def _ten_words(head: str, repeats: int, tail: str) -> str:
    """``head``, ``repeats`` times "kafka", padding, then ``tail``: always ten tokens, so that the average
    document length (which BM25 reads from the whole index) is the same alone or shared."""
    words = head.split() + ["kafka"] * repeats
    return " ".join(words + ["pad"] * (8 - len(words)) + tail.split())


def _ranked(workspace: Workspace, limit: int) -> list[tuple[uuid.UUID, float]]:
    return selectors.lexical_search(workspace=workspace, query="kafka lag", limit=limit, statuses=None)


@pytest.mark.parametrize("own, others", [(30, 2), (3, 60), (0, 40), (12, 12)])
def test_ranked_hits_are_the_ones_the_workspace_would_get_alone_whatever_share_of_the_index_it_holds(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory], own: int, others: int
) -> None:
    """The best hits of one workspace, best first, with the scores it would get if it were the only one
    in the index, whether it holds most of the matches, few of them or none (each way twice, so the
    second query runs with the share and the counts the first one kept)."""
    for i in range(own):
        make_memory(_ten_words("kafka consumer lag", i % 5, f"note {i}"))
    for i in range(others):
        make_memory(_ten_words("kafka broker", i % 6, f"elsewhere {i}"), ws=other_workspace)
    selectors._FTS_SHARE.clear()
    fts_stats.forget()
    shared = {limit: [_ranked(workspace, limit) for _ in range(2)] for limit in (5, 40)}
    owned = set(Memory.objects.filter(workspace=workspace).values_list("id", flat=True))
    Memory.objects.filter(workspace=other_workspace).delete()
    fts_stats.forget()
    for limit, answers in shared.items():
        alone = _ranked(workspace, limit)
        for hits in answers:
            assert len(hits) == min(limit, own) and {mid for mid, _ in hits} <= owned
            assert [mid for mid, _ in hits] == [mid for mid, _ in alone]
            assert [score for _, score in hits] == pytest.approx([score for _, score in alone], rel=1e-9)
            scores = [score for _, score in hits]
            assert scores == sorted(scores, reverse=True)


def test_another_workspace_writing_does_not_change_a_workspace_ranking(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    """A word that is rare here and common there ("lag") keeps its weight here: the scores of one
    workspace do not move when another writes, and so say nothing about what it wrote."""
    for i in range(8):
        make_memory(_ten_words("kafka consumer lag" if i % 4 == 0 else "kafka consumer", i % 3, f"note {i}"))
    make_memory(_ten_words("kafka", 0, "unrelated note"), ws=other_workspace)
    before = _ranked(workspace, 10)
    for i in range(200):
        make_memory(_ten_words("lag lag", i % 2, f"elsewhere {i}"), ws=other_workspace)
    fts_stats.forget()
    after = _ranked(workspace, 10)
    assert [mid for mid, _ in after] == [mid for mid, _ in before]
    assert [score for _, score in after] == pytest.approx([score for _, score in before], rel=1e-9)


def test_the_list_search_matches_the_words_a_term_begins(workspace: Workspace, user: object) -> None:
    from memories import services
    from memories.inputs import MemoryInput

    services.memories_create(
        workspace=workspace,
        actor=user,  # type: ignore[arg-type]
        items=[MemoryInput(content=c) for c in ("We run RabbitMQ for jobs", "Rabbits eat carrots", "A kafka note")],
    )

    def listed(query: str) -> list[str]:
        page = selectors.memory_list(workspace=workspace, filters=MemoryFilters(q=query), ordering="created")
        return sorted(m.content for m in page.results)

    assert listed("Rabbit") == ["Rabbits eat carrots", "We run RabbitMQ for jobs"]
    assert listed("rabbitmq") == ["We run RabbitMQ for jobs"]
    # Two letters are not a prefix worth matching.
    assert listed("ka") == []
    assert fts5_expression(["rabbit", "ka", "real-time"], prefix=True) == '"rabbit" OR "rabbit"* OR "ka" OR "real-time"'
    assert tsquery_expression(["rabbit", "real-time"], prefix=True) == "rabbit | rabbit:* | (real <-> time)"


# -- ranking the rarer terms' matches only ---------------------------------------------------------------


@pytest.fixture
def common_and_rare(
    workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """12 memories say "deploy", 3 of them also "zeppelin"; the rare-term budget is shrunk to fit."""
    monkeypatch.setattr(selectors, "_RARE_BUDGET_MIN", 4)
    monkeypatch.setattr(selectors, "_RARE_BUDGET_PER_HIT", 1)
    fts_stats.forget()
    rare = {make_memory(f"deploy the zeppelin service, step {i}").id for i in range(3)}
    common = {make_memory(f"deploy step {i} of the release").id for i in range(9)}
    return rare, common


def test_when_the_rare_terms_fill_the_pool_the_best_hits_are_theirs(
    workspace: Workspace, common_and_rare: tuple[set[uuid.UUID], set[uuid.UUID]]
) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    rare, _ = common_and_rare
    with CaptureQueriesContext(connection) as queries:
        hits = selectors.lexical_search(workspace=workspace, query="deploy zeppelin", limit=2)
    assert len(hits) == 2 and {mid for mid, _ in hits} <= rare
    if connection.vendor == "sqlite":
        ranked = [q["sql"] for q in queries.captured_queries if "bm25" in q["sql"]]
        # Ranked by the whole query, among the rare term's rows only.
        assert len(ranked) == 1 and 'MATCH \'"deploy" OR "zeppelin"\' AND f.rowid IN (' in ranked[0]
    if connection.vendor == "postgresql":
        ranked = [q["sql"] for q in queries.captured_queries if "ts_rank" in q["sql"]]
        # Ranked by the whole query, matched by the rare term alone, one query.
        assert len(ranked) == 1 and "'deploy | zeppelin') r" in ranked[0]
        assert "@@ to_tsquery('english', 'zeppelin')" in ranked[0]


def test_when_every_term_is_common_the_newest_matches_are_ranked(
    workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    monkeypatch.setattr(selectors, "_RARE_BUDGET_MIN", 3)
    monkeypatch.setattr(selectors, "_RARE_BUDGET_PER_HIT", 1)
    monkeypatch.setattr(selectors, "_NEWEST_PER_BUDGET", 2)
    # PostgreSQL takes the newest matches among the newest rows: a window of the workspace's time span that
    # would hold the matches wanted were they spread evenly (the planner's estimate of the matches made exact).
    monkeypatch.setattr(selectors, "_NEWEST_MARGIN", 1.0)
    monkeypatch.setattr(selectors, "_pg_estimated_rows", lambda cursor, sql, params: 10)
    monkeypatch.setattr(selectors, "_spans", {})
    fts_stats.forget()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # The oldest say the word three times (the best rank for every engine), the 6 newest once.
    oldest = [make_memory("deploy deploy deploy it", created_at=start + timedelta(days=i)).id for i in range(4)]
    newest = [make_memory(f"deploy step {i}", created_at=start + timedelta(days=10 + i)).id for i in range(6)]
    hits = [mid for mid, _ in selectors.lexical_search(workspace=workspace, query="deploy", limit=2)]
    assert len(hits) == 2 and set(hits) <= set(newest)
    # A term that matches nothing does not make the query look rare.
    hits = [mid for mid, _ in selectors.lexical_search(workspace=workspace, query="deploy quokka", limit=2)]
    assert len(hits) == 2 and set(hits) <= set(newest)
    # Asking for more than the newest matches hold ranks every match.
    hits = [mid for mid, _ in selectors.lexical_search(workspace=workspace, query="deploy", limit=7)]
    assert set(oldest) <= set(hits)


def test_matches_of_only_common_terms_are_found_when_the_rare_ones_cannot_fill_the_pool(
    workspace: Workspace, common_and_rare: tuple[set[uuid.UUID], set[uuid.UUID]]
) -> None:
    rare, common = common_and_rare
    hits = [mid for mid, _ in selectors.lexical_search(workspace=workspace, query="deploy zeppelin", limit=5)]
    assert set(hits[:3]) == rare and set(hits[3:]) <= common and len(hits) == 5


def test_rare_matches_filtered_out_by_status_fall_back_to_every_match(
    workspace: Workspace, common_and_rare: tuple[set[uuid.UUID], set[uuid.UUID]]
) -> None:
    rare, common = common_and_rare
    archived = sorted(rare)[:2]
    Memory.objects.filter(id__in=archived).update(status="archived")
    hits = [mid for mid, _ in selectors.lexical_search(workspace=workspace, query="deploy zeppelin", limit=2)]
    assert hits[0] == (rare - set(archived)).pop() and hits[1] in common


@pytest.mark.postgres
def test_the_planner_estimates_a_query_s_rows(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    from django.db import connection

    for i in range(30):
        make_memory(f"note {i}")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memories_memory")
        sql = "SELECT 1 FROM memories_memory WHERE workspace_id = %s"
        assert selectors._pg_estimated_rows(cursor, sql, [workspace.pk]) == 30
        assert selectors._pg_estimated_rows(cursor, sql, [-1]) == 1


@pytest.mark.postgres
def test_an_empty_workspace_has_no_span(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection

    monkeypatch.setattr(selectors, "_spans", {})
    with connection.cursor() as cursor:
        assert selectors._pg_workspace_span(cursor, workspace.pk) is None
    assert selectors._pg_ranked_rows(workspace.pk, "'english'", "deploy", "deploy", 10, None, newest=2) == []


@pytest.mark.parametrize(("matched", "growth"), [(0, 64), (1, 64), (100, 16), (300, 4), (600, 2), (5_000, 2)])
def test_a_newest_window_grows_enough_for_the_density_seen(matched: int, growth: int) -> None:
    assert selectors._pg_window_growth(800, matched) == growth


@pytest.mark.postgres
def test_the_newest_window_widens_until_it_holds_the_matches_wanted(
    workspace: Workspace, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    monkeypatch.setattr(selectors, "_spans", {})
    start = datetime(2026, 1, 1, tzinfo=UTC)
    # One match in every 10 rows, an hour apart, the newest row first: 5 matches among 50 rows.
    texts = ["deploy it" if i % 10 == 0 else f"note {i}" for i in range(50)]
    made = [make_memory(text, created_at=start - timedelta(hours=i)) for i, text in enumerate(texts)]
    with connection.cursor() as cursor:
        span = selectors._pg_workspace_span(cursor, workspace.pk)
    assert span == selectors._Span(start - timedelta(hours=49), start)
    # The planner expects 50 matches (10x too many): the first window is too small.
    monkeypatch.setattr(selectors, "_NEWEST_MARGIN", 1.0)
    monkeypatch.setattr(selectors, "_pg_estimated_rows", lambda cursor, sql, params: 50)
    rows = selectors._pg_ranked_rows(workspace.pk, "'english'", "deploy", "deploy", 10, None, newest=2)
    # 2 of 50 expected matches: a window of 4% of the span (1.96 h) holds one match, and so do the windows
    # twice as long (3.92 h, 7.84 h); 15.68 h hold two, the two newest.
    assert {mid for mid, _ in rows} == {made[i].id for i in (0, 10)}
    # A window too small by far grows faster: one match of 3 x 1.25 wanted asks for 4x (1.96 h, 7.84 h);
    # past half the span (31.36 h) the window is all of it, the three newest matches ranked.
    monkeypatch.setattr(selectors, "_NEWEST_MARGIN", 1.25)
    monkeypatch.setattr(selectors, "_pg_estimated_rows", lambda cursor, sql, params: 95)
    with CaptureQueriesContext(connection) as queries:
        rows = selectors._pg_ranked_rows(workspace.pk, "'english'", "deploy", "deploy", 10, None, newest=3)
    assert {mid for mid, _ in rows} == {made[i].id for i in (0, 10, 20)}
    windows = [q["sql"] for q in queries.captured_queries if "MATERIALIZED" in q["sql"]]
    assert len(windows) == 3 and ["created_at >=" in sql for sql in windows] == [True, True, False]
    # Prefixes that must all match (the list's every-term search) walk the newest rows instead: one query.
    every = "(deploy:*) & (deploy)"
    with CaptureQueriesContext(connection) as queries:
        rows = selectors._pg_ranked_rows(workspace.pk, "'english'", every, every, 10, None, newest=3)
    assert [mid for mid, _ in rows] and {mid for mid, _ in rows} == {made[i].id for i in (0, 10, 20)}
    assert len(queries.captured_queries) == 1 and "ORDER BY m.created_at DESC" in queries.captured_queries[0]["sql"]
    rows = selectors._pg_ranked_rows(workspace.pk, "'english'", "deploy", "deploy", 10, None, newest=1)
    # The first window (1 row, the newest) holds the one match wanted.
    assert [mid for mid, _ in rows] == [made[0].id]
