"""Presentation of the query inspector: what the page shows about one get_working_context call.

Nothing here ranks anything: ``inspect`` calls ``retrieval.get_working_context`` (once, or twice for the
legacy/router comparison) and turns its answer into rows a template can draw without arithmetic:

- the stacked score bar of each row. Router mode in the seed profile (the project's first composite; in
  the calibrated profile ``base`` is the relevance and ``lift`` what the bounded priors add to it)::

      score = base * (1 + centrality_weight * centrality) + anchor + pin + freshness
      base  = max(activation, floor) * relevance * recency

  so the segments are ``base``, ``lift = base * centrality_weight * centrality``, ``anchor``
  (``anchor_boost`` when forced), ``pin`` (``pin_weight * pin_multiplier``) and ``fresh``; they add up
  to the score. Legacy mode has the base alone. Widths are percentages of the table's top score;
- provenance with the memories on a spreading path resolved to short labels (one query);
- rank changes between the legacy and router results of the same query;
- the what-if knobs (slider ranges around the saved settings) and the difference between the knobs
  and the saved settings, which is what the Save button stores.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from memories.models import Workspace
from surfacing import retrieval, selectors
from surfacing.algorithms.composite import ScoreBreakdown, ScoreProfile, SurfacingMode
from surfacing.settings import SurfacingSettings

__all__ = [
    "KNOBS",
    "Control",
    "Inspection",
    "Knob",
    "ProvenanceView",
    "RankChange",
    "Row",
    "RunView",
    "Segment",
    "SettingChange",
    "bar_segments",
    "inspect",
    "rank_changes",
    "setting_changes",
    "whatif_controls",
    "whatif_override",
]

KnobKind = Literal["float", "int", "bool", "log"]
MemoryUrl = Callable[[str], str]
LABEL_CHARS = 48


@dataclass(frozen=True)
class Knob:
    """A surfacing setting the inspector offers as a control; ``low``/``high``/``step`` are the slider's
    (the settings module validates the value itself, with its own wider limits)."""

    key: str
    label: str
    kind: KnobKind
    low: float = 0.0
    high: float = 1.0
    step: float = 0.01
    help: str = ""
    unit: str = ""


KNOBS: tuple[Knob, ...] = (
    Knob("activation_weight", "Activation weight", "float", 0.0, 2.0, 0.05, "calibrated: × (1 + weight × activation)"),
    Knob("recency_weight", "Recency weight", "float", 0.0, 2.0, 0.05, "calibrated: × (1 + weight × recency)"),
    Knob("centrality_weight", "Centrality weight", "float", 0.0, 2.0, 0.05, "lift = 1 + weight × centrality"),
    Knob("activation_floor", "Activation floor", "float", 0.0, 0.5, 0.01, "seed: activation below it counts as it"),
    Knob(
        "recency_time_constant_hours",
        "Recency time constant",
        "log",
        1.0,
        8760.0,
        0.0,
        "recency = exp(−age / τ)",
        "h",
    ),
    Knob("lexical_weight", "Lexical weight", "float", 0.0, 1.0, 0.05, "relevance = w·lexical + (1 − w)·cosine"),
    Knob("freshness_max", "Freshness boost", "float", 0.0, 1.0, 0.05, "for memories younger than a day"),
    Knob("pin_multiplier", "Pin multiplier", "float", 0.0, 2.0, 0.05, "session pin boost = weight × this"),
    Knob("anchor_boost", "Anchor boost", "float", 0.0, 3.0, 0.1, "added to every anchor"),
    Knob("spread_depth", "Spread depth", "int", 0.0, 4.0, 1.0, "hops from the top hits (deep:multi-hop)"),
    Knob("spread_enabled", "Spreading activation", "bool", help="reach graph neighbours of the top hits"),
    Knob("ppr_enabled", "Personalized PageRank", "bool", help="centrality from the top hits"),
)
KNOB_BY_KEY = {knob.key: knob for knob in KNOBS}

SEGMENT_LABELS = {
    "base": "relevance (calibrated) or activation × relevance × recency (seed)",
    "lift": "subject and priors: activation, recency, freshness, centrality (calibrated) or centrality lift (seed)",
    "anchor": "anchor",
    "pin": "session pin",
    "fresh": "freshness",
}
PROVENANCE_LABELS = {
    "lexical": "lexical hit",
    "semantic": "semantic match",
    "context": "context of a hit",
    "recent": "semantic match",
    "spread": "spread",
    "pinned": "pinned",
    "anchor": "anchor",
    "entity": "named entity",
}
WALK_KINDS = frozenset({"spread", "context"})
"""Provenance kinds that came over graph edges from a seed hit: their path is shown."""
FACTOR_LABELS = {
    "budget": "token budget",
    "low_activation": "low activation after decay",
    "interference": "interference",
    "low_relevance": "low relevance",
    "recency": "recency (old)",
}


# -- numbers ----------------------------------------------------------------------------------------


def _same(a: float | bool, b: float | bool) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return bool(a) is bool(b)
    return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-12)


def _exact(value: float | int | bool) -> str:
    """The value as a form field carries it: shortest text that parses back to the same number."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _show(value: float | int | bool, unit: str = "") -> str:
    """The value for people: booleans as on/off, numbers to four significant digits."""
    if isinstance(value, bool):
        return "on" if value else "off"
    text = f"{value:.4g}"
    return f"{text} {unit}" if unit else text


def _score(value: float) -> str:
    return f"{value:.4f}" if value == 0.0 or abs(value) >= 1e-4 else f"{value:.2e}"


# -- what-if ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Control:
    """One what-if control as the template draws it (all attribute values pre-formatted)."""

    knob: Knob
    value: str
    saved: str
    shown: str
    saved_shown: str
    changed: bool
    checked: bool = False
    low: str = ""
    high: str = ""
    step: str = ""
    log_value: str = ""
    log_low: str = ""
    log_high: str = ""


def whatif_controls(saved: SurfacingSettings, values: Mapping[str, Any]) -> list[Control]:
    """Controls for every knob: the what-if value (``values``, else the saved one) and the saved one.

    A slider never clips a value: its range widens to include the current value, and its step becomes
    "any" when the value is off the step grid, so showing a stored setting never changes it.
    """
    controls: list[Control] = []
    for knob in KNOBS:
        stored = getattr(saved, knob.key)
        current = values.get(knob.key, stored)
        changed = not _same(current, stored)
        if knob.kind == "bool":
            controls.append(
                Control(
                    knob=knob,
                    value=_exact(bool(current)),
                    saved=_exact(bool(stored)),
                    shown=_show(bool(current)),
                    saved_shown=_show(bool(stored)),
                    checked=bool(current),
                    changed=changed,
                )
            )
            continue
        number: float | int = int(current) if knob.kind == "int" else float(current)
        low, high = min(knob.low, number), max(knob.high, number)
        common = Control(
            knob=knob,
            value=_exact(number),
            saved=_exact(stored),
            shown=_show(number, knob.unit),
            saved_shown=_show(stored, knob.unit),
            changed=changed,
            low=_exact(low),
            high=_exact(high),
        )
        if knob.kind == "log":
            controls.append(
                replace(
                    common,
                    step="any",
                    log_value=f"{math.log10(number):.6f}",
                    log_low=f"{math.log10(max(low, 1e-3)):.6f}",
                    log_high=f"{math.log10(high):.6f}",
                )
            )
            continue
        steps = (number - knob.low) / knob.step
        on_grid = abs(steps - round(steps)) < 1e-9
        controls.append(replace(common, step=_exact(knob.step) if on_grid else "any"))
    return controls


def whatif_override(values: Mapping[str, Any], saved: SurfacingSettings) -> dict[str, Any]:
    """The knobs whose value differs from the saved settings: the request's ``settings_override``."""
    return {key: value for key, value in values.items() if key in KNOB_BY_KEY and not _same(value, getattr(saved, key))}


@dataclass(frozen=True)
class SettingChange:
    """A saved setting the what-if changes: ``form_value`` is what the Save form posts."""

    key: str
    label: str
    before: str
    after: str
    form_value: str


def setting_changes(saved: SurfacingSettings, override: Mapping[str, Any], mode: str | None) -> list[SettingChange]:
    """What Save would store: the mode used (when it is not the saved one) and every overridden knob."""
    changes: list[SettingChange] = []
    if mode and mode != saved.mode:
        changes.append(SettingChange("mode", "Mode", saved.mode, mode, mode))
    for knob in KNOBS:
        if knob.key in override:
            value = override[knob.key]
            before = getattr(saved, knob.key)
            changes.append(
                SettingChange(knob.key, knob.label, _show(before, knob.unit), _show(value, knob.unit), _exact(value))
            )
    return changes


# -- rows -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    key: str
    label: str
    value: float
    text: str
    width: str


def _parts(breakdown: ScoreBreakdown, mode: str) -> dict[str, float]:
    """The additive parts of a score, from the factors its profile really used.

    Calibrated: ``base`` is the relevance and ``lift`` what the bounded priors added to it. Seed: ``base``
    is activation × relevance × recency and ``lift`` the centrality lift; freshness adds on its own.
    """
    factors = breakdown["factors"]
    if factors["profile"] == ScoreProfile.CALIBRATED.value:
        base = factors["relevance"]
    else:
        base = factors["base"] / factors["centrality"]
    parts = {"base": base, "lift": factors["base"] - base}
    if mode == SurfacingMode.LEGACY.value:
        return parts
    return {**parts, "anchor": factors["anchor"], "pin": factors["pin"], "fresh": factors["freshness"]}


def _factor_text(breakdown: ScoreBreakdown) -> str:
    factors = breakdown["factors"]
    if factors["profile"] == ScoreProfile.CALIBRATED.value:
        return (
            f"relevance {factors['relevance']:.3f} × subject {factors['subject']:.3f}"
            f" (named {breakdown['subject_match']:.2f}) × time {factors['time']:.3f}"
            f" × activation {factors['activation']:.3f}"
            f" (activation {breakdown['activation']:.3f}) × recency {factors['recency']:.3f}"
            f" (recency {breakdown['recency']:.3g}, freshness {breakdown['freshness_boost']:.3f})"
            f" × centrality {factors['centrality']:.3f} (centrality {breakdown['centrality']:.3f})"
        )
    floor_note = " (raised to the floor)" if factors["activation"] > breakdown["activation"] else ""
    text = (
        f"activation {factors['activation']:.3f}{floor_note} × relevance {breakdown['relevance']:.3f}"
        f" × recency {breakdown['recency']:.3g} × centrality lift {factors['centrality']:.3f}"
    )
    if factors["log_base"] is not None:
        text += f" (too small to read: ln = {factors['log_base']:.1f})"
    return text


def bar_segments(breakdown: ScoreBreakdown, score: float, mode: str, scale: float) -> tuple[list[Segment], str]:
    """The non-zero parts of ``score`` as bar segments (width in % of ``scale``) and the sentence that
    says the same in numbers (the bar's text alternative)."""
    parts = _parts(breakdown, mode)
    top = scale if scale > 0.0 else 1.0
    segments = [
        Segment(key, SEGMENT_LABELS[key], value, _score(value), f"{max(0.0, min(100.0, value / top * 100.0)):.2f}")
        for key, value in parts.items()
        if value > 0.0
    ]
    profile = breakdown["factors"]["profile"]
    text = f"Score {_score(score)} ({profile} profile) = {_factor_text(breakdown)}"
    if mode == SurfacingMode.LEGACY.value:
        return segments, text + " (legacy mode: no centrality or additives)"
    for key in ("anchor", "pin", "fresh"):
        if parts[key] > 0.0:
            text += f"; + {SEGMENT_LABELS[key]} {_score(parts[key])}"
    return segments, text


@dataclass(frozen=True)
class Step:
    id: str
    label: str
    url: str


@dataclass(frozen=True)
class ProvenanceView:
    kind: str
    label: str
    seed: Step | None
    edge_type: str
    hops: int
    path: list[Step]


@dataclass(frozen=True)
class RankChange:
    """How an item moved between the legacy and the router results (``other_rank`` in the other mode)."""

    kind: Literal["up", "down", "same", "new", "dropped"]
    delta: int
    other_rank: int | None
    symbol: str
    text: str


@dataclass(frozen=True)
class Row:
    rank: int
    id: str
    url: str
    content: str
    memory_type: str
    score: float
    score_text: str
    segments: list[Segment]
    bar_text: str
    forced: bool
    provenance: ProvenanceView
    terms: str
    tokens: int | None = None
    change: RankChange | None = None
    factor: str = ""
    factor_label: str = ""
    detail: str = ""


@dataclass(frozen=True)
class RunView:
    mode: str
    strategy_used: str
    requested_strategy: str | None
    confidence: float
    reasons: list[str]
    tokens_used: int
    drift_warnings: list[dict[str, object]]
    recorded: bool
    rows: list[Row]
    scale: str
    note: str = ""


@dataclass(frozen=True)
class Inspection:
    primary: RunView
    declined: list[Row]
    legacy: RunView | None
    router: RunView | None
    changes: list[SettingChange]
    settings: SurfacingSettings

    @property
    def compared(self) -> bool:
        return self.legacy is not None and self.router is not None

    @property
    def columns(self) -> list[RunView]:
        """The side-by-side columns, legacy first (empty without a comparison)."""
        return [view for view in (self.legacy, self.router) if view is not None]


def _label(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1].rstrip() + "…"


def _step(memory_id: object, labels: Mapping[str, str], memory_url: MemoryUrl) -> Step:
    mid = str(memory_id)
    return Step(mid, labels.get(mid, "(not found)"), memory_url(mid))


def _provenance(raw: Mapping[str, Any], labels: Mapping[str, str], memory_url: MemoryUrl) -> ProvenanceView:
    kind = str(raw.get("kind") or "")
    path = [_step(mid, labels, memory_url) for mid in raw.get("path") or []]
    seed = _step(raw["seed"], labels, memory_url) if raw.get("seed") else None
    return ProvenanceView(
        kind=kind,
        label=PROVENANCE_LABELS.get(kind, kind),
        seed=seed,
        edge_type=str(raw.get("edge_type") or ""),
        hops=int(raw.get("hops") or 0),
        path=path if kind in WALK_KINDS else [],
    )


def _row(
    item: retrieval.ContextItem | retrieval.DeclinedItem,
    rank: int,
    context: retrieval.WorkingContext,
    scale: float,
    labels: Mapping[str, str],
    memory_url: MemoryUrl,
) -> Row:
    segments, text = bar_segments(item.score_breakdown, item.score, context.mode, scale)
    kind = str(item.provenance.get("kind") or "")
    forced = item.score_breakdown["anchor_forced"] or (kind == "pinned" and context.mode == SurfacingMode.ROUTER.value)
    tokens: int | None = None
    factor = detail = ""
    if isinstance(item, retrieval.DeclinedItem):
        factor, detail = item.factor, item.detail
    else:
        tokens = item.tokens
    return Row(
        rank=rank,
        id=str(item.id),
        url=memory_url(str(item.id)),
        content=item.content,
        memory_type=item.memory_type,
        score=item.score,
        score_text=_score(item.score),
        segments=segments,
        bar_text=text,
        forced=forced,
        provenance=_provenance(item.provenance, labels, memory_url),
        terms=_terms(item.score_breakdown, context.mode),
        tokens=tokens,
        factor=factor,
        factor_label=FACTOR_LABELS.get(factor, factor),
        detail=detail,
    )


def _terms(breakdown: ScoreBreakdown, mode: str) -> str:
    """The raw signals in one short line (the bar's title has the arithmetic)."""
    text = f"act {breakdown['activation']:.2f} · rel {breakdown['relevance']:.2f} · rec {breakdown['recency']:.2f}"
    return text if mode == SurfacingMode.LEGACY.value else f"{text} · cen {breakdown['centrality']:.2f}"


def _path_labels(workspace: Workspace, contexts: Sequence[retrieval.WorkingContext]) -> dict[str, str]:
    """Short labels of every memory a row shows or a provenance path names (one query for the rest)."""
    labels: dict[str, str] = {}
    wanted: set[str] = set()
    for context in contexts:
        items: list[retrieval.ContextItem | retrieval.DeclinedItem] = [*context.items, *(context.declined or [])]
        for item in items:
            labels[str(item.id)] = _label(item.content)
            wanted.update(str(mid) for mid in item.provenance.get("path") or [])
            if item.provenance.get("seed"):
                wanted.add(str(item.provenance["seed"]))
    missing = [uuid.UUID(mid) for mid in wanted - labels.keys()]
    for mid, detail in selectors.memory_details(workspace=workspace, ids=missing).items():
        labels[str(mid)] = _label(detail.content)
    return labels


def _run_view(context: retrieval.WorkingContext, labels: Mapping[str, str], memory_url: MemoryUrl) -> RunView:
    scale = max([item.score for item in context.items] + [0.0])
    rows = [_row(item, rank, context, scale, labels, memory_url) for rank, item in enumerate(context.items, start=1)]
    return RunView(
        mode=context.mode,
        strategy_used=context.strategy_used,
        requested_strategy=context.requested_strategy,
        confidence=context.confidence,
        reasons=context.reasons,
        tokens_used=context.tokens_used,
        drift_warnings=context.drift_warnings,
        recorded=context.recorded,
        rows=rows,
        scale=_score(scale),
    )


def rank_changes(rows: Sequence[Row], other: Sequence[Row], other_mode: str) -> list[Row]:
    """``rows`` with the move of each item relative to its rank in ``other`` (arrows, new)."""
    other_rank = {row.id: row.rank for row in other}
    changed: list[Row] = []
    for row in rows:
        before = other_rank.get(row.id)
        if before is None:
            change = RankChange("new", 0, None, "new", f"not returned in {other_mode} mode")
        elif before > row.rank:
            delta = before - row.rank
            change = RankChange("up", delta, before, "▲", f"up {delta} from #{before} in {other_mode} mode")
        elif before < row.rank:
            delta = row.rank - before
            change = RankChange("down", delta, before, "▼", f"down {delta} from #{before} in {other_mode} mode")
        else:
            change = RankChange("same", 0, before, "=", f"same rank in {other_mode} mode")
        changed.append(_with_change(row, change))
    return changed


def _dropped(rows: Sequence[Row], other: Sequence[Row], other_mode: str) -> list[Row]:
    """The legacy column: an item the router leaves out is "dropped"; the others name their new rank."""
    other_rank = {row.id: row.rank for row in other}
    marked: list[Row] = []
    for row in rows:
        after = other_rank.get(row.id)
        if after is None:
            change = RankChange("dropped", 0, None, "dropped", f"not returned in {other_mode} mode")
        else:
            change = RankChange("same", 0, after, f"→ #{after}", f"#{after} in {other_mode} mode")
        marked.append(_with_change(row, change))
    return marked


def _with_change(row: Row, change: RankChange) -> Row:
    return replace(row, change=change)


def inspect(
    *,
    workspace: Workspace,
    query: str,
    session_id: str,
    k: int,
    strategy: str | None,
    mode: str | None,
    max_tokens: int | None,
    override: Mapping[str, Any],
    saved: SurfacingSettings,
    compare: bool,
    record: bool,
    memory_url: MemoryUrl,
) -> Inspection:
    """Run the query as the inspector shows it: ``explain`` on, a dry read unless ``record``.

    With ``compare`` the other mode runs too (always dry) with the same what-if settings; legacy mode
    only runs fast:recency, so an explicit other strategy is dropped there and the page says so.
    ``memory_url`` maps a memory id to its page. Raises InvalidInput (from the service) for a bad
    query, k, strategy, mode or setting.
    """
    primary = retrieval.get_working_context(
        workspace,
        session_id,
        query,
        k=k,
        max_tokens=max_tokens,
        strategy=strategy,
        mode=mode,
        settings_override=override,
        record=record,
        explain=True,
    )
    other: retrieval.WorkingContext | None = None
    note = ""
    if compare:
        other_mode = (
            SurfacingMode.ROUTER.value if primary.mode == SurfacingMode.LEGACY.value else SurfacingMode.LEGACY.value
        )
        other_strategy = strategy
        if other_mode == SurfacingMode.LEGACY.value and strategy not in (None, "", "fast:recency"):
            other_strategy = None
            note = f"Legacy mode always runs fast:recency; the requested {strategy} applies to router mode only."
        other = retrieval.get_working_context(
            workspace,
            session_id,
            query,
            k=k,
            max_tokens=max_tokens,
            strategy=other_strategy,
            mode=other_mode,
            settings_override=override,
            record=False,
            explain=False,
        )
    labels = _path_labels(workspace, [primary] if other is None else [primary, other])
    primary_view = _run_view(primary, labels, memory_url)
    declined_scale = max([item.score for item in primary.items] + [d.score for d in primary.declined or []] + [0.0])
    declined = [_row(d, d.rank, primary, declined_scale, labels, memory_url) for d in primary.declined or []]
    legacy_view: RunView | None = None
    router_view: RunView | None = None
    if other is not None:
        other_view = _run_view(other, labels, memory_url)
        pair = (primary_view, other_view) if primary.mode == SurfacingMode.LEGACY.value else (other_view, primary_view)
        legacy_raw, router_raw = pair
        legacy_note = note if legacy_raw is other_view else ""
        legacy_view = _replace_rows(
            legacy_raw, _dropped(legacy_raw.rows, router_raw.rows, SurfacingMode.ROUTER.value), legacy_note
        )
        router_view = _replace_rows(
            router_raw, rank_changes(router_raw.rows, legacy_raw.rows, SurfacingMode.LEGACY.value), ""
        )
    return Inspection(
        primary=primary_view,
        declined=declined,
        legacy=legacy_view,
        router=router_view,
        changes=setting_changes(saved, override, mode),
        settings=primary.settings,
    )


def _replace_rows(view: RunView, rows: list[Row], note: str) -> RunView:
    return replace(view, rows=rows, note=note)
