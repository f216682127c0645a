"""`{{ value|value_html }}` and `{{ value|value_text }}`: JSON-ish values as every page shows them (memories.values)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.safestring import SafeString

from memories import values

register = template.Library()


@register.filter
def value_html(value: Any) -> SafeString:
    return values.value_html(value)


@register.filter
def value_text(value: Any, length: int = 200) -> str:
    return values.value_text(value, int(length))
