from __future__ import annotations

from django.urls import path

from memories import views

app_name = "memories"

urlpatterns = [
    path("", views.home, name="home"),
    path("w/<slug:ws>/", views.memory_list, name="list"),
    path("w/<slug:ws>/memories/<uuid:memory_id>/", views.memory_detail, name="detail"),
]
