"""Retention and retrieval profile move from the memory row to MemoryScore (see its docstring).

The values are copied, not reset: forwards into the new table before the columns go, backwards into the
re-added columns before the table goes.
"""

import django.db.models.deletion
from django.db import migrations, models

COPY_FORWARD = """
INSERT INTO memories_memoryscore (memory_id, workspace_id, retention_score, retrieval_profile)
SELECT id, workspace_id, retention_score, retrieval_profile FROM memories_memory
"""
COPY_BACK = """
UPDATE memories_memory SET
  retention_score = (SELECT s.retention_score FROM memories_memoryscore s WHERE s.memory_id = memories_memory.id),
  retrieval_profile = (SELECT s.retrieval_profile FROM memories_memoryscore s WHERE s.memory_id = memories_memory.id)
WHERE id IN (SELECT memory_id FROM memories_memoryscore)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0004_drop_redundant_fk_indexes"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryScore",
            fields=[
                (
                    "memory",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="score",
                        serialize=False,
                        to="memories.memory",
                    ),
                ),
                (
                    "workspace",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="memories.workspace",
                    ),
                ),
                ("retention_score", models.FloatField(default=1.0)),
                ("retrieval_profile", models.JSONField(blank=True, default=dict)),
            ],
        ),
        migrations.RunSQL(COPY_FORWARD, COPY_BACK),
        # After the copy: one sorted build instead of an insert per row.
        migrations.AddIndex(
            model_name="memoryscore",
            index=models.Index(fields=["workspace", "retention_score", "memory"], name="score_ws_retention"),
        ),
        migrations.RemoveIndex(model_name="memory", name="mem_ws_retention"),
        migrations.RemoveField(model_name="memory", name="retention_score"),
        migrations.RemoveField(model_name="memory", name="retrieval_profile"),
    ]
