"""SQLite: BM25 of one workspace's full-text hits under that workspace's own term statistics.

Every workspace shares one FTS5 table, and FTS5's bm25() weighs a term by how rare it is in the whole
table. A workspace's ranking would then change whenever another workspace writes (a name that is rare
here but common there sinks), and the order of one's own results would say something about what others
hold. So when other workspaces share the index, the best hits of the shared index (a pool deeper than
asked for) are scored again with Okapi BM25 over the workspace's own row count and term counts, the
document lengths averaged over the whole index (FTS5 keeps that average; its effect is bounded by BM25's
length normalisation). Term frequencies come from the hits' text, tokenized as the index tokenizes it.

Term counts cost a pass over a term's matches, so they are kept per workspace and term while the index
grows by less than ``_STALE_GROWTH`` (and ``_STALE_SECONDS`` at most); a rolled-back or deleted newest
row makes them stale at once. When a workspace holds the whole index nothing is scored again: FTS5's own
scores are then exactly the workspace's.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import connection

from memories.algorithms.fts import bm25, fts5_expression, fts5_idf, term_counts

# Term counts stay valid while the index grows by at most 5% (+ 64 rows for small indexes), for 5 min.
_STALE_GROWTH = 0.05
_STALE_ROWS = 64
_STALE_SECONDS = 300.0
_MAX_WORKSPACES = 256
_MAX_TERMS_PER_WORKSPACE = 20_000


@dataclass
class WorkspaceCounts:
    """Counts of one workspace, taken when the index's newest row was ``top`` (``top_id`` its memory)."""

    workspace_id: int
    database: str
    top: int
    top_id: str | None
    taken: float
    rows: int
    average_length: float
    own_rows: int
    terms: dict[str, int] = field(default_factory=dict)

    @property
    def whole(self) -> bool:
        """The workspace holds every indexed row: FTS5's own statistics are the workspace's."""
        return self.own_rows >= self.rows


_counts: dict[int, WorkspaceCounts] = {}
_lock = threading.Lock()


def workspace_counts(workspace_id: int) -> WorkspaceCounts:
    """The workspace's row counts against the whole index (kept; one cheap query when nothing changed)."""
    database = str(connection.settings_dict.get("NAME"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT rowid, memory_id FROM memories_fts ORDER BY rowid DESC LIMIT 1")
        newest = cursor.fetchone()
        top, top_id = (int(newest[0]), str(newest[1])) if newest else (0, None)
        with _lock:
            kept = _counts.get(workspace_id)
        if kept is not None and _still_valid(kept, database, top, top_id, cursor):
            return kept
        rows, tokens = _index_totals(cursor)
        cursor.execute("SELECT count(*) FROM memories_memory WHERE workspace_id = %s", [workspace_id])
        own_rows = int(cursor.fetchone()[0])
    fresh = WorkspaceCounts(
        workspace_id=workspace_id,
        database=database,
        top=top,
        top_id=top_id,
        taken=time.monotonic(),
        rows=rows,
        average_length=tokens / rows if rows else 0.0,
        own_rows=own_rows,
    )
    with _lock:
        if len(_counts) >= _MAX_WORKSPACES:
            _counts.clear()
        _counts[workspace_id] = fresh
    return fresh


def rescored(
    hits: Sequence[tuple[int, uuid.UUID, float]], terms: Sequence[str], counts: WorkspaceCounts
) -> list[tuple[uuid.UUID, float]]:
    """``hits`` (FTS rowid, memory id, FTS5 score higher-is-better) of one workspace, scored with the
    workspace's statistics, best first; ties keep the order of ``hits``. ``hits`` itself when the
    workspace is the whole index."""
    if not hits or not terms or counts.whole:
        return [(mid, score) for _, mid, score in hits]
    missing = [t for t in terms if t not in counts.terms]
    if missing:
        _count_terms(counts, missing)
    text = _texts([rowid for rowid, _, _ in hits])
    counts_of, lengths = term_counts([text.get(rowid, "") for rowid, _, _ in hits], terms)
    idf = fts5_idf(max(counts.own_rows, 1), [counts.terms[t] for t in terms])
    scores = bm25(counts_of, lengths, counts.average_length or max(float(lengths.mean()), 1.0), idf)
    order = np.argsort(-scores, kind="stable")
    return [(hits[i][1], float(scores[i])) for i in order.tolist()]


def forget() -> None:
    """Drop every kept count (tests that rebuild the index under the same row ids)."""
    with _lock:
        _counts.clear()
        _terms.clear()


def _still_valid(kept: WorkspaceCounts, database: str, top: int, top_id: str | None, cursor: Any) -> bool:
    if kept.database != database or time.monotonic() - kept.taken > _STALE_SECONDS:
        return False
    if top == kept.top:
        return top_id == kept.top_id
    if top < kept.top or top > kept.top * (1 + _STALE_GROWTH) + _STALE_ROWS:
        return False
    # The index grew a little: valid if the row that was newest is still the same memory (a rolled-back
    # transaction gives its row ids to other memories).
    cursor.execute("SELECT memory_id FROM memories_fts WHERE rowid = %s", [kept.top])
    then = cursor.fetchone()
    return then is not None and str(then[0]) == kept.top_id


def _index_totals(cursor: Any) -> tuple[int, int]:
    """Rows and tokens of the whole index, from the totals FTS5 keeps in its data table (row 1: the
    row count, then each column's token count, as SQLite varints), or counted if that cannot be read."""
    cursor.execute("SELECT block FROM memories_fts_data WHERE id = 1")
    found = cursor.fetchone()
    if found is not None and found[0]:
        values = _varints(bytes(found[0]))
        if len(values) >= 2:
            return values[0], values[1]
    cursor.execute(
        "SELECT count(*), coalesce(sum(length(content) - length(replace(content, ' ', '')) + 1), 0) FROM memories_fts"
    )
    rows, tokens = cursor.fetchone()
    return int(rows), int(tokens)


def _varints(block: bytes) -> list[int]:
    """SQLite's variable-length integers: 7 bits a byte, high bit set while more follow, 8 bits in a 9th."""
    values: list[int] = []
    at = 0
    while at < len(block):
        value = 0
        for i in range(9):
            if at >= len(block):
                return values
            byte = block[at]
            at += 1
            if i == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        values.append(value)
    return values


def _count_terms(counts: WorkspaceCounts, terms: Sequence[str]) -> None:
    """The workspace's rows matching each term (one pass over the term's matches in the index)."""
    found: dict[str, int] = {}
    with connection.cursor() as cursor:
        for term in terms:
            cursor.execute(
                "SELECT count(*) FROM memories_fts WHERE memories_fts MATCH %s AND workspace_id = %s",
                [fts5_expression([term]), counts.workspace_id],
            )
            found[term] = int(cursor.fetchone()[0])
    with _lock:
        if len(counts.terms) + len(found) > _MAX_TERMS_PER_WORKSPACE:
            counts.terms.clear()
        counts.terms.update(found)


def _texts(rowids: Sequence[int]) -> dict[int, str]:
    """The indexed text of each FTS row (row ids travel as one JSON parameter: no bound-parameter limit)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT rowid, content FROM memories_fts WHERE rowid IN (SELECT value FROM json_each(%s))",
            [json.dumps(list(rowids))],
        )
        return {int(rowid): str(content or "") for rowid, content in cursor.fetchall()}


# -- how many rows each term matches, capped -------------------------------------------------------------

# A term's count is kept for a minute per (database, scope, term, cap); counts only choose which terms'
# matches are ranked (memories.algorithms.fts.rare_term_subset), so a stale one costs speed, never a
# match: when the chosen matches return too few rows the whole query runs.
_TERM_SECONDS = 60.0
_TERMS_MAX = 50_000
_terms: dict[tuple[str, int | None, str, int], tuple[int, float]] = {}


def pg_term_counts(workspace_id: int, expressions: Sequence[str], *, config: str, cap: int) -> list[int]:
    """PostgreSQL: how many memories of the workspace match each to_tsquery expression, counted up to
    ``cap`` (a count of ``cap`` means at least that many)."""
    part = (
        "SELECT %s::int, (SELECT count(*) FROM (SELECT 1 FROM memories_memory WHERE workspace_id = %s "
        f"AND search_vector @@ to_tsquery({config}, %s) LIMIT %s) t)"
    )
    return _kept_counts(workspace_id, expressions, cap, part, lambda k, e: [k, workspace_id, e, cap])


def sqlite_term_counts(expressions: Sequence[str], *, cap: int) -> list[int]:
    """SQLite: how many rows of the whole full-text index match each FTS5 expression, counted up to ``cap``
    (a capped count reads at most ``cap`` entries of a doclist)."""
    part = "SELECT %s, (SELECT count(*) FROM (SELECT 1 FROM memories_fts WHERE memories_fts MATCH %s LIMIT %s))"
    return _kept_counts(None, expressions, cap, part, lambda k, e: [k, e, cap])


def _kept_counts(
    scope: int | None,
    expressions: Sequence[str],
    cap: int,
    part: str,
    params_of: Callable[[int, str], list[Any]],
) -> list[int]:
    """The kept count of each expression, the ones not kept counted by ``part`` (one SELECT of the index
    and the count, its parameters from ``params_of``) in one UNION ALL query."""
    database = str(connection.settings_dict.get("NAME"))
    now = time.monotonic()
    found: dict[str, int] = {}
    with _lock:
        for expression in expressions:
            kept = _terms.get((database, scope, expression, cap))
            if kept is not None and now - kept[1] < _TERM_SECONDS:
                found[expression] = kept[0]
    missing = [e for e in dict.fromkeys(expressions) if e not in found]
    if missing:
        params = [p for k, expression in enumerate(missing) for p in params_of(k, expression)]
        with connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join([part] * len(missing)), params)
            rows = cursor.fetchall()
        with _lock:
            if len(_terms) + len(rows) > _TERMS_MAX:
                _terms.clear()
            for k, count in rows:
                found[missing[k]] = int(count)
                _terms[(database, scope, missing[k], cap)] = (int(count), now)
    return [found[e] for e in expressions]
