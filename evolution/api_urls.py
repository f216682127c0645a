from __future__ import annotations

from django.urls import path

from evolution import api

urlpatterns = [
    path("workspaces/<slug:ws>/evolution/runs/", api.EvolutionRunListCreateApi.as_view(), name="evolution-runs"),
    path(
        "workspaces/<slug:ws>/evolution/runs/<str:run_id>/",
        api.EvolutionRunDetailApi.as_view(),
        name="evolution-run",
    ),
    path(
        "workspaces/<slug:ws>/evolution/runs/<str:run_id>/cancel/",
        api.EvolutionRunCancelApi.as_view(),
        name="evolution-run-cancel",
    ),
    path(
        "workspaces/<slug:ws>/evolution/runs/<str:run_id>/revert/",
        api.EvolutionRunRevertApi.as_view(),
        name="evolution-run-revert",
    ),
    path(
        "workspaces/<slug:ws>/evolution/records/<str:record_id>/",
        api.EvolutionRecordDetailApi.as_view(),
        name="evolution-record",
    ),
    path(
        "workspaces/<slug:ws>/evolution/records/<str:record_id>/revert/",
        api.EvolutionRecordRevertApi.as_view(),
        name="evolution-record-revert",
    ),
    path(
        "workspaces/<slug:ws>/memories/<str:memory_id>/history/",
        api.MemoryHistoryApi.as_view(),
        name="memory-history",
    ),
]
