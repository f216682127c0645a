# Session ids become a workspace's own: unique per (workspace, session id) instead of site-wide, so one
# workspace can neither learn of nor claim another's session. Existing rows already satisfy it.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0008_delete_auditentry'),
        ('surfacing', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='pinnedsession',
            name='session_id',
            field=models.CharField(max_length=128),
        ),
        migrations.AddConstraint(
            model_name='pinnedsession',
            constraint=models.UniqueConstraint(fields=('workspace', 'session_id'), name='pinsession_ws_sid'),
        ),
    ]
