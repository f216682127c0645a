from __future__ import annotations

from typing import ClassVar

from django.contrib import admin

from memories.models import AuditEntry, Edge, Membership, Memory, RetrievalEvent, Workspace


class MembershipInline(admin.TabularInline[Membership, Workspace]):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin[Workspace]):
    list_display = ("slug", "name", "created_at", "graph_generation")
    search_fields = ("slug", "name")
    readonly_fields = ("created_at", "graph_generation")
    inlines: ClassVar = [MembershipInline]


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin[Memory]):
    list_display = (
        "short_content",
        "memory_type",
        "status",
        "tier",
        "compression_tier",
        "workspace",
        "created_at",
    )
    list_filter = ("memory_type", "status", "tier", "compression_tier", "origin_tier", "pinned", "workspace")
    search_fields = ("content", "subject")
    list_select_related = ("workspace",)
    show_full_result_count = False
    readonly_fields = (
        "id",
        "origin",
        "origin_tier",
        "activation_score",
        "activation_last_boost_at",
        "activation_boost_count",
        "activation_sort_key",
        "retention_score",
        "access_count",
        "last_accessed",
        "retrieval_profile",
        "replace_log",
        "replace_count",
        "version",
        "drift_flags",
        "snapshots",
        "summarizes",
        "summarized_by",
        "superseded_by",
        "created_at",
        "updated_at",
    )
    exclude = ("embedding",)

    @admin.display(description="content")
    def short_content(self, obj: Memory) -> str:
        return obj.content[:80]


@admin.register(Edge)
class EdgeAdmin(admin.ModelAdmin[Edge]):
    list_display = ("edge_type", "source", "target", "weight", "co_retrieval_count", "workspace")
    list_filter = ("edge_type", "workspace")
    raw_id_fields = ("source", "target")
    readonly_fields = ("created_at", "co_retrieval_count", "first_co_retrieved_at", "last_co_retrieved_at")
    list_select_related = ("source", "target", "workspace")
    show_full_result_count = False


@admin.register(RetrievalEvent)
class RetrievalEventAdmin(admin.ModelAdmin[RetrievalEvent]):
    list_display = ("source", "rank", "query", "session_id", "created_at", "workspace")
    list_filter = ("source", "workspace")
    raw_id_fields = ("memory",)
    show_full_result_count = False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin[AuditEntry]):
    list_display = ("action", "object_id", "actor", "created_at", "workspace")
    list_filter = ("action", "workspace")

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_add_permission(self, request: object) -> bool:
        return False
