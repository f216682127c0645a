from __future__ import annotations

from django.urls import path

from surfacing import api

urlpatterns = [
    path("workspaces/<slug:ws>/context/", api.WorkingContextApi.as_view(), name="context"),
    path("workspaces/<slug:ws>/search/", api.SearchApi.as_view(), name="search"),
    path("workspaces/<slug:ws>/settings/", api.SettingsApi.as_view(), name="settings"),
    path(
        "workspaces/<slug:ws>/sessions/<str:sid>/pins/<str:memory_id>/",
        api.SessionPinApi.as_view(),
        name="session-pin",
    ),
]
