"""Fast multi-row INSERT for Memory and Edge rows.

Django's bulk_create prepares every value through several layers of field machinery and, on SQLite,
splits the insert into ~25-row statements (999 parameters); at 100k memories that preparation costs
more than the database work. Here each field gets one precomputed converter and rows go to the
driver in one executemany per chunk. Defaults, validation and ids are the caller's (services build
complete model instances first), so the rows written are exactly what bulk_create would write.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import connection, models
from django.db.models.fields.json import JSONField

M = TypeVar("M", bound=models.Model)
Converter = Callable[[Any], Any]


def _converter(field: models.Field[Any, Any]) -> Converter:
    ops = connection.ops
    if isinstance(field, JSONField):
        if connection.vendor == "sqlite":
            return lambda v: None if v is None else json.dumps(v)
        return lambda v: None if v is None else ops.adapt_json_value(v, field.encoder)
    if isinstance(field, models.UUIDField) or (
        isinstance(field, models.ForeignKey) and isinstance(field.target_field, models.UUIDField)
    ):
        if connection.features.has_native_uuid_field:
            return lambda v: v
        return lambda v: None if v is None else (v.hex if isinstance(v, uuid.UUID) else uuid.UUID(str(v)).hex)
    if isinstance(field, models.DateTimeField):
        adapt = ops.adapt_datetimefield_value

        def convert_datetime(v: datetime | None) -> Any:
            return None if v is None else adapt(v)

        return convert_datetime
    if isinstance(field, models.BinaryField):
        return lambda v: None if v is None else bytes(v)
    if isinstance(field, models.BooleanField):
        return lambda v: None if v is None else bool(v)
    return lambda v: v


def bulk_insert(model: type[M], objs: Sequence[M], *, chunk: int = 2000) -> None:
    """INSERT `objs` (complete instances with their primary keys set unless auto) in chunks."""
    if not objs:
        return
    fields = [f for f in model._meta.concrete_fields if not (f.primary_key and isinstance(f, models.AutoField))]
    converters = [(f.attname, _converter(f)) for f in fields]
    table = connection.ops.quote_name(model._meta.db_table)
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    placeholders = ", ".join(["%s"] * len(fields))
    sql = f"INSERT INTO {table} ({columns}) VALUES ({placeholders})"
    with connection.cursor() as cursor:
        for start in range(0, len(objs), chunk):
            rows = [
                tuple(convert(getattr(obj, attname)) for attname, convert in converters)
                for obj in objs[start : start + chunk]
            ]
            cursor.executemany(sql, rows)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias
