"""Fast multi-row INSERT for Memory and Edge rows.

Django's bulk_create prepares every value through several layers of field machinery and, on SQLite,
splits the insert into ~25-row statements (999 parameters); at 100k memories that preparation costs
more than the database work. Here rows are read with one attrgetter, only the fields whose database
form differs from the Python value are converted, and rows go to the driver in one executemany per
chunk. On SQLite the full-text rows are written right after (search_indexed=1 tells the insert
trigger to skip them), because FTS5 inserts run about three times faster outside a trigger.
Defaults, validation and ids are the caller's: services build complete model instances first.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from operator import attrgetter
from typing import Any, TypeVar, cast

from django.db import connection, models
from django.db.models.base import ModelState
from django.db.models.fields.json import JSONField

from memories.models import Memory, MemoryScore

M = TypeVar("M", bound=models.Model)
Converter = Callable[[Any], Any]


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
    defaults run only for fields missing from `values`. `related` pre-fills the FK cache. A name of
    `values` that is a property of the model (Memory's scores) is set through it.
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
        for name in properties:
            if not isinstance(getattr(model, name, None), property):
                raise TypeError(f"{model.__name__} has no field or property {name!r}")
            setattr(obj, name, values[name])
    return obj


def _json_sqlite(value: Any) -> Any:
    if value is None:
        return None
    if not value:
        return "[]" if isinstance(value, list) else "{}"
    return json.dumps(value)


def uuid_hex(value: Any) -> Any:
    """A UUID as Django stores it on SQLite, 32 lower-case hex digits (None stays None): from a UUID, or
    from its text, canonical or bare, in any case. Other text goes through uuid.UUID, which reads the other
    forms it knows and raises ValueError for what is not a UUID.

    Text is checked by bytes.fromhex rather than parsed into a UUID: ~0.1 us against ~1.5 us an id, and
    an evolution cycle converts a few hundred thousand.
    """
    if value is None:
        return None
    if value.__class__ is str:
        text = value.replace("-", "").lower()
        if len(text) == 32:
            try:
                if len(bytes.fromhex(text)) == 16:
                    return text
            except ValueError:
                pass
    return value.hex if isinstance(value, uuid.UUID) else uuid.UUID(str(value)).hex


@lru_cache(maxsize=4096)
def _datetime_sqlite(value: datetime | None) -> Any:
    # Django's SQLite backend stores naive UTC text, str() of the datetime.
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return str(value)


def db_datetime(value: datetime | None) -> Any:
    """A datetime as the current database backend stores it (naive UTC text on SQLite)."""
    return _datetime_sqlite(value) if connection.vendor == "sqlite" else value


def _converter(field: models.Field[Any, Any]) -> Converter | None:
    """Return the value converter for `field`, or None when the Python value goes in as it is."""
    sqlite = connection.vendor == "sqlite"
    if isinstance(field, JSONField):
        if sqlite:
            return _json_sqlite
        encoder = field.encoder
        return lambda v: None if v is None else connection.ops.adapt_json_value(v, encoder)
    is_uuid = isinstance(field, models.UUIDField) or (
        isinstance(field, models.ForeignKey) and isinstance(field.target_field, models.UUIDField)
    )
    if is_uuid:
        return None if connection.features.has_native_uuid_field else uuid_hex
    if isinstance(field, models.DateTimeField):
        return _datetime_sqlite if sqlite else None
    if isinstance(field, models.BinaryField):
        return lambda v: None if v is None else bytes(v)
    return None


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
    special = [(i, conv) for i, f in enumerate(fields) if (conv := _converter(f)) is not None]
    table = connection.ops.quote_name(model._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
    if ignore_conflicts:
        sql = (
            sql.replace("INSERT", "INSERT OR IGNORE", 1)
            if connection.vendor == "sqlite"
            else sql + " ON CONFLICT DO NOTHING"
        )
    index_fts = model is Memory and connection.vendor == "sqlite"
    if index_fts:
        for obj in objs:
            obj.search_indexed = True  # type: ignore[attr-defined]
    with connection.cursor() as cursor:
        for start in range(0, len(objs), chunk):
            batch = objs[start : start + chunk]
            rows = []
            for obj in batch:
                row = list(get_row(obj))
                for i, convert in special:
                    row[i] = convert(row[i])
                rows.append(row)
            cursor.executemany(sql, rows)
            if index_fts:
                _index_fts(cursor, batch)  # type: ignore[arg-type]
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
    if model is Memory:
        _insert_scores(cast(Sequence[Memory], objs), chunk)


def _insert_scores(memories: Sequence[Memory], chunk: int) -> None:
    """INSERT the scores row of each freshly inserted memory: the one it was given, else the defaults.

    From value tuples, not instances: a MemoryScore per memory of a 100k ingest cost more than its insert.
    """
    fields = list(MemoryScore._meta.concrete_fields)
    assert [f.name for f in fields] == ["memory", "workspace", "retention_score", "retrieval_profile"]
    identity: Converter = lambda v: v  # noqa: E731
    converters = [_converter(f) or identity for f in fields]
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
            cursor.executemany(sql, rows[start : start + chunk])


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
