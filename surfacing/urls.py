"""Pages of the query inspector; every workspace page lives under /w/<slug>/."""

from __future__ import annotations

from django.urls import path

from surfacing import views

app_name = "surfacing"

urlpatterns = [
    path("w/<slug:ws>/inspector/", views.inspector_page, name="inspector"),
    path("w/<slug:ws>/inspector/settings/", views.inspector_save, name="inspector-save"),
]
