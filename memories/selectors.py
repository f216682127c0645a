"""Reads of workspaces, memories and edges, always scoped to a workspace the caller belongs to.

Full-text search keeps its own vendor branches (`lexical_search`, `_fts_filter`, `_ranked_matches`):
SQLite's FTS5 table and PostgreSQL's stored tsvector are two features with their own queries, statistics
and plans, not two spellings of one query. Every other difference between the backends is a name in the
dialect module (core.sql), whose guard test allows a vendor test in those three functions only.
"""

from __future__ import annotations

import base64
import bisect
import itertools
import json
import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import connection
from django.db.models import BinaryField, BooleanField, Case, F, Q, QuerySet, Value, When
from django.db.models.expressions import RawSQL

from core.errors import Forbidden, InvalidInput, NotFound
from core.sql import json_array_has, planner_needs_index_hints, unindexed, uuid_in
from history.models import Action, EvolutionRecord, RecordLink
from memories import fts_stats
from memories.algorithms.fts import (
    fts5_expression,
    index_tokens,
    only_stop_words,
    query_terms,
    rare_term_subset,
    tsquery_expression,
)
from memories.models import Edge, Membership, Memory, RetrievalEvent, Role, Workspace

Access = Literal["view", "edit", "own"]
_ROLES_FOR: dict[Access, tuple[str, ...]] = {
    "view": (Role.OWNER, Role.EDITOR, Role.VIEWER),
    "edit": (Role.OWNER, Role.EDITOR),
    "own": (Role.OWNER,),
}


@dataclass(frozen=True)
class WorkspaceAccess:
    workspace: Workspace
    role: str

    @property
    def can_edit(self) -> bool:
        return self.role in _ROLES_FOR["edit"]

    @property
    def is_owner(self) -> bool:
        return self.role == Role.OWNER


def workspace_access(*, user: AbstractBaseUser | AnonymousUser, slug: str, require: Access = "view") -> WorkspaceAccess:
    """Return the workspace and the user's role; a non-member gets NotFound, never a hint it exists."""
    if not user.is_authenticated:
        raise NotFound(f"workspace {slug!r} not found", field="workspace")
    # A raw query: this runs on every request, and the ORM's query building cost ~1.2 ms of the ~1.5.
    qn = connection.ops.quote_name
    found = list(
        Workspace.objects.raw(
            f"SELECT w.*, m.{qn('role')} AS member_role FROM {qn(Workspace._meta.db_table)} w "
            f"JOIN {qn(Membership._meta.db_table)} m ON m.{qn('workspace_id')} = w.{qn('id')} "
            f"WHERE m.{qn('user_id')} = %s AND w.{qn('slug')} = %s",
            [user.pk, slug],
        )
    )
    if not found:
        raise NotFound(f"workspace {slug!r} not found", field="workspace")
    workspace = found[0]
    role: str = workspace.member_role  # type: ignore[attr-defined]
    if role not in _ROLES_FOR[require]:
        raise Forbidden(
            f"your role in workspace {slug!r} is {role}; this needs " + " or ".join(_ROLES_FOR[require]),
            field="workspace",
        )
    return WorkspaceAccess(workspace=workspace, role=role)


def workspace_by_slug(*, slug: str) -> Workspace:
    """For management commands, which act as the operator rather than as a member."""
    workspace = Workspace.objects.filter(slug=slug).first()
    if workspace is None:
        raise NotFound(f"workspace {slug!r} not found", field="workspace")
    return workspace


def workspace_list_for_user(*, user: AbstractBaseUser | AnonymousUser) -> list[WorkspaceAccess]:
    if not user.is_authenticated:
        return []
    memberships = Membership.objects.filter(user_id=user.pk).select_related("workspace")
    return [WorkspaceAccess(workspace=m.workspace, role=m.role) for m in memberships.order_by("workspace__slug")]


def parse_memory_id(value: object, *, field: str = "id") -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except (ValueError, TypeError, AttributeError):
        raise InvalidInput(f"{field}: {value!r} is not a memory id (a UUID)", field=field) from None


def memory_get(*, workspace: Workspace, memory_id: object, field: str = "id") -> Memory:
    """Return one memory of `workspace`; an id of another workspace is NotFound like a missing one."""
    mid = parse_memory_id(memory_id, field=field)
    memory = Memory.objects.select_related("score").filter(workspace=workspace, id=mid).first()
    if memory is None:
        raise NotFound(f"{field}: no memory {mid} in workspace {workspace.slug!r}", field=field)
    return memory


def memories_by_ids(*, workspace: Workspace, ids: Sequence[uuid.UUID | str]) -> dict[uuid.UUID, Memory]:
    found: dict[uuid.UUID, Memory] = {}
    id_list = list(ids)
    for start in range(0, len(id_list), 900):
        chunk = id_list[start : start + 900]
        for memory in Memory.objects.select_related("score").filter(workspace=workspace, id__in=chunk):
            found[memory.id] = memory
    return found


# -- full-text search ---------------------------------------------------------------------------


def lexical_search(
    *, workspace: Workspace, query: str, limit: int, statuses: Sequence[str] | None = ("active",)
) -> list[tuple[uuid.UUID, float]]:
    """Return up to `limit` (memory id, score) pairs best first, score higher-is-better (BM25).

    SQLite ranks with FTS5's bm25() (negated, since FTS5 returns smaller-is-better) under the
    workspace's own term statistics (`memories.fts_stats`): the best hits of the shared index, a pool
    twice as deep when other workspaces share it, are rescored. PostgreSQL ranks with ts_rank over
    the stored, GIN-indexed tsvector, which needs no corpus statistics (it is not BM25 but orders the same
    way for short documents), only the rarer terms' matches when they fill the pool (`_pg_ranked`).
    Scores are raw: normalise per query before fusing them with other signals.
    """
    terms = query_terms(query)
    if not terms or limit <= 0:
        return []
    if connection.vendor == "sqlite":
        counts = fts_stats.workspace_counts(workspace.pk)
        pool = limit if counts.whole else 2 * limit + 10
        expression = fts5_expression(terms)
        restriction = _fts_restriction(terms, pool)
        hits = _fts_hits(expression, workspace.pk, pool, statuses, restriction)
        if restriction is not None and len(hits) < pool:
            hits = _fts_hits(expression, workspace.pk, pool, statuses, None)
        return fts_stats.rescored(hits, terms, counts)[:limit]
    return _pg_ranked(workspace.pk, terms, limit, statuses)


Restriction = tuple[str, list[Any]]
"""SQLite: a condition on the full-text table's rowid (``{t}`` stands for its alias) and its parameters."""


def _fts_hits(
    expression: str, workspace_id: int, pool: int, statuses: Sequence[str] | None, restriction: Restriction | None
) -> list[tuple[int, uuid.UUID, float]]:
    if statuses:
        return _fts_ranked_with_status(expression, workspace_id, pool, statuses, restriction)
    return _fts_ranked(expression, workspace_id, pool, restriction)


def _fts_restriction(terms: list[str], pool: int) -> Restriction | None:
    """SQLite: which matches are worth ranking, as PostgreSQL's ``_pg_ranked`` chooses them: FTS5 computes
    bm25() for every match of the query before it sorts, and at 1M memories three words each in thousands
    of rows cost 20 ms a query of a 30 ms context call. When the rarer terms' matches fill the pool, only
    theirs are ranked (still by the whole query); when every term that matches is common, the newest
    matches (by index row, that is by insertion) are. None ranks every match. Counts are of the whole index
    (what a query's cost follows), capped, kept a minute; terms that match nothing are left out."""
    budget = max(_RARE_BUDGET_MIN, _RARE_BUDGET_PER_HIT * pool)
    per_term = [fts5_expression([t]) for t in terms]
    counts = fts_stats.sqlite_term_counts(per_term, cap=budget + 1)
    present = [k for k, count in enumerate(counts) if count > 0]
    if not present:
        return None
    with connection.cursor() as cursor:
        if min(counts[k] for k in present) > budget:
            # The rowid of the N-th newest match: the doclists are in rowid order, read from the end.
            cursor.execute(
                "SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s ORDER BY rowid DESC LIMIT 1 OFFSET %s",
                [fts5_expression([terms[k] for k in present]), _NEWEST_PER_BUDGET * budget - 1],
            )
            floor = cursor.fetchone()
            return ("{t}rowid >= %s", [int(floor[0])]) if floor else None
        subset = rare_term_subset([counts[k] for k in present], pool=pool, budget=budget)
        if subset is None:
            return None
        cursor.execute(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s",
            [fts5_expression([terms[present[k]] for k in subset])],
        )
        rowids = [int(row[0]) for row in cursor.fetchall()]
    return ("{t}rowid IN (" + ",".join(["%s"] * len(rowids)) + ")", rowids)


def _restricted(restriction: Restriction | None, alias: str) -> tuple[str, list[Any]]:
    if restriction is None:
        return "", []
    return " AND " + restriction[0].format(t=alias), restriction[1]


# PostgreSQL ranks a query's matches in full only while the rarer terms' matches are fewer than
# _RARE_BUDGET_PER_HIT rows per wanted hit (at least _RARE_BUDGET_MIN): ranking a match reads its
# row, and one common word in a query made it read thousands (bench: 1,816 rows, 13 ms, for a name in 1.5%
# of 100k memories; 340 rows, 3 ms, without it). When every term is that common, the newest
# _NEWEST_PER_BUDGET x budget matches are ranked (a query of three words each in most of 20k turns
# ranked all 20k: 110 ms).
_RARE_BUDGET_PER_HIT = 4
_RARE_BUDGET_MIN = 400
_NEWEST_PER_BUDGET = 2


def _pg_ranked(
    workspace_id: int, terms: list[str], limit: int, statuses: Sequence[str] | None
) -> list[tuple[uuid.UUID, float]]:
    """PostgreSQL: the ``limit`` best (memory id, ts_rank) of the workspace for ``terms``.

    Matched and ranked from the stored ``search_vector`` (ts_rank: ts_rank_cd's cover density cost
    three to seven times as much per row, for the same order on short texts). The rows ranked may be
    only those of the rarer terms (``rare_term_subset`` over kept per-term counts), or, when every term
    is common, the newest matches, still scored by the whole query; the whole query runs when either
    gives fewer than ``limit`` rows.
    """
    config = _pg_config(terms)
    expression = tsquery_expression(terms)
    if not expression:
        return []
    match, newest = expression, 0
    if config == "'english'":
        budget = max(_RARE_BUDGET_MIN, _RARE_BUDGET_PER_HIT * limit)
        per_term = [tsquery_expression([t]) for t in terms]
        counts = fts_stats.pg_term_counts(workspace_id, per_term, config=config, cap=budget + 1)
        if min([c for c in counts if c > 0] or [0]) > budget:
            newest = _NEWEST_PER_BUDGET * budget
        elif (subset := rare_term_subset(counts, pool=limit, budget=budget)) is not None:
            match = " | ".join(per_term[k] for k in subset)
    rows = _pg_ranked_rows(workspace_id, config, match, expression, limit, statuses, newest=newest)
    if (match != expression or newest) and len(rows) < limit:
        rows = _pg_ranked_rows(workspace_id, config, expression, expression, limit, statuses)
    return rows


def _pg_ranked_rows(
    workspace_id: int,
    config: str,
    match: str,
    rank: str,
    limit: int,
    statuses: Sequence[str] | None,
    *,
    newest: int = 0,
) -> list[tuple[uuid.UUID, float]]:
    """The ``limit`` rows matching ``match`` best ranked by ``rank`` (among the ``newest`` latest matches)."""
    vector = _pg_vector(config, "m.")
    params: list[Any] = [match, workspace_id]
    status_sql = ""
    if statuses:
        status_sql = " AND m.status IN (" + ",".join(["%s"] * len(statuses)) + ")"
        params.extend(statuses)
    hits = f"SELECT m.id, {vector} AS v, m.created_at FROM memories_memory m "
    hits += f"WHERE {vector} @@ to_tsquery({config}, %s) AND m.workspace_id = %s{status_sql}"
    rank_sql = f"SELECT h.id, ts_rank(h.v, r, 32) AS score{{count}} FROM ({{hits}}) h, to_tsquery({config}, %s) r "
    rank_sql += "ORDER BY score DESC, h.id LIMIT %s"
    with connection.cursor() as cursor:
        if not newest or (":*" in match and "&" in match):
            # Prefixes that must all match (the list's every-term search) walk the created_at index: GIN ANDs
            # the bitmaps of every word each prefix begins (116 ms for three common ones at 1M memories, where
            # their OR takes 3 ms), and the list asks for them only when each is common, so the walk meets the
            # matches it wants within a few thousand rows.
            walk = " ORDER BY m.created_at DESC, m.id LIMIT %s" if newest else ""
            cursor.execute(
                rank_sql.format(count="", hits=hits + walk), [*params, *([newest] if newest else []), rank, limit]
            )
            return [(as_uuid(r[0]), float(r[1])) for r in cursor.fetchall()]
        # The window's matches once (MATERIALIZED: the planner would otherwise walk the created_at index
        # for the LIMIT), the newest of them ranked, and how many the window held.
        windowed = "WITH w AS MATERIALIZED ({hits}) " + rank_sql.format(
            count=", (SELECT count(*) FROM w)", hits="SELECT * FROM w ORDER BY created_at DESC, id LIMIT %s"
        )
        span = _pg_workspace_span(cursor, workspace_id)
        share = 1.0 if span is None else _NEWEST_MARGIN * newest / _pg_estimated_rows(cursor, hits, params)
        while True:
            floor = span.floor(share) if span is not None else None
            bounded = hits + (" AND m.created_at >= %s" if floor is not None else "")
            bound = [floor] if floor is not None else []
            cursor.execute(windowed.format(hits=bounded), [*params, *bound, newest, rank, limit])
            rows = cursor.fetchall()
            matched = int(rows[0][2]) if rows else 0
            if floor is None or matched >= newest:
                break
            share *= _pg_window_growth(newest, matched)
            if share >= _NEWEST_WHOLE_SHARE:
                # Most of the span: every match, read through the GIN index (a bound that excludes little makes
                # the planner estimate a scan of the table).
                share = 1.0
    return [(as_uuid(r[0]), float(r[1])) for r in rows]


# The newest matches of a query whose every term is common: PostgreSQL has no index that gives a term's
# matches newest first (SQLite reads the doclist from its end). Walking the (workspace, created_at) index
# backwards and testing each row's tsvector read 50,911 rows for 1,040 matches at 1M memories (640 ms);
# instead the newest matches are taken from a window of the workspace's newest rows, bounded by created_at,
# so that the GIN index's bitmap and the created_at range's are intersected before any row is read (the
# window ends at the newest row, so once it holds the matches wanted its newest are the newest). It is a
# share of the workspace's time span: the share that would hold _NEWEST_MARGIN x the matches wanted were the
# planner's estimate of the query's matches right and the matches spread evenly in time; while it holds
# fewer, it grows by powers of _NEWEST_WINDOW_STEP (enough for the density just seen, at most
# _NEWEST_MAX_GROWTH at once) up to the whole span. Each row of the window costs a step of the created_at
# index (13 ms for 164k rows), each match a read of its row. A window counted in rows instead (the N-th
# newest row's created_at) visits the heap for each of its rows on a page not all-visible, and the newest
# rows are the ones updated most: 140 ms for 66k rows.
_NEWEST_MARGIN = 1.25
_NEWEST_WHOLE_SHARE = 0.5
_NEWEST_WINDOW_STEP = 2
_NEWEST_MAX_GROWTH = 64
_NEWEST_SPAN_SECONDS = 60.0


@dataclass(frozen=True)
class _Span:
    """The created_at range of a workspace's memories."""

    oldest: datetime
    newest: datetime

    def floor(self, share: float) -> datetime | None:
        """The lower bound of a window of ``share`` of the span, ending at its newest row; None for the whole."""
        if share >= 1.0 or self.newest <= self.oldest:
            return None
        return self.newest - (self.newest - self.oldest) * share


_spans: dict[tuple[str, int], tuple[_Span | None, float]] = {}


def _pg_window_growth(wanted: int, matched: int) -> int:
    """The factor (a power of _NEWEST_WINDOW_STEP, at most _NEWEST_MAX_GROWTH) by which a window that held
    ``matched`` of ``wanted`` matches grows: enough for _NEWEST_MARGIN x ``wanted`` at the density seen."""
    growth = _NEWEST_WINDOW_STEP
    while growth < _NEWEST_MAX_GROWTH and matched * growth < _NEWEST_MARGIN * wanted:
        growth *= _NEWEST_WINDOW_STEP
    return growth


def _pg_workspace_span(cursor: Any, workspace_id: int) -> _Span | None:
    """The workspace's span (its oldest and newest created_at: two reads of the ends of its created_at
    index), kept a minute; None for an empty workspace."""
    key = (str(connection.settings_dict.get("NAME")), workspace_id)
    now = time.monotonic()
    kept = _spans.get(key)
    if kept is not None and now - kept[1] < _NEWEST_SPAN_SECONDS:
        return kept[0]
    cursor.execute(
        "SELECT min(created_at), max(created_at) FROM memories_memory WHERE workspace_id = %s", [workspace_id]
    )
    oldest, newest = cursor.fetchone()
    span = None if oldest is None else _Span(oldest, newest)
    if len(_spans) > 4096:
        _spans.clear()
    _spans[key] = (span, now)
    return span


def _pg_estimated_rows(cursor: Any, sql: str, params: list[Any]) -> int:
    """How many rows the planner expects ``sql`` to return (at least 1): an EXPLAIN, which plans the query
    without running it (a tsvector column's statistics estimate a query's matches within tens of percent)."""
    cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
    plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan
    return max(1, int(plan[0]["Plan"]["Plan Rows"]))


def _fts_ranked_with_status(
    expression: str, workspace_id: int, limit: int, statuses: Sequence[str], restriction: Restriction | None = None
) -> list[tuple[int, uuid.UUID, float]]:
    """SQLite: the ``limit`` best BM25 hits (FTS rowid, memory id, score) of one workspace in ``statuses``.

    The join reads the memory row of every match, not only of the returned ones (callers that filter
    statuses themselves pass statuses=None and skip it).
    """
    marks = ",".join(["%s"] * len(statuses))
    where, params = _restricted(restriction, "f.")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT f.rowid, f.memory_id, -bm25(memories_fts) AS score FROM memories_fts f "
            "JOIN memories_memory m ON m.id = f.memory_id "
            f"WHERE memories_fts MATCH %s{where} AND f.workspace_id = %s AND m.status IN ({marks}) "
            "ORDER BY bm25(memories_fts), f.rowid LIMIT %s",
            [expression, *params, workspace_id, *statuses, limit],
        )
        return [(int(rowid), as_uuid(mid), float(score)) for rowid, mid, score in cursor.fetchall()]


def embedding_of(model: str) -> Case:
    """A query column: the stored vector when `model` (an Embedder.name) made it, else NULL, so that vectors
    of two models are never compared (a reader treats another model's vector as missing)."""
    return Case(When(embedding_model=model, then=F("embedding")), default=Value(None), output_field=BinaryField())


def as_uuid(value: Any) -> uuid.UUID:
    """A UUID column value as the driver returns it (UUID on PostgreSQL, hex text on SQLite) or id text."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


# Share of a workspace's rows among its best full-text hits, as last seen by this process
# (`_fts_ranked`); a workspace not seen yet counts as 1.0.
_FTS_SHARE: dict[int, float] = {}
_FTS_SHARE_MIN = 0.5
_FTS_REPROBE_EVERY = 64
_fts_queries = itertools.count()


def _fts_ranked(
    expression: str, workspace_id: int, limit: int, restriction: Restriction | None = None
) -> list[tuple[int, uuid.UUID, float]]:
    """SQLite: the ``limit`` best BM25 hits (FTS rowid, memory id, score) of one workspace, any status.

    ``workspace_id`` is an UNINDEXED column: filtering on it reads the stored row of every match (a
    third of the query for a common word), where ranking the whole index by rowid and reading only the
    best rows reads a few hundred. That answer is exact when the best ``wanted`` rows hold ``limit`` rows of
    the workspace or are all the matches; otherwise the filtered query runs as well. ``wanted`` grows as
    the workspace's share of hits shrinks; below half, the filtered query runs directly (re-checked every
    ``_FTS_REPROBE_EVERY`` queries, since a workspace's share changes as it grows).
    """
    share = _FTS_SHARE.get(workspace_id, 1.0)
    where, params = _restricted(restriction, "")
    if share >= _FTS_SHARE_MIN or next(_fts_queries) % _FTS_REPROBE_EVERY == 0:
        wanted = math.ceil(limit * 1.2 / max(share, _FTS_SHARE_MIN)) + 8
        with connection.cursor() as cursor:
            # Ranked by rowid alone, then the best rows' stored columns: selecting memory_id in the ranking
            # query itself reads the stored row of every match for the sort (~1 ms of 5.8 measured).
            cursor.execute(
                "SELECT best.id, f.memory_id, f.workspace_id, -best.score FROM (SELECT rowid AS id, bm25(memories_fts) "
                f"AS score FROM memories_fts WHERE memories_fts MATCH %s{where} ORDER BY score, rowid LIMIT %s) best "
                "JOIN memories_fts f ON f.rowid = best.id ORDER BY best.score, best.id",
                [expression, *params, wanted],
            )
            rows = cursor.fetchall()
        own = [(rowid, mid, score) for rowid, mid, space, score in rows if space == workspace_id]
        if len(rows) == wanted:
            _FTS_SHARE[workspace_id] = len(own) / wanted
        if len(own) >= limit or len(rows) < wanted:
            return [(int(rowid), as_uuid(mid), float(score)) for rowid, mid, score in own[:limit]]
    where, params = _restricted(restriction, "f.")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT f.rowid, f.memory_id, -bm25(memories_fts) FROM memories_fts f WHERE memories_fts MATCH %s{where} "
            "AND f.workspace_id = %s ORDER BY bm25(memories_fts), f.rowid LIMIT %s",
            [expression, *params, workspace_id, limit],
        )
        return [(int(rowid), as_uuid(mid), float(score)) for rowid, mid, score in cursor.fetchall()]


# A prefix is searched as the indexed terms it begins while it begins at most this many (a shorter prefix
# in a large vocabulary stays a prefix query: slower per probe, never wrong).
_PREFIX_TERMS_MAX = 32


def _list_clauses(terms: list[str]) -> tuple[list[str], list[str]]:
    """SQLite: one FTS5 clause per term of a list search, and the indexed terms its prefix added.

    The list also finds the words a term begins ("Rabbit" finds RabbitMQ). As a prefix query
    (``"rabbit"*``) FTS5 merges the doclists of every term the stem begins before it returns a row, and
    again for each single-row probe: the walk plans probe ~200 rows a page, 5.7 ms each at 1M memories
    (1.7-2.4 s a page). So the index's own terms that the stem begins are read from the vocabulary
    table (memories_fts_vocab, migration 0013: a skip from term to term, ~0.3 ms each, one query for all
    terms) and searched by name: ``"rabbit" OR "rabbitmq"``, whose probes seek each doclist (0.02 ms).
    FTS5 stems a prefix as it stems a word ("running"* is "run"*), so the range is the term's stem; a
    term whose name the tokenizer would not keep as it is (a stem of a stem that differs), or a prefix
    beginning more than _PREFIX_TERMS_MAX terms, stays a prefix query.
    """
    stems: dict[int, str] = {}
    for k, term in enumerate(terms):
        tokens = index_tokens(term)
        if fts5_expression([term], prefix=True).endswith("*") and len(tokens) == 1:
            stems[k] = tokens[0]
    found: dict[int, list[str]] = {k: [] for k in stems}
    if stems:
        seeds = ", ".join(["(%s, %s, %s)"] * len(stems))
        params: list[Any] = []
        for k, stem in stems.items():
            params.extend([k, stem, stem + "\U0010ffff"])
        # Each step seeks the first term after the last one found (term || char(1)): "term > x" walked
        # every instance of x (31 ms for a common word), ">=" past it seeks.
        sql = (
            f"WITH RECURSIVE p(k, lo, hi) AS (VALUES {seeds}), "
            "t(k, term, n) AS (SELECT k, (SELECT term FROM memories_fts_vocab WHERE term >= p.lo AND term < p.hi "
            "LIMIT 1), 1 FROM p UNION ALL SELECT t.k, (SELECT term FROM memories_fts_vocab v WHERE v.term >= "
            "t.term || char(1) AND v.term < p.hi LIMIT 1), t.n + 1 FROM t JOIN p ON p.k = t.k "
            f"WHERE t.term IS NOT NULL AND t.n <= {_PREFIX_TERMS_MAX}) "
            "SELECT k, term FROM t WHERE term IS NOT NULL"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            for k, term in cursor.fetchall():
                found[int(k)].append(str(term))
    clauses: list[str] = []
    added: list[str] = []
    for k, term in enumerate(terms):
        names = found.get(k)
        if names is None:
            clauses.append(fts5_expression([term]))
            continue
        # The term's own stem is what the quoted term matches; the others are searched by their names.
        others = [n for n in names if n != stems[k]]
        if len(names) > _PREFIX_TERMS_MAX or any(index_tokens(n) != [n] for n in others):
            clauses.append(fts5_expression([term], prefix=True))
        else:
            added.extend(others)
            clauses.append(fts5_expression([term, *others]))
    return clauses, added


def _fts_filter(workspace: Workspace, query: str, *, plan_probes: bool = False) -> Q:
    terms = query_terms(query)
    if not terms:
        return Q()
    if connection.vendor == "sqlite":
        # A list search also finds the words a term begins: "Rabbit" finds the memories about RabbitMQ.
        # The page (plan_probes) names those words (_list_clauses); elsewhere one query merges the prefix once.
        expression = " OR ".join(_list_clauses(terms)[0]) if plan_probes else fts5_expression(terms, prefix=True)
        plan = _fts_plan(expression) if plan_probes else "gather"
        # Reading memory_id/workspace_id of every match from the FTS content table costs seconds for
        # a common word at 1M memories, so common words walk the list's ordered index instead and test
        # each row through the memory's FTS rowid: against the match set built from the doclist
        # (rowids only) while it is small, or by seeking the row in the doclist once the set is so
        # large that building it costs more than the ~limit / share rows the walk reads.
        if plan == "walk_exists":
            return Q(
                RawSQL(
                    "EXISTS (SELECT 1 FROM memories_fts WHERE memories_fts MATCH %s AND rowid = "
                    "(SELECT fts_rowid FROM memories_fts_map WHERE memory_id = memories_memory.id))",
                    (expression,),
                    output_field=BooleanField(),
                )
            )
        if plan == "walk_in":
            return Q(
                RawSQL(
                    "(SELECT fts_rowid FROM memories_fts_map WHERE memory_id = memories_memory.id) IN "
                    "(SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s)",
                    (expression,),
                    output_field=BooleanField(),
                )
            )
        raw = RawSQL(
            "SELECT memory_id FROM memories_fts WHERE memories_fts MATCH %s AND workspace_id = %s",
            (expression, workspace.pk),
        )
    else:
        config = _pg_config(terms)
        raw = RawSQL(
            "SELECT id FROM memories_memory WHERE workspace_id = %s "
            f"AND {_pg_vector(config)} @@ to_tsquery({config}, %s)",
            (workspace.pk, tsquery_expression(terms, prefix=True)),
        )
    return Q(id__in=raw)


# A value is "common" when it covers at least 1/_COMMON_SHARE of the rows (and at least _COMMON_MIN): then
# walking an ordered index and filtering finds a page within ~limit * _COMMON_SHARE rows, while
# gathering every matching row and sorting it grows with the match count. Below the line the
# gather-and-sort plan touches at most the threshold's worth of rows. A search term matching at
# least 1/_VERY_COMMON_SHARE of all rows is checked by doclist seeks (measured at 1M memories: a
# word in 24% of them 31 ms instead of 48 ms, two such words 34 ms instead of 102 ms).
_COMMON_SHARE = 200
_VERY_COMMON_SHARE = 5
_COMMON_MIN = 1000
# Whether a common term is very common is estimated from _SAMPLE_WINDOWS runs of up to _SAMPLE_WIDTH
# FTS rowids spread evenly over the index: counting the matches exactly up to 1/5 of 1M rows read
# 200k doclist entries (15-30 ms per search), the sample reads ~2% of them (~3 ms). A wrong guess
# near the line only picks the slower of two walks, never a gather of every match.
_SAMPLE_WINDOWS = 8
_SAMPLE_WIDTH = 1000

FtsPlan = Literal["gather", "walk_in", "walk_exists"]


def _fts_plan(expression: str) -> FtsPlan:
    """SQLite: how to filter the list by an FTS5 expression, from its share of all indexed memories.

    One query: the matches counted up to the common threshold, then (only for a common term) the
    matches among a sample of rowid windows. Counted over the whole FTS table (its doclists are cheap
    to walk; filtering by workspace is not), so in a very uneven multi-workspace database the share
    is global.
    """
    n = _SAMPLE_WINDOWS
    windows = " + ".join(
        "(SELECT count(*) FROM memories_fts WHERE memories_fts MATCH %s "
        f"AND rowid >= p.first + p.span * {k} / {n} AND rowid < p.first + p.span * {k} / {n} + p.width)"
        for k in range(n)
    )
    # MATERIALIZED: the bounded count runs once although the outer query names it twice.
    sql = (
        "WITH b AS MATERIALIZED (SELECT coalesce((SELECT max(rowid) FROM memories_fts), 0) AS top, "
        "coalesce((SELECT min(rowid) FROM memories_fts), 1) AS first), "
        f"p AS MATERIALIZED (SELECT first, top - first + 1 AS span, min({_SAMPLE_WIDTH}, (top - first + 1) / {n}) "
        f"AS width, max({_COMMON_MIN}, top / {_COMMON_SHARE}) AS common, "
        "(SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH %s "
        f"LIMIT (SELECT max({_COMMON_MIN}, top / {_COMMON_SHARE}) FROM b))) AS found FROM b) "
        f"SELECT common, found, width * {n}, CASE WHEN found >= common THEN {windows} ELSE 0 END FROM p"
    )
    if "*" in expression:
        # A prefix query (one beginning more words than _list_clauses names) merges its doclists for each
        # query it is in: once for the match set of walk_in, but once per window of the sample and once
        # per row walk_exists probes (5.7 ms a probe at 1M memories).
        sql = sql.replace(f"CASE WHEN found >= common THEN {windows} ELSE 0 END", "0")
        n = 0
    with connection.cursor() as cursor:
        cursor.execute(sql, [expression] * (n + 1))
        common, found, sampled, matched = (int(v) for v in cursor.fetchone())
    if found < common:
        return "gather"
    return "walk_exists" if n and sampled and matched * _VERY_COMMON_SHARE >= sampled else "walk_in"


def _type_filter(workspace: Workspace, memory_type: str) -> Q:
    """Filter by type so that SQLite pages a common type along the list's ordered index.

    SQLite's planner prefers the (workspace, memory_type, subject) index for an equality on the type
    and then sorts every memory of that type (125k of 1M: 0.5 s) even when LIMIT 51 would be served
    by walking the ordering index. For a common type the unary plus (`+memory_type`) keeps the type
    index out of the plan; a rare type keeps it, since walking the ordering index would then read
    most of the workspace. PostgreSQL's planner weighs LIMIT itself.
    """
    if not planner_needs_index_hints():
        return Q(memory_type=memory_type)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memories_memory WHERE workspace_id = %s AND memory_type = %s "
            "LIMIT %s)",
            (workspace.pk, memory_type, _COMMON_MIN * 5),
        )
        common = int(cursor.fetchone()[0]) >= _COMMON_MIN * 5
    if not common:
        return Q(memory_type=memory_type)
    column = '"memories_memory"."memory_type"'
    return Q(RawSQL(f"{unindexed(column)} = %s", (memory_type,), output_field=BooleanField()))


def _pg_config(terms: list[str]) -> str:
    """The text search configuration literal for `terms`.

    'english' matches the GIN index (mem_content_fts). Its stop list would empty a query made only of
    stop words ("who is it"), so such a query scans the workspace with 'simple', which keeps them, as
    SQLite's FTS5 table does.
    """
    return "'simple'" if only_stop_words(terms) else "'english'"


def _pg_vector(config: str, alias: str = "") -> str:
    """The tsvector to match and rank under ``config``: the stored, GIN-indexed ``search_vector`` column
    for 'english' (migration 0011; ranking re-parsed text five times slower), parsed on the fly for
    'simple'."""
    if config == "'english'":
        return f"{alias}search_vector"
    return f"to_tsvector({config}, {alias}content)"


# -- listing with keyset pagination ---------------------------------------------------------------

ORDERINGS: dict[str, tuple[str, bool]] = {
    # name: (column, descending)
    "created": ("created_at", False),
    "-created": ("created_at", True),
    "updated": ("updated_at", False),
    "-updated": ("updated_at", True),
    "activation": ("activation_sort_key", False),
    "-activation": ("activation_sort_key", True),
    # In MemoryScore (`memory.score.retention_score`).
    "retention": ("score__retention_score", False),
    "-retention": ("score__retention_score", True),
    "accessed": ("last_accessed", False),
    "-accessed": ("last_accessed", True),
}
DEFAULT_ORDERING = "-created"
# Best match first: the list's search ranked as ranked retrieval ranks it (see _ranked_matches); the
# default ordering of a list with a search (default_ordering).
RELEVANCE = "relevance"


def default_ordering(filters: MemoryFilters) -> str:
    """The ordering a list gets when none is asked for: best match when it searches, else newest first."""
    return RELEVANCE if query_terms(filters.q) else DEFAULT_ORDERING


@dataclass(frozen=True)
class MemoryFilters:
    memory_type: str = ""
    status: str = ""
    tier: str = ""
    compression_tier: int | None = None
    origin: str = ""
    pinned: bool | None = None
    has_conflicts: bool | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    q: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class MemoryPage:
    results: list[Memory]
    next_cursor: str | None
    # The cursor that pages back from this page's first row (None on the first page).
    previous_cursor: str | None = None
    # Best-match order only: False when the search has more matches than were ranked (see _ranked_matches).
    ranked_all: bool = True


_NULLABLE_COLUMNS = frozenset({"last_accessed"})
_SCORE_PREFIX = "score__"
_DATETIME_COLUMNS = frozenset({"created_at", "updated_at", "last_accessed"})


def encode_cursor(ordering: str, value: Any, memory_id: uuid.UUID) -> str:
    """Opaque cursor naming its ordering, so a cursor reused under another ordering is refused."""
    if isinstance(value, datetime):
        value = {"dt": value.isoformat()}
    raw = json.dumps([ordering, value, memory_id.hex], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, ordering: str) -> tuple[Any, uuid.UUID]:
    """Return the (sort value, id) a cursor resumes after; InvalidInput for anything not made by
    encode_cursor for `ordering` (a value of the wrong type would otherwise fail inside the ORM)."""
    invalid = InvalidInput("cursor: not a cursor returned by this list", field="cursor")
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        decoded = json.loads(base64.urlsafe_b64decode(padded.encode()))
        if not isinstance(decoded, list) or len(decoded) != 3:
            raise invalid
        name, value, mid = decoded
        if name != ordering or not isinstance(mid, str):
            raise invalid
        column = ORDERINGS[ordering][0] if ordering in ORDERINGS else ""
        if value is None:
            if column not in _NULLABLE_COLUMNS:
                raise invalid
        elif column in _DATETIME_COLUMNS:
            if not isinstance(value, dict) or not isinstance(value.get("dt"), str):
                raise invalid
            value = datetime.fromisoformat(value["dt"])
            if value.tzinfo is None:
                raise invalid
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise invalid
        return value, uuid.UUID(mid)
    except (ValueError, TypeError, KeyError):
        raise invalid from None


def memory_queryset(*, workspace: Workspace, filters: MemoryFilters, plan_probes: bool = False) -> QuerySet[Memory]:
    """The filtered memories of a workspace.

    `plan_probes` (SQLite) spends one bounded query per type or search filter to pick the plan that
    stays fast at 1M memories for common and rare values alike (see _type_filter, _fts_is_common).
    """
    qs = Memory.objects.filter(workspace=workspace)
    if filters.memory_type:
        qs = qs.filter(
            _type_filter(workspace, filters.memory_type) if plan_probes else Q(memory_type=filters.memory_type)
        )
    if filters.status:
        qs = qs.filter(status=filters.status)
    if filters.tier:
        qs = qs.filter(tier=filters.tier)
    if filters.compression_tier is not None:
        qs = qs.filter(compression_tier=filters.compression_tier)
    if filters.origin:
        qs = qs.filter(origin__startswith=filters.origin)
    if filters.pinned is not None:
        qs = qs.filter(pinned=filters.pinned)
    if filters.has_conflicts is not None:
        qs = qs.exclude(conflicts_with=[]) if filters.has_conflicts else qs.filter(conflicts_with=[])
    if filters.created_after is not None:
        qs = qs.filter(created_at__gte=filters.created_after)
    if filters.created_before is not None:
        qs = qs.filter(created_at__lt=filters.created_before)
    for tag in filters.tags:
        # Whole, case-sensitive tags on both backends.
        qs = qs.filter(json_array_has("tags", "memories_memory.tags", tag))
    if filters.q:
        qs = qs.filter(_fts_filter(workspace, filters.q, plan_probes=plan_probes))
    return qs


def memory_list(
    *,
    workspace: Workspace,
    filters: MemoryFilters,
    ordering: str = DEFAULT_ORDERING,
    cursor: str | None = None,
    limit: int = 50,
    plan_probes: bool = False,
    backward: bool = False,
) -> MemoryPage:
    """Return one page ordered by `ordering` then id; the cursor is the last row's (value, id).

    Keyset pagination keeps every page an index range scan, so page 1,000 costs what page 1 does.
    Rows whose sort column is NULL (never accessed) sort last in both directions and are paged by id.
    With `backward`, the page is the `limit` rows just before `cursor` (the same walk, the other way), still
    in list order; `previous_cursor` is None once the first row is reached.
    """
    if ordering not in ORDERINGS and ordering != RELEVANCE:
        names = ", ".join(sorted([*ORDERINGS, RELEVANCE]))
        raise InvalidInput(f"ordering: {ordering!r} is not one of {names}", field="ordering")
    if not 1 <= limit <= 500:
        raise InvalidInput("limit: must be between 1 and 500", field="limit")
    if ordering == RELEVANCE:
        terms = query_terms(filters.q)
        if terms:
            return _ranked_list(workspace, filters, terms, cursor=cursor, limit=limit, backward=backward)
        # Nothing to rank by: the list is newest first, and so are its cursors.
        ordering = DEFAULT_ORDERING
    column, desc = ORDERINGS[ordering]
    attribute = column.removeprefix(_SCORE_PREFIX)
    backward = backward and bool(cursor)
    # Walking back is walking forward in the reversed order.
    desc_walk = desc != backward
    op = "lt" if desc_walk else "gt"
    nullable = column == "last_accessed"
    qs = memory_queryset(workspace=workspace, filters=filters, plan_probes=plan_probes)
    # The same id; named on the scores row when sorting by a score, so its index covers the whole order.
    tie = "id"
    if column != attribute:
        # The scores row's own workspace column: the join becomes an inner one and SQLite walks the
        # score_ws_retention index in order, as it walks the memory table's indexes for other orderings.
        qs = qs.filter(score__workspace=workspace)
        tie = "score__memory_id"
    # Rows whose sort column is NULL, read after the page's other rows when those run out (see below).
    null_tail: QuerySet[Memory] | None = None
    if cursor:
        value, last_id = decode_cursor(cursor, ordering)
        if value is None:
            # Inside the NULL tail: page it by id alone; walking back, every non-NULL row comes before it.
            tail = Q(**{f"{column}__isnull": True, f"id__{op}": last_id})
            qs = qs.filter(tail | Q(**{f"{column}__isnull": False}) if backward else tail)
        else:
            if nullable and not backward:
                # The NULL rows follow the cursor too, but "column <= value OR column IS NULL" is no index
                # range: PostgreSQL walked the ordered index from its first row (100k memories, half way
                # down "recently accessed": 175 ms) and SQLite gathered and sorted every row past the
                # cursor (page 2: 2 s). The tail is a second query, run only once the non-NULL rows no
                # longer fill the page (1M memories, any depth: 20-36 ms a whole request on either backend).
                null_tail = qs.filter(**{f"{column}__isnull": True})
            after = Q(**{f"{column}__{op}": value}) | Q(**{column: value, f"{tie}__{op}": last_id})
            # The redundant bound (column <= value) is what lets SQLite start the index walk at the
            # cursor; with the OR alone it walked from the first row, so page 10,000 read 500k rows.
            bound = Q(**{f"{column}__{op}e": value})
            qs = qs.filter(bound, after)
    # NULLS LAST only where NULLs exist: on PostgreSQL "DESC NULLS LAST" is not the backward walk of an
    # ascending index, so on a NOT NULL column it would put a sort step in front of every page.
    nulls = ({"nulls_first": True} if backward else {"nulls_last": True}) if nullable else {}
    primary = F(column).desc(**nulls) if desc_walk else F(column).asc(**nulls)
    qs = qs.order_by(primary, f"-{tie}" if desc_walk else tie)
    rows = list(qs.select_related("score").defer("embedding", "snapshots")[: limit + 1])
    if null_tail is not None and len(rows) <= limit:
        null_tail = null_tail.order_by("-id" if desc_walk else "id").select_related("score")
        rows += null_tail.defer("embedding", "snapshots")[: limit + 1 - len(rows)]
    more = len(rows) > limit
    rows = rows[:limit]

    def cursor_of(memory: Memory) -> str:
        holder = memory.score if column != attribute else memory  # a score sorts from the scores row
        return encode_cursor(ordering, getattr(holder, attribute), memory.id)

    if backward:
        rows.reverse()
        # The row the cursor named follows this page; more rows before it mean a page before this one.
        return MemoryPage(
            results=rows,
            next_cursor=cursor_of(rows[-1]) if rows else cursor,
            previous_cursor=cursor_of(rows[0]) if rows and more else None,
        )
    return MemoryPage(
        results=rows,
        next_cursor=cursor_of(rows[-1]) if more else None,
        previous_cursor=cursor_of(rows[0]) if rows and cursor else None,
    )


# Best match ranks the newest RANK_DEPTH matches of the search, and when there are more, the newest
# RANK_EVERY_DEPTH of those that hold every term (see _ranked_matches).
RANK_DEPTH = 500
RANK_EVERY_DEPTH = 100


def _hex(value: Any) -> str:
    """A memory id as 32 hex digits: SQLite returns the stored text as it is, PostgreSQL a UUID."""
    return value.hex if isinstance(value, uuid.UUID) else str(value)


def _ranked_matches(workspace: Workspace, terms: list[str]) -> tuple[list[tuple[str, float]], bool]:
    """The matches of a list search to rank, as (memory id hex, score) best first, score higher-is-better,
    ties by id; and whether they are every match.

    Scored as ranked retrieval scores (``lexical_search``): on SQLite FTS5's BM25 of the list's expression
    (its terms and the indexed words they begin, ``_list_clauses``), again with the workspace's own term
    statistics when other workspaces share the index (``fts_stats.rescored``); on PostgreSQL ts_rank of the
    stored vector for the prefix tsquery. Ranking a match reads its row (bm25() its sizes, ts_rank its
    vector): ranking every match of a word in a quarter of 1M memories took 0.35-0.87 s on SQLite, so at
    most RANK_DEPTH + RANK_EVERY_DEPTH rows are ranked: the newest RANK_DEPTH matches, and when those are
    not all, the newest RANK_EVERY_DEPTH that hold every term too (BM25's best for a search of several
    words: "jwt session cookie" finds the memories naming all three first however common "session" is).
    A match outside both is not listed in this order; the date orders list every match. A row scores the
    same from either query (BM25 sums over the expression's phrases whatever joins them; PostgreSQL ranks
    both by the OR query). Costs at 1M memories, words each in a quarter of them: bm25() first counts each
    phrase's rows (its idf), ~6 ms a phrase and query on SQLite; PostgreSQL walks the newest memories
    until enough hold every term, 45k rows (156 ms) for 500 rows of three such words, hence the smaller
    RANK_EVERY_DEPTH.
    """
    depth = RANK_DEPTH
    found: list[tuple[Any, Any, float]] = []
    if connection.vendor == "sqlite":
        clauses, added = _list_clauses(terms)
        newest = (
            "SELECT rowid, memory_id, -bm25(memories_fts) FROM memories_fts WHERE memories_fts MATCH %s "
            "AND workspace_id = %s ORDER BY rowid DESC LIMIT %s"
        )
        expressions = [" OR ".join(clauses), " AND ".join(f"({c})" for c in clauses)]
        with connection.cursor() as cursor:
            for k, expression in enumerate(expressions[: 2 if len(clauses) > 1 else 1]):
                cursor.execute(newest, [expression, workspace.pk, RANK_EVERY_DEPTH if k else depth])
                rows = cursor.fetchall()
                found += rows
                if k == 0 and len(rows) < depth:
                    break
        ranked_all = len(found) < depth
        counts = fts_stats.workspace_counts(workspace.pk)
        if not counts.whole:
            unique = {int(rowid): (as_uuid(mid), float(score)) for rowid, mid, score in found}
            hits = [(rowid, mid, score) for rowid, (mid, score) in unique.items()]
            hits.sort(key=lambda hit: (-hit[2], hit[1].hex))
            rescored = fts_stats.rescored(hits, list(dict.fromkeys([*terms, *added])), counts)
            found = [(None, mid, score) for mid, score in rescored]
    else:
        config = _pg_config(terms)
        any_term = tsquery_expression(terms, prefix=True)
        if not any_term:
            return [], True
        found = [
            (None, m, v)
            for m, v in _pg_ranked_rows(workspace.pk, config, any_term, any_term, depth, None, newest=depth)
        ]
        ranked_all = len(found) < depth
        parts = [p for p in (tsquery_expression([t], prefix=True) for t in terms) if p]
        if not ranked_all and len(parts) > 1:
            every_term = " & ".join(f"({p})" for p in parts)
            every = RANK_EVERY_DEPTH
            rows = _pg_ranked_rows(workspace.pk, config, every_term, any_term, every, None, newest=every)
            found += [(None, m, v) for m, v in rows]
    scores = {_hex(mid): float(score) for _, mid, score in found}
    return sorted(scores.items(), key=lambda hit: (-hit[1], hit[0])), ranked_all


def _ranked_list(
    workspace: Workspace,
    filters: MemoryFilters,
    terms: list[str],
    *,
    cursor: str | None,
    limit: int,
    backward: bool,
) -> MemoryPage:
    """One page of a list search in best-match order: keyset on (score, id) over a bounded ranked set.

    The ranked set (``_ranked_matches``: a bounded number of matches, scored) is made again for each
    page, narrowed by the list's other filters in one query of ids, and the page is the ``limit`` rows
    after the cursor's (score, id) in (score descending, id) order, read in one more query: five to seven
    queries a page whatever its depth (the prefixes' words, one or two ranking queries, the index's newest
    row for its statistics, the ids, the rows), and no page repeats or skips a row while the memories do
    not change. A write between two pages can move scores (BM25 weighs a term by how many rows hold it),
    so a row near the cursor may then appear on both pages or on neither; the date orders page by stored
    columns and do not.
    """
    scored, ranked_all = _ranked_matches(workspace, terms)
    kept: set[str] = set()
    if scored:
        others = memory_queryset(workspace=workspace, filters=replace(filters, q=""))
        # One parameter, however many ids. On PostgreSQL from the array, not "id = ANY(array)": with a type
        # filter the planner ANDed a bitmap of the type index (125k rows at 1M memories, 19.5 ms) where
        # looking up each id costs 2.4 ms.
        within = others.filter(uuid_in('"memories_memory"."id"', [mid for mid, _ in scored]))
        # Raw ids, not model values: converting ~1,000 of them to UUIDs cost more than the query.
        sql, params = within.order_by().values_list("id").query.sql_with_params()
        with connection.cursor() as db:
            db.execute(sql, params)
            kept = {_hex(row[0]) for row in db.fetchall()}
    order = [(mid, score) for mid, score in scored if mid in kept]
    keys = [(-score, mid) for mid, score in order]
    backward = backward and bool(cursor)
    start, end = 0, len(order)
    if cursor:
        value, last_id = decode_cursor(cursor, RELEVANCE)
        # The cursor's row itself is on neither side (it may have left the set since: the bound still holds).
        key = (-float(value), last_id.hex)
        if backward:
            end = bisect.bisect_left(keys, key)
        else:
            start = bisect.bisect_right(keys, key)
    if backward:
        chosen = order[max(end - limit, 0) : end]
        more = end - limit > 0
    else:
        chosen = order[start : start + limit]
        more = start + limit < len(order)
    page_ids = [uuid.UUID(mid) for mid, _ in chosen]
    rows_by_id = (
        {
            m.id: m
            for m in Memory.objects.filter(id__in=page_ids).select_related("score").defer("embedding", "snapshots")
        }
        if page_ids
        else {}
    )
    rows = [rows_by_id[mid] for mid in page_ids if mid in rows_by_id]
    score_of = {uuid.UUID(mid): score for mid, score in chosen}

    def cursor_of(memory: Memory) -> str:
        return encode_cursor(RELEVANCE, score_of[memory.id], memory.id)

    if backward:
        return MemoryPage(
            results=rows,
            next_cursor=cursor_of(rows[-1]) if rows else cursor,
            previous_cursor=cursor_of(rows[0]) if rows and more else None,
            ranked_all=ranked_all,
        )
    return MemoryPage(
        results=rows,
        next_cursor=cursor_of(rows[-1]) if rows and more else None,
        previous_cursor=cursor_of(rows[0]) if rows and cursor else None,
        ranked_all=ranked_all,
    )


def memory_count(*, workspace: Workspace, filters: MemoryFilters, cap: int = 10_000) -> tuple[int, bool]:
    """How many memories match `filters`, counted up to `cap`; (count, True) when there are more.

    Bounded so a count never costs more than reading `cap` index entries, whatever the workspace's size.
    """
    qs = memory_queryset(workspace=workspace, filters=filters, plan_probes=True)
    found = qs.order_by()[: cap + 1].count()
    return min(found, cap), found > cap


def edges_of_memory(*, workspace: Workspace, memory: Memory) -> list[Edge]:
    """Edges touching `memory` in both directions, neighbours loaded in the same query."""
    return list(
        Edge.objects.filter(workspace=workspace)
        .filter(Q(source=memory) | Q(target=memory))
        .select_related("source", "target")
        .defer("source__embedding", "target__embedding", "source__snapshots", "target__snapshots")
        .order_by("edge_type", "-weight", "id")
    )


# -- memory browser reads -------------------------------------------------------------------------


@dataclass(frozen=True)
class EdgePage:
    edges: list[Edge]
    more: bool


def memory_edges_page(*, workspace: Workspace, memory: Memory, limit: int = 200) -> EdgePage:
    """At most `limit` edges touching `memory` (by type, strongest first), neighbours' text joined in.

    A hub (an entity mentioned in 10k turns) would otherwise render every edge on its detail page.
    Only the neighbour columns the page shows are loaded.
    """
    shown = ("id", "content", "memory_type", "status")
    rows = list(
        Edge.objects.filter(workspace=workspace)
        .filter(Q(source=memory) | Q(target=memory))
        .select_related("source", "target")
        .only(
            "id",
            "source_id",
            "target_id",
            "edge_type",
            "weight",
            "co_retrieval_count",
            *(f"source__{c}" for c in shown),
            *(f"target__{c}" for c in shown),
        )
        .order_by("edge_type", "-weight", "id")[: limit + 1]
    )
    return EdgePage(edges=rows[:limit], more=len(rows) > limit)


def workspace_has_memories(*, workspace: Workspace) -> bool:
    """True when the workspace holds any memory at all (decides the teaching empty state)."""
    return Memory.objects.filter(workspace=workspace).exists()


@dataclass(frozen=True)
class MemoryHistory:
    records: list[EvolutionRecord]
    more: bool


def memory_history(*, workspace: Workspace, memory_id: uuid.UUID, limit: int = 50) -> MemoryHistory:
    """The newest `limit` applied (not dry-run) records that touched a memory, newest first.

    One query through RecordLink's (memory_id, record) index; the actor is joined for display.
    """
    rows = list(
        EvolutionRecord.objects.filter(workspace=workspace, links__memory_id=memory_id, dry_run=False)
        .select_related("actor")
        .order_by("-pk")[: limit + 1]
    )
    return MemoryHistory(records=rows[:limit], more=len(rows) > limit)


@dataclass(frozen=True)
class Original:
    """The FULL text of a compressed memory and where it is kept: a legacy snapshot of the row (record None)
    or the ``before`` of the record that took it from FULL."""

    content: str
    at: str
    record_id: int | None = None


_ORIGINAL_CHUNK = 500


def compressed_originals(*, workspace: Workspace, memories: Sequence[Memory]) -> dict[uuid.UUID, Original]:
    """The FULL text of each compressed memory of ``memories`` that kept one (a FULL memory maps to nothing).

    The compression ladder keeps the FULL text once, in the record of the step that left FULL: the row keeps
    only its current rung (a TOMBSTONE its marker). That record is the newest applied one that saw the memory
    go from compression_tier 0 with a content to a tier above 0 (a compress step, or the revert of a rehydrate,
    whose before is what the rehydrate restored). Rows compressed before this rule kept every replaced rung in
    ``snapshots``; their FULL snapshot is used as it is. Two queries per 500 memories looked up.
    """
    found: dict[uuid.UUID, Original] = {}
    wanted: list[uuid.UUID] = []
    for memory in memories:
        if memory.compression_tier == 0:
            continue
        snap = next(
            (s for s in memory.snapshots or () if isinstance(s, dict) and s.get("tier") == 0),
            None,
        )
        if snap is not None and isinstance(snap.get("content"), str):
            found[memory.id] = Original(str(snap["content"]), str(snap.get("at", "")))
        else:
            wanted.append(memory.id)
    for start in range(0, len(wanted), _ORIGINAL_CHUNK):
        chunk = wanted[start : start + _ORIGINAL_CHUNK]
        links: dict[int, list[uuid.UUID]] = {}
        # Only a compress step or a revert (of a rehydrate, or the redo of a compress) can take a memory from
        # FULL: the decay and boost records of every cycle, which touch most memories, are never read.
        for rid, mid in RecordLink.objects.filter(
            memory_id__in=chunk,
            record__workspace=workspace,
            record__dry_run=False,
            record__action__in=[Action.COMPRESS, Action.REVERT],
        ).values_list("record_id", "memory_id"):
            links.setdefault(rid, []).append(mid)
        left = set(chunk)
        order = sorted(links, reverse=True)
        for batch in range(0, len(order), _ORIGINAL_CHUNK):
            if not left:
                break
            ids = order[batch : batch + _ORIGINAL_CHUNK]
            rows = {
                pk: (before, after, at)
                for pk, before, after, at in EvolutionRecord.objects.filter(pk__in=ids).values_list(
                    "pk", "before", "after", "timestamp"
                )
            }
            for rid in ids:
                before, after, at = rows[rid]
                for mid in links[rid]:
                    if mid not in left:
                        continue
                    old, new = before.get(str(mid)), after.get(str(mid))
                    if (
                        isinstance(old, dict)
                        and isinstance(new, dict)
                        and old.get("compression_tier") == 0
                        and isinstance(old.get("content"), str)
                        and isinstance(new.get("compression_tier"), int)
                        and new["compression_tier"] > 0
                    ):
                        found[mid] = Original(old["content"], at.isoformat(), rid)
                        left.discard(mid)
    return found


def memory_retrievals(*, memory: Memory, limit: int = 200) -> list[RetrievalEvent]:
    """The newest `limit` retrieval events of a memory (the flushed boosts), newest first."""
    return list(
        RetrievalEvent.objects.filter(memory=memory)
        .only("id", "created_at", "source", "rank", "query")
        .order_by("-created_at")[:limit]
    )


@dataclass(frozen=True)
class GraphNode:
    id: uuid.UUID
    content: str
    memory_type: str
    status: str
    hops: int


@dataclass(frozen=True)
class GraphEdge:
    id: int
    source: uuid.UUID
    target: uuid.UUID
    edge_type: str
    weight: float


@dataclass(frozen=True)
class Neighbourhood:
    nodes: list[GraphNode]
    edges: list[GraphEdge]
    truncated: bool


def memory_neighbourhood(*, workspace: Workspace, memory: Memory, max_nodes: int = 40) -> Neighbourhood:
    """The memory, its neighbours and their neighbours (two hops), capped at `max_nodes` nodes.

    Two queries: the edges touching the memory, then the edges touching its first-hop neighbours.
    Strongest edges are kept first when the cap cuts, so the picture shows what matters most.
    """
    columns = ("id", "content", "memory_type", "status")
    nodes: dict[uuid.UUID, GraphNode] = {
        memory.id: GraphNode(memory.id, memory.content, memory.memory_type, memory.status, 0)
    }
    edges: dict[int, GraphEdge] = {}
    truncated = False

    def take(rows: QuerySet[Edge], hops: int) -> None:
        nonlocal truncated
        for edge in rows:
            for end in (edge.source, edge.target):
                if end.id not in nodes:
                    if len(nodes) >= max_nodes:
                        truncated = True
                        break
                    nodes[end.id] = GraphNode(end.id, end.content, end.memory_type, end.status, hops)
            else:
                edges[edge.pk] = GraphEdge(edge.pk, edge.source_id, edge.target_id, edge.edge_type, edge.weight)

    def touching(ids: list[uuid.UUID]) -> QuerySet[Edge]:
        related = [f"source__{c}" for c in columns] + [f"target__{c}" for c in columns]
        return (
            Edge.objects.filter(workspace=workspace)
            .filter(Q(source_id__in=ids) | Q(target_id__in=ids))
            .select_related("source", "target")
            .only("id", "source_id", "target_id", "edge_type", "weight", *related)
            .order_by("-weight", "id")
        )

    take(touching([memory.id])[: max_nodes * 2], 1)
    first_hop = [nid for nid, node in nodes.items() if node.hops == 1]
    if first_hop and len(nodes) < max_nodes:
        take(touching(first_hop[:900])[: max_nodes * 4], 2)
    return Neighbourhood(nodes=list(nodes.values()), edges=list(edges.values()), truncated=truncated)


LIVE_COLUMNS: tuple[str, ...] = (
    "id",
    "activation_score",
    "activation_last_boost_at",
    "activation_half_life_hours",
    "activation_boost_count",
    "access_count",
    "last_accessed",
)
"""What memories.fragments.activation_push reads: a push loads these and nothing more."""


def memories_activation(*, workspace: Workspace, ids: Sequence[uuid.UUID]) -> list[Memory]:
    """Just the columns of the live figures of some memories (the polling fallback and the socket push)."""
    return list(Memory.objects.filter(workspace=workspace, id__in=list(ids)[:900]).only(*LIVE_COLUMNS))
