# Records and their links move here from the evolution app. Their tables were created by the evolution
# app's migrations and keep their names, so this migration only tells Django's state where they live.

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

import history.models


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("evolution", "0004_drop_redundant_fk_indexes"),
        ("memories", "0007_workspace_vector_stamp"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    state_operations = [
        migrations.CreateModel(
            name="EvolutionRecord",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("evolver", models.CharField(max_length=64)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("flag", "Flag"),
                            ("annotate", "Annotate"),
                            ("create", "Create"),
                            ("resolve", "Resolve"),
                            ("supersede", "Supersede"),
                            ("revert", "Revert"),
                            ("decay", "Decay"),
                            ("boost", "Boost"),
                            ("archive", "Archive"),
                            ("restore", "Restore"),
                            ("promote", "Promote"),
                            ("demote", "Demote"),
                            ("compress", "Compress"),
                            ("rehydrate", "Rehydrate"),
                            ("replace", "Replace"),
                            ("update", "Update"),
                            ("link", "Link"),
                            ("delete", "Delete"),
                        ],
                        max_length=12,
                    ),
                ),
                ("input_ids", models.JSONField(default=list, encoder=history.models.RecordJSONEncoder)),
                ("output_ids", models.JSONField(default=list, encoder=history.models.RecordJSONEncoder)),
                ("reason", models.TextField(blank=True, default="")),
                ("before", models.JSONField(blank=True, default=dict, encoder=history.models.RecordJSONEncoder)),
                ("after", models.JSONField(blank=True, default=dict, encoder=history.models.RecordJSONEncoder)),
                ("dry_run", models.BooleanField(default=False)),
                ("reverted_at", models.DateTimeField(blank=True, null=True)),
                ("timestamp", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "actor",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "reverted_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="reverts",
                        to="history.evolutionrecord",
                    ),
                ),
                (
                    "run",
                    models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="records",
                        to="evolution.evolutionrun",
                    ),
                ),
                (
                    "workspace",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="evolution_records",
                        to="memories.workspace",
                    ),
                ),
            ],
            options={"db_table": "evolution_evolutionrecord"},
        ),
        migrations.CreateModel(
            name="RecordLink",
            fields=[
                ("id", history.models.RowidKey(primary_key=True, serialize=False)),
                ("memory_id", models.UUIDField()),
                (
                    "record",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="links",
                        to="history.evolutionrecord",
                    ),
                ),
            ],
            options={"db_table": "evolution_recordlink"},
        ),
        migrations.AddIndex(
            model_name="evolutionrecord",
            index=models.Index(fields=["run", "id"], name="rec_run_id"),
        ),
        migrations.AddIndex(
            model_name="evolutionrecord",
            index=models.Index(fields=["workspace", "timestamp"], name="rec_ws_time"),
        ),
        migrations.AddIndex(
            model_name="recordlink",
            index=models.Index(fields=["memory_id", "record"], name="reclink_memory"),
        ),
    ]

    operations = [migrations.SeparateDatabaseAndState(state_operations=state_operations, database_operations=[])]
