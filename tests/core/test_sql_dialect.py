"""The dialect module (core.sql): what each of its names gives on the backend the suite runs on (SQLite,
then PostgreSQL for the api subset), and a guard that no vendor test spreads outside it again.

The guard walks the apps' source (migrations aside) and fails on a vendor test anywhere but core.sql, the
full-text search functions, which keep theirs (FTS5 and tsvector are two features, not two spellings), and
the migration operation that runs on a schema editor's connection: ``connection.vendor`` or any other
``.vendor`` read, Django's ``has_native_uuid_field`` feature, and a per-vendor compile method
(``as_sqlite``, ``as_postgresql``, ...).
"""

from __future__ import annotations

import ast
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from core import sql
from memories.models import Memory

ROOT = Path(__file__).resolve().parents[2]
APPS = ("core", "graph", "history", "memories", "surfacing", "evolution", "smartmemory_site")
DIALECT_MODULE = "core/sql.py"
# Vendor tests that stay outside the dialect module, by file and enclosing function: full-text search
# (FTS5 against tsvector) and the migration operations, which run on the schema editor's connection.
ALLOWED: dict[str, frozenset[str]] = {
    "memories/selectors.py": frozenset({"lexical_search", "_fts_filter", "_ranked_matches"}),
    "memories/bulk.py": frozenset({"_writes_fts5_rows"}),
    "memories/migration_ops.py": frozenset({"AddFieldInPlace.database_forwards"}),
}
_PROBED_ATTRIBUTES = frozenset({"vendor", "has_native_uuid_field"})
_VENDOR_METHODS = frozenset({"as_sqlite", "as_postgresql", "as_mysql", "as_oracle"})


class _VendorTests(ast.NodeVisitor):
    """(line, enclosing function as Class.method, what) of every vendor test in one module."""

    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: list[tuple[int, str, str]] = []

    def _enter(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        if not isinstance(node, ast.ClassDef) and node.name in _VENDOR_METHODS:
            self.found.append((node.lineno, ".".join(self.scope), f"def {node.name}"))
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _enter

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in _PROBED_ATTRIBUTES:
            self.found.append((node.lineno, ".".join(self.scope), ast.unparse(node)))
        self.generic_visit(node)


def _vendor_tests(source: str) -> list[tuple[int, str, str]]:
    visitor = _VendorTests()
    visitor.visit(ast.parse(source))
    return visitor.found


def _app_modules() -> Iterator[tuple[str, str]]:
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if "migrations" not in relative.parts:
                yield relative.as_posix(), path.read_text(encoding="utf-8")


def test_the_guard_finds_every_kind_of_vendor_test() -> None:
    source = """
import django.db
def f(connection, editor):
    if connection.vendor == "sqlite":
        return editor.connection.vendor
    return connection.features.has_native_uuid_field
class C:
    def as_postgresql(self):
        return django.db.connection.vendor
"""
    found = _vendor_tests(source)
    assert [(line, scope) for line, scope, _ in found] == [
        (4, "f"),
        (5, "f"),
        (6, "f"),
        (8, "C"),
        (9, "C.as_postgresql"),
    ]


def test_vendor_tests_live_in_the_dialect_module_and_full_text_search_only() -> None:
    stray: list[str] = []
    used: dict[str, set[str]] = {name: set() for name in ALLOWED}
    modules = list(_app_modules())
    assert any(name == DIALECT_MODULE for name, _ in modules)
    for name, source in modules:
        if name == DIALECT_MODULE:
            continue
        for line, scope, what in _vendor_tests(source):
            if scope in ALLOWED.get(name, ()):
                used[name].add(scope)
            else:
                stray.append(f"{name}:{line} ({scope or 'module'}): {what}")
    assert not stray, "a dialect difference outside core.sql: give it a name there and call that\n" + "\n".join(stray)
    # The allowance shrinks with the code: a function that no longer tests the vendor leaves the list.
    assert {name: set(scopes) for name, scopes in ALLOWED.items()} == used


# -- the names, on the backend the suite runs on ------------------------------------------------------


def _one(query: str, params: list[Any] | tuple[Any, ...] = ()) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(query, params)
        return cursor.fetchone()[0]


@pytest.mark.api
@pytest.mark.django_db
def test_which_backend_does_what() -> None:
    sqlite = connection.vendor == "sqlite"
    assert connection.vendor in ("sqlite", "postgresql")
    assert sql.single_writer() is sqlite
    assert sql.writes_by_rowid() is sqlite
    assert sql.planner_needs_index_hints() is sqlite
    assert sql.values_stored_as_text() is sqlite
    assert sql.loads_by_copy() is not sqlite
    assert sql.updates_by_column_arrays() is not sqlite
    assert sql.analyzes_after_bulk_inserts() is not sqlite


@pytest.mark.api
@pytest.mark.django_db
def test_sql_fragments_are_the_ones_the_callers_wrote() -> None:
    if connection.vendor == "sqlite":
        assert sql.group_concat("x") == "group_concat(x, '')"
        assert sql.group_concat("x", ",") == "group_concat(x, ',')"
        assert sql.as_text("w * 2") == "w * 2"
        assert sql.uuid_hex_sql("source_id") == "source_id"
        assert sql.unindexed("workspace_id") == "+workspace_id"
        assert sql.no_key_update_lock() == ""
        assert sql.hours_between("%s", "c") == "(julianday(%s) - julianday(c)) * 24.0"
    else:
        assert sql.group_concat("x") == "string_agg(x, '')"
        assert sql.group_concat("x", ",") == "string_agg(x, ',')"
        assert sql.as_text("w * 2") == "(w * 2)::text"
        assert sql.uuid_hex_sql("source_id") == "replace(source_id::text, '-', '')"
        assert sql.unindexed("workspace_id") == "workspace_id"
        assert sql.no_key_update_lock() == " FOR NO KEY UPDATE"
        assert sql.hours_between("%s", "c") == "(EXTRACT(EPOCH FROM (%s - c)) / 3600.0)::float8"
    with pytest.raises(ValueError, match="SQL literal"):
        sql.group_concat("x", "'")


@pytest.mark.api
@pytest.mark.django_db
def test_group_concat_joins_ids_as_hex_and_numbers_as_text(make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("one")
    hex_id = sql.uuid_hex_sql("id")
    found = _one(f"SELECT {sql.group_concat(hex_id)} FROM memories_memory WHERE id = %s", sql.uuid_params([memory.id]))
    assert found == memory.id.hex
    assert _one(f"SELECT {sql.group_concat(sql.as_text('w'), ',')} FROM (SELECT 0.5 AS w) t") == "0.5"
    # The unary plus changes the plan, never the result.
    assert _one(f"SELECT count(*) FROM memories_memory WHERE {sql.unindexed('workspace_id')} = %s", [-1]) == 0


@pytest.mark.api
@pytest.mark.django_db
def test_uuid_params_find_the_row_and_raw_values_come_back_as_stored(make_memory: Callable[..., Memory]) -> None:
    memory = make_memory("raw")
    sqlite = connection.vendor == "sqlite"
    assert sql.uuid_params([memory.id]) == ([memory.id.hex] if sqlite else [memory.id])
    assert sql.uuid_converter()(memory.id) == (memory.id.hex if sqlite else memory.id)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id, created_at FROM memories_memory WHERE id IN (%s){sql.no_key_update_lock()}",
            sql.uuid_params([memory.id]),
        )
        raw_id, raw_created = cursor.fetchone()
    if sql.values_stored_as_text():
        assert raw_id == memory.id.hex and getattr(raw_created, "tzinfo", None) is None
    else:
        assert raw_id == memory.id and raw_created.tzinfo is not None


def test_stored_forms_of_uuids_and_datetimes() -> None:
    key = uuid.uuid4()
    assert sql.uuid_hex(str(key).upper()) == sql.uuid_hex(key) == key.hex
    assert sql.uuid_hex(None) is None
    with pytest.raises(ValueError):
        sql.uuid_hex("not an id")


@pytest.mark.api
@pytest.mark.django_db
def test_datetime_values_and_parameters() -> None:
    at = datetime(2024, 5, 6, 9, 8, 9, tzinfo=timezone(timedelta(hours=2)))
    if connection.vendor == "sqlite":
        # Naive UTC text, as Django's SQLite backend stores it.
        assert sql.db_datetime(at) == "2024-05-06 07:08:09" == sql.datetime_converter()(at)
        assert sql.timestamp_param(at) == "2024-05-06 07:08:09.000000"
    else:
        assert sql.db_datetime(at) is at and sql.datetime_converter()(at) is at
        assert sql.timestamp_param(at) is at
    assert sql.db_datetime(None) is None
    earlier = at - timedelta(hours=2, minutes=30)
    hours = _one(f"SELECT {sql.hours_between('%s', '%s')}", [sql.timestamp_param(at), sql.timestamp_param(earlier)])
    assert hours == pytest.approx(2.5, abs=1e-6)


@pytest.mark.api
@pytest.mark.django_db
def test_orm_filters_and_expressions(make_memory: Callable[..., Memory]) -> None:
    tagged = make_memory("tagged", tags=("Auth", "db"), metadata={"marker": "m1"})
    other = make_memory("other", tags=("OAuth",), metadata={})
    mine = Memory.objects.filter(pk__in=[tagged.pk, other.pk])
    assert list(mine.filter(sql.json_array_has("tags", "memories_memory.tags", "Auth"))) == [tagged]
    assert not mine.filter(sql.json_array_has("tags", "memories_memory.tags", "Aut")).exists()
    assert set(mine.filter(sql.uuid_in('"memories_memory"."id"', [tagged.id.hex, other.id.hex]))) == {tagged, other}
    assert not mine.filter(sql.uuid_in('"memories_memory"."id"', [uuid.uuid4().hex])).exists()
    markers = dict(mine.values_list("content", sql.json_key_text("metadata", "marker")))
    assert markers == {"tagged": "m1", "other": None}
    row = Memory.objects.filter(pk=tagged.pk).values_list(sql.IdText("id"), sql.EpochSeconds("created_at")).get()
    assert row[0] == str(tagged.id)
    assert row[1] == pytest.approx(tagged.created_at.timestamp(), abs=0.01)


@pytest.mark.api
@pytest.mark.django_db
def test_auto_key_suffix() -> None:
    suffix = sql.auto_key_type_suffix(connection, "BigAutoField")
    assert suffix == (None if connection.vendor == "sqlite" else "GENERATED BY DEFAULT AS IDENTITY")


def _lock_wait_ms() -> int:
    if connection.vendor == "sqlite":
        return int(_one("PRAGMA busy_timeout"))
    text = str(_one("SHOW lock_timeout"))
    for unit, factor in (("ms", 1), ("s", 1000), ("min", 60_000)):
        if text.endswith(unit) and text[: -len(unit)].isdigit():
            return int(text[: -len(unit)]) * factor
    return int(text)


@pytest.mark.api
@pytest.mark.django_db
def test_lock_wait_holds_inside_the_block_then_the_previous_wait() -> None:
    before = _lock_wait_ms()
    with sql.lock_wait(4321):
        assert _lock_wait_ms() == 4321
    assert _lock_wait_ms() == before


@pytest.mark.api
@pytest.mark.django_db
def test_session_lock_timeout_is_postgresql_s_setting() -> None:
    before = _lock_wait_ms()
    with CaptureQueriesContext(connection) as queries:
        sql.set_session_lock_timeout(connection, 2345)
    if connection.vendor == "sqlite":
        assert len(queries) == 0 and _lock_wait_ms() == before
    else:
        assert _lock_wait_ms() == 2345
        sql.set_session_lock_timeout(connection, before)
