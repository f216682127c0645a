"""Pages of the evolution dashboard; every workspace page lives under /w/<slug>/evolution/."""

from __future__ import annotations

from django.urls import path

from evolution import views

app_name = "evolution"

urlpatterns = [
    path("w/<slug:ws>/evolution/proposals/", views.proposal_queue, name="proposals"),
    path("w/<slug:ws>/evolution/counts/", views.counts, name="counts"),
    path("w/<slug:ws>/evolution/proposals/bulk/", views.proposal_bulk, name="proposals-bulk"),
    path("w/<slug:ws>/evolution/proposals/<int:proposal_id>/", views.proposal_detail, name="proposal"),
    path("w/<slug:ws>/evolution/proposals/<int:proposal_id>/approve/", views.proposal_approve, name="proposal-approve"),
    path("w/<slug:ws>/evolution/proposals/<int:proposal_id>/reject/", views.proposal_reject, name="proposal-reject"),
    path("w/<slug:ws>/evolution/proposals/<int:proposal_id>/modify/", views.proposal_modify, name="proposal-modify"),
    path("w/<slug:ws>/evolution/contradictions/", views.contradictions, name="contradictions"),
    path("w/<slug:ws>/evolution/contradictions/resolve/", views.contradiction_resolve, name="contradiction-resolve"),
    path(
        "w/<slug:ws>/evolution/contradictions/<uuid:memory_id>/edit/",
        views.contradiction_edit,
        name="contradiction-edit",
    ),
    path("w/<slug:ws>/evolution/drift/", views.drift, name="drift"),
    path(
        "w/<slug:ws>/evolution/drift/<uuid:memory_id>/acknowledge/",
        views.drift_acknowledge,
        name="drift-acknowledge",
    ),
    path("w/<slug:ws>/evolution/runs/", views.runs, name="runs"),
    path("w/<slug:ws>/evolution/runs/start/", views.run_start, name="run-start"),
    path("w/<slug:ws>/evolution/runs/schedule/", views.run_schedule, name="run-schedule"),
    path("w/<slug:ws>/evolution/runs/<uuid:run_id>/", views.run_detail, name="run"),
    path("w/<slug:ws>/evolution/runs/<uuid:run_id>/progress/", views.run_progress, name="run-progress"),
    path("w/<slug:ws>/evolution/runs/<uuid:run_id>/apply/", views.run_apply, name="run-apply"),
    path("w/<slug:ws>/evolution/runs/<uuid:run_id>/cancel/", views.run_cancel, name="run-cancel"),
    path("w/<slug:ws>/evolution/runs/<uuid:run_id>/revert/", views.run_revert, name="run-revert"),
    path("w/<slug:ws>/evolution/records/<int:record_id>/revert/", views.record_revert, name="record-revert"),
    path("w/<slug:ws>/evolution/engine/", views.engine_page, name="engine"),
    path("w/<slug:ws>/evolution/engine/evolve/", views.engine_evolve, name="engine-evolve"),
    path("w/<slug:ws>/evolution/engine/dream/", views.engine_dream, name="engine-dream"),
    path("w/<slug:ws>/evolution/engine/dream/<int:report_id>/", views.dream_report, name="dream-report"),
    path("w/<slug:ws>/evolution/engine/export.zip", views.engine_export, name="engine-export"),
    path("w/<slug:ws>/evolution/engine/import/", views.engine_import, name="engine-import"),
]
