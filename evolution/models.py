"""Evolution runs, proposals awaiting a person, and the engine's inputs (records live in ``history``)."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone

from memories.models import Workspace


class RunStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REVERTED = "reverted"


# A run that has not finished: queued for a worker, or being worked.
OPEN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class RevertState(models.TextChoices):
    """How far a run's revert came (the ``state`` of ``summary["revert"]``, kept in a column as well so that
    workers find the queued ones, and the workspace its revert under way, by an index)."""

    NONE = ""
    QUEUED = "queued"
    REVERTING = "reverting"
    REVERTED = "reverted"
    STOPPED = "stopped"


# A revert that is not over: waiting for a worker, or being worked (by a worker or by the request that asked).
OPEN_REVERT_STATES = (RevertState.QUEUED, RevertState.REVERTING)


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
    # The worker working the run (and later its revert) and when it last said so: a run or revert whose
    # heartbeat is older than the worker's lease is taken over by another worker (evolution.jobs).
    worker = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # summary["revert"]["state"] as a column: a worker claims a queued revert by a conditional UPDATE of it,
    # as it claims a queued run by its status (evolution.jobs.claim_revert).
    revert_state = models.CharField(max_length=10, choices=RevertState.choices, blank=True, default="")
    cancel_requested = models.BooleanField(default=False)
    # Queued by the workspace's schedule (evolution.jobs.schedule_due), not by a person or a command.
    scheduled = models.BooleanField(default=False)

    class Meta:
        indexes: ClassVar = [
            models.Index(fields=["workspace", "started_at"], name="run_ws_started"),
            models.Index(fields=["status", "started_at"], name="run_status_started"),
            # The workers' look for queued and abandoned reverts; nearly every run's state is "" or reverted.
            models.Index(fields=["revert_state", "heartbeat_at"], name="run_revert_state"),
        ]

    def __str__(self) -> str:
        return f"run {self.id} ({'dry' if self.dry_run else 'applied'})"


class ScheduledJob(models.Model):
    """One scheduled job of one workspace (evolution.scheduler): when it last ran and how it went, what it
    carries from one run to the next, and the database lock that keeps it to one worker at a time.

    With REDIS_URL set the lock lives in Redis instead (evolution.locks) and the lock columns stay empty;
    the rest is written by the worker holding the lock either way.
    """

    # schedjob_ws_job leads with workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="scheduled_jobs", db_index=False)
    job = models.CharField(max_length=32)
    # The clock reading the last finished run worked at (its `now`): the job is due again a period later.
    # A run killed before it finished leaves it as it was, so the job stays due for the next worker.
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_finished_at = models.DateTimeField(null=True, blank=True)
    last_status = models.CharField(max_length=8, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    last_seconds = models.FloatField(default=0.0)
    last_stats = models.JSONField(default=dict, blank=True)
    runs = models.PositiveIntegerField(default=0)
    # What the job carries to its next run (the retrieval statistics' event watermarks).
    state = models.JSONField(default=dict, blank=True)
    # The database lock (evolution.locks.DatabaseJobLocks): the holder's token and when its lease ends.
    lock_token = models.CharField(max_length=64, blank=True, default="")
    lock_expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["workspace", "job"], name="schedjob_ws_job"),
        ]

    def __str__(self) -> str:
        return f"{self.job} of workspace {self.workspace_id}"


class ProposalKind(models.TextChoices):
    SUMMARY = "summary"
    PROMOTION = "promotion"
    STRATEGY = "strategy"
    MERGE = "merge"
    REFLECTION = "reflection"
    CONFLICT = "conflict"
    # TOMBSTONE -> FORGOTTEN steps of the compression ladder (evolution.forgetting): never applied unasked.
    FORGET = "forget"


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
        "history.EvolutionRecord", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
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
    """A task outcome recorded by an agent: the engine's sensor input."""

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
