from __future__ import annotations

from typing import Any, ClassVar

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from graph.writes import graph_touch
from memories.models import ApiToken, Edge, Membership, Memory, RetrievalEvent, Workspace


def _rewrites(workspace_ids: set[int]) -> None:
    """Edges changed or went away behind the services' back: cached graph snapshots must rebuild."""
    for workspace in Workspace.objects.filter(pk__in=workspace_ids):
        graph_touch(workspace=workspace, rewrites=True)


class MembershipInline(admin.TabularInline[Membership, Workspace]):
    model = Membership
    extra = 0
    autocomplete_fields = ("user",)


@admin.register(Workspace)
class WorkspaceAdmin(admin.ModelAdmin[Workspace]):
    list_display = ("slug", "name", "created_at", "graph_generation")
    search_fields = ("slug", "name")
    # The embedder changes only through `manage.py reembed`, which re-embeds the vectors first.
    readonly_fields = ("created_at", "graph_generation", "graph_rewrites", "embedder", "vector_generation")
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
        "retention",
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
        "embedding_model",
        "embedded_at",
    )
    exclude = ("embedding",)

    @admin.display(description="content")
    def short_content(self, obj: Memory) -> str:
        return obj.content[:80]

    # The scores the evolution cycle rewrites live in the memory's MemoryScore row.
    @admin.display(description="retention score")
    def retention(self, obj: Memory) -> float:
        return float(obj.score.retention_score)

    @admin.display(description="retrieval profile")
    def retrieval_profile(self, obj: Memory) -> Any:
        return obj.score.retrieval_profile

    # Deleting a memory deletes its edges (cascade).
    def delete_model(self, request: HttpRequest, obj: Memory) -> None:
        workspace_id = obj.workspace_id
        super().delete_model(request, obj)
        _rewrites({workspace_id})

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
        workspace_ids = set(queryset.values_list("workspace_id", flat=True).distinct())
        super().delete_queryset(request, queryset)
        _rewrites(workspace_ids)


@admin.register(Edge)
class EdgeAdmin(admin.ModelAdmin[Edge]):
    list_display = ("edge_type", "source", "target", "weight", "co_retrieval_count", "workspace")
    list_filter = ("edge_type", "workspace")
    raw_id_fields = ("source", "target")
    readonly_fields = ("created_at", "co_retrieval_count", "first_co_retrieved_at", "last_co_retrieved_at")
    list_select_related = ("source", "target", "workspace")
    show_full_result_count = False

    def save_model(self, request: HttpRequest, obj: Edge, form: Any, change: bool) -> None:
        # A new edge is appended by the next snapshot read; a changed one needs a rebuild. The touch goes
        # before the write (see graph_touch).
        graph_touch(workspace=obj.workspace, rewrites=change)
        super().save_model(request, obj, form, change)

    def delete_model(self, request: HttpRequest, obj: Edge) -> None:
        workspace_id = obj.workspace_id
        super().delete_model(request, obj)
        _rewrites({workspace_id})

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Edge]) -> None:
        workspace_ids = set(queryset.values_list("workspace_id", flat=True).distinct())
        super().delete_queryset(request, queryset)
        _rewrites(workspace_ids)


@admin.register(RetrievalEvent)
class RetrievalEventAdmin(admin.ModelAdmin[RetrievalEvent]):
    list_display = ("source", "rank", "query", "session_id", "created_at", "workspace")
    list_filter = ("source", "workspace")
    raw_id_fields = ("memory",)
    show_full_result_count = False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """Tokens are issued where their key can be shown once (`manage.py create_api_token`, the memory browser);
    here they are listed, given an expiry, and revoked."""

    list_display = ("prefix", "user", "name", "created_at", "expires_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("prefix", "name", "user__username")
    fields = ("user", "prefix", "name", "created_at", "expires_at", "revoked_at")
    readonly_fields = ("user", "prefix", "created_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token{'s' if count != 1 else ''}.")
