"""Per-workspace surfacing settings and the evolution settings hook.

A workspace stores only its overrides (``Workspace.surfacing_settings``); the effective settings are the
defaults below, then the values that suit the workspace's embedder (``EMBEDDER_VALUES``), then the values
of the chosen ``score_profile`` (``calibrated`` by default; ``seed`` gives the project's first composite
exactly, with its constants), then the stored overrides, and every request may override them again
(``settings_override``). Every value is validated here, and a bad one is an InvalidInput naming the field
as ``surfacing.<key>`` (or ``evolution.<key>``), so the API, the commands and the pages reject the same
input with the same words.

Evolution settings live in ``Workspace.evolution_settings``. This module knows one key,
``compression_enabled`` (bool, default False: the compression ladder rewrites content, so a workspace
opts in); the evolution app registers the keys it adds with ``register_evolution_setting(key, default, validator)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from core.errors import InvalidInput
from surfacing.algorithms.composite import ScoreProfile, SurfacingMode, Weights
from surfacing.algorithms.relevance import DEFAULT_LEXICAL_WEIGHT

__all__ = [
    "EMBEDDER_VALUES",
    "SurfacingSettings",
    "effective_settings",
    "evolution_defaults",
    "register_evolution_setting",
    "validate_evolution_changes",
    "validate_surfacing_changes",
]


@dataclass(frozen=True)
class SurfacingSettings:
    """Everything get_working_context tunes. Units: hours for times; weights are unitless.

    - ``mode``: "legacy" (fast:recency, relevance with recency and activation, no graph; the default, so a
      workspace keeps its behaviour until someone opts into the router) or "router" (router, composite,
      pins, freshness, spreading and PPR).
    - ``score_profile``: "calibrated" (relevance times bounded priors, see
      ``surfacing.algorithms.composite``) or "seed" (the project's first composite, kept as the ``seed``
      profile). Choosing a profile also chooses its values of the composite knobs below
      (``PROFILE_VALUES``) unless they are set explicitly.
    - composite: ``subject_weight``, ``time_weight`` (a "when" question and a memory that says when),
      ``activation_weight`` and ``recency_weight`` (calibrated),
      ``activation_floor`` (seed),
      ``centrality_weight``, ``pin_multiplier``, ``freshness_max``, ``freshness_window_hours``,
      ``recency_time_constant_hours``, ``anchor_boost``.
    - relevance: ``lexical_weight`` in the BM25/cosine fusion; ``candidate_multiplier`` (lexical
      candidates = max(multiplier * k, k)); ``semantic_pool`` nearest memories by embedding (the vector
      index over the whole workspace) besides the lexical hits, admitted when cosine >=
      ``semantic_min_similarity``.
    - context (router mode, and legacy mode in the calibrated profile; never for point queries): the
      ``context_seeds`` most relevant candidates pass ``context_damping`` of their relevance per hop to
      the memories up to ``context_hops`` edges away: the turns before and after them (FOLLOWS) and the
      memories they link to (RELATED, DERIVED_FROM, ...); a memory that links to a hit gets
      ``context_backlink`` of that (``surfacing.algorithms.context``; 0 hops turns it off).
    - graph (deep:multi-hop): ``graph_seeds`` top hits to start from; ``spread_enabled``,
      ``spread_depth``, ``spread_fan_out``, ``spread_damping``; ``ppr_enabled``, ``ppr_alpha``,
      ``ppr_epsilon`` (per-degree residual threshold of the forward push), ``ppr_max_pushes`` (work cap;
      hitting it keeps the estimate and says so in the reasons), ``ppr_top_k`` (nodes that get a
      centrality), ``ppr_undirected`` (walk edges both ways: a memory graph's edge direction is mostly
      grammar, "A mentions B", not relevance).
    - ``max_partners``: co-retrieved partners boosted per context (graph neighbours not returned).
    """

    mode: str = SurfacingMode.LEGACY.value
    score_profile: str = ScoreProfile.CALIBRATED.value
    activation_weight: float = 0.1
    recency_weight: float = 0.1
    subject_weight: float = 0.5
    time_weight: float = 0.3
    activation_floor: float = 0.05
    centrality_weight: float = 0.2
    pin_multiplier: float = 0.3
    freshness_max: float = 0.05
    freshness_window_hours: float = 24.0
    recency_time_constant_hours: float = 720.0
    anchor_boost: float = 1.0
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    candidate_multiplier: int = 5
    semantic_pool: int = 100
    semantic_min_similarity: float = 0.25
    graph_seeds: int = 5
    spread_enabled: bool = True
    spread_depth: int = 2
    spread_fan_out: int = 20
    spread_damping: float = 0.5
    ppr_enabled: bool = True
    ppr_alpha: float = 0.85
    ppr_epsilon: float = 3e-5
    ppr_max_pushes: int = 50_000
    ppr_top_k: int = 100
    ppr_undirected: bool = True
    max_partners: int = 50
    context_seeds: int = 20
    context_hops: int = 2
    context_damping: float = 0.8
    context_backlink: float = 0.75

    @property
    def surfacing_mode(self) -> SurfacingMode:
        return SurfacingMode(self.mode)

    def weights(self) -> Weights:
        return Weights(
            profile=ScoreProfile(self.score_profile),
            activation_weight=self.activation_weight,
            recency_weight=self.recency_weight,
            subject_weight=self.subject_weight,
            time_weight=self.time_weight,
            activation_floor=self.activation_floor,
            centrality_weight=self.centrality_weight,
            pin_multiplier=self.pin_multiplier,
            freshness_max=self.freshness_max,
            freshness_window_hours=self.freshness_window_hours,
            recency_time_constant_hours=self.recency_time_constant_hours,
            anchor_boost=self.anchor_boost,
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


DEFAULTS = SurfacingSettings()

# Values that suit an embedder better than the defaults, by Memory.embedding_model name: a model of meaning
# earns dense relevance more weight than hashed words do (docs/surfacing.md, "Calibration").
EMBEDDER_VALUES: dict[str, dict[str, Any]] = {
    "minilm": {"lexical_weight": 0.65},
}

PROFILE_VALUES: dict[str, dict[str, Any]] = {
    # Calibrated on long multi-session conversations (docs/surfacing.md, "Calibration").
    ScoreProfile.CALIBRATED.value: {},
    # The constants the project's first composite (kept as the seed profile) was written with.
    ScoreProfile.SEED.value: {
        "activation_floor": 0.05,
        "centrality_weight": 0.5,
        "freshness_max": 0.2,
        "recency_time_constant_hours": 24.0,
    },
}

# key -> (kind, low, high, low_inclusive): numbers must be finite and within [low, high] (or (low, high]).
_RANGES: dict[str, tuple[type, float, float, bool]] = {
    "activation_floor": (float, 0.0, 1.0, True),
    "centrality_weight": (float, 0.0, 10.0, True),
    "pin_multiplier": (float, 0.0, 10.0, True),
    "freshness_max": (float, 0.0, 10.0, True),
    "freshness_window_hours": (float, 0.0, 24.0 * 3650, False),
    "recency_time_constant_hours": (float, 0.0, 24.0 * 36500, False),
    "anchor_boost": (float, 0.0, 100.0, True),
    "lexical_weight": (float, 0.0, 1.0, True),
    "candidate_multiplier": (int, 1, 20, True),
    "semantic_pool": (int, 0, 2000, True),
    "semantic_min_similarity": (float, -1.0, 1.0, True),
    "graph_seeds": (int, 1, 50, True),
    "spread_depth": (int, 0, 4, True),
    "spread_fan_out": (int, 0, 200, True),
    "spread_damping": (float, 0.0, 1.0, False),
    "ppr_alpha": (float, 0.0, 0.99, True),
    "ppr_epsilon": (float, 1e-9, 1e-2, True),
    "ppr_max_pushes": (int, 0, 5_000_000, True),
    "ppr_top_k": (int, 1, 10_000, True),
    "max_partners": (int, 0, 500, True),
    "activation_weight": (float, 0.0, 10.0, True),
    "recency_weight": (float, 0.0, 10.0, True),
    "subject_weight": (float, 0.0, 10.0, True),
    "time_weight": (float, 0.0, 10.0, True),
    "context_seeds": (int, 0, 200, True),
    "context_hops": (int, 0, 5, True),
    "context_damping": (float, 0.0, 1.0, True),
    "context_backlink": (float, 0.0, 1.0, True),
}
_BOOLEANS = frozenset({"spread_enabled", "ppr_enabled", "ppr_undirected"})
SURFACING_KEYS = frozenset(f.name for f in fields(SurfacingSettings))


def _number(key: str, value: Any, kind: type, low: float, high: float, low_inclusive: bool) -> float | int:
    name = f"surfacing.{key}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{name}: expected a number, got {value!r}", field=name)
    if kind is int and (isinstance(value, float) and not value.is_integer()):
        raise InvalidInput(f"{name}: expected a whole number, got {value!r}", field=name)
    if not math.isfinite(value):
        raise InvalidInput(f"{name}: must be a finite number", field=name)
    below = value < low if low_inclusive else value <= low
    if below or value > high:
        bracket = "[" if low_inclusive else "("
        raise InvalidInput(f"{name}: must be within {bracket}{low}, {high}], got {value!r}", field=name)
    return int(value) if kind is int else float(value)


def _validate_value(key: str, value: Any) -> Any:
    name = f"surfacing.{key}"
    for choice_key, choices in (("mode", SurfacingMode), ("score_profile", ScoreProfile)):
        if key == choice_key:
            if value not in choices.__members__.values():
                allowed = ", ".join(m.value for m in choices)
                raise InvalidInput(f"{name}: {value!r} is not one of {allowed}", field=name)
            return str(value)
    if key in _BOOLEANS:
        if not isinstance(value, bool):
            raise InvalidInput(f"{name}: expected true or false", field=name)
        return value
    kind, low, high, low_inclusive = _RANGES[key]
    return _number(key, value, kind, low, high, low_inclusive)


def validate_surfacing_changes(changes: Any) -> dict[str, Any]:
    """Validate a partial surfacing settings object; ``null`` for a key means "back to the default"."""
    if not isinstance(changes, Mapping):
        raise InvalidInput("surfacing: expected a JSON object", field="surfacing")
    cleaned: dict[str, Any] = {}
    for key, value in changes.items():
        if key not in SURFACING_KEYS:
            raise InvalidInput(
                f"surfacing.{key}: unknown setting; known: {', '.join(sorted(SURFACING_KEYS))}",
                field=f"surfacing.{key}",
            )
        cleaned[key] = None if value is None else _validate_value(key, value)
    return cleaned


def effective_settings(
    stored: Mapping[str, Any] | None, override: Mapping[str, Any] | None = None, *, embedder: str = ""
) -> SurfacingSettings:
    """Defaults, then the values of the workspace's `embedder` (its model name, ``EMBEDDER_VALUES``), then the
    chosen profile's values, then the workspace's stored overrides, then a per-request override (all
    validated).

    A stored key that is no longer known (a setting removed in an upgrade) is ignored rather than
    failing every request of that workspace.
    """
    values: dict[str, Any] = {}
    for source in (stored or {}, override or {}):
        known = {k: v for k, v in source.items() if k in SURFACING_KEYS}
        for key, value in validate_surfacing_changes(known).items():
            if value is None:
                values.pop(key, None)
            else:
                values[key] = value
    profile = values.get("score_profile", DEFAULTS.score_profile)
    return replace(DEFAULTS, **{**EMBEDDER_VALUES.get(embedder, {}), **PROFILE_VALUES[profile], **values})


# -- evolution settings -----------------------------------------------------------------------------

EvolutionValidator = Callable[[str, Any], Any]


def _boolean(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name}: expected true or false", field=name)
    return value


_EVOLUTION: dict[str, tuple[Any, EvolutionValidator]] = {
    "compression_enabled": (False, _boolean),
}


def register_evolution_setting(key: str, default: Any, validator: EvolutionValidator) -> None:
    """Make ``key`` a known evolution setting. ``validator(field_name, value)`` returns the cleaned value
    or raises InvalidInput naming ``field_name`` (``evolution.<key>``)."""
    _EVOLUTION[key] = (default, validator)


def evolution_defaults() -> dict[str, Any]:
    return {key: default for key, (default, _) in _EVOLUTION.items()}


def validate_evolution_changes(changes: Any) -> dict[str, Any]:
    """Validate a partial evolution settings object; ``null`` resets a key to its default."""
    if not isinstance(changes, Mapping):
        raise InvalidInput("evolution: expected a JSON object", field="evolution")
    cleaned: dict[str, Any] = {}
    for key, value in changes.items():
        name = f"evolution.{key}"
        if key not in _EVOLUTION:
            raise InvalidInput(f"{name}: unknown setting; known: {', '.join(sorted(_EVOLUTION))}", field=name)
        cleaned[key] = None if value is None else _EVOLUTION[key][1](name, value)
    return cleaned


def effective_evolution(stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """Defaults with the stored values on top; stored keys nobody registered are kept as they are."""
    return {**evolution_defaults(), **dict(stored or {})}
