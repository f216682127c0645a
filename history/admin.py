from __future__ import annotations

from django.contrib import admin

from history.models import EvolutionRecord


@admin.register(EvolutionRecord)
class EvolutionRecordAdmin(admin.ModelAdmin[EvolutionRecord]):
    list_display = ("id", "evolver", "action", "workspace", "dry_run", "timestamp", "reverted_at")
    list_filter = ("evolver", "action", "dry_run", "workspace")
    search_fields = ("reason",)
    show_full_result_count = False
    readonly_fields = (
        "workspace",
        "run",
        "evolver",
        "action",
        "input_ids",
        "output_ids",
        "reason",
        "before",
        "after",
        "dry_run",
        "actor",
        "reverted_at",
        "reverted_by",
        "timestamp",
    )

    def has_add_permission(self, request: object) -> bool:
        return False
