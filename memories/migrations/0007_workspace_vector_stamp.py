"""Vector stamps are issued from the workspace row (strictly increasing per workspace, in commit order).

The new column starts at the latest stamp a workspace's memories already carry, so the first stamp issued
from it is later than every stamp before it whatever the clock of the host that issues it.
"""

from django.db import migrations, models

START_FROM_STORED_STAMPS = """
UPDATE memories_workspace SET vector_stamped_at = (
  SELECT max(m.embedded_at) FROM memories_memory m WHERE m.workspace_id = memories_workspace.id
)
"""


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0006_vector_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="vector_stamped_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunSQL(START_FROM_STORED_STAMPS, migrations.RunSQL.noop),
    ]
