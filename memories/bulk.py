"""Fast multi-row writes: the one module that writes many rows without Django's per-value machinery.

Django's bulk_create and bulk_update prepare every value through several layers of field machinery (on
SQLite bulk_create also splits an insert into ~25-row statements of 999 parameters, and bulk_update builds
a CASE WHEN expression per batch); at 100k rows that preparation costs more than the database work. Here a
value is converted only where its database form differs from the Python value, by the converter the one
converter table (core.sql.field_converter, with the other differences between SQLite and PostgreSQL) gives
its field type on the current backend, and rows go to the driver in one executemany, COPY or column-array
UPDATE per chunk, whichever the backend does fastest (core.sql names each: no vendor test here but the
full-text one, `_writes_fts5_rows`):

- `bulk_insert` INSERTs complete instances (memories, edges, retrieval events), read with one attrgetter;
  a memory's scores row follows, and on SQLite its full-text rows (search_indexed=1 tells the insert
  trigger to skip them, because FTS5 inserts run about three times faster outside a trigger);
- `write_rows` UPDATEs fields of many rows by primary key and `insert_rows` INSERTs tuples of a few fields
  (the evolvers' writes: scores, edges, record links).

Defaults, validation and ids are the caller's: services build complete instances (`new_instance`) first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from itertools import islice
from operator import attrgetter, itemgetter
from typing import Any, TypeVar, cast

from django.db import connection, models, transaction
from django.db.models.base import ModelState
from django.db.models.fields.json import JSONField

from core.sql import (
    Converter,
    analyzes_after_bulk_inserts,
    field_converter,
    loads_by_copy,
    updates_by_column_arrays,
    writes_by_rowid,
)
from memories.models import Memory, MemoryScore

M = TypeVar("M", bound=models.Model)

# Rows per executemany call of `write_rows` / `insert_rows`: bounds the parameter list held in memory.
WRITE_BATCH = 2000
# SQLite writes of at least this many rows go in table (rowid) order, see `_write_sqlite_rows`; a smaller
# write touches few pages and the extra lookup query would cost more than it saves.
ROWID_ORDER_MIN = 1000
# Keys per rowid lookup (SQLite >= 3.32 allows 32766 parameters; the evolvers need >= 3.35 for RETURNING).
_LOOKUP_CHUNK = 30_000


class _Defaults:
    """Per-model defaults: constants computed once, container factories (list, dict) called per row."""

    def __init__(self, model: type[models.Model]) -> None:
        fields = model._meta.concrete_fields
        self.static = {f.attname: (f.default if f.has_default() and not callable(f.default) else None) for f in fields}
        self.factories = [(f.attname, f.default) for f in fields if f.has_default() and callable(f.default)]


_defaults: dict[type[models.Model], _Defaults] = {}


def new_instance(model: type[M], values: dict[str, Any], related: dict[str, models.Model] | None = None) -> M:
    """Build an unsaved instance from attname values, skipping Model.__init__.

    Model.__init__ runs a descriptor __set__ per field, which dominates building 100k rows; a new
    instance needs only its field values (defaults filled in here) and a fresh ModelState. Callable
    defaults run only for fields missing from `values`. `related` pre-fills the FK cache. For a Memory, the
    names of its scores (`Memory.SCORE_FIELDS`) build the MemoryScore it is inserted with (`memory.score`).
    """
    spec = _defaults.get(model)
    if spec is None:
        spec = _defaults[model] = _Defaults(model)
    data = dict(spec.static)
    for name, factory in spec.factories:
        if name not in values:
            data[name] = factory()
    data.update(values)
    # Only names that are not fields (no allocation when there are none: ~130k instances per ingest).
    properties = None if values.keys() <= spec.static.keys() else [n for n in values if n not in spec.static]
    if properties:
        for name in properties:
            del data[name]
    obj = model.__new__(model)
    obj._state = ModelState()
    if related:
        obj._state.fields_cache.update(related)
    obj.__dict__.update(data)
    if properties:
        scores = {name: values[name] for name in properties if model is Memory and name in Memory.SCORE_FIELDS}
        unknown = [name for name in properties if name not in scores]
        if unknown:
            raise TypeError(f"{model.__name__} has no field {unknown[0]!r}")
        cast(Memory, obj).score = MemoryScore(**scores)
    return obj


# -- inserting instances --------------------------------------------------------------------------


def bulk_insert(model: type[M], objs: Sequence[M], *, chunk: int = 2000, ignore_conflicts: bool = False) -> None:
    """INSERT `objs` (complete instances with their primary keys set unless auto) in chunks.

    With `ignore_conflicts`, rows violating a unique constraint are skipped (edges that exist).
    """
    if not objs:
        return
    if model is Memory and ignore_conflicts:
        # A skipped memory would still get a scores row, or fail on the one it has.
        raise ValueError("bulk_insert(Memory) does not skip conflicts")
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and isinstance(f, models.AutoField))]
    get_row = attrgetter(*[f.attname for f in fields])
    special = [(i, conv) for i, f in enumerate(fields) if (conv := field_converter(f)) is not None]
    table = connection.ops.quote_name(model._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
    if ignore_conflicts:  # SQLite; PostgreSQL copies (see _copy_rows_skipping_conflicts)
        sql = sql.replace("INSERT", "INSERT OR IGNORE", 1)
    index_fts = _writes_fts5_rows(model)
    if index_fts:
        for obj in objs:
            obj.search_indexed = True  # type: ignore[attr-defined]
    copy = loads_by_copy()
    with transaction.atomic(), connection.cursor() as cursor:
        for start in range(0, len(objs), chunk):
            batch = objs[start : start + chunk]
            rows = []
            for obj in batch:
                row = list(get_row(obj))
                for i, convert in special:
                    row[i] = convert(row[i])
                rows.append(row)
            if copy and ignore_conflicts:
                _copy_rows_skipping_conflicts(cursor, table, columns, rows)
            elif copy:
                _copy_rows(cursor, table, columns, rows)
            else:
                cursor.executemany(sql, rows)
            if index_fts:
                _index_fts(cursor, batch)  # type: ignore[arg-type]
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
    analyze_when_grown(model._meta.db_table, len(objs))
    if model is Memory:
        _insert_scores(cast(Sequence[Memory], objs), chunk)
        analyze_when_grown(MemoryScore._meta.db_table, len(objs))


# PostgreSQL plans from table statistics that autovacuum refreshes on its next pass (up to a minute later,
# after 10% growth). Right after an import of 20k conversation turns the planner still took the memory
# table for 126 rows and read all 20k for one full-text query (300 ms; 28 ms after ANALYZE). A table grown
# by a fifth (and at least _ANALYZE_MIN_ROWS rows) by bulk inserts of this process is analysed when the
# transaction commits: ANALYZE samples at most 30k rows, a fraction of what the import itself cost.
_ANALYZE_GROWTH = 0.2
_ANALYZE_MIN_ROWS = 1000
_grown: dict[tuple[str, str], int] = {}


def analyze_when_grown(table: str, rows: int) -> None:
    """Count ``rows`` inserted into ``table``; on PostgreSQL ANALYZE it after commit once they are many."""
    if not analyzes_after_bulk_inserts() or rows <= 0:
        return
    key = (str(connection.settings_dict.get("NAME")), table)
    grown = _grown.get(key, 0) + rows
    _grown[key] = grown
    if grown < _ANALYZE_MIN_ROWS:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE oid = %s::regclass", [table])
        found = cursor.fetchone()
    known = max(float(found[0]), 0.0) if found else 0.0  # -1 before a table's first ANALYZE
    if grown < _ANALYZE_GROWTH * known:
        return
    _grown[key] = 0
    quoted = connection.ops.quote_name(table)

    def analyze() -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {quoted}")

    transaction.on_commit(analyze)


def _identity(value: Any) -> Any:
    return value


def _insert_scores(memories: Sequence[Memory], chunk: int) -> None:
    """INSERT the scores row of each freshly inserted memory: the one it was given, else the defaults.

    From value tuples, not instances: a MemoryScore per memory of a 100k ingest cost more than its insert.
    """
    fields = list(MemoryScore._meta.concrete_fields)
    assert [f.name for f in fields] == ["memory", "workspace", "retention_score", "retrieval_profile"]
    converters = [field_converter(f) or _identity for f in fields]
    default_retention = fields[2].get_default()
    default_profile = converters[3]({})
    table = connection.ops.quote_name(MemoryScore._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    sql = f"INSERT INTO {table} ({columns}) VALUES (%s, %s, %s, %s)"
    to_key, to_profile = converters[0], converters[3]
    rows = [
        (to_key(m.pk), m.workspace_id, m.score.retention_score, to_profile(m.score.retrieval_profile))
        if m.score_loaded()
        else (to_key(m.pk), m.workspace_id, default_retention, default_profile)
        for m in memories
    ]
    with connection.cursor() as cursor:
        for start in range(0, len(rows), chunk):
            if loads_by_copy():
                _copy_rows(cursor, table, columns, rows[start : start + chunk])
            else:
                cursor.executemany(sql, rows[start : start + chunk])


def _copy_rows(cursor: Any, table: str, columns: str, rows: Sequence[Sequence[Any]]) -> None:
    """PostgreSQL: the rows through COPY FROM STDIN, values adapted by the driver as for parameters.

    An INSERT per row, even pipelined by executemany, parses and plans each statement: COPY measured
    about 3x faster for memory rows (100k memories on the ingestion bench). The driver's own cursor is
    used, so Django's query log does not see the statement.
    """
    with cursor.cursor.copy(f"COPY {table} ({columns}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def _copy_rows_skipping_conflicts(cursor: Any, table: str, columns: str, rows: Sequence[Sequence[Any]]) -> None:
    """PostgreSQL: COPY into a temporary table shaped like ``table`` (dropped at commit), then one
    INSERT ... SELECT ... ON CONFLICT DO NOTHING: the conflict handling of an INSERT at COPY's speed
    (10k conversation edges one INSERT each spent most of an ingest waiting on the server)."""
    staging = connection.ops.quote_name("bulk_" + table.strip('"'))
    # Only the written columns, no constraints or defaults: the table's auto key stays the table's.
    cursor.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {staging} ON COMMIT DROP AS SELECT {columns} FROM {table} WITH NO DATA"
    )
    _copy_rows(cursor, staging, columns, rows)
    cursor.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {staging} ON CONFLICT DO NOTHING")
    cursor.execute(f"TRUNCATE {staging}")


def _writes_fts5_rows(model: type[models.Model]) -> bool:
    """Whether inserting `model` rows writes their full-text rows here: memories on SQLite, whose FTS5 table
    this module fills itself (`_index_fts`). Full-text search keeps its own vendor test (core.sql): on
    PostgreSQL the index is the memory row's stored tsvector, a different feature, not another spelling."""
    return model is Memory and connection.vendor == "sqlite"


def _index_fts(cursor: Any, memories: Sequence[Memory]) -> None:
    """Write the FTS5 rows (and their id map) of freshly inserted memories, as the trigger would."""
    first = cursor.execute("SELECT coalesce(max(rowid), 0) FROM memories_fts").fetchone()[0] + 1
    cursor.executemany(
        "INSERT INTO memories_fts(rowid, content, memory_id, workspace_id) VALUES (%s, %s, %s, %s)",
        [(first + i, m.content, m.id.hex, m.workspace_id) for i, m in enumerate(memories)],
    )
    cursor.executemany(
        "INSERT INTO memories_fts_map(memory_id, fts_rowid) VALUES (%s, %s)",
        [(m.id.hex, first + i) for i, m in enumerate(memories)],
    )


# -- writing rows of values -----------------------------------------------------------------------


def _executemany(
    sql: str, converters: Sequence[Converter | None], rows: Iterable[tuple[Any, ...]], *, prepared: bool = False
) -> int:
    """Run `sql` for every row in batches of WRITE_BATCH, converting values only where needed
    (`prepared`: the caller passes every value as stored: numbers, text, UUIDs as `uuid_hex` gives them).

    A batch is converted by column (transposed, each converter mapped over its column, transposed back):
    a list built per row, calling every converter, cost ~1 us a row, ~1.5 s of a bench cycle's 350k rows
    where most columns need no conversion at all.
    """
    active = [] if prepared else [(k, c) for k, c in enumerate(converters) if c is not None]
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
    exactly as a model save would store them (see core.sql.field_converter). Memory's score fields
    (`Memory.SCORE_FIELDS`) go to MemoryScore, keyed by the same memory id.
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
    converters = [field_converter(f) for f in [*prep, pk]]
    qn = connection.ops.quote_name
    sets = ", ".join(f"{qn(f.column)} = %s" for f in prep)
    if writes_by_rowid():
        rows = list(rows)
        if model is MemoryScore and rows:
            # ~20 narrow rows to a page: in key order the key's index is walked once and the small table
            # stays cached, cheaper than looking rowids up first (132k updates in three sweeps: 1.6-1.8 s
            # against 2.4-2.6 s with the rowid lookup, raw SQLite). The keys are converted once, here,
            # and sorted as stored.
            keyed: list[Sequence[Any]] = list(zip(*rows, strict=True))
            to_key = converters[-1]
            if to_key is not None:
                keyed[-1] = list(map(to_key, keyed[-1]))
            rows = sorted(zip(*keyed, strict=True), key=itemgetter(-1))
            converters[-1] = None
        elif len(rows) >= ROWID_ORDER_MIN:
            return _write_sqlite_rows(meta, sets, converters, rows)
    elif updates_by_column_arrays():
        rows = list(rows)
        if len(rows) >= PG_ARRAY_MIN:
            return _write_postgresql_rows(meta, prep, converters, rows)
    sql = f"UPDATE {qn(meta.db_table)} SET {sets} WHERE {qn(pk.column)} = %s"
    return _executemany(sql, converters, rows)


#: Rows from which a PostgreSQL write goes as one UPDATE ... FROM unnest() per batch: executemany sends one
#: statement per row (each parsed, planned and run), one statement over column arrays does the same writes
#: under one plan (the activation flush: 2,846 -> 3,932 boosts/s with events, measured at load ~7).
PG_ARRAY_MIN = 20


def _pg_array_values(field: models.Field[Any, Any], values: Sequence[Any]) -> tuple[str, list[Any]]:
    """The array type to cast a column to, and its values in a form psycopg sends as one array: ids and JSON
    as text (cast by the server), numbers made one Python type (a list typed by its first element would
    refuse a float after an int)."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    db_type = str(field.db_type(connection))  # a foreign key: its target's type
    if isinstance(target, models.UUIDField):
        return "uuid", [None if v is None else str(v) for v in values]
    if isinstance(target, JSONField):
        # As the JSON converter prepared them (jsonb adapters): their text, parsed by the server.
        return "jsonb", [None if v is None else _jsonb_text(v) for v in values]
    if isinstance(target, models.FloatField):
        return db_type, [None if v is None else float(v) for v in values]
    if isinstance(target, models.IntegerField) and not isinstance(target, models.BooleanField):
        return db_type, [None if v is None else int(v) for v in values]
    return db_type, list(values)


def _jsonb_text(value: Any) -> str:
    obj = getattr(value, "obj", value)  # psycopg's Jsonb wraps the Python value
    dumps = getattr(value, "dumps", None) or json.dumps
    return str(dumps(obj))


def _write_postgresql_rows(
    meta: Any,
    prep: Sequence[models.Field[Any, Any]],
    converters: Sequence[Converter | None],
    rows: list[tuple[Any, ...]],
) -> int:
    """PostgreSQL: the same UPDATEs as one ``UPDATE ... FROM unnest(arrays)`` per batch of WRITE_BATCH rows
    (returns the rows given, as executemany did). A key given twice keeps its last row, as the UPDATEs one
    after another would."""
    qn = connection.ops.quote_name
    pk = meta.pk
    columns = [*prep, pk]
    names = [f"v{k}" for k in range(len(columns))]
    sets = ", ".join(f"{qn(f.column)} = v.{n}" for f, n in zip(prep, names, strict=False))
    for start in range(0, len(rows), WRITE_BATCH):
        batch = rows[start : start + WRITE_BATCH]
        if any(len(row) != len(columns) for row in batch):
            raise ValueError(f"rows of other lengths than {len(columns)} values")
        last = {str(row[-1]): row for row in batch}  # the last row of each key
        values: list[Sequence[Any]] = list(zip(*last.values(), strict=True))
        arrays: list[list[Any]] = []
        casts: list[str] = []
        for k, (field, convert) in enumerate(zip(columns, converters, strict=True)):
            column = values[k] if convert is None else list(map(convert, values[k]))
            db_type, prepared = _pg_array_values(field, column)
            casts.append(f"%s::{db_type}[]")
            arrays.append(prepared)
        sql = (
            f"UPDATE {qn(meta.db_table)} AS t SET {sets} FROM unnest({', '.join(casts)}) AS v({', '.join(names)}) "
            f"WHERE t.{qn(pk.column)} = v.{names[-1]}"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, arrays)
    return len(rows)


def _write_sqlite_rows(
    meta: Any, sets: str, converters: Sequence[Converter | None], rows: list[tuple[Any, ...]]
) -> int:
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
        # As the key is stored: UUIDs as 32 hex digits, other keys as they are.
        to_key = converters[-1]
        keys = [row[-1] for row in rows] if to_key is None else list(map(to_key, [row[-1] for row in rows]))
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
    _executemany(sql, [*converters[:-1], None], ordered)
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
    qn = connection.ops.quote_name
    names = ", ".join(qn(f.column) for f in prep)
    marks = ", ".join(["%s"] * len(prep))
    sql = f"INSERT INTO {qn(meta.db_table)} ({names}) VALUES ({marks})"
    return _executemany(sql, [field_converter(f) for f in prep], rows, prepared=prepared)
