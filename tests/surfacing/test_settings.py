from __future__ import annotations

from typing import Any

import pytest

from core.errors import InvalidInput
from surfacing import settings as surfacing_settings
from surfacing.algorithms.composite import ScoreProfile
from surfacing.selectors import workspace_settings
from surfacing.settings import (
    SurfacingSettings,
    effective_evolution,
    effective_settings,
    register_evolution_setting,
    validate_evolution_changes,
    validate_surfacing_changes,
)


def test_defaults_are_the_calibrated_profile_with_the_seed_graph_values() -> None:
    s = effective_settings(None)
    assert s == SurfacingSettings()
    assert s.mode == "legacy"  # router, graph walks and pins stay off until a workspace opts into the router
    assert s.score_profile == "calibrated"
    assert s.weights().profile is ScoreProfile.CALIBRATED
    assert (s.pin_multiplier, s.anchor_boost, s.freshness_window_hours) == (0.3, 1.0, 24.0)
    assert (s.spread_depth, s.spread_fan_out, s.spread_damping, s.graph_seeds) == (2, 20, 0.5, 5)
    assert (s.ppr_enabled, s.ppr_alpha, s.ppr_top_k) == (True, 0.85, 100)


def test_the_seed_profile_brings_the_seed_constants_unless_a_value_is_set() -> None:
    s = effective_settings({"score_profile": "seed"})
    assert s.weights().profile is ScoreProfile.SEED
    assert (s.activation_floor, s.centrality_weight, s.pin_multiplier) == (0.05, 0.5, 0.3)
    assert (s.freshness_max, s.freshness_window_hours, s.recency_time_constant_hours) == (0.2, 24.0, 24.0)
    assert s.anchor_boost == 1.0
    tuned = effective_settings({"score_profile": "seed"}, {"recency_time_constant_hours": 8760.0})
    assert tuned.recency_time_constant_hours == 8760.0 and tuned.centrality_weight == 0.5
    back = effective_settings({"score_profile": "seed"}, {"score_profile": "calibrated"})
    assert back == SurfacingSettings()


def test_an_unknown_profile_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidInput) as err:
        validate_surfacing_changes({"score_profile": "bm25"})
    assert err.value.field == "surfacing.score_profile"
    assert "calibrated, seed" in err.value.detail


def test_effective_settings_layer_stored_then_request_overrides() -> None:
    stored = {"mode": "router", "pin_multiplier": 0.5}
    override = {"pin_multiplier": 0.1, "spread_depth": 1}
    s = effective_settings(stored, override)
    assert (s.mode, s.pin_multiplier, s.spread_depth) == ("router", 0.1, 1)
    assert effective_settings(stored, {"mode": None}).mode == "legacy"


def test_effective_settings_ignore_stored_keys_that_no_longer_exist() -> None:
    assert effective_settings({"retired_knob": 3}) == SurfacingSettings()


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mode": "turbo"}, "surfacing.mode"),
        ({"pin_multiplier": -0.1}, "surfacing.pin_multiplier"),
        ({"pin_multiplier": "0.3"}, "surfacing.pin_multiplier"),
        ({"recency_time_constant_hours": 0}, "surfacing.recency_time_constant_hours"),
        ({"spread_fan_out": 2.5}, "surfacing.spread_fan_out"),
        ({"spread_depth": True}, "surfacing.spread_depth"),
        ({"ppr_enabled": "yes"}, "surfacing.ppr_enabled"),
        ({"lexical_weight": float("nan")}, "surfacing.lexical_weight"),
        ({"nonsense": 1}, "surfacing.nonsense"),
    ],
)
def test_invalid_surfacing_values_name_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_surfacing_changes(changes)
    assert err.value.field == field


def test_whole_numbers_written_as_floats_are_accepted() -> None:
    assert validate_surfacing_changes({"spread_fan_out": 10.0, "freshness_max": 1}) == {
        "spread_fan_out": 10,
        "freshness_max": 1.0,
    }


def test_surfacing_changes_must_be_an_object() -> None:
    with pytest.raises(InvalidInput) as err:
        validate_surfacing_changes(["mode"])
    assert err.value.field == "surfacing"


def test_evolution_settings_know_compression_and_accept_registered_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(surfacing_settings, "_EVOLUTION", dict(surfacing_settings._EVOLUTION))
    assert effective_evolution({}) == {
        "compression_enabled": False,
        "cycle_every_hours": 0.0,
        "dream_every_hours": 0.0,
        "evolve_at_ingest": True,
        "forget_after_days": 180.0,
        "forgotten_enabled": False,
    }
    assert validate_evolution_changes(
        {
            "compression_enabled": True,
        }
    ) == {"compression_enabled": True}
    with pytest.raises(InvalidInput) as err:
        validate_evolution_changes({"cycle_cap": 300})
    assert err.value.field == "evolution.cycle_cap"

    def cap(name: str, value: Any) -> int:
        if not isinstance(value, int) or value < 1:
            raise InvalidInput(f"{name}: expected a positive whole number", field=name)
        return value

    register_evolution_setting("cycle_cap", 500, cap)
    assert validate_evolution_changes({"cycle_cap": 300}) == {"cycle_cap": 300}
    assert effective_evolution({"cycle_cap": 300})["cycle_cap"] == 300
    assert effective_evolution({})["cycle_cap"] == 500
    with pytest.raises(InvalidInput) as err:
        validate_evolution_changes({"cycle_cap": 0})
    assert err.value.field == "evolution.cycle_cap"


def test_a_model_of_meaning_weighs_dense_relevance_more_unless_the_workspace_says_otherwise() -> None:
    assert effective_settings(None, embedder="minilm").lexical_weight == 0.65
    assert effective_settings(None, embedder="hashing:256").lexical_weight == SurfacingSettings().lexical_weight == 0.8
    assert effective_settings({"lexical_weight": 0.9}, embedder="minilm").lexical_weight == 0.9
    assert effective_settings(None, {"lexical_weight": 0.5}, embedder="minilm").lexical_weight == 0.5


@pytest.mark.django_db
def test_the_settings_a_workspace_reads_follow_its_embedder(workspace: Any) -> None:
    assert workspace_settings(workspace=workspace).surfacing.lexical_weight == 0.8
    workspace.embedder = "minilm"
    assert workspace_settings(workspace=workspace).surfacing.lexical_weight == 0.65
