# Audit entries now live in the one audit table (history/migrations/0002_audit_entries.py copied them).

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0007_workspace_vector_stamp"),
        ("history", "0002_audit_entries"),
    ]

    operations = [migrations.DeleteModel(name="AuditEntry")]
