from __future__ import annotations

from django.contrib import admin

from surfacing.models import PinnedSession, SessionPin


@admin.register(PinnedSession)
class PinnedSessionAdmin(admin.ModelAdmin[PinnedSession]):
    list_display = ("session_id", "workspace", "expires_at")
    list_filter = ("workspace",)


@admin.register(SessionPin)
class SessionPinAdmin(admin.ModelAdmin[SessionPin]):
    list_display = ("session", "memory", "weight", "created_at")
    raw_id_fields = ("memory",)
