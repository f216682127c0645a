# API tokens are stored as the SHA-256 of their key. The plain keys of DRF's token table (an install from
# before) become hashed tokens that keep working, and the plain copies are deleted.

import hashlib
from datetime import UTC

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models
from django.utils.dateparse import parse_datetime

PLAIN_TABLE = "authtoken_token"


def _aware(value):
    if isinstance(value, str):
        value = parse_datetime(value)
    if value is None:
        return django.utils.timezone.now()
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def hash_plain_tokens(apps, schema_editor):
    connection = schema_editor.connection
    if PLAIN_TABLE not in connection.introspection.table_names():
        return
    qn = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {qn('key')}, {qn('user_id')}, {qn('created')} FROM {qn(PLAIN_TABLE)}")
        rows = cursor.fetchall()
        ApiToken = apps.get_model("memories", "ApiToken")
        ApiToken.objects.bulk_create(
            [
                ApiToken(
                    user_id=user_id,
                    digest=hashlib.sha256(key.encode()).hexdigest(),
                    prefix=key[:8],
                    name="issued before tokens were hashed",
                    created_at=_aware(created),
                )
                for key, user_id, created in rows
            ]
        )
        cursor.execute(f"DELETE FROM {qn(PLAIN_TABLE)}")


class Migration(migrations.Migration):

    dependencies = [
        ('memories', '0008_delete_auditentry'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('digest', models.CharField(max_length=64, unique=True)),
                ('prefix', models.CharField(max_length=8)),
                ('name', models.CharField(blank=True, default='', max_length=100)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('expires_at', models.DateTimeField(blank=True, null=True)),
                ('revoked_at', models.DateTimeField(blank=True, null=True)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_tokens', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['user', 'created_at'], name='apitoken_user_created')],
            },
        ),
        # The plain keys cannot be written back: going back leaves the tokens hashed (and dropped with the table).
        migrations.RunPython(hash_plain_tokens, migrations.RunPython.noop),
    ]
