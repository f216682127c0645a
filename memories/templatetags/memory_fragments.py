"""`{% memory_row row can_edit %}` and `{% activation_bar memory activation oob %}`: see memories.fragments."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from memories import fragments
from memories.models import Memory

register = template.Library()


@register.simple_tag
def memory_row(row: fragments.Row, can_edit: bool) -> SafeString:
    return fragments.memory_row(row, can_edit=bool(can_edit))


@register.simple_tag
def activation_bar(memory: Memory, activation: float, oob: bool = False) -> SafeString:
    return fragments.activation_bar(memory, float(activation), oob=bool(oob))
