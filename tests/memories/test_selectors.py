"""Reads: workspace access, memory lookup, full-text ranking, filtered keyset listing, edges."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core.errors import Forbidden, InvalidInput, NotFound
from memories import selectors, services
from memories.inputs import MemoryInput
from memories.models import CompressionTier, Edge, EdgeType, Memory, MemoryScore, Role, Status, Workspace
from memories.selectors import MemoryFilters

pytestmark = [pytest.mark.django_db, pytest.mark.api]

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
# Fixed, so parametrized test ids are the same in every pytest-xdist worker.
SOME_ID = "0f1e2d3c4b5a69788796a5b4c3d2e1f0"


# -- access ---------------------------------------------------------------------------------------


def test_a_member_gets_the_workspace_and_their_role(workspace: Workspace, user: Any) -> None:
    access = selectors.workspace_access(user=user, slug="acme", require="own")
    assert access.workspace == workspace
    assert access.role == Role.OWNER and access.is_owner and access.can_edit


def test_a_non_member_is_told_the_workspace_does_not_exist(workspace: Workspace, make_user: Callable[..., Any]) -> None:
    stranger = make_user("eve")
    with pytest.raises(NotFound) as hidden:
        selectors.workspace_access(user=stranger, slug="acme")
    with pytest.raises(NotFound) as missing:
        selectors.workspace_access(user=stranger, slug="no-such-workspace")
    assert hidden.value.status_code == missing.value.status_code == 404
    assert hidden.value.field == "workspace"


def test_an_anonymous_user_is_told_the_workspace_does_not_exist(workspace: Workspace) -> None:
    with pytest.raises(NotFound):
        selectors.workspace_access(user=AnonymousUser(), slug="acme")


@pytest.mark.parametrize(
    ("role", "require", "allowed"),
    [
        (Role.VIEWER, "view", True),
        (Role.VIEWER, "edit", False),
        (Role.EDITOR, "edit", True),
        (Role.EDITOR, "own", False),
        (Role.OWNER, "own", True),
    ],
)
def test_roles_decide_what_a_member_may_do(
    member: Callable[[str], Any], role: str, require: Any, allowed: bool
) -> None:
    someone = member(role)
    if allowed:
        assert selectors.workspace_access(user=someone, slug="acme", require=require).role == role
    else:
        with pytest.raises(Forbidden) as info:
            selectors.workspace_access(user=someone, slug="acme", require=require)
        assert info.value.status_code == 403


def test_a_user_lists_only_their_workspaces_by_slug(
    user: Any, workspace: Workspace, other_workspace: Workspace
) -> None:
    services.workspace_create(owner=user, slug="beta", name="Beta")
    assert [a.workspace.slug for a in selectors.workspace_list_for_user(user=user)] == ["acme", "beta"]
    assert selectors.workspace_list_for_user(user=AnonymousUser()) == []


# -- single memories ------------------------------------------------------------------------------


def test_a_memory_of_another_workspace_is_not_found(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    foreign = make_memory("theirs", ws=other_workspace)
    with pytest.raises(NotFound) as info:
        selectors.memory_get(workspace=workspace, memory_id=foreign.id)
    assert "theirs" not in info.value.detail
    assert selectors.memory_get(workspace=other_workspace, memory_id=str(foreign.id)) == foreign


def test_a_malformed_memory_id_names_the_field(workspace: Workspace) -> None:
    with pytest.raises(InvalidInput) as info:
        selectors.memory_get(workspace=workspace, memory_id="not-a-uuid", field="source")
    assert info.value.field == "source"


def test_memories_by_ids_skips_other_workspaces(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    mine = make_memory("mine")
    theirs = make_memory("theirs", ws=other_workspace)
    found = selectors.memories_by_ids(workspace=workspace, ids=[mine.id, str(theirs.id), uuid.uuid4()])
    assert list(found) == [mine.id]


# -- full-text search -----------------------------------------------------------------------------


def test_lexical_search_ranks_the_better_match_first(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    both = make_memory("JWT tokens for the load balancer")
    one = make_memory("the load balancer config")
    make_memory("nothing relevant here")
    hits = selectors.lexical_search(workspace=workspace, query="JWT balancer", limit=10)
    assert [mid for mid, _ in hits] == [both.id, one.id]
    assert hits[0][1] > hits[1][1] > 0


def test_lexical_search_stays_inside_the_workspace_and_the_limit(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    for i in range(4):
        make_memory(f"kafka note {i}")
    make_memory("kafka secret", ws=other_workspace)
    hits = selectors.lexical_search(workspace=workspace, query="kafka", limit=3)
    assert len(hits) == 3
    assert all(Memory.objects.get(id=mid).workspace_id == workspace.pk for mid, _ in hits)


def test_lexical_search_finds_active_memories_unless_told_otherwise(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    archived = make_memory("archived grafana note", status=Status.ARCHIVED)
    active = make_memory("active grafana note")
    assert [m for m, _ in selectors.lexical_search(workspace=workspace, query="grafana", limit=5)] == [active.id]
    everything = selectors.lexical_search(workspace=workspace, query="grafana", limit=5, statuses=None)
    assert {m for m, _ in everything} == {active.id, archived.id}


def test_lexical_search_of_nothing_searchable_is_empty(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    make_memory("anything")
    assert selectors.lexical_search(workspace=workspace, query="?!", limit=5) == []
    assert selectors.lexical_search(workspace=workspace, query="anything", limit=0) == []


def test_search_plan_samples_the_rowids_still_in_the_index_after_deletes(
    workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Windows spread over the live rowid range: deleted old rows must not hide a word in every memory."""
    monkeypatch.setattr(selectors, "_COMMON_MIN", 4)
    old = services.memories_create(
        workspace=workspace, actor=None, items=[MemoryInput(content=f"gone {i}") for i in range(200)]
    )
    services.memories_create(
        workspace=workspace,
        actor=None,
        items=[MemoryInput(content=f"{'kafka' if i % 2 else 'redis'} note {i}") for i in range(40)],
    )
    Memory.objects.filter(id__in=[m.id for m in old]).delete()
    if connection.vendor == "sqlite":  # PostgreSQL's planner needs no probe
        assert selectors._fts_plan('"kafka"') == "walk_exists"
        assert selectors._fts_plan('"kafka" OR "redis"') == "walk_exists"
        assert selectors._fts_plan('"zebra"') == "gather"


# -- listing --------------------------------------------------------------------------------------


@pytest.fixture
def spread(workspace: Workspace, user: Any) -> list[Memory]:
    """Seven memories with distinct, known values in every sortable column."""
    memories = services.memories_create(
        workspace=workspace,
        actor=user,
        items=[MemoryInput(content=f"spread {i}", created_at=T0 + timedelta(hours=i)) for i in range(7)],
    )
    for i, memory in enumerate(memories):
        MemoryScore.objects.filter(memory=memory).update(retention_score=[0.5, 0.1, 0.9, 0.5, 0.3, 0.5, 0.7][i])
        Memory.objects.filter(id=memory.id).update(
            activation_sort_key=[3.0, 1.0, 2.0, 2.0, 5.0, 4.0, 0.0][i],
            updated_at=T0 + timedelta(days=1, minutes=[5, 1, 3, 2, 7, 6, 4][i]),
            last_accessed=None if i % 3 == 0 else T0 + timedelta(days=2, hours=7 - i),
        )
    return memories


def page_through(workspace: Workspace, ordering: str, limit: int, filters: MemoryFilters | None = None) -> list[str]:
    contents: list[str] = []
    cursor = None
    for _ in range(50):
        page = selectors.memory_list(
            workspace=workspace, filters=filters or MemoryFilters(), ordering=ordering, cursor=cursor, limit=limit
        )
        contents.extend(m.content for m in page.results)
        cursor = page.next_cursor
        if cursor is None:
            return contents
    raise AssertionError("pagination did not end")


def expected_order(ordering: str) -> list[str]:
    column, desc = selectors.ORDERINGS[ordering]
    rows = list(Memory.objects.values_list(column, "id", "content"))
    present = sorted((r for r in rows if r[0] is not None), key=lambda r: (r[0], r[1]), reverse=desc)
    missing = sorted((r for r in rows if r[0] is None), key=lambda r: r[1], reverse=desc)
    return [r[2] for r in present + missing]


@pytest.mark.parametrize("ordering", sorted(selectors.ORDERINGS))
@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_every_ordering_pages_through_every_memory_once_in_order(
    workspace: Workspace, spread: list[Memory], ordering: str, limit: int
) -> None:
    assert page_through(workspace, ordering, limit) == expected_order(ordering)


@pytest.mark.parametrize("ordering", sorted(selectors.ORDERINGS))
@pytest.mark.parametrize("limit", [1, 2, 3])
def test_paging_back_from_the_last_page_returns_every_page_as_it_was(
    workspace: Workspace, spread: list[Memory], ordering: str, limit: int
) -> None:
    def page(cursor: str | None, backward: bool = False) -> selectors.MemoryPage:
        return selectors.memory_list(
            workspace=workspace,
            filters=MemoryFilters(),
            ordering=ordering,
            cursor=cursor,
            limit=limit,
            backward=backward,
        )

    forward = [page(None)]
    while forward[-1].next_cursor is not None:
        forward.append(page(forward[-1].next_cursor))
    assert forward[0].previous_cursor is None
    back = [forward[-1]]
    while back[-1].previous_cursor is not None:
        back.append(page(back[-1].previous_cursor, backward=True))
    assert [[m.content for m in p.results] for p in reversed(back)] == [[m.content for m in p.results] for p in forward]
    # A page reached backwards pages forward again to the page it came from.
    if len(back) > 1:
        again = page(back[1].next_cursor)
        assert [m.content for m in again.results] == [m.content for m in back[0].results]


def test_a_page_past_a_recently_accessed_cursor_reads_the_never_accessed_tail_only_when_it_reaches_it(
    workspace: Workspace, spread: list[Memory]
) -> None:
    def page(limit: int) -> selectors.MemoryPage:
        first = selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering="-accessed", limit=1)
        return selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(), ordering="-accessed", cursor=first.next_cursor, limit=limit
        )

    expected = expected_order("-accessed")  # four accessed memories, then three never accessed
    with CaptureQueriesContext(connection) as queries:
        inside = page(limit=2)
    # The first page and this one, whose three accessed rows past the cursor fill it (and tell there is more).
    assert len(queries.captured_queries) == 2
    # An index range: "IS NULL" in the query would make both backends walk from the first row.
    assert "IS NULL" not in queries.captured_queries[-1]["sql"]
    assert [m.content for m in inside.results] == expected[1:3] and inside.next_cursor is not None
    with CaptureQueriesContext(connection) as queries:
        across = page(limit=4)
    assert len(queries.captured_queries) == 3  # the accessed rows ran out: the tail's query follows
    assert [m.content for m in across.results] == expected[1:5] and across.next_cursor is not None
    assert all(m.score_loaded() for m in across.results)


def test_recently_accessed_pages_are_read_in_index_order_without_a_sort(
    workspace: Workspace, spread: list[Memory]
) -> None:
    """At 1M memories a sort of every accessed memory cost seconds a page (PostgreSQL needs 0012's index for
    DESC NULLS LAST; a cursor's "IS NULL" branch made SQLite sort). Planners pick a sort for a table this
    small, so PostgreSQL is told sorts cost the earth: it still sorts when no index gives the order."""
    first = selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering="-accessed", limit=1)
    with CaptureQueriesContext(connection) as queries:
        selectors.memory_list(
            workspace=workspace, filters=MemoryFilters(), ordering="-accessed", cursor=first.next_cursor, limit=1
        )
        selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering="-accessed", limit=1)
    for query in queries.captured_queries:
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET LOCAL enable_sort = off")
                cursor.execute("EXPLAIN " + query["sql"])
            else:
                cursor.execute("EXPLAIN QUERY PLAN " + query["sql"])
            plan = "\n".join(str(row[-1]) for row in cursor.fetchall())
        # SQLite's index holds no id: ties of one timestamp are put in order apart ("RIGHT PART OF ORDER BY").
        assert "Sort" not in plan and "TEMP B-TREE FOR ORDER BY" not in plan and "MULTI-INDEX OR" not in plan, plan


def test_the_default_ordering_is_newest_first(workspace: Workspace, spread: list[Memory]) -> None:
    page = selectors.memory_list(workspace=workspace, filters=MemoryFilters())
    assert [m.content for m in page.results] == [f"spread {i}" for i in reversed(range(7))]
    assert page.next_cursor is None


def test_a_cursor_of_one_ordering_is_refused_by_another(workspace: Workspace, spread: list[Memory]) -> None:
    first = selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering="-created", limit=2)
    assert first.next_cursor is not None
    for ordering in ("activation", "retention", "-accessed"):
        with pytest.raises(InvalidInput) as info:
            selectors.memory_list(
                workspace=workspace, filters=MemoryFilters(), ordering=ordering, cursor=first.next_cursor, limit=2
            )
        assert info.value.field == "cursor"


def encoded(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage",
        "%%%",
        encoded(5),
        encoded(["ab"]),
        encoded(["-created", {"dt": "not a date"}, SOME_ID]),
        encoded(["-created", 1.5, SOME_ID]),
        encoded(["-created", {"x": 1}, SOME_ID]),
        encoded(["activation", "high", SOME_ID]),
        encoded(["-created", None, SOME_ID]),
        encoded(["-created", {"dt": T0.isoformat()}, "not-a-uuid"]),
    ],
)
def test_a_forged_cursor_is_a_clear_error(workspace: Workspace, spread: list[Memory], cursor: str) -> None:
    with pytest.raises(InvalidInput) as info:
        for ordering in ("-created", "activation"):
            selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering=ordering, cursor=cursor)
    assert info.value.field == "cursor"


def test_unknown_orderings_and_limits_are_refused(workspace: Workspace) -> None:
    with pytest.raises(InvalidInput) as bad_order:
        selectors.memory_list(workspace=workspace, filters=MemoryFilters(), ordering="content")
    with pytest.raises(InvalidInput) as bad_limit:
        selectors.memory_list(workspace=workspace, filters=MemoryFilters(), limit=501)
    assert (bad_order.value.field, bad_limit.value.field) == ("ordering", "limit")


def contents(workspace: Workspace, **filters: Any) -> set[str]:
    page = selectors.memory_list(workspace=workspace, filters=MemoryFilters(**filters), limit=500)
    return {m.content for m in page.results}


def test_filters_narrow_the_list(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    make_memory("decision jwt", memory_type="decision", tags=("auth", "Arch"), tier="hot", created_at=T0)
    make_memory("fact redis", memory_type="fact", tags=("infra",), pinned=True, created_at=T0 + timedelta(days=1))
    make_memory("old archived", status=Status.ARCHIVED, origin="import:wiki", created_at=T0 - timedelta(days=1))
    compressed = make_memory("compressed one", created_at=T0)
    Memory.objects.filter(id=compressed.id).update(
        compression_tier=CompressionTier.SUMMARY, conflicts_with=[str(uuid.uuid4())]
    )
    make_memory("decision elsewhere", ws=other_workspace, memory_type="decision")

    assert contents(workspace, memory_type="decision") == {"decision jwt"}
    assert contents(workspace, status=Status.ARCHIVED) == {"old archived"}
    assert contents(workspace, tier="hot") == {"decision jwt"}
    assert contents(workspace, compression_tier=CompressionTier.SUMMARY) == {"compressed one"}
    assert contents(workspace, origin="import:") == {"old archived"}
    assert contents(workspace, pinned=True) == {"fact redis"}
    assert contents(workspace, has_conflicts=True) == {"compressed one"}
    assert "compressed one" not in contents(workspace, has_conflicts=False)
    assert len(contents(workspace, has_conflicts=False)) == 3
    assert contents(workspace, created_after=T0, created_before=T0 + timedelta(hours=1)) == {
        "decision jwt",
        "compressed one",
    }
    assert contents(workspace, tags=("auth",)) == {"decision jwt"}
    assert contents(workspace, tags=("auth", "infra")) == set()
    assert contents(workspace, q="redis") == {"fact redis"}
    assert contents(workspace, q="decision", memory_type="decision") == {"decision jwt"}


def test_the_tag_filter_matches_whole_tags_exactly(workspace: Workspace, make_memory: Callable[..., Memory]) -> None:
    make_memory("upper", tags=("Auth",))
    make_memory("longer", tags=("auth-v2",))
    make_memory("quoted", tags=('say "auth"',))
    make_memory("exact", tags=("auth",))
    assert contents(workspace, tags=("auth",)) == {"exact"}
    assert contents(workspace, tags=("Auth",)) == {"upper"}


def test_full_text_filter_is_scoped_to_the_workspace(
    workspace: Workspace, other_workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    make_memory("mine about postgres")
    make_memory("theirs about postgres", ws=other_workspace)
    assert contents(workspace, q="postgres") == {"mine about postgres"}


# -- edges ----------------------------------------------------------------------------------------


def test_edges_of_a_memory_include_both_directions_with_their_ends(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    a, b, c, d = (make_memory(x) for x in "abcd")
    services.edge_link(workspace=workspace, source=a, target=b, edge_type=EdgeType.RELATED, weight=0.5)
    services.edge_link(workspace=workspace, source=c, target=a, edge_type=EdgeType.FOLLOWS)
    services.edge_link(workspace=workspace, source=a, target=d, edge_type=EdgeType.RELATED, weight=2.0)
    services.edge_link(workspace=workspace, source=b, target=c, edge_type=EdgeType.RELATED)
    edges = selectors.edges_of_memory(workspace=workspace, memory=a)
    assert [(e.edge_type, e.source.content, e.target.content) for e in edges] == [
        ("FOLLOWS", "c", "a"),
        ("RELATED", "a", "d"),
        ("RELATED", "a", "b"),
    ]
    assert Edge.objects.count() == 4
