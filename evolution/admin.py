from __future__ import annotations

from django.contrib import admin

from evolution.models import DreamReport, EvolutionRun, Outcome, Proposal


@admin.register(EvolutionRun)
class EvolutionRunAdmin(admin.ModelAdmin[EvolutionRun]):
    list_display = ("id", "workspace", "dry_run", "status", "started_at", "finished_at")
    list_filter = ("status", "dry_run", "workspace")
    readonly_fields = (
        "evolvers",
        "dry_run",
        "started_by",
        "started_at",
        "finished_at",
        "summary",
        "progress",
    )


@admin.register(Proposal)
class ProposalAdmin(admin.ModelAdmin[Proposal]):
    list_display = ("title", "kind", "status", "workspace", "created_at", "decided_by", "decided_at")
    list_filter = ("kind", "status", "workspace")
    search_fields = ("title", "rationale")
    readonly_fields = ("created_by", "created_at", "decided_by", "decided_at", "applied_record", "source_ids")


@admin.register(Outcome)
class OutcomeAdmin(admin.ModelAdmin[Outcome]):
    list_display = ("task_type", "approach", "result", "workspace", "created_at")
    list_filter = ("result", "workspace")
    search_fields = ("task_type", "lesson")


@admin.register(DreamReport)
class DreamReportAdmin(admin.ModelAdmin[DreamReport]):
    list_display = ("workspace", "created_at")
    readonly_fields = ("report",)
