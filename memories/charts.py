"""The SVG charts of a memory's detail page, laid out in Python so the template only draws them: the
projected decay of its activation and its activation and retention over time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from history.models import EvolutionRecord
from memories.algorithms.activation import decayed_activation, hours_since, project_decay_curve
from memories.models import Memory, RetrievalEvent

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


_W, _H, _LEFT, _TOP, _RIGHT, _BOTTOM = 480, 170, 38, 10, 468, 146


def _y(value: float) -> float:
    return round(_BOTTOM - max(0.0, min(1.0, value)) * (_BOTTOM - _TOP), 1)


def _y_ticks() -> list[Tick]:
    return [Tick(_y(v), f"{v:g}") for v in (0.0, 0.25, 0.5, 0.75, 1.0)]


def decay_chart(memory: Memory, now: datetime, days: int = DECAY_DAYS) -> Chart:
    """Activation on each of the next `days` days if nothing touches the memory (its half-life decay)."""
    since = None if memory.activation_last_boost_at is None else hours_since(memory.activation_last_boost_at, now)
    curve = project_decay_curve(memory.activation_score, since, memory.activation_half_life_hours, days=days)
    span = max(1, days - 1)

    def x(day: float) -> float:
        return round(_LEFT + day / span * (_RIGHT - _LEFT), 1)

    points = " ".join(f"{x(i)},{_y(float(v))}" for i, v in enumerate(curve))
    marks = [d for d in (0, 30, 60, days - 1) if d < days]
    labels = {0: "now", days - 1: f"{days} d"}
    values = ", ".join(f"{labels.get(d, f'{d} d')} {float(curve[d]):.2f}" for d in marks)
    return Chart(
        _W,
        _H,
        _LEFT,
        _TOP,
        _RIGHT,
        _BOTTOM,
        series=[Series("projected activation", "s-act", points, [(x(0), _y(float(curve[0])), "now")])],
        x_ticks=[
            Tick(x(d), labels.get(d, f"{d} d"), "start" if d == 0 else "end" if d == days - 1 else "middle")
            for d in marks
        ],
        y_ticks=_y_ticks(),
        markers=[],
        description=f"Projected activation if untouched: {values}.",
    )


def history_chart(
    memory: Memory, records: Sequence[EvolutionRecord], retrievals: Sequence[RetrievalEvent], now: datetime
) -> Chart:
    """Activation and retention over time from evolution records, the last boost's decay and retrievals.

    Recorded values are exact; between the last boost and now the activation follows the decay
    formula exactly, so that stretch is drawn as a curve. Retrievals (flushed boosts) are ticks.
    """
    key = str(memory.id)
    act: list[tuple[datetime, float]] = []
    ret: list[tuple[datetime, float]] = []
    for record in records:
        after = record.after.get(key)
        if not isinstance(after, dict) or record.reverted_at is not None:
            continue
        if isinstance(after.get("activation_score"), int | float):
            act.append((record.timestamp, float(after["activation_score"])))
        if isinstance(after.get("retention_score"), int | float):
            ret.append((record.timestamp, float(after["retention_score"])))
    boost = memory.activation_last_boost_at
    if boost is not None and boost < now:
        step = (now - boost) / 24
        act.extend((boost + step * i, activation_now(memory, boost + step * i)) for i in range(25))
    else:
        act.append((now, activation_now(memory, now)))
    ret.append((now, memory.retention_score))
    moments = [t for t, _ in act + ret] + [e.created_at for e in retrievals] + [memory.created_at]
    start = min(moments)
    span = max((now - start).total_seconds(), 3600.0)

    def x(t: datetime) -> float:
        return round(_LEFT + (t - start).total_seconds() / span * (_RIGHT - _LEFT), 1)

    def line(points: list[tuple[datetime, float]]) -> str:
        return " ".join(f"{x(t)},{_y(v)}" for t, v in sorted(points, key=lambda p: p[0]))

    middle = start + timedelta(seconds=span / 2)
    return Chart(
        _W,
        _H,
        _LEFT,
        _TOP,
        _RIGHT,
        _BOTTOM,
        series=[
            Series("activation", "s-act", line(act)),
            Series("retention", "s-ret", line(ret), [(x(t), _y(v), f"retention {v:.2f}") for t, v in ret]),
        ],
        x_ticks=[
            Tick(x(start), f"{start:%Y-%m-%d}", "start"),
            Tick(x(middle), f"{middle:%Y-%m-%d}"),
            Tick(x(now), "now", "end"),
        ],
        y_ticks=_y_ticks(),
        markers=[
            (x(e.created_at), f"{e.source} #{e.rank} {e.created_at:%Y-%m-%d %H:%M} {e.query[:60]}") for e in retrievals
        ],
        description=(
            f"Activation now {activation_now(memory, now):.2f}, retention {memory.retention_score:.2f}; "
            f"{len(retrievals)} retrievals and {len(act) + len(ret)} plotted values since {start:%Y-%m-%d}."
        ),
    )
