from __future__ import annotations

from django.apps import AppConfig


class SurfacingConfig(AppConfig):
    name = "surfacing"
    verbose_name = "Surfacing"
    default_auto_field = "django.db.models.BigAutoField"
