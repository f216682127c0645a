# Record links keyed without SQLite's AUTOINCREMENT (see history.models.RowidKey). SQLite rebuilds the
# table once; on PostgreSQL the column does not change.

from django.db import migrations

import history.models


class Migration(migrations.Migration):
    dependencies = [
        ("evolution", "0002_record_json_encoder"),
    ]

    operations = [
        migrations.AlterField(
            model_name="recordlink",
            name="id",
            field=history.models.RowidKey(primary_key=True, serialize=False),
        ),
    ]
