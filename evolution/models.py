"""Evolution runs, their audited records, proposals awaiting a person, and the engine's inputs."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

import orjson
from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from memories.models import Workspace


class RunStatus(models.TextChoices):
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    REVERTED = "reverted"


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


class EvolutionRun(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # run_ws_started leads with workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="evolution_runs", db_index=False)
    evolvers = models.JSONField(default=list)
    dry_run = models.BooleanField(default=True)
    status = models.CharField(max_length=10, choices=RunStatus.choices, default=RunStatus.RUNNING)
    started_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    # {"evolvers": [{"name", "status": ok|failed, "records": n, "error": str, "seconds": f}], "counts": {...}}
    summary = models.JSONField(default=dict, blank=True)
    # {"evolver": name, "done": i, "total": n} while running; read by the progress page and socket.
    progress = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes: ClassVar = [models.Index(fields=["workspace", "started_at"], name="run_ws_started")]

    def __str__(self) -> str:
        return f"run {self.id} ({'dry' if self.dry_run else 'applied'})"


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
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="evolution_records", db_index=False)
    run = models.ForeignKey(
        EvolutionRun, null=True, blank=True, on_delete=models.CASCADE, related_name="records", db_index=False
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
        return None if connection.vendor == "sqlite" else connection.data_types_suffix.get(self.get_internal_type())


class RecordLink(models.Model):
    """Which memories a record touched, so a memory's history is one indexed lookup."""

    id = RowidKey(primary_key=True)
    record = models.ForeignKey(EvolutionRecord, on_delete=models.CASCADE, related_name="links")
    memory_id = models.UUIDField()

    class Meta:
        indexes: ClassVar = [
            # GET memories/{id}/history: WHERE memory_id ORDER BY record DESC.
            models.Index(fields=["memory_id", "record"], name="reclink_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.record_id}->{self.memory_id}"


class ProposalKind(models.TextChoices):
    SUMMARY = "summary"
    PROMOTION = "promotion"
    STRATEGY = "strategy"
    MERGE = "merge"
    REFLECTION = "reflection"
    CONFLICT = "conflict"


class ProposalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    MODIFIED = "modified"
    VETOED = "vetoed"


class Proposal(models.Model):
    # prop_ws_status and prop_ws_key lead with workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="proposals", db_index=False)
    kind = models.CharField(max_length=12, choices=ProposalKind.choices)
    status = models.CharField(max_length=10, choices=ProposalStatus.choices, default=ProposalStatus.PENDING)
    title = models.CharField(max_length=300)
    rationale = models.TextField(blank=True, default="")
    payload = models.JSONField(default=dict, blank=True)
    source_ids = models.JSONField(default=list, blank=True)
    # Stable identity of what is proposed (e.g. a lesson key) so the engine never proposes it twice.
    dedupe_key = models.CharField(max_length=200, blank=True, default="")
    created_by = models.CharField(max_length=64, default="engine")
    created_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_reason = models.TextField(blank=True, default="")
    applied_record = models.ForeignKey(
        EvolutionRecord, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        indexes: ClassVar = [
            # The review queue: WHERE workspace AND status ORDER BY created_at.
            models.Index(fields=["workspace", "status", "created_at"], name="prop_ws_status"),
            models.Index(fields=["workspace", "dedupe_key"], name="prop_ws_key"),
        ]

    def __str__(self) -> str:
        return f"[{self.kind}] {self.title}"


class OutcomeResult(models.TextChoices):
    SUCCESS = "success"
    FAIL = "fail"


class Outcome(models.Model):
    """A task outcome recorded by an agent: the engine's sensor input (seed 002)."""

    # outcome_ws_created leads with workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="outcomes", db_index=False)
    task_type = models.CharField(max_length=120)
    approach = models.CharField(max_length=200, blank=True, default="")
    result = models.CharField(max_length=8, choices=OutcomeResult.choices)
    lesson = models.TextField(blank=True, default="")
    issue = models.TextField(blank=True, default="")
    solution = models.TextField(blank=True, default="")
    source = models.CharField(max_length=32, default="api")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes: ClassVar = [models.Index(fields=["workspace", "created_at"], name="outcome_ws_created")]

    def __str__(self) -> str:
        return f"{self.task_type}: {self.result}"


class DreamReport(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="dream_reports")
    run = models.ForeignKey(EvolutionRun, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    report = models.JSONField(default=dict)

    def __str__(self) -> str:
        return f"dream {self.created_at:%Y-%m-%d %H:%M}"
