"""The SVG charts of a memory's detail page, laid out in Python so the template only draws them: the
projected decay of its activation, and its activation and retention over its life.

One helper (``time_chart``) lays out every chart on a time axis: the scale, the ticks (dates, or hours for a
memory younger than two days, never two labels on top of each other) and the "now" line. The activation
history is replayed from the memory's boosts (its retrieval events) back from the stored score
(``replay_activation``), so it shows the real sawtooth of use and decay, then the projected decay ahead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from history.models import EvolutionRecord
from memories.algorithms.activation import (
    BOOST_DIRECT,
    BOOST_SURFACED,
    decayed_activation,
    replay_activation,
)
from memories.models import Memory, RetrievalEvent, RetrievalSource

DECAY_DAYS = 90
"""Days the decay projection covers."""


def activation_now(memory: Memory, now: datetime) -> float:
    """The memory's stored activation decayed to `now` (what every page shows as "activation now")."""
    return decayed_activation(
        memory.activation_score, memory.activation_last_boost_at, memory.activation_half_life_hours, now
    )


@dataclass(frozen=True)
class Tick:
    pos: float
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Series:
    name: str
    css: str
    points: str
    dots: list[tuple[float, float, str]] = field(default_factory=list)


@dataclass(frozen=True)
class Chart:
    """An SVG line chart laid out in a fixed viewBox; the template only draws what is here."""

    width: int
    height: int
    left: int
    top: int
    right: int
    bottom: int
    series: list[Series]
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    markers: list[tuple[float, str]]
    description: str
    now_x: float | None = None


_W, _H, _LEFT, _TOP, _RIGHT, _BOTTOM = 480, 170, 38, 10, 468, 146


def _y(value: float) -> float:
    return round(_BOTTOM - max(0.0, min(1.0, value)) * (_BOTTOM - _TOP), 1)


def _y_ticks() -> list[Tick]:
    return [Tick(_y(v), f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)]


_MIN_TICK_GAP = 70.0
"""Pixels (of the 480 viewBox) between two x labels: a closer label is left out."""


def _span_label(moment: datetime, span: timedelta) -> str:
    return f"{moment:%Y-%m-%d}" if span >= timedelta(days=2) else f"{moment:%H:%M}"


def time_chart(
    series: Sequence[tuple[str, str, Sequence[tuple[datetime, float]], bool]],
    *,
    start: datetime,
    end: datetime,
    now: datetime,
    markers: Sequence[tuple[datetime, str]] = (),
    end_label: str = "",
    description: str,
) -> Chart:
    """A line chart of values in [0, 1] over [start, end] with "now" marked.

    ``series`` are (name, css class, points, dots): ``dots`` also draws each point as a circle with its value.
    Times outside [start, end] are clamped to the edges.
    """
    span = max((end - start).total_seconds(), 60.0)

    def x(t: datetime) -> float:
        offset = min(max((t - start).total_seconds(), 0.0), span)
        return round(_LEFT + offset / span * (_RIGHT - _LEFT), 1)

    drawn = [
        Series(
            name,
            css,
            " ".join(f"{x(t)},{_y(v)}" for t, v in sorted(points, key=lambda p: p[0])),
            [(x(t), _y(v), f"{name} {v:.2f}") for t, v in points] if dots else [],
        )
        for name, css, points, dots in series
    ]
    length = end - start
    wanted = [
        Tick(x(start), _span_label(start, length), "start"),
        Tick(x(now), "now", "middle" if now < end else "end"),
        Tick(x(end), end_label or _span_label(end, length), "end"),
    ]
    ticks: list[Tick] = []
    for tick in wanted:
        # "now" wins over an edge label it would overlap; edges keep their place otherwise.
        if all(abs(tick.pos - t.pos) >= _MIN_TICK_GAP for t in ticks):
            ticks.append(tick)
        elif tick.label == "now":
            ticks = [t for t in ticks if abs(tick.pos - t.pos) >= _MIN_TICK_GAP] + [tick]
    return Chart(
        _W,
        _H,
        _LEFT,
        _TOP,
        _RIGHT,
        _BOTTOM,
        series=drawn,
        x_ticks=sorted(ticks, key=lambda t: t.pos),
        y_ticks=_y_ticks(),
        markers=[(x(t), label) for t, label in markers],
        description=description,
        now_x=x(now) if start < now < end else None,
    )


def _decay_points(memory: Memory, frm: datetime, to: datetime, samples: int) -> list[tuple[datetime, float]]:
    step = (to - frm) / max(1, samples)
    return [(frm + step * i, activation_now(memory, frm + step * i)) for i in range(samples + 1)]


def decay_chart(memory: Memory, now: datetime, days: int = DECAY_DAYS) -> Chart:
    """Activation over the next `days` days if nothing touches the memory (its half-life decay)."""
    # One point a day, day 0 (now) to day days - 1.
    end = now + timedelta(days=days - 1)
    curve = _decay_points(memory, now, end, days - 1)
    values = ", ".join(
        f"{d} d {activation_now(memory, now + timedelta(days=d)):.2f}" for d in (0, 30, 60, days - 1) if d < days
    )
    return time_chart(
        [("projected activation", "s-act", curve, False)],
        start=now,
        end=end,
        now=now,
        end_label=f"{days} d",
        description=f"Projected activation if untouched: {values}.",
    )


def _boost(event: RetrievalEvent) -> float:
    """What a retrieval of this source added (surfacing in a working context adds less than a direct read)."""
    return BOOST_SURFACED if event.source == RetrievalSource.CONTEXT else BOOST_DIRECT


def history_chart(
    memory: Memory, records: Sequence[EvolutionRecord], retrievals: Sequence[RetrievalEvent], now: datetime
) -> Chart:
    """Activation and retention over the memory's life, then the projected decay of its activation.

    Activation is replayed from its boosts (the retrieval events) back from the stored score; the values its
    evolution records wrote are dots on the same line (exact); retention is its recorded values and now. The
    axis runs from the memory's creation to now plus 40% of its age (at least 6 hours of past), so a memory
    made today is spread over the chart rather than squeezed into its left edge.
    """
    key = str(memory.id)
    recorded: list[tuple[datetime, float]] = []
    ret: list[tuple[datetime, float]] = []
    for record in records:
        after = record.after.get(key)
        if not isinstance(after, dict) or record.reverted_at is not None:
            continue
        if isinstance(after.get("activation_score"), int | float):
            recorded.append((record.timestamp, float(after["activation_score"])))
        if isinstance(after.get("retention_score"), int | float):
            ret.append((record.timestamp, float(after["retention_score"])))
    ret.append((now, memory.score.retention_score))
    moments = [memory.created_at, *(t for t, _ in recorded + ret), *(e.created_at for e in retrievals)]
    start = min(min(moments), now - timedelta(hours=6))
    end = now + (now - start) * 0.4
    past = replay_activation(
        memory.activation_score,
        memory.activation_last_boost_at,
        memory.activation_half_life_hours,
        [(e.created_at, _boost(e)) for e in retrievals],
        start,
        now,
    )
    series: list[tuple[str, str, Sequence[tuple[datetime, float]], bool]] = [
        ("activation", "s-act", past, False),
        ("projected activation", "s-act proj", _decay_points(memory, now, end, 12), False),
        ("retention", "s-ret", ret, True),
    ]
    if recorded:
        series.append(("recorded activation", "s-act dots", recorded, True))
    return time_chart(
        series,
        start=start,
        end=end,
        now=now,
        markers=[
            (e.created_at, f"{e.source} #{e.rank} {e.created_at:%Y-%m-%d %H:%M} {e.query[:60]}") for e in retrievals
        ],
        description=(
            f"Activation now {activation_now(memory, now):.2f}, retention {memory.score.retention_score:.2f}; "
            f"{len(retrievals)} retrievals since {start:%Y-%m-%d %H:%M}; the line after now is the projected "
            f"decay to {end:%Y-%m-%d %H:%M}."
        ),
    )
