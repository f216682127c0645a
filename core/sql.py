"""The two SQL dialects the site runs on, SQLite and PostgreSQL: every difference between them, by name.

Raw SQL is written once for both backends wherever it can be. Where they differ, the difference is a
function here named for what differs (how a value is stored and passed as a raw parameter, group
concatenation, a row lock, the unary plus that keeps SQLite's planner off an index, whether one writer
holds the whole database), and the selectors, stores and writers of every app call that name instead of
testing ``connection.vendor``. What each backend does stays byte for byte what the callers wrote before
(their queries are tuned for speed on both); only the choice moved here, so a change of how one backend
stores a value, or a third backend, is this module to read.

It is the lowest layer (``core``) because the graph store and the history app, below memories, need it
too; the fast-write module (memories.bulk) writes through its converter table and asks it which write
path the backend has.

Two kinds of branch stay outside, on purpose:

- full-text search: SQLite's FTS5 table and PostgreSQL's stored tsvector are two different features, not
  two spellings of one, so the search code branches on the vendor itself (memories.selectors'
  ``lexical_search``, ``_fts_filter`` and ``_ranked_matches``, and memories.bulk's ``_writes_fts5_rows``);
- migration operations (memories.migration_ops), which run on the schema editor's connection.

tests/core/test_sql_dialect.py fails when a vendor test appears anywhere else in the apps.

Everything reads the default connection when it is called, unless handed another: a connection_created
receiver's, a field's ``db_type_suffix``, and the evolution runner's own (which its tests replace by a
connection to a SQLite file of their own).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, CharField, F, FloatField, Func, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.fields.json import KT, JSONField

Converter = Callable[[Any], Any]


def _sqlite(conn: BaseDatabaseWrapper | None = None) -> bool:
    return (connection if conn is None else conn).vendor == "sqlite"


def _postgresql(conn: BaseDatabaseWrapper | None = None) -> bool:
    return (connection if conn is None else conn).vendor == "postgresql"


def _identity(value: Any) -> Any:
    return value


# -- values as each backend stores them -----------------------------------------------------------

# The text of an empty container, without a json.dumps call (most tags and metadata of an ingest are empty).
_EMPTY_JSON: dict[type, str] = {list: "[]", dict: "{}"}


def _json_sqlite(value: Any) -> Any:
    """JSON as Django's SQLite backend stores it: the stdlib's json.dumps text (None stays SQL NULL)."""
    if value is None:
        return None
    if not value:
        text = _EMPTY_JSON.get(value.__class__)
        if text is not None:
            return text
    return json.dumps(value)


def _json_postgresql(value: Any) -> Any:
    """JSON as the PostgreSQL backend hands it to the driver (a jsonb adapter; None stays SQL NULL)."""
    return None if value is None else connection.ops.adapt_json_value(value, None)


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
    """Django's SQLite form of a datetime: naive UTC text, str() of it (cached: a run writes one `now` a lot).

    A naive value is taken as UTC, as Django takes it with USE_TZ and TIME_ZONE = "UTC" (the project's).
    """
    if value is None:
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return str(value)


def _bytes(value: Any) -> Any:
    """A BinaryField value as bytes (a memoryview or bytearray copied; None stays SQL NULL)."""
    return None if value is None else bytes(value)


# Numbers, booleans and text reach every driver as they are.
_AS_IS: dict[type[models.Field[Any, Any]], Converter | None] = dict.fromkeys(
    [models.FloatField, models.IntegerField, models.BooleanField, models.CharField, models.TextField]
)
# The converter table: how a Python value of each field type reaches the driver, per vendor (None: as it
# is), the way a model save stores it. A field is looked up along its type's MRO (a foreign key by its
# target's, so auto keys are integers); a type or vendor not listed, and a JSONField with its own encoder,
# go through Django's get_db_prep_save: the same result, only slower per value. The fast-write module's
# property test (tests/memories/test_bulk.py) holds it to what Model.save stores.
_CONVERTERS: dict[str, dict[type[models.Field[Any, Any]], Converter | None]] = {
    "sqlite": {
        JSONField: _json_sqlite,
        models.UUIDField: uuid_hex,
        models.DateTimeField: _datetime_sqlite,
        models.BinaryField: _bytes,
        **_AS_IS,
    },
    "postgresql": {
        JSONField: _json_postgresql,
        # Native uuid and timestamptz columns take a UUID (or its text) and an aware datetime as they are.
        models.UUIDField: None,
        models.DateTimeField: None,
        models.BinaryField: _bytes,
        **_AS_IS,
    },
}


def field_converter(field: models.Field[Any, Any]) -> Converter | None:
    """The converter of `field`'s values on the current backend, or None when a value goes as it is."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    table = _CONVERTERS.get(connection.vendor)
    if table is not None and not (isinstance(target, JSONField) and target.encoder is not None):
        for cls in type(target).__mro__:
            if cls in table:
                return table[cls]
    # The wrapper itself, not the `connection` proxy: every attribute read through the proxy costs a
    # lookup, and get_db_prep_save reads several per value.
    conn = connections[DEFAULT_DB_ALIAS]
    return lambda v: field.get_db_prep_save(v, conn)


def datetime_converter() -> Converter:
    """`db_datetime` for the current backend, resolved once (a caller converting many values)."""
    convert = _CONVERTERS.get(connection.vendor, {}).get(models.DateTimeField)
    return _identity if convert is None else convert


def db_datetime(value: datetime | None) -> Any:
    """A datetime as the current database backend stores it (naive UTC text on SQLite)."""
    convert = _CONVERTERS.get(connection.vendor, {}).get(models.DateTimeField)
    return value if convert is None else convert(value)


def uuid_converter() -> Converter:
    """A UUID as the current backend stores it, resolved once (`uuid_hex` on SQLite, the UUID itself on
    PostgreSQL): for rows of raw parameters a caller builds itself."""
    convert = _CONVERTERS.get(connection.vendor, {}).get(models.UUIDField)
    return _identity if convert is None else convert


def uuid_params(ids: Iterable[uuid.UUID]) -> list[Any]:
    """UUIDs as raw query parameters: 32 hex digits on SQLite (Django's UUIDField there), the UUIDs
    themselves on PostgreSQL."""
    return [i.hex for i in ids] if _sqlite() else list(ids)


def values_stored_as_text() -> bool:
    """Whether UUID and datetime columns hold text (SQLite: 32 hex digits, naive UTC ISO text, as Django's
    SQLite backend writes them), so a raw query returns them as that text and a key built from stored ids
    is their hex digits; PostgreSQL's uuid and timestamptz come back as UUIDs and aware datetimes."""
    return _sqlite()


def timestamp_param(value: datetime) -> Any:
    """A datetime as the raw parameter of `hours_between`: UTC text with microseconds on SQLite (what
    julianday() reads), the aware datetime itself on PostgreSQL."""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f") if _sqlite() else value


# -- SQL text ------------------------------------------------------------------------------------------


def group_concat(expression: str, separator: str = "") -> str:
    """The aggregate joining the text of `expression` over a group with `separator` (SQLite's group_concat,
    PostgreSQL's string_agg, which wants text: see `as_text`)."""
    if "'" in separator:
        raise ValueError(f"separator {separator!r} would end the SQL literal")
    function = "group_concat" if _sqlite() else "string_agg"
    return f"{function}({expression}, '{separator}')"


def as_text(expression: str) -> str:
    """`expression` (a number) as text for `group_concat`: SQLite's group_concat converts it itself."""
    return expression if _sqlite() else f"({expression})::text"


def uuid_hex_sql(column: str) -> str:
    """A UUID column's value as 32 hex digits without dashes (SQLite stores exactly that)."""
    return column if _sqlite() else f"replace({column}::text, '-', '')"


def unindexed(column: str) -> str:
    """`column` as a term no index serves: ``+column`` on SQLite, whose planner without ANALYZE statistics
    would otherwise pick that column's index over a better one (the primary key, a list's ordering index);
    PostgreSQL's planner weighs its statistics, so the column as it is."""
    return f"+{column}" if _sqlite() else column


def planner_needs_index_hints() -> bool:
    """Whether the planner has to be kept off an index by the query (`unindexed`) where a common value
    makes it the wrong one: SQLite's plans from its indexes alone; PostgreSQL's weighs LIMIT and value
    frequencies itself."""
    return _sqlite()


def no_key_update_lock() -> str:
    """The clause ending a SELECT that locks its rows for an UPDATE changing no key: `` FOR NO KEY UPDATE``
    on PostgreSQL (inserts referencing the rows take KEY SHARE locks, which it does not wait for), nothing on
    SQLite, where writers are serialised by the database lock anyway."""
    return " FOR NO KEY UPDATE" if _postgresql() else ""


def hours_between(later: str, earlier: str) -> str:
    """Hours from the timestamp `earlier` to `later` (SQL expressions; a parameter given by
    `timestamp_param`) as a float: julianday() arithmetic on SQLite, epoch arithmetic on PostgreSQL."""
    if _sqlite():
        return f"(julianday({later}) - julianday({earlier})) * 24.0"
    # float8: EXTRACT gives numeric, which the driver turns into one Decimal per value (~40% of a candidate
    # read's time for 700 rows).
    return f"(EXTRACT(EPOCH FROM ({later} - {earlier})) / 3600.0)::float8"


def uuid_in(column: str, hex_ids: Sequence[str]) -> RawSQL:
    """`column IN (hex_ids)` (ids as 32 hex digits) with every id in one parameter, however many: a JSON list
    read by json_each on SQLite (the ids as stored), a uuid[] unnested on PostgreSQL (from the array rather
    than ``= ANY(array)``, which a planner may take for a set to AND with another index)."""
    if _sqlite():
        return RawSQL(
            f"{column} IN (SELECT value FROM json_each(%s))", (json.dumps(list(hex_ids)),), output_field=BooleanField()
        )
    return RawSQL(
        f"{column} IN (SELECT unnest(%s::uuid[]))", ([uuid.UUID(h) for h in hex_ids],), output_field=BooleanField()
    )


def json_array_has(field: str, column: str, value: Any) -> Q | RawSQL:
    """A filter: the JSON list `field` (SQL `column`) holds `value` whole, as PostgreSQL's jsonb containment
    matches it (a substring match on SQLite's JSON text would also find "Auth" in "OAuth" and strings that
    merely contain the quoted value), so through json_each on SQLite."""
    if _postgresql():
        return Q(**{f"{field}__contains": [value]})
    return RawSQL(
        f"EXISTS (SELECT 1 FROM json_each({column}) WHERE json_each.value = %s)", (value,), output_field=BooleanField()
    )


def json_key_text(field: str, key: str) -> Any:
    """The value under `key` of the JSON object `field`, as text (NULL when missing). On SQLite one
    json_extract, which returns a number as a number (the caller makes it text): Django's KT there is a
    CASE over two JSON_TYPE calls and a json_extract, three parses of the JSON per row. Elsewhere KT
    (PostgreSQL: ->>)."""
    if _sqlite():
        return Func(F(field), Value(f"$.{key}"), function="JSON_EXTRACT", output_field=CharField())
    return KT(f"{field}__{key}")


class EpochSeconds(Func):
    """Seconds since 1970-01-01 UTC of a datetime column, computed by the database (NULL stays NULL).

    Parsing 100k datetimes in Python costs seconds; the evolvers only need them as float epochs.
    SQLite's julianday() keeps milliseconds, which is far finer than the days the formulas work in.
    """

    output_field = FloatField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, Any]:
        return self.as_sql(
            compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)", **extra_context
        )

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, Any]:
        return self.as_sql(
            compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::double precision", **extra_context
        )


class IdText(Func):
    """A UUID column as canonical text ("8-4-4-4-12", lower case), formatted by the database.

    Evolvers key everything by memory id; building a Python UUID per row (and formatting it back for
    records) cost more than the arithmetic at 100k memories. Django stores UUIDs on SQLite as 32 hex
    digits, on PostgreSQL natively.
    """

    output_field = CharField()

    def as_sqlite(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, Any]:
        col = "%(expressions)s"
        parts = "||'-'||".join(f"substr({col}, {start}, {length})" for start, length in _HEX_GROUPS)
        return self.as_sql(compiler, connection, template=parts, **extra_context)

    def as_postgresql(self, compiler: Any, connection: Any, **extra_context: Any) -> tuple[str, Any]:
        return self.as_sql(compiler, connection, template="(%(expressions)s)::text", **extra_context)


_HEX_GROUPS = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))


def auto_key_type_suffix(conn: BaseDatabaseWrapper, internal_type: str) -> str | None:
    """The column suffix of an auto key that SQLite assigns without AUTOINCREMENT (none there: a rowid key,
    see history.models.RowidKey), elsewhere the backend's own (PostgreSQL: GENERATED BY DEFAULT AS IDENTITY)."""
    return None if _sqlite(conn) else conn.data_types_suffix.get(internal_type)


# -- writes and waits ----------------------------------------------------------------------------------


def loads_by_copy() -> bool:
    """Whether many new rows go fastest through COPY FROM STDIN (PostgreSQL with psycopg: about 3x an
    INSERT per row, each parsed and planned); SQLite runs a prepared INSERT by executemany."""
    return _postgresql()


def updates_by_column_arrays() -> bool:
    """Whether many UPDATEs by key go fastest as one ``UPDATE ... FROM unnest(column arrays)`` (PostgreSQL:
    executemany sends a statement per row, each parsed, planned and run); SQLite runs a prepared UPDATE by
    executemany, with no round trip per row."""
    return _postgresql()


def writes_by_rowid() -> bool:
    """Whether every table has a rowid that a large write can go through in table order (SQLite, where an
    auto key is the rowid itself); PostgreSQL has no such column."""
    return _sqlite()


def analyzes_after_bulk_inserts() -> bool:
    """Whether a table grown by bulk inserts needs an ANALYZE of its own (PostgreSQL, whose planner reads
    statistics autovacuum refreshes up to a minute later; SQLite's plans do not change with the count)."""
    return _postgresql()


def single_writer(conn: BaseDatabaseWrapper | None = None) -> bool:
    """Whether one writer holds the whole database at a time (SQLite: a file lock, and writers waiting for
    it retry on their own, with no queue; the file's journal, page cache and data_version are the
    connection's to read and set with PRAGMAs). PostgreSQL locks rows and queues the waiters."""
    return _sqlite(conn)


@contextmanager
def lock_wait(millis: int, conn: BaseDatabaseWrapper | None = None) -> Iterator[None]:
    """Inside the block the connection (`conn`, else the default) waits up to `millis` ms for a lock
    (SQLite's busy_timeout, PostgreSQL's lock_timeout), then its previous wait again (another backend:
    unchanged)."""
    if conn is None:
        conn = connection
    if _sqlite(conn):
        with conn.cursor() as cursor:
            cursor.execute("PRAGMA busy_timeout")
            (previous,) = cursor.fetchone()
            cursor.execute(f"PRAGMA busy_timeout = {millis}")
        try:
            yield
        finally:
            with conn.cursor() as cursor:
                cursor.execute(f"PRAGMA busy_timeout = {int(previous)}")
    elif _postgresql(conn):
        with conn.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            (previous,) = cursor.fetchone()
            cursor.execute("SELECT set_config('lock_timeout', %s, false)", [f"{millis}ms"])
        try:
            yield
        finally:
            if conn.is_usable():
                with conn.cursor() as cursor:
                    cursor.execute("SELECT set_config('lock_timeout', %s, false)", [str(previous)])
    else:
        yield


def set_session_lock_timeout(conn: BaseDatabaseWrapper, millis: int) -> None:
    """Make the new connection `conn` wait `millis` ms for a lock until it closes or a caller sets another
    wait (PostgreSQL's lock_timeout, a session setting); SQLite's busy timeout comes with the connection's
    OPTIONS, so nothing is done there."""
    if not _postgresql(conn):
        return
    with conn.cursor() as cursor:
        cursor.execute("SELECT set_config('lock_timeout', %s, false)", [f"{millis}ms"])
