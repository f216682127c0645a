"""`{% memory_row %}`, `{% activation_bar %}` and the detail page's live figures: see memories.fragments."""

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


@register.simple_tag
def activation_number(memory: Memory, activation: float) -> SafeString:
    return fragments.activation_number(memory, float(activation))


@register.simple_tag
def activation_stored(memory: Memory) -> SafeString:
    return fragments.activation_stored(memory)


@register.simple_tag
def accessed(memory: Memory) -> SafeString:
    return fragments.accessed(memory)


@register.simple_tag
def activation_push(memory: Memory, activation: float) -> SafeString:
    return fragments.activation_push(memory, float(activation))
