"""Move each memory's vector out of the memory row into memories_memoryembedding.

The copy is one INSERT ... SELECT (and UPDATE back when migrating backwards), so it runs inside the
database without loading vectors into Python.
"""

import django.db.models.deletion
from django.db import migrations, models

FORWARD = (
    "INSERT INTO memories_memoryembedding (memory_id, vector) "
    "SELECT id, embedding FROM memories_memory WHERE embedding IS NOT NULL"
)
BACKWARD = (
    "UPDATE memories_memory SET embedding = "
    "(SELECT vector FROM memories_memoryembedding e WHERE e.memory_id = memories_memory.id)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0003_workspace_graph_rewrites"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryEmbedding",
            fields=[
                (
                    "memory",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="embedding",
                        serialize=False,
                        to="memories.memory",
                    ),
                ),
                ("vector", models.BinaryField()),
            ],
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
        migrations.RemoveField(model_name="memory", name="embedding"),
    ]
