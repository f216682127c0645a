"""Session pins (database store) for get_working_context."""

from __future__ import annotations

from typing import ClassVar

from django.db import models

from memories.models import Memory, Workspace


class PinnedSession(models.Model):
    """A session of one workspace: session ids are the workspace's own, so the same id in two workspaces
    names two sessions and neither can learn of, claim or touch the other. Pins live and expire with it."""

    session_id = models.CharField(max_length=128)
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="pinned_sessions")
    expires_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["workspace", "session_id"], name="pinsession_ws_sid"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}@{self.workspace_id}"


class SessionPin(models.Model):
    session = models.ForeignKey(PinnedSession, on_delete=models.CASCADE, related_name="pins")
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="session_pins")
    weight = models.FloatField(default=1.0)
    created_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["session", "memory"], name="pin_unique_memory"),
        ]

    def __str__(self) -> str:
        return f"{self.session_id}:{self.memory_id}"
