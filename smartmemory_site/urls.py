from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from core import openapi  # noqa: F401  (registers how request bodies are documented)
from smartmemory_site.health import healthz

api_patterns = [
    path("", include("memories.api_urls")),
    path("", include("evolution.api_urls")),
    path("", include("evolution.typed_urls")),
    path("", include("evolution.engine_urls")),
    path("", include("surfacing.api_urls")),
]

# A lock timeout raised outside a view (a middleware's write) is a 503 too (smartmemory_site.db_busy).
handler500 = "smartmemory_site.db_busy.server_error"

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    path("api/v1/", include((api_patterns, "api"), namespace="api")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="schema"), name="api-docs"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("surfacing.urls")),
    path("", include("evolution.urls")),
    path("", include("memories.urls")),
]
