# Records and their links now belong to the history app (history/migrations/0001_initial.py); the tables
# stay where they are, so only Django's state changes here.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("evolution", "0004_drop_redundant_fk_indexes"),
        ("history", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="proposal",
                    name="applied_record",
                    field=models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="history.evolutionrecord",
                    ),
                ),
                migrations.DeleteModel(name="RecordLink"),
                migrations.DeleteModel(name="EvolutionRecord"),
            ],
            database_operations=[],
        )
    ]
