"""Migration operations shared by the apps' migrations."""

from __future__ import annotations

from typing import Any

from django.db import migrations


class AlterFieldIndex(migrations.AlterField):
    """AlterField of a field whose only change is `db_index`: drops or creates its single-column index.

    Django's AlterField rebuilds a SQLite table for that (a copy of every row: minutes on a large events
    table) although an index is all that changes. The state changes exactly as AlterField changes it. The
    index to drop is found by its column through the schema editor (the name Django gave it differs per
    table), so composite indexes and foreign-key constraints are left alone; the index created on the way
    back gets Django's own name.
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._switch(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        self._switch(app_label, schema_editor, from_state, to_state)

    def _switch(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        old = from_state.apps.get_model(app_label, self.model_name)._meta.get_field(self.name)
        new = model._meta.get_field(self.name)
        if old.db_index == new.db_index:
            raise ValueError(f"{self.model_name}.{self.name}: AlterFieldIndex expects db_index to change")
        if new.db_index:
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[new]))
            return
        for name in schema_editor._constraint_names(model, [new.column], index=True, unique=False, primary_key=False):
            schema_editor.execute(schema_editor._delete_index_sql(model, name))


class AddFieldInPlace(migrations.AddField):
    """AddField that keeps the table on SQLite: ALTER TABLE ... ADD COLUMN with the default as a literal.

    For a NOT NULL column with a default Django rebuilds a SQLite table (a copy of every row), and the
    rebuild drops the table's triggers, which for memories_memory are the full-text index's. SQLite adds
    such a column in place when the default is given in the column definition; the column then keeps that
    database default, which is harmless (every insert names every column). Other backends take AddField's
    path, and backwards is AddField's (RemoveField drops the column in place on SQLite).
    """

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.connection.vendor != "sqlite":
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        model = to_state.apps.get_model(app_label, self.model_name)
        field = model._meta.get_field(self.name)
        definition, params = schema_editor.column_sql(model, field, include_default=True)
        quote = schema_editor.quote_name
        schema_editor.execute(
            f"ALTER TABLE {quote(model._meta.db_table)} ADD COLUMN {quote(field.column)} {definition}", params or None
        )
