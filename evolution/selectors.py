"""Reads for evolution: whole-workspace arrays for the evolvers, runs, records and memory history.

Evolver inputs are loaded with `values_list` (one query each, no model instances) and handed to the
pure algorithms as plain columns; everything is scoped to one workspace.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from django.db import connection
from django.db.models import BooleanField, ExpressionWrapper, Max, Q, QuerySet
from django.db.models.sql.constants import MULTI

from core.errors import InvalidInput, NotFound
from core.sql import EpochSeconds, IdText, json_key_text, single_writer, uuid_hex, values_stored_as_text
from evolution.models import EvolutionRun, RunStatus
from history.models import EvolutionRecord, RecordLink
from memories.models import (
    Edge,
    EdgeType,
    Memory,
    MemoryScore,
    MemoryType,
    RetrievalEvent,
    RetrievalSource,
    Status,
    Workspace,
)
from memories.selectors import workspace_by_slug as workspace_by_slug  # the commands of this app read it here

# Retrieval sources that mean a person or agent actually used the result (see docs/evolution.md, hub
# bias): the query inspector's dry reads are left out of profiles and of CO_RETRIEVED counts.
USED_SOURCES: tuple[str, ...] = (
    RetrievalSource.SEARCH,
    RetrievalSource.GET,
    RetrievalSource.CONTEXT,
    RetrievalSource.HELPFUL,
)
# metadata key holding the CRC-32 of the embedding the InterferenceBasedConsolidation evolver last
# compared (see evolution.evolvers.enhanced): rows whose marker differs are the new or changed ones.
INTERFERENCE_MARKER = "interference_checked"
K = TypeVar("K", str, uuid.UUID)
IntArray = npt.NDArray[np.intp]
FloatArray = npt.NDArray[np.float64]
# Ids per IN (...) query: under SQLite's default limit of host parameters on old builds.
_IN_CHUNK = 900
# Id pairs per join query: a few large queries beat many small ones by far (PostgreSQL sends them as a
# VALUES list, three parameters each, under its limit of 65535).
_PAIR_CHUNK = 20_000


def _raw_rows(queryset: QuerySet[Any, Any]) -> list[tuple[Any, ...]]:
    """Rows of a values_list query as the driver returns them, without Django's per-value converters.

    Used for whole-workspace reads whose columns are already plain: floats, integers, text (ids via
    IdText, JSON as text, decoded here by the caller), bytes. Booleans come back as 0/1 on SQLite.
    Django 5.2 selects values_list columns in the order given, so rows need no reordering.
    """
    compiler = queryset.query.get_compiler(using=queryset.db)
    return [row for chunk in compiler.execute_sql(MULTI) for row in chunk]


# (start, stop) of each group of the 32 hex digits and where it lands in the 36-character form.
_ID_GROUPS = ((0, 8, 0), (8, 12, 9), (12, 16, 14), (16, 20, 19), (20, 32, 24))
_DASH = ord("-")


def id_texts(values: Sequence[Any]) -> list[str]:
    """Canonical id text ("8-4-4-4-12") of raw UUID column values: 32 hex digits on SQLite (Django's
    storage there), UUID objects on PostgreSQL.

    The evolvers read ids raw and format them here rather than with `IdText` in SQL: SQLite builds the
    text with five substr() calls and eight concatenations per row (~1.2 us), where one numpy pass over
    the joined digits costs ~0.4 us an id (80k ids: 94 ms of SQL against 35 ms here).
    """
    n = len(values)
    try:
        joined = "".join(values)
    except TypeError:  # not all text: UUID objects from PostgreSQL
        joined = ""
    # Every key 32 characters: none shorter, and 32 each on average.
    if n and len(joined) == 32 * n and min(map(len, values)) == 32 and joined.isascii():
        digits = np.frombuffer(joined.encode("ascii"), dtype=np.uint8).reshape(n, 32)
        out = np.full((n, 36), _DASH, dtype=np.uint8)
        for start, stop, at in _ID_GROUPS:
            out[:, at : at + stop - start] = digits[:, start:stop]
        texts: list[str] = out.view("S36").ravel().astype("U36").tolist()
        return texts
    return [f"{v[:8]}-{v[8:12]}-{v[12:16]}-{v[16:20]}-{v[20:]}" if isinstance(v, str) else str(v) for v in values]


def _id_rows(queryset: QuerySet[Any, Any], *id_columns: int) -> list[tuple[Any, ...]]:
    """`_raw_rows` with the raw UUID values of `id_columns` turned into canonical text (`id_texts`)."""
    rows = _raw_rows(queryset)
    if not rows:
        return rows
    if id_columns == (0,):
        return [(mid, *row[1:]) for mid, row in zip(id_texts([row[0] for row in rows]), rows, strict=True)]
    out = [list(row) for row in rows]
    for k in id_columns:
        for row, text in zip(out, id_texts([row[k] for row in rows]), strict=True):
            row[k] = text
    return [tuple(row) for row in out]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


# -- evolver cursors --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvolverCursor:
    """What the last applied, not reverted, successful run of an evolver left behind."""

    state: dict[str, Any]
    ran_at: datetime | None


def evolver_cursor(*, workspace: Workspace, name: str) -> EvolverCursor:
    """The state saved by the newest applied run in which `name` succeeded (empty when there is none).

    Runs are scanned newest first and stop at the first match, so the cost is the number of recent
    runs that did not include this evolver.
    """
    runs = (
        EvolutionRun.objects.filter(workspace=workspace, dry_run=False)
        .exclude(status=RunStatus.REVERTED)
        .order_by("-started_at")
        .values_list("started_at", "summary")
    )
    for started_at, summary in runs.iterator(chunk_size=20):
        for entry in (summary or {}).get("evolvers", []):
            if entry.get("name") == name and entry.get("status") == "ok":
                return EvolverCursor(state=dict(entry.get("state") or {}), ran_at=started_at)
    return EvolverCursor(state={}, ran_at=None)


# -- evolver inputs -------------------------------------------------------------------------------


def working_buffer(*, workspace: Workspace) -> list[tuple[str, str, float, str, list[str], float]]:
    """Active working memories: (id, content, created_at epoch seconds, subject, tags, confidence), oldest
    first."""
    rows = _raw_rows(
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.WORKING, status=Status.ACTIVE)
        .order_by("created_at", "id")
        .values_list(IdText("id"), "content", EpochSeconds("created_at"), "subject", "tags", "confidence")
    )
    return [
        (mid, content, created, subject, _json(tags), confidence)
        for mid, content, created, subject, tags, confidence in rows
    ]


def decay_rows(
    *, workspace: Workspace, memory_types: Sequence[str]
) -> list[tuple[str, float, float, float | None, float | None, float, bool]]:
    """Active memories of `memory_types`: (id, retention, stability, last_accessed, valid_from, created_at,
    pinned), times as epoch seconds."""
    queryset = Memory.objects.filter(
        workspace=workspace, status=Status.ACTIVE, memory_type__in=list(memory_types)
    ).values_list(
        "id",
        "score__retention_score",
        "stability",
        EpochSeconds("last_accessed"),
        EpochSeconds("valid_from"),
        EpochSeconds("created_at"),
        "pinned",
    )
    return [(*row[:6], bool(row[6])) for row in _id_rows(queryset, 0)]


def embedding_rows(*, workspace: Workspace, model: str) -> list[tuple[str, float | None, bytes, str | None]]:
    """Active memories with an embedding of `model` (an Embedder.name), oldest first: (id, retention,
    embedding bytes, interference marker or None); retention is None for a memory without a scores row.

    The retention comes from one read of the scores' (workspace, retention, memory) index, matched by key in
    a dict: joined in SQL, each memory in creation order looked its scores row up at a random place of the
    key index and of the table (raw SQLite, 80k memories: 610 ms joined, 350 + 70 ms apart).
    """
    rows = (
        Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, embedding__isnull=False, embedding_model=model)
        .order_by("created_at", "id")
        .values_list("id", "embedding", _marker())
    )
    raw = _raw_rows(rows)
    retention: dict[Any, float] = dict(
        _raw_rows(MemoryScore.objects.filter(workspace=workspace).order_by().values_list("memory", "retention_score"))
    )
    keys = [row[0] for row in raw]
    return [
        (mid, ret, bytes(blob), marker if marker is None or marker.__class__ is str else str(marker))
        for mid, ret, (_, blob, marker) in zip(id_texts(keys), map(retention.get, keys), raw, strict=True)
    ]


def _marker() -> Any:
    """The interference marker of metadata, without decoding a JSON value per row in Python.

    On SQLite one json_extract (a number comes back as a number, made text by the caller): Django's KT
    there parsed the metadata three times per row (~50-100 ms more on 80k memories); see `json_key_text`.
    """
    return json_key_text("metadata", INTERFERENCE_MARKER)


def retention_rows(*, workspace: Workspace) -> list[tuple[str, float, float, Any]]:
    """Active memories: (id, retention, created_at as epoch seconds, retrieval_profile as the driver returns
    it: JSON text on SQLite, decode with `_json`).

    Left encoded: the strengthening evolver decodes only the profiles it may change (a fifth of 100k).
    """
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE).values_list(
        "id", "score__retention_score", EpochSeconds("created_at"), "score__retrieval_profile"
    )
    return _id_rows(rows, 0)


def active_retention(*, workspace: Workspace) -> list[tuple[str, float]]:
    """Active memories: (id, retention), in the order `retention_rows` gives them.

    Inside a cycle the previous evolver may have handed them over (`hand_over_active_retention`): they are
    taken instead of read when nothing can have changed them since.
    """
    handed = _HANDOFF.get()
    if handed is not None:
        offered = handed.take(workspace)
        if offered is not None:
            return offered
    rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE).values_list("id", "score__retention_score")
    return _id_rows(rows, 0)


# -- reads handed from one evolver to the next ----------------------------------------------------


@dataclass
class _Offer:
    workspace_id: int
    data_version: int
    rows: list[tuple[str, float]]


class CycleHandoff:
    """Whole-workspace reads one evolver of a cycle leaves for the next, instead of the next reading them
    again: the retention strengthening evolver has just read and rewritten the retention of every active
    memory, and the Hebbian evolver after it needs exactly that (80k memories: a 0.4-0.5 s read).

    An offer is taken by the next evolver only (`advance` drops it otherwise, and drops the offer of an
    evolver that failed, whose writes were rolled back), for the workspace it was made for, and only on
    SQLite while no other connection has committed since it was made: `PRAGMA data_version` is the same in
    the taker's transaction as in the maker's (the connection's own commits do not change it; another
    connection's commits, and a truncating checkpoint, do). Elsewhere nothing is offered.
    """

    def __init__(self) -> None:
        self.made: _Offer | None = None
        self.available: _Offer | None = None
        # Set by the runner while an evolver plans outside a transaction (its writes commit in units
        # afterwards, evolution.runner): data_version then compares commits since the offer all the same.
        self.planning = False

    def offer(self, workspace: Workspace, rows: list[tuple[str, float]]) -> None:
        if single_writer() and (connection.in_atomic_block or self.planning):
            self.made = _Offer(workspace.pk, _data_version(), rows)

    def take(self, workspace: Workspace) -> list[tuple[str, float]] | None:
        offer, self.available = self.available, None
        if offer is None or offer.workspace_id != workspace.pk:
            return None
        if not (connection.in_atomic_block or self.planning):
            return None
        return offer.rows if offer.data_version == _data_version() else None

    def advance(self, *, succeeded: bool) -> None:
        """Between evolvers: what the one that just ran offered (if it succeeded) becomes available."""
        self.available = self.made if succeeded else None
        self.made = None


_HANDOFF: ContextVar[CycleHandoff | None] = ContextVar("evolution_cycle_handoff", default=None)


@contextmanager
def cycle_handoff() -> Iterator[CycleHandoff]:
    """The handoff of one cycle (the runner wraps a cycle in it); outside, offers are ignored."""
    handoff = CycleHandoff()
    token = _HANDOFF.set(handoff)
    try:
        yield handoff
    finally:
        _HANDOFF.reset(token)


def hand_over_active_retention(*, workspace: Workspace, rows: list[tuple[str, float]]) -> None:
    """Offer (id, retention) of every active memory, in `retention_rows` order, as they stand once the
    caller's transaction commits, to the next evolver's `active_retention`."""
    handed = _HANDOFF.get()
    if handed is not None:
        handed.offer(workspace, rows)


def _data_version() -> int:
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA data_version")
        (version,) = cursor.fetchone()
    return int(version)


def metadata_of(*, workspace: Workspace, ids: Sequence[K]) -> dict[K, dict[str, Any]]:
    """metadata of the given memories (ids as UUIDs or their text), keyed by the ids as given."""
    wanted = {str(i): i for i in ids}
    keys = list(wanted)
    found: dict[K, dict[str, Any]] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        rows = Memory.objects.filter(workspace=workspace, id__in=keys[start : start + _IN_CHUNK]).values_list(
            IdText("id"), "metadata"
        )
        found.update((wanted[key], _json(metadata)) for key, metadata in _raw_rows(rows))
    return found


@dataclass(frozen=True)
class RetrievalAggregates:
    """Per-memory retrieval counts over the events up to `now` (used sources only), as columns: entry k
    of every array belongs to memory_ids[k]; last_at holds epoch seconds of each memory's newest event."""

    memory_ids: list[str]
    total: IntArray
    search: IntArray
    rank_sum: IntArray
    top1: IntArray
    in_short: IntArray
    in_lookback: IntArray
    last_at: FloatArray


def retrieval_aggregates(
    *,
    workspace: Workspace,
    now: datetime,
    lookback_days: float,
    short_days: float,
    memory_ids: Sequence[str] | None = None,
) -> RetrievalAggregates:
    """Per-memory counts over the workspace's retrieval events up to `now` (used sources only): one scan
    of the events in (workspace, created_at) index order, counted with numpy. Search events (source
    search) carry the ranks; every used source counts in total. With `memory_ids` only those memories'
    events are read (by the (memory, created_at) index, _IN_CHUNK ids a query): the incremental refresh of
    retrieval profiles (evolution.retrieval_stats) reads the few memories whose profile can have changed.

    The database compares each time with the window bounds and converts it to epoch seconds (no datetime
    is parsed in Python); the newest time of a memory is the maximum of those epochs, the same value as
    converting the newest time text. A GROUP BY in SQL measured 0.90 s on the 100k bench workspace (164k
    events: it walked the memory index and looked every event up in the table); the scan and the
    counting take ~0.3 s.
    """
    is_search = Q(source=RetrievalSource.SEARCH)
    events = (
        RetrievalEvent.objects.filter(workspace=workspace, source__in=USED_SOURCES, created_at__lte=now)
        .order_by()
        .values_list(
            "memory_id",
            ExpressionWrapper(is_search, output_field=BooleanField()),
            "rank",
            ExpressionWrapper(Q(created_at__gt=now - timedelta(days=short_days)), output_field=BooleanField()),
            ExpressionWrapper(Q(created_at__gt=now - timedelta(days=lookback_days)), output_field=BooleanField()),
            EpochSeconds("created_at"),
        )
    )
    if memory_ids is None:
        rows = _raw_rows(events)
    else:
        keys = list(memory_ids)
        rows = [
            row
            for start in range(0, len(keys), _IN_CHUNK)
            for row in _raw_rows(events.filter(memory_id__in=keys[start : start + _IN_CHUNK]))
        ]
    n = len(rows)
    columns: list[Sequence[Any]] = list(zip(*rows, strict=True)) if rows else [()] * 6
    codes: dict[Any, int] = {}
    index = np.fromiter((codes.setdefault(key, len(codes)) for key in columns[0]), dtype=np.intp, count=n)
    m = len(codes)
    search = np.fromiter(columns[1], dtype=bool, count=n)
    # Stored ranks count from 1, as a result set is shown (its first item is #1); the strengthening formula
    # counts from 0 (evolution.algorithms.retrieval).
    rank = np.fromiter(columns[2], dtype=np.intp, count=n) - 1

    def counts(mask: npt.NDArray[np.bool_]) -> IntArray:
        return np.bincount(index[mask], minlength=m).astype(np.intp)

    last_at = np.full(m, -np.inf)
    np.maximum.at(last_at, index, np.fromiter(columns[5], dtype=np.float64, count=n))
    searched = index[search]
    return RetrievalAggregates(
        memory_ids=id_texts(list(codes)),
        total=np.bincount(index, minlength=m).astype(np.intp),
        search=np.bincount(searched, minlength=m).astype(np.intp),
        rank_sum=np.bincount(searched, weights=rank[search], minlength=m).round().astype(np.intp),
        top1=counts(search & (rank == 0)),
        in_short=counts(np.fromiter(columns[3], dtype=bool, count=n)),
        in_lookback=counts(np.fromiter(columns[4], dtype=bool, count=n)),
        last_at=last_at,
    )


def last_event_id(*, workspace: Workspace, after_event_id: int = 0) -> int:
    """The largest retrieval event id of the workspace above `after_event_id` (`after_event_id` when there is
    none): a key range read from the watermark on, not a scan of every event."""
    last = RetrievalEvent.objects.filter(workspace=workspace, id__gt=after_event_id).aggregate(last=Max("id"))["last"]
    return after_event_id if last is None else int(last)


def memories_retrieved_since(
    *, workspace: Workspace, after_event_id: int, through_event_id: int, windows: Sequence[tuple[datetime, datetime]]
) -> list[str]:
    """Memories (id text) with a used-source event whose id is in (after_event_id, through_event_id], or whose
    time is in one of the (start, end] `windows`: those whose retrieval profile can have changed since a
    refresh that had seen the events up to `after_event_id` at the time that opens the windows."""
    used = RetrievalEvent.objects.filter(workspace=workspace, source__in=USED_SOURCES)
    found: set[Any] = set(
        _raw_rows(
            used.filter(id__gt=after_event_id, id__lte=through_event_id).order_by().values_list("memory_id").distinct()
        )
    )
    for start, end in windows:
        if end > start:
            found.update(
                _raw_rows(
                    used.filter(created_at__gt=start, created_at__lte=end)
                    .order_by()
                    .values_list("memory_id")
                    .distinct()
                )
            )
    return id_texts([row[0] for row in found])


def used_result_sets(*, workspace: Workspace, after_event_id: int) -> tuple[list[tuple[str, list[str], datetime]], int]:
    """Result sets of events newer than `after_event_id` from used sources: [(set id, member ids, time)]
    (time = newest event of the set), and the largest event id now stored (the next watermark).

    The time of a set comes from a GROUP BY, so only one datetime per set is parsed in Python.
    """
    newer = RetrievalEvent.objects.filter(workspace=workspace, id__gt=after_event_id)
    last_id = newer.aggregate(last=Max("id"))["last"]
    if last_id is None:
        return [], after_event_id
    used = newer.filter(id__lte=last_id, source__in=USED_SOURCES)
    newest = used.values("result_set").annotate(at=Max("created_at")).values_list("result_set", "at")
    times = {str(key): at for key, at in newest}
    members: dict[str, list[str]] = {}
    for result_set, memory_id in _id_rows(used.order_by("id").values_list("result_set", "memory_id"), 0, 1):
        members.setdefault(result_set, []).append(memory_id)
    return [(key, ids, times[key]) for key, ids in members.items()], int(last_id)


def co_retrieved_edges(*, workspace: Workspace, min_count: float | None = None) -> list[tuple[int, str, str, int]]:
    """CO_RETRIEVED edges, all of them or those with co_retrieval_count >= min_count: (id, source, target,
    co_retrieval_count), by id."""
    queryset = Edge.objects.filter(workspace=workspace, edge_type=EdgeType.CO_RETRIEVED)
    if min_count is not None:
        queryset = queryset.filter(co_retrieval_count__gte=min_count)
    rows = queryset.order_by("id").values_list("id", "source_id", "target_id", "co_retrieval_count")
    return _id_rows(rows, 1, 2)


def co_retrieved_between(*, workspace: Workspace, pairs: Sequence[tuple[str, str]]) -> list[tuple[int, str, str, int]]:
    """CO_RETRIEVED edges joining one of `pairs` (memory ids as text) in either direction, an edge stored
    both ways coming back twice: (id, source, target, co_retrieval_count), by id.

    One probe of the (source, target, type) unique index per oriented pair, the pairs sent as one list: a
    cycle needs the edges of the pairs its new result sets form, not every CO_RETRIEVED edge of the
    workspace (those are read with `co_retrieved_edges(min_count=...)`). The ids come back as asked.
    """
    hex_keys = values_stored_as_text()
    # Each oriented pair under the key it is probed by, and the ids as asked. On SQLite the key is the two
    # ids as stored (32 hex digits each) in one string, cut apart by substr(): a JSON list of [a, b] pairs
    # cost two json_extract and two replace calls per probe, and twice the sorting (62k probes of a bench
    # cycle: 0.34 s in all before).
    asked: dict[Any, tuple[str, str]] = {}
    for a, b in pairs:
        if hex_keys:
            ha, hb = uuid_hex(a), uuid_hex(b)
            asked[ha + hb], asked[hb + ha] = (a, b), (b, a)
        else:
            asked[(a, b)], asked[(b, a)] = (a, b), (b, a)
    # In key order, so that consecutive probes share index pages.
    oriented = sorted(asked)
    if not oriented:
        return []
    qn = connection.ops.quote_name
    meta = Edge._meta
    pk, source, target, kind, count, space = (
        qn(str(meta.get_field(name).column))  # type: ignore[union-attr]
        for name in ("id", "source", "target", "edge_type", "co_retrieval_count", "workspace")
    )
    table = qn(meta.db_table)
    found: dict[int, tuple[int, str, str, int]] = {}
    with connection.cursor() as cursor:
        for begin in range(0, len(oriented), _PAIR_CHUNK):
            chunk = oriented[begin : begin + _PAIR_CHUNK]
            if hex_keys:
                # The keys as one JSON list (json_each), the table walked in that order. A VALUES list of
                # more than ~150 rows makes SQLite build a Bloom filter over every CO_RETRIEVED edge of the
                # database first (~80 ms per statement at 300k edges, whatever the list's length).
                sql = (
                    f"SELECT p.key, e.{pk}, e.{count} FROM json_each(%s) p CROSS JOIN {table} e "
                    f"ON e.{source} = substr(p.value, 1, 32) AND e.{target} = substr(p.value, 33, 32) "
                    f"AND e.{kind} = %s AND e.{space} = %s"
                )
                params: list[Any] = [json.dumps(chunk)]
            else:
                sql = (
                    f"WITH p (k, s, t) AS (VALUES {', '.join(['(%s, %s::uuid, %s::uuid)'] * len(chunk))}) "
                    f"SELECT p.k, e.{pk}, e.{count} FROM p JOIN {table} e ON e.{source} = p.s AND "
                    f"e.{target} = p.t AND e.{kind} = %s AND e.{space} = %s"
                )
                params = [v for k, (a, b) in enumerate(chunk) for v in (k, a, b)]
            cursor.execute(sql, [*params, EdgeType.CO_RETRIEVED.value, workspace.pk])
            for k, eid, n in cursor.fetchall():
                a, b = asked[chunk[k]]
                found[eid] = (eid, a, b, n)
    return [found[eid] for eid in sorted(found)]


def edge_times(*, workspace: Workspace, ids: Sequence[int]) -> dict[int, tuple[datetime | None, datetime | None]]:
    """first/last_co_retrieved_at of the given edges (only those a run changes need exact datetimes)."""
    found: dict[int, tuple[datetime | None, datetime | None]] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        rows = Edge.objects.filter(workspace=workspace, id__in=list(ids[start : start + _IN_CHUNK])).values_list(
            "id", "first_co_retrieved_at", "last_co_retrieved_at"
        )
        found.update((eid, (first, last)) for eid, first, last in rows)
    return found


# -- runs, records, history -----------------------------------------------------------------------


def workspace_of_memory(*, memory_id: uuid.UUID) -> Workspace:
    """The workspace a memory belongs (or, for a memory removed by a revert, belonged) to."""
    workspace = Workspace.objects.filter(memories__id=memory_id).first()
    if workspace is None:
        workspace = Workspace.objects.filter(evolution_records__links__memory_id=memory_id).first()
    if workspace is None:
        raise NotFound(f"no memory {memory_id}", field="id")
    return workspace


def _parse_run_id(value: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound(f"run {value!r} not found", field="run_id") from None


def run_get(*, workspace: Workspace, run_id: object) -> EvolutionRun:
    run = EvolutionRun.objects.filter(workspace=workspace, id=_parse_run_id(run_id)).first()
    if run is None:
        raise NotFound(f"run {run_id} not found in workspace {workspace.slug!r}", field="run_id")
    return run


def run_list(*, workspace: Workspace, limit: int = 50) -> list[EvolutionRun]:
    """Newest runs first (summary included; records are fetched per run)."""
    return list(EvolutionRun.objects.filter(workspace=workspace).order_by("-started_at")[: _clamp(limit)])


def run_record_count(*, run: EvolutionRun) -> int:
    return EvolutionRecord.objects.filter(run=run).count()


def run_records(*, run: EvolutionRun, after_id: int = 0, limit: int = 100) -> tuple[list[EvolutionRecord], int | None]:
    """A page of a run's records in order; the second value is the cursor of the next page or None."""
    size = _clamp(limit)
    records = list(EvolutionRecord.objects.filter(run=run, id__gt=after_id).order_by("id")[: size + 1])
    if len(records) > size:
        return records[:size], records[size - 1].pk
    return records, None


def record_get(*, workspace: Workspace, record_id: object) -> EvolutionRecord:
    try:
        pk = int(str(record_id))
    except ValueError:
        raise NotFound(f"record {record_id!r} not found", field="record_id") from None
    record = EvolutionRecord.objects.filter(workspace=workspace, pk=pk).first()
    if record is None:
        raise NotFound(f"record {pk} not found in workspace {workspace.slug!r}", field="record_id")
    return record


def memory_history(
    *, workspace: Workspace, memory_id: uuid.UUID, before_id: int | None = None, limit: int = 50
) -> tuple[list[EvolutionRecord], int | None]:
    """Applied records that touched a memory, newest first, and the cursor of the next page or None.

    Dry-run records describe what did not happen, so they are not part of a memory's history. A memory
    that no longer exists (an episode removed by a revert) keeps its history; an id never seen in the
    workspace is NotFound.
    """
    size = _clamp(limit)
    known = (
        Memory.objects.filter(workspace=workspace, id=memory_id).exists()
        or RecordLink.objects.filter(memory_id=memory_id, record__workspace=workspace).exists()
    )
    if not known:
        raise NotFound(f"id: no memory {memory_id} in workspace {workspace.slug!r}", field="id")
    links = RecordLink.objects.filter(memory_id=memory_id, record__workspace=workspace, record__dry_run=False)
    if before_id is not None:
        links = links.filter(record_id__lt=before_id)
    ids = list(links.order_by("-record_id").values_list("record_id", flat=True)[: size + 1])
    more = len(ids) > size
    ids = ids[:size]
    by_id = EvolutionRecord.objects.in_bulk(ids)
    records = [by_id[i] for i in ids if i in by_id]
    return records, (ids[-1] if more and ids else None)


def _clamp(limit: int) -> int:
    if limit < 1 or limit > 1000:
        raise InvalidInput("limit: expected an integer between 1 and 1000", field="limit")
    return limit
