"""What the memory list's rows and the live activation figures show, prepared for their templates.

The markup lives in one template, memories/partials/memory.html: the list's rows (the full page, and one row
for the htmx swap after archive/restore) with their activation bars, the detail page's figures (bar, big
number, stored value, Accessed line) and ``push``, all of them out of band, which the WebSocket and the
polling fallback send; so every swap target renders the markup of the full page, escaped by the template
engine. Numbers and dates are formatted here, once per memory, with Python's formatting (round half to even
on the binary value, UTC as stored), so a figure reads the same in every place it is shown; the templates
only place them. The template engine costs ~0.3-0.4 ms a row where one f-string per row cost a twentieth of
that (a 50-row page at 1M memories: ~20 ms of CPU against ~21 ms for the rest of the page, see
docs/performance-log.md); the list page stays well within its target, and the markup has one home.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from django.template.loader import render_to_string
from django.utils.safestring import SafeString, mark_safe

from memories.models import Memory

TEMPLATE = "memories/partials/memory.html"
PUSH = f"{TEMPLATE}#push"


@dataclass(frozen=True)
class Moment:
    """A time as the pages print it: ``text`` ("2026-01-01 12:00", or the date alone) and ``iso``."""

    text: str
    iso: str


def moment(value: datetime, *, with_time: bool = True) -> Moment:
    return Moment(f"{value:%Y-%m-%d %H:%M}" if with_time else f"{value:%Y-%m-%d}", value.isoformat())


@dataclass(frozen=True)
class Bar:
    """One activation meter: the decayed activation now with two, three and four decimals, as a percentage
    of the track, and the boosts behind it."""

    memory_id: uuid.UUID
    now2: str
    now3: str
    value: str
    percent: int
    boosts: int


def bar(memory: Memory, activation: float) -> Bar:
    return Bar(
        memory_id=memory.id,
        now2=f"{activation:.2f}",
        now3=f"{activation:.3f}",
        value=f"{activation:.4f}",
        percent=round(activation * 100),
        boosts=int(memory.activation_boost_count),
    )


@dataclass(frozen=True)
class Live:
    """Every figure of a memory that moves while a page shows it: the bar, the stored activation with its last
    boost, half-life and boost count, and how often and when it was accessed."""

    bar: Bar
    stored: str
    last_boost: Moment | None
    half_life: str
    access_count: int
    last_accessed: Moment | None


def live(memory: Memory, activation: float) -> Live:
    return Live(
        bar=bar(memory, activation),
        stored=f"{memory.activation_score:.3f}",
        last_boost=moment(memory.activation_last_boost_at) if memory.activation_last_boost_at else None,
        half_life=f"{memory.activation_half_life_hours:.0f}",
        access_count=int(memory.access_count),
        last_accessed=moment(memory.last_accessed) if memory.last_accessed else None,
    )


def activation_push(memory: Memory, activation: float) -> SafeString:
    """What the socket and the polling fallback send for one memory: every live figure, each swapped out of band
    by id. A page holds some of them (the list only bars); site.js drops the ones it does not hold."""
    return mark_safe(render_to_string(PUSH, {"live": live(memory, activation)}))


@dataclass(frozen=True)
class Row:
    """One list row with its display values prepared (views.RowBuilder builds it); ``action_url`` archives
    an active memory and restores an archived one."""

    memory: Memory
    bar: Bar
    retention: str
    url: str
    action_url: str
    excerpt: str
    label: str
    created: Moment
    accessed: Moment | None
