from __future__ import annotations

from django.apps import AppConfig


class EvolutionConfig(AppConfig):
    name = "evolution"
    verbose_name = "Evolution"
    default_auto_field = "django.db.models.BigAutoField"
