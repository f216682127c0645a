"""Every stored vector names the model that made it; workspaces count their vector writes.

Existing vectors are labelled from their length: a blob of 4 * dim bytes, dim being that of the site's
EMBEDDER now, gets that embedder's name. Others (another dim: an earlier EMBEDDER) keep "" = unknown
model, which nothing compares until `manage.py reembed` writes them again. A blob of the right length
could still come from another model of the same dim; nothing stored can tell, and re-embedding fixes it.
"""

import logging

from django.conf import settings
from django.db import migrations, models

from memories.migration_ops import AddFieldInPlace

log = logging.getLogger(__name__)


def label_vectors(apps, schema_editor):
    from memories.algorithms.embedding import EmbedderUnavailable, get_embedder

    try:
        embedder = get_embedder(settings.EMBEDDER)
    except (EmbedderUnavailable, ValueError) as exc:
        log.warning("stored vectors left unlabelled (EMBEDDER %r cannot load: %s)", settings.EMBEDDER, exc)
        return
    table = schema_editor.quote_name(apps.get_model("memories", "Memory")._meta.db_table)
    # length() of a blob (SQLite) or bytea (PostgreSQL) is its size in bytes on both.
    schema_editor.execute(
        f"UPDATE {table} SET embedding_model = %s WHERE embedding IS NOT NULL AND length(embedding) = %s",
        [embedder.name, 4 * embedder.dim],
    )


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0005_memory_scores"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="embedded_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        # In place: a SQLite table rebuild would drop the memory table's full-text triggers.
        AddFieldInPlace(
            model_name="memory",
            name="embedding_model",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="workspace",
            name="embedder",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="workspace",
            name="vector_generation",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.RunPython(label_vectors, migrations.RunPython.noop),
        migrations.AddIndex(
            model_name="memory",
            index=models.Index(fields=["workspace", "embedded_at"], name="mem_ws_embedded"),
        ),
    ]
