"""The Evolver protocol, the registry the cycle runner reads, and the toolkit evolvers write with.

An evolver reads a whole workspace, decides, and (unless it is a dry run) writes. It returns an
`EvolutionResult` whose records are built but not saved: the runner saves them in the same
transaction as the evolver's writes, so a run's memory changes and its audit trail commit together.

Registry: `register(cls)` (usable as a class decorator) adds an evolver under `cls.name`. Registration
order is cycle order, so the order of the enhanced cycle (consolidation, decay, interference, retrieval
strengthening, Hebbian co-retrieval) is fixed by the import order in `evolution.evolvers`. `default=False`
registers an evolver that runs only when asked for by name.

Toolkit: `MemoryUpdates` collects field changes of many memories under one action; `write_memory_updates`
writes them with one prepared UPDATE per field set (executemany in batches), and `update_records` turns them
into records of at most `RECORD_CHUNK` memories each, holding the exact before/after values revert needs.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, ClassVar, Protocol, TypeVar

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.models import JSONField

from core.errors import InvalidInput
from evolution.models import EvolutionRun
from history import audit
from history.models import EvolutionRecord, RecordLink
from memories.bulk import uuid_hex
from memories.models import Memory, MemoryScore, Workspace

# Memories per record. A record is the unit of a single revert; 500 keeps a record's JSON well under a
# megabyte while a 100k-memory cycle writes a few hundred records instead of a hundred thousand.
RECORD_CHUNK = 500
# Rows per executemany call: bounds the parameter list held in memory.
WRITE_BATCH = 2000
# SQLite writes of at least this many rows go in table (rowid) order, see `_write_sqlite_rows`; a smaller
# write touches few pages and the extra lookup query would cost more than it saves.
ROWID_ORDER_MIN = 1000
# Keys per rowid lookup (SQLite >= 3.32 allows 32766 parameters; the evolvers need >= 3.35 for RETURNING).
_LOOKUP_CHUNK = 30_000
# Memory ids as records store them (str(uuid)); other keys of before/after are not memories.
_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# Any number of them, each followed by a newline.
_CANONICAL_UUIDS = re.compile(rf"(?:{_CANONICAL_UUID.pattern}\n)*")
# Key of `after` holding one audit sentence per memory of a chunked record.
REASONS = "reasons"


@dataclass
class EvolutionResult:
    """What one evolver did (or would do, when dry_run).

    records: built, unsaved records (the runner saves them and sets run / dry_run).
    stats: small counters shown in the run summary (memories seen, changed, archived...).
    state: a cursor persisted in the run summary and handed back by `selectors.evolver_state` on the next
    applied run (e.g. the last retrieval event counted); a reverted run's state is forgotten with it.
    """

    evolver: str
    dry_run: bool
    records: list[EvolutionRecord] = field(default_factory=list)
    stats: dict[str, int | float | str] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)


class Evolver(Protocol):
    """Reads a workspace and changes it (or previews the change) with an audit record per action."""

    name: ClassVar[str]

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult: ...


E = TypeVar("E", bound=type[Evolver])

EVOLVERS: dict[str, type[Evolver]] = {}
_DEFAULT: list[str] = []


def register(evolver_cls: E, *, default: bool = True) -> E:
    """Add an evolver class to the registry under its `name` (decorator-friendly; returns the class).

    Cycle order is registration order. default=True puts it in the cycle run when no names are given.
    Registering a second class under a taken name is an error (a silent replacement would change what
    existing runs' names mean).
    """
    name = evolver_cls.name
    existing = EVOLVERS.get(name)
    if existing is not None and existing is not evolver_cls:
        raise ValueError(f"an evolver named {name!r} is already registered ({existing.__qualname__})")
    if existing is None:
        EVOLVERS[name] = evolver_cls
        if default:
            _DEFAULT.append(name)
    return evolver_cls


def default_cycle() -> list[str]:
    """Names run when a caller asks for no particular evolver, in cycle order."""
    return list(_DEFAULT)


def _canonical(name: str) -> str:
    key = name.strip().lower()
    return key[: -len("evolver")] if key.endswith("evolver") and key != "evolver" else key


def resolve_names(names: Sequence[str] | None) -> list[str]:
    """Registered names for `names` in cycle order (None or empty: the default cycle).

    Matching ignores case and an "Evolver" suffix (ExponentialDecayEvolver == ExponentialDecay).
    Duplicates collapse. An unknown name raises InvalidInput naming it and listing the known ones.
    """
    if not names:
        return default_cycle()
    lookup = {_canonical(n): n for n in EVOLVERS}
    wanted: set[str] = set()
    for raw in names:
        if not isinstance(raw, str):
            raise InvalidInput(f"evolvers: {raw!r} is not an evolver name", field="evolvers")
        found = lookup.get(_canonical(raw))
        if found is None:
            raise InvalidInput(
                f"evolvers: unknown evolver {raw!r}; known: {', '.join(EVOLVERS)}",
                code="unknown_evolver",
                field="evolvers",
            )
        wanted.add(found)
    return [n for n in EVOLVERS if n in wanted]


def evolver_instance(name: str) -> Evolver:
    return EVOLVERS[name]()


# -- writing many memories ------------------------------------------------------------------------


@dataclass
class MemoryUpdates:
    """Field changes of many memories under one audited action.

    `add` keeps only fields whose value really changes, and drops a memory with no change at all, so
    `before`/`after` hold exactly the changed fields (revert restores them and nothing else).
    """

    evolver: str
    action: str
    summary: str
    ids: list[str] = field(default_factory=list)
    changes: list[dict[str, tuple[Any, Any]]] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def add(self, memory_id: str | uuid.UUID, changes: dict[str, tuple[Any, Any]], reason: str) -> None:
        """Keep `changes` (the caller's dict, not a copy, when every pair really changes)."""
        real = changes
        for old, new in changes.values():
            if old == new:
                real = {name: pair for name, pair in changes.items() if pair[0] != pair[1]}
                break
        if real:
            self.ids.append(memory_id if isinstance(memory_id, str) else str(memory_id))
            self.changes.append(real)
            self.reasons.append(reason)

    def __len__(self) -> int:
        return len(self.ids)


Converter = Callable[[Any], Any]


def _identity(value: Any) -> Any:
    return value


def _column(field: models.Field[Any, Any]) -> tuple[Converter, str]:
    """How a Python value of `field` reaches the driver, and its SQL placeholder.

    As Django would store it, minus the per-value dispatch through several layers that dominates
    100k-row writes: numbers and text go as they are; plain JSON is dumped with the stdlib encoder on
    SQLite (the text Django writes); on SQLite a UUID is stored as 32 hex digits, to which the canonical
    text the evolvers carry is turned here. Anything else goes through Django.
    """
    # The wrapper itself, not the `connection` proxy: every attribute read through the proxy costs a
    # lookup, and get_db_prep_save reads several per value.
    conn = connections[DEFAULT_DB_ALIAS]
    sqlite = conn.vendor == "sqlite"
    if isinstance(field, JSONField):
        if sqlite:
            return (lambda v: None if v is None else json.dumps(v)), "%s"
        return (lambda v: field.get_db_prep_save(v, conn)), "%s"
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    if isinstance(target, models.FloatField | models.IntegerField | models.BooleanField | models.CharField):
        return _identity, "%s"
    if isinstance(target, models.UUIDField):
        if conn.features.has_native_uuid_field:
            return (lambda v: v if isinstance(v, str) else field.get_db_prep_save(v, conn)), "%s"
        return uuid_hex, "%s"
    if isinstance(target, models.DateTimeField) and sqlite and settings.USE_TZ:
        return _sqlite_datetime, "%s"
    return (lambda v: field.get_db_prep_save(v, conn)), "%s"


@lru_cache(maxsize=4096)
def _sqlite_datetime(value: datetime | None) -> str | None:
    """Django's SQLite form of an aware datetime: naive UTC text (cached: a run writes one `now` a lot)."""
    if value is None:
        return None
    return str(value.astimezone(UTC).replace(tzinfo=None))


def _executemany(
    sql: str, converters: Sequence[Converter], rows: Iterable[tuple[Any, ...]], *, prepared: bool = False
) -> int:
    """Run `sql` for every row in batches of WRITE_BATCH, converting values only where needed
    (`prepared`: the caller passes every value as stored: numbers, text, UUIDs as `uuid_hex` gives them).

    A batch is converted by column (transposed, each converter mapped over its column, transposed back):
    a list built per row, calling every converter, cost ~1 us a row, ~1.5 s of a bench cycle's 350k rows
    where most columns need no conversion at all.
    """
    active = [] if prepared else [(k, c) for k, c in enumerate(converters) if c is not _identity]
    done = 0
    remaining = iter(rows)
    with connection.cursor() as cursor:
        while batch := list(islice(remaining, WRITE_BATCH)):
            if active:
                columns: list[Sequence[Any]] = list(zip(*batch, strict=True))
                if len(columns) != len(converters):
                    raise ValueError(f"rows of {len(columns)} values for {len(converters)} columns")
                for k, convert in active:
                    columns[k] = list(map(convert, columns[k]))
                batch = list(zip(*columns, strict=True))
            cursor.executemany(sql, batch)
            done += len(batch)
    return done


def write_rows(model: type[models.Model], fields: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> int:
    """UPDATE model SET fields = values WHERE pk = last value, for every row; returns rows written.

    One prepared statement run with executemany in batches of WRITE_BATCH. Django's bulk_update builds
    a CASE WHEN expression per batch and measured 13x slower on 100k SQLite rows; values are stored
    exactly as a model save would store them (see `_column`). Memory's score fields (`Memory.SCORE_FIELDS`)
    go to MemoryScore, keyed by the same memory id.
    """
    if model is Memory and Memory.SCORE_FIELDS.intersection(fields):
        rows = rows if isinstance(rows, list) else list(rows)
        for target, names in (
            (Memory, [n for n in fields if n not in Memory.SCORE_FIELDS]),
            (MemoryScore, [n for n in fields if n in Memory.SCORE_FIELDS]),
        ):
            if names:
                at = [fields.index(n) for n in names]
                _write_rows(target, names, [(*(row[k] for k in at), row[-1]) for row in rows])
        return len(rows)
    return _write_rows(model, fields, rows)


def _write_rows(model: type[models.Model], fields: Sequence[str], rows: Iterable[tuple[Any, ...]]) -> int:
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    prep: list[models.Field[Any, Any]] = [meta.get_field(name) for name in fields]  # type: ignore[misc]
    columns = [_column(f) for f in [*prep, pk]]
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(f.column)} = {mark}" for f, (_, mark) in zip(prep, columns, strict=False))
    if connection.vendor == "sqlite":
        rows = list(rows)
        if model is MemoryScore and rows:
            # ~20 narrow rows to a page: in key order the key's index is walked once and the small table
            # stays cached, cheaper than looking rowids up first (132k updates in three sweeps: 1.6-1.8 s
            # against 2.4-2.6 s with the rowid lookup, raw SQLite). The keys are converted once, here,
            # and sorted as stored.
            keyed: list[Sequence[Any]] = list(zip(*rows, strict=True))
            keyed[-1] = list(map(columns[-1][0], keyed[-1]))
            rows = sorted(zip(*keyed, strict=True), key=itemgetter(-1))
            columns[-1] = (_identity, columns[-1][1])
        elif len(rows) >= ROWID_ORDER_MIN:
            return _write_sqlite_rows(meta, sets, [c for c, _ in columns], rows)
    sql = f"UPDATE {qn(meta.db_table)} SET {sets} WHERE {qn(pk.column)} = {columns[-1][1]}"
    return _executemany(sql, [c for c, _ in columns], rows)


def _write_sqlite_rows(meta: Any, sets: str, converters: Sequence[Converter], rows: list[tuple[Any, ...]]) -> int:
    """SQLite: the same UPDATEs by rowid, in rowid order (returns the rows given).

    Memory rows are ~1.4 KB (embedding inline), so an update rewrites a page holding two or three rows: in
    table order each page is dirtied once while it is hot, where primary-key order (a random UUID) went
    through the key's index and revisited pages across the whole table (measured ~30% slower on 45k
    updates). A row whose key is not found is left out, as the UPDATE by key would have matched nothing.
    """
    qn = connection.ops.quote_name
    pk = meta.pk
    table = qn(meta.db_table)
    # Django's auto keys are declared INTEGER PRIMARY KEY on SQLite: the key is the rowid.
    if isinstance(pk, models.AutoField | models.BigAutoField | models.SmallAutoField):
        located = sorted((int(row[-1]), k) for k, row in enumerate(rows))
    else:
        # As `_column` stores the key: UUIDs as 32 hex digits, other keys as they are.
        if isinstance(pk, models.UUIDField):
            keys = list(map(uuid_hex, [row[-1] for row in rows]))
        else:
            keys = [row[-1] for row in rows]
        rowids: dict[Any, int] = {}
        with connection.cursor() as cursor:
            unique = list(dict.fromkeys(keys))
            for start in range(0, len(unique), _LOOKUP_CHUNK):
                chunk = unique[start : start + _LOOKUP_CHUNK]
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(f"SELECT {qn(pk.column)}, rowid FROM {table} WHERE {qn(pk.column)} IN ({marks})", chunk)
                rowids.update(cursor.fetchall())
        # (rowid, position) pairs sort as plain integer tuples, without a key function.
        located = sorted((rowids[key], k) for k, key in enumerate(keys) if key in rowids)
    sql = f"UPDATE {table} SET {sets} WHERE rowid = %s"
    if len(converters) == 2:
        ordered: Iterable[tuple[Any, ...]] = ((rows[k][0], rowid) for rowid, k in located)
    else:
        ordered = ((*rows[k][:-1], rowid) for rowid, k in located)
    _executemany(sql, [*converters[:-1], _identity], ordered)
    return len(rows)


def insert_rows(
    model: type[models.Model], fields: Sequence[str], rows: Iterable[tuple[Any, ...]], *, prepared: bool = False
) -> int:
    """INSERT rows of `fields` with one prepared statement (executemany in batches); returns rows inserted.

    For many small rows (CO_RETRIEVED edges, record links) where building model instances for
    bulk_create would cost more than the insert itself. Callers that need the new ids select them back
    by a column they set.
    """
    meta = model._meta
    prep: list[models.Field[Any, Any]] = [meta.get_field(name) for name in fields]  # type: ignore[misc]
    columns = [_column(f) for f in prep]
    qn = connection.ops.quote_name
    names = ", ".join(qn(f.column) for f in prep)
    marks = ", ".join(mark for _, mark in columns)
    sql = f"INSERT INTO {qn(meta.db_table)} ({names}) VALUES ({marks})"
    return _executemany(sql, [c for c, _ in columns], rows, prepared=prepared)


def save_records(records: Sequence[EvolutionRecord]) -> list[EvolutionRecord]:
    """Insert records and the RecordLink rows that put them in each memory's history.

    The same links as `audit.records_save` (input ids, output ids and the memory keys of `before`), but
    written with one prepared INSERT: a 100k-memory cycle links every memory it changed, and building a
    model instance per link cost more than the rest of the write. Links go in (memory, record) order, the
    order of their history index, so consecutive inserts land on the same index pages (182k links of the
    bench cycle: median 2.26 s -> 2.09 s, 5 runs each).
    """
    if not records:
        return []
    # SQLite >= 3.35 and PostgreSQL return the new ids from a bulk insert.
    saved = EvolutionRecord.objects.bulk_create(records, batch_size=200)
    rows: list[tuple[str, int]] = []
    for record in saved:
        keys = dict.fromkeys(map(str, record.input_ids))
        keys.update(dict.fromkeys(map(str, record.output_ids)))
        keys.update(dict.fromkeys(record.before))
        rows.extend(zip(_memory_keys(keys), repeat(record.pk)))
    # By memory; records of one memory stay in id order (a stable sort of rows appended in id order): the
    # same order as sorting the pairs, in 40% of the time (182k links).
    rows.sort(key=itemgetter(0))
    insert_rows(RecordLink, ["memory_id", "record"], rows, prepared=True)
    return saved


def _memory_keys(keys: Iterable[str]) -> list[str]:
    """The keys that are memory ids in canonical text, as stored (32 lower-case hex digits), in order,
    each once.

    Checked with one match over the joined candidates (a record's keys are all ids, or all but a few
    named entries such as "edges"), one by one only when that fails.
    """
    candidates = [key for key in keys if len(key) == 36]
    joined = "\n".join(candidates)
    if candidates and _CANONICAL_UUIDS.fullmatch(joined + "\n"):
        stored = joined.replace("-", "").lower().split("\n")
    else:
        stored = [uuid_hex(key) for key in candidates if _CANONICAL_UUID.fullmatch(key)]
    # One id written in two cases is one memory.
    return list(dict.fromkeys(stored))


def write_memory_updates(updates: Iterable[MemoryUpdates]) -> int:
    """Write every change of `updates` (grouped by the set of changed fields); returns memories written."""
    groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    # The sorted field names of each key order seen (a batch has one or two).
    sorted_names: dict[tuple[str, ...], tuple[str, ...]] = {}
    for batch in updates:
        for memory_id, changes in zip(batch.ids, batch.changes, strict=True):
            key = tuple(changes)
            names = sorted_names.get(key)
            if names is None:
                names = sorted_names[key] = tuple(sorted(key))
                groups.setdefault(names, [])
            rows = groups[names]
            if len(names) == 1:
                rows.append((changes[names[0]][1], memory_id))
            else:
                rows.append((*(changes[n][1] for n in names), memory_id))
    return sum(write_rows(Memory, names, rows) for names, rows in groups.items())


# Values records store as they are; anything else goes through audit.encode_value (datetimes, UUIDs).
_JSON_NATIVE = (float, int, str, bool, dict, list)


def _chunks(n: int, size: int) -> list[tuple[int, int]]:
    return [(start, min(start + size, n)) for start in range(0, n, size)]


def update_records(
    updates: MemoryUpdates,
    *,
    workspace: Workspace,
    run: EvolutionRun | None,
    dry_run: bool,
    now: datetime,
    chunk: int = RECORD_CHUNK,
) -> list[EvolutionRecord]:
    """One record per `chunk` memories: before/after {memory_id: {field: value}} and one reason each."""
    records: list[EvolutionRecord] = []
    spans = _chunks(len(updates), chunk)
    native = _JSON_NATIVE
    for k, (start, stop) in enumerate(spans):
        ids = updates.ids[start:stop]
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        for key, changes in zip(ids, updates.changes[start:stop], strict=True):
            # One loop filling both dicts, the class test inline: ~35% less than two comprehensions
            # calling a helper per value (55k single-field changes: 0.13 -> 0.08 s).
            old_values: dict[str, Any] = {}
            new_values: dict[str, Any] = {}
            for name, (old, new) in changes.items():
                old_values[name] = old if old.__class__ in native else audit.encode_value(name, old)
                new_values[name] = new if new.__class__ in native else audit.encode_value(name, new)
            before[key] = old_values
            after[key] = new_values
        after[REASONS] = dict(zip(ids, updates.reasons[start:stop], strict=True))
        part = f", part {k + 1}/{len(spans)}" if len(spans) > 1 else ""
        records.append(
            audit.record_build(
                workspace=workspace,
                evolver=updates.evolver,
                action=updates.action,
                reason=f"{updates.summary} ({len(ids)} memories{part})",
                input_ids=ids,
                output_ids=ids,
                before=before,
                after=after,
                run=run,
                dry_run=dry_run,
                now=now,
            )
        )
    return records


def apply_updates(
    updates: Sequence[MemoryUpdates],
    *,
    workspace: Workspace,
    run: EvolutionRun | None,
    dry_run: bool,
    now: datetime,
) -> list[EvolutionRecord]:
    """Write `updates` unless dry_run, and return their records (in the order of `updates`)."""
    if not dry_run:
        write_memory_updates(updates)
    records: list[EvolutionRecord] = []
    for batch in updates:
        records.extend(update_records(batch, workspace=workspace, run=run, dry_run=dry_run, now=now))
    return records
