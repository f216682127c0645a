"""Migration operations shared by the apps' migrations."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import migrations


def drop_field_indexes(app_label: str, fields: Sequence[tuple[str, str]]) -> migrations.RunPython:
    """Drop the single-column index of each (model, field) and create it again on the way back.

    The database half of turning `db_index` off for a field that a composite index already leads with.
    Django's own AlterField rebuilds a SQLite table for that (a copy of every row: minutes on a large
    events table); an index is all that changes, so only the index is dropped. The index is found by its
    column through the schema editor (the name Django gave it differs per table), so composite indexes
    and foreign-key constraints are left alone.
    """

    def forwards(apps: Any, schema_editor: Any) -> None:
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            column = model._meta.get_field(field_name).column
            for name in schema_editor._constraint_names(model, [column], index=True, unique=False, primary_key=False):
                schema_editor.execute(schema_editor._delete_index_sql(model, name))

    def backwards(apps: Any, schema_editor: Any) -> None:
        for model_name, field_name in fields:
            model = apps.get_model(app_label, model_name)
            schema_editor.execute(schema_editor._create_index_sql(model, fields=[model._meta.get_field(field_name)]))

    return migrations.RunPython(forwards, backwards, elidable=False)
