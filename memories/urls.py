"""URLs of the memory browser; every workspace page lives under /w/<slug>/."""

from __future__ import annotations

from django.urls import path

from memories import views

app_name = "memories"

urlpatterns = [
    path("", views.home, name="home"),
    path("w/<slug:ws>/", views.memory_list, name="list"),
    path("w/<slug:ws>/memories/new/", views.memory_create, name="create"),
    path("w/<slug:ws>/memories/bulk/", views.memory_bulk, name="bulk"),
    path("w/<slug:ws>/memories/activation/", views.activation_bars, name="activation"),
    path("w/<slug:ws>/memories/count/", views.memory_count, name="count"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/", views.memory_detail, name="detail"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/content/", views.memory_content, name="content"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/edit/", views.memory_edit, name="edit"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/archive/", views.memory_archive, name="archive"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/restore/", views.memory_restore, name="restore"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/pin/", views.memory_pin, name="pin"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/rehydrate/", views.memory_rehydrate, name="rehydrate"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/delete/", views.memory_delete, name="delete"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/graph.json", views.memory_graph, name="graph"),
    path("w/<slug:ws>/records/<int:record_id>/revert/", views.record_revert, name="revert"),
    path("w/<slug:ws>/token/", views.api_token, name="token"),
]
