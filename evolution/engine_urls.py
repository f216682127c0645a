"""URLs of the self-learning engine, the dream cycle and the directory import/export (under /api/v1/)."""

from __future__ import annotations

from django.urls import path

from evolution import api_engine

urlpatterns = [
    path("workspaces/<slug:ws>/outcomes/", api_engine.OutcomeListCreateApi.as_view(), name="outcomes"),
    path("workspaces/<slug:ws>/corrections/", api_engine.CorrectionCreateApi.as_view(), name="corrections"),
    path("workspaces/<slug:ws>/reflections/", api_engine.ReflectionCreateApi.as_view(), name="reflections"),
    path("workspaces/<slug:ws>/engine/world-model/", api_engine.WorldModelApi.as_view(), name="engine-world-model"),
    path("workspaces/<slug:ws>/engine/evolve/", api_engine.EvolveApi.as_view(), name="engine-evolve"),
    path("workspaces/<slug:ws>/dream/", api_engine.DreamApi.as_view(), name="dream"),
    path("workspaces/<slug:ws>/dream/<str:report_id>/", api_engine.DreamDetailApi.as_view(), name="dream-report"),
    path("workspaces/<slug:ws>/export/", api_engine.ExportApi.as_view(), name="memdir-export"),
    path("workspaces/<slug:ws>/import/", api_engine.ImportApi.as_view(), name="memdir-import"),
]
