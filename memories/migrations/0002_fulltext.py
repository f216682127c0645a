"""Full-text index of memory content: SQLite FTS5 table kept by triggers, or a PostgreSQL GIN index.

The FTS5 table stores its own copy of the text and the memory id; `memories_fts_map` remembers which
FTS rowid belongs to which memory so updates and deletes touch one row instead of scanning the index
(a memory table's implicit rowid is not stable across VACUUM, so it cannot be the link). Rows
inserted with search_indexed = 1 were indexed by their writer (memories.bulk), which is much faster
than FTS5 inserts run from a trigger.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE memories_fts USING fts5("
    "content, memory_id UNINDEXED, workspace_id UNINDEXED, tokenize='porter unicode61 remove_diacritics 2')",
    "CREATE TABLE memories_fts_map (memory_id char(32) PRIMARY KEY, fts_rowid INTEGER NOT NULL) WITHOUT ROWID",
    """CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories_memory WHEN new.search_indexed = 0 BEGIN
         INSERT INTO memories_fts(content, memory_id, workspace_id) VALUES (new.content, new.id, new.workspace_id);
         INSERT INTO memories_fts_map(memory_id, fts_rowid) VALUES (new.id, last_insert_rowid());
       END""",
    """CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories_memory BEGIN
         DELETE FROM memories_fts WHERE rowid = (SELECT fts_rowid FROM memories_fts_map WHERE memory_id = old.id);
         DELETE FROM memories_fts_map WHERE memory_id = old.id;
       END""",
    """CREATE TRIGGER memories_fts_au AFTER UPDATE OF content ON memories_memory BEGIN
         UPDATE memories_fts SET content = new.content
           WHERE rowid = (SELECT fts_rowid FROM memories_fts_map WHERE memory_id = old.id);
       END""",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS memories_fts_au",
    "DROP TRIGGER IF EXISTS memories_fts_ad",
    "DROP TRIGGER IF EXISTS memories_fts_ai",
    "DROP TABLE IF EXISTS memories_fts_map",
    "DROP TABLE IF EXISTS memories_fts",
]
POSTGRES_FORWARD = [
    "CREATE INDEX IF NOT EXISTS mem_content_fts ON memories_memory USING GIN (to_tsvector('english', content))",
]
POSTGRES_BACKWARD = ["DROP INDEX IF EXISTS mem_content_fts"]


def forward(apps: Any, schema_editor: Any) -> None:
    statements = SQLITE_FORWARD if schema_editor.connection.vendor == "sqlite" else POSTGRES_FORWARD
    for sql in statements:
        schema_editor.execute(sql)


def backward(apps: Any, schema_editor: Any) -> None:
    statements = SQLITE_BACKWARD if schema_editor.connection.vendor == "sqlite" else POSTGRES_BACKWARD
    for sql in statements:
        schema_editor.execute(sql)


class Migration(migrations.Migration):
    dependencies = [("memories", "0001_initial")]
    operations = [migrations.RunPython(forward, backward)]
