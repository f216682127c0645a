from __future__ import annotations

from django.urls import path

from memories import api

urlpatterns = [
    path("workspaces/", api.WorkspaceListCreateApi.as_view(), name="workspaces"),
    path("workspaces/<slug:ws>/memories/", api.MemoryListCreateApi.as_view(), name="memories"),
    path("workspaces/<slug:ws>/memories/bulk/", api.MemoryBulkCreateApi.as_view(), name="memories-bulk"),
    path("workspaces/<slug:ws>/memories/<str:memory_id>/", api.MemoryDetailApi.as_view(), name="memory"),
    path(
        "workspaces/<slug:ws>/memories/<str:memory_id>/edges/",
        api.MemoryEdgesApi.as_view(),
        name="memory-edges",
    ),
    path("workspaces/<slug:ws>/edges/", api.EdgeCreateApi.as_view(), name="edges"),
    path("workspaces/<slug:ws>/conversations/", api.ConversationIngestApi.as_view(), name="conversations"),
]
