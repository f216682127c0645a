# One audit table: the rows of memories.AuditEntry (settings changes, API tokens, import lineage) become
# records of actions that cannot be reverted. Hard deletes wrote a record already; their entry is dropped.

from typing import Any

from django.db import migrations, models

_ACTIONS = {
    "settings.update": ("settings", "configure"),
    "token.create": ("tokens", "grant"),
    "memdir.import": ("memdir", "import"),
}


def entries_to_records(apps: Any, schema_editor: Any) -> None:
    entry_model = apps.get_model("memories", "AuditEntry")
    record_model = apps.get_model("history", "EvolutionRecord")
    records = []
    for entry in entry_model.objects.order_by("created_at", "pk").iterator():
        if entry.action not in _ACTIONS:
            continue
        evolver, action = _ACTIONS[entry.action]
        detail = entry.detail if isinstance(entry.detail, dict) else {}
        if action == "configure":
            before, after = {"settings": detail.get("before", {})}, {"settings": detail.get("after", {})}
        elif action == "grant":
            before, after = {}, {"token_user": entry.object_id}
        else:
            before, after = {}, {"lineage": detail}
        records.append(
            record_model(
                workspace_id=entry.workspace_id,
                evolver=evolver,
                action=action,
                reason=f"{entry.action} (moved from the audit entries)",
                before=before,
                after=after,
                actor_id=entry.actor_id,
                timestamp=entry.created_at,
            )
        )
    record_model.objects.bulk_create(records, batch_size=500)


class Migration(migrations.Migration):
    dependencies = [
        ("history", "0001_initial"),
        ("memories", "0007_workspace_vector_stamp"),
    ]

    operations = [
        migrations.AlterField(
            model_name="evolutionrecord",
            name="action",
            field=models.CharField(
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
                    ("configure", "Configure"),
                    ("grant", "Grant"),
                    ("import", "Import"),
                ],
                max_length=12,
            ),
        ),
        migrations.RunPython(entries_to_records, migrations.RunPython.noop),
    ]
