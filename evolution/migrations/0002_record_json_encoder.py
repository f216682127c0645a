# The encoder only changes how Python writes the JSON text, not the column: the state learns it and the
# database is left alone (a plain AlterField makes SQLite copy the whole records table).

from django.db import migrations, models

import history.models


class Migration(migrations.Migration):
    dependencies = [
        ("evolution", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="evolutionrecord",
                    name="after",
                    field=models.JSONField(blank=True, default=dict, encoder=history.models.RecordJSONEncoder),
                ),
                migrations.AlterField(
                    model_name="evolutionrecord",
                    name="before",
                    field=models.JSONField(blank=True, default=dict, encoder=history.models.RecordJSONEncoder),
                ),
                migrations.AlterField(
                    model_name="evolutionrecord",
                    name="input_ids",
                    field=models.JSONField(default=list, encoder=history.models.RecordJSONEncoder),
                ),
                migrations.AlterField(
                    model_name="evolutionrecord",
                    name="output_ids",
                    field=models.JSONField(default=list, encoder=history.models.RecordJSONEncoder),
                ),
            ],
            database_operations=[],
        ),
    ]
