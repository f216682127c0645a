"""SQLite: a read-only view of the full-text index's own terms (fts5vocab), for the list search's prefixes.

A prefix query (``"rabbit"*``) has FTS5 merge the doclists of every term it begins into one list before
the first row is returned, and again for every probe of a single row: a list search checks one row at a
time, so each of the ~200 rows a page reads cost 5.7 ms at 1M memories (1.7-2.4 s a page). The list now
asks this table which indexed terms the prefix begins (a skip over the term list, ~0.3 ms a term) and
searches for those terms by name. The table stores nothing: creating it costs nothing on an existing
database, and the index itself is not rebuilt. PostgreSQL: nothing (its GIN index serves ``rabbit:*``).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

SQLITE_FORWARD = ["CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts_vocab USING fts5vocab(memories_fts, 'instance')"]
SQLITE_BACKWARD = ["DROP TABLE IF EXISTS memories_fts_vocab"]


def forward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_FORWARD:
            schema_editor.execute(sql)


def backward(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "sqlite":
        for sql in SQLITE_BACKWARD:
            schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("memories", "0012_accessed_desc_index")]
    operations = [migrations.RunPython(forward, backward)]
