"""Audited records: one row per change a person, an API client or the engine made, with the exact values
needed to undo it, and the links that make a memory's history one indexed lookup.

Every app writes its history here and none of this module imports an app above it: the workspace and the
evolution run a record belongs to are named by string.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import orjson
from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from core.sql import auto_key_type_suffix


class Action(models.TextChoices):
    FLAG = "flag"
    ANNOTATE = "annotate"
    CREATE = "create"
    RESOLVE = "resolve"
    SUPERSEDE = "supersede"
    REVERT = "revert"
    DECAY = "decay"
    BOOST = "boost"
    ARCHIVE = "archive"
    RESTORE = "restore"
    PROMOTE = "promote"
    DEMOTE = "demote"
    COMPRESS = "compress"
    REHYDRATE = "rehydrate"
    REPLACE = "replace"
    UPDATE = "update"
    LINK = "link"
    DELETE = "delete"
    # Audit entries of what people did that is not a change to memories (nothing to revert).
    CONFIGURE = "configure"
    GRANT = "grant"
    IMPORT = "import"


AUDIT_ONLY_ACTIONS = frozenset({Action.DELETE, Action.CONFIGURE, Action.GRANT, Action.IMPORT})
"""Actions whose records document what happened and cannot be reverted: a hard delete (the deleted
content is kept in ``before`` for reference), a settings change, an API token granted, an import's lineage."""


class RecordJSONEncoder(json.JSONEncoder):
    """The JSON of record columns, written by orjson: the same values as the stdlib encoder, compact.

    A 100k-memory cycle writes ~135k memory entries into before/after, where the stdlib encoder took over
    a second. Records are only ever read back as values, so the text form does not matter (memory columns,
    which revert must restore byte for byte, keep Django's encoder). A value orjson refuses (an integer
    beyond 64 bits, say) goes through the stdlib encoder, which raises for what JSON cannot hold.
    """

    _OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY

    def encode(self, o: Any) -> str:
        try:
            return orjson.dumps(o, option=self._OPTIONS).decode()
        except orjson.JSONEncodeError:
            return super().encode(o)


class EvolutionRecord(models.Model):
    """One audited action. `before`/`after` hold exactly the field values needed to undo it."""

    # No single-column indexes: rec_ws_time and rec_run_id lead with these keys.
    workspace = models.ForeignKey(
        "memories.Workspace", on_delete=models.CASCADE, related_name="evolution_records", db_index=False
    )
    # The evolution cycle that wrote it (None for a person's edit); named by string, so this app imports
    # nothing above it.
    run = models.ForeignKey(
        "evolution.EvolutionRun",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="records",
        db_index=False,
    )
    evolver = models.CharField(max_length=64)
    action = models.CharField(max_length=12, choices=Action.choices)
    input_ids = models.JSONField(default=list, encoder=RecordJSONEncoder)
    output_ids = models.JSONField(default=list, encoder=RecordJSONEncoder)
    reason = models.TextField(blank=True, default="")
    # {memory_id: {field: value}} for updates; {"created": [...]} / {"edges": [...]} for creations.
    before = models.JSONField(default=dict, blank=True, encoder=RecordJSONEncoder)
    after = models.JSONField(default=dict, blank=True, encoder=RecordJSONEncoder)
    dry_run = models.BooleanField(default=False)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    reverted_at = models.DateTimeField(null=True, blank=True)
    reverted_by = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reverts")
    timestamp = models.DateTimeField(default=timezone.now)

    class Meta:
        # The table keeps the name it had when records lived in the evolution app (no data is copied).
        db_table = "evolution_evolutionrecord"
        indexes: ClassVar = [
            # Run pages list their records in order.
            models.Index(fields=["run", "id"], name="rec_run_id"),
            # Audit views of a workspace, newest first.
            models.Index(fields=["workspace", "timestamp"], name="rec_ws_time"),
        ]

    def __str__(self) -> str:
        return f"{self.evolver}.{self.action} #{self.pk}"


class RowidKey(models.BigAutoField):  # type: ignore[type-arg]
    """An auto key that SQLite assigns without AUTOINCREMENT (elsewhere a plain BigAutoField).

    AUTOINCREMENT makes SQLite read and rewrite the table's sqlite_sequence entry for every inserted row,
    which cost about a third of inserting a record link. Without it a new key is the largest key + 1: a key
    can come back only after the newest links were deleted, and nothing refers to a link by its key.
    """

    def db_type_suffix(self, connection: BaseDatabaseWrapper) -> str | None:
        # Django's Field.db_type_suffix (which the stubs do not declare), minus SQLite's suffix.
        return auto_key_type_suffix(connection, self.get_internal_type())


class RecordLink(models.Model):
    """Which memories a record touched, so a memory's history is one indexed lookup."""

    id = RowidKey(primary_key=True)
    record = models.ForeignKey(EvolutionRecord, on_delete=models.CASCADE, related_name="links")
    memory_id = models.UUIDField()

    class Meta:
        db_table = "evolution_recordlink"
        indexes: ClassVar = [
            # GET memories/{id}/history: WHERE memory_id ORDER BY record DESC.
            models.Index(fields=["memory_id", "record"], name="reclink_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id}->{self.memory_id}"
