from __future__ import annotations

from django.apps import AppConfig


class HistoryConfig(AppConfig):
    """Audited records of every change and their revert: the floor every other app writes history on."""

    name = "history"
    verbose_name = "History"
    default_auto_field = "django.db.models.BigAutoField"
