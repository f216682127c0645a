"""Presentation helpers of the inspector: bars that add up to the score, rank changes, what-if knobs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memories import services as memory_services
from memories.inputs import MemoryInput
from memories.models import Memory, Workspace
from surfacing import inspector, services
from surfacing.algorithms.composite import CandidateSignals, ScoreBreakdown, SurfacingMode, score_candidates
from surfacing.settings import DEFAULTS, effective_settings

QUERY = "Why did we pick JWT?"


def url(memory_id: str) -> str:
    return f"/m/{memory_id}/"


def row(rank: int, mid: str) -> inspector.Row:
    provenance = inspector.ProvenanceView("lexical", "lexical hit", None, "", 0, [])
    return inspector.Row(rank, mid, url(mid), "", "fact", 0.0, "0", [], "", False, provenance, "")


def scored(
    *,
    profile: str = "seed",
    activation: float = 0.5,
    relevance: float = 0.8,
    age_hours: float = 2.5,
    centrality: float = 0.0,
    anchor: bool = False,
    pin: float = 0.0,
    mode: SurfacingMode = SurfacingMode.ROUTER,
) -> tuple[ScoreBreakdown, float]:
    """One candidate scored by the real composite: its breakdown and score."""
    weights = replace(effective_settings({"score_profile": profile}), mode=mode.value).weights()
    result = score_candidates(
        CandidateSignals(
            activation=np.array([activation]),
            relevance=np.array([relevance]),
            age_hours=np.array([age_hours]),
            centrality=np.array([centrality]),
            is_anchor=np.array([anchor]),
            is_pinned=np.array([pin > 0.0]),
            pin_weight=np.array([pin / weights.pin_multiplier if weights.pin_multiplier else 0.0]),
        ),
        mode=mode,
        weights=weights,
    )
    return result.breakdown(0), float(result.composite[0])


# -- bars -------------------------------------------------------------------------------------------

unit = st.floats(0.0, 1.0)


@given(
    profile=st.sampled_from(["seed", "calibrated"]),
    activation=unit,
    relevance=unit,
    age_hours=st.floats(0.0, 1e6),
    centrality=unit,
    anchor=st.booleans(),
    pin=st.floats(0.0, 3.0),
)
def test_router_bar_segments_add_up_to_the_composite_score(
    profile: str, activation: float, relevance: float, age_hours: float, centrality: float, anchor: bool, pin: float
) -> None:
    b, score = scored(
        profile=profile,
        activation=activation,
        relevance=relevance,
        age_hours=age_hours,
        centrality=centrality,
        anchor=anchor,
        pin=pin,
    )
    segments, text = inspector.bar_segments(b, score, "router", scale=score)
    assert math.isclose(sum(s.value for s in segments), score, rel_tol=1e-9, abs_tol=1e-12)
    assert all(0.0 <= float(s.width) <= 100.0 for s in segments)
    if score > 0:
        assert math.isclose(sum(float(s.width) for s in segments), 100.0, abs_tol=0.05)
    assert text.startswith("Score ") and f"({profile} profile)" in text


def test_legacy_bar_is_the_base_alone_and_says_so() -> None:
    b, score = scored(activation=0.01, mode=SurfacingMode.LEGACY)
    segments, text = inspector.bar_segments(b, score, "legacy", scale=2 * score)
    assert [s.key for s in segments] == ["base"]
    assert segments[0].width == "50.00"
    assert "raised to the floor" in text and "legacy mode" in text


def test_calibrated_bar_shows_relevance_and_what_the_priors_added() -> None:
    b, score = scored(profile="calibrated", activation=1.0, relevance=0.5, age_hours=1.0)
    segments, text = inspector.bar_segments(b, score, "router", scale=score)
    assert [s.key for s in segments] == ["base", "lift"]
    assert segments[0].value == pytest.approx(0.5)
    assert segments[1].value == pytest.approx(score - 0.5)
    assert "relevance 0.500" in text and "calibrated profile" in text


def test_zero_scale_draws_empty_bars_instead_of_dividing_by_zero() -> None:
    b, score = scored(relevance=0.0, age_hours=48.0)
    segments, _ = inspector.bar_segments(b, score, "router", scale=0.0)
    assert segments == []


# -- rank changes -----------------------------------------------------------------------------------


def test_rank_changes_mark_up_down_same_and_new() -> None:
    legacy = [row(1, "a"), row(2, "b"), row(3, "c")]
    router = [row(1, "c"), row(2, "b"), row(3, "a"), row(4, "d")]
    marked = {r.id: r.change for r in inspector.rank_changes(router, legacy, "legacy")}
    assert marked["c"] is not None and (marked["c"].kind, marked["c"].delta, marked["c"].symbol) == ("up", 2, "▲")
    assert marked["b"] is not None and marked["b"].kind == "same"
    assert marked["a"] is not None and (marked["a"].kind, marked["a"].delta) == ("down", 2)
    assert marked["a"].text == "down 2 from #1 in legacy mode"
    assert marked["d"] is not None and marked["d"].kind == "new"


# -- what-if ----------------------------------------------------------------------------------------


def test_whatif_override_keeps_only_values_that_differ_from_the_saved_settings() -> None:
    values = {
        "centrality_weight": DEFAULTS.centrality_weight,
        "recency_time_constant_hours": 72.0,
        "ppr_enabled": False,
        "spread_depth": 2,
    }
    assert inspector.whatif_override(values, DEFAULTS) == {"recency_time_constant_hours": 72.0, "ppr_enabled": False}


def test_whatif_controls_never_clip_or_round_a_saved_value() -> None:
    saved = replace(DEFAULTS, centrality_weight=7.25, activation_floor=0.123, recency_time_constant_hours=43800.0)
    controls = {c.knob.key: c for c in inspector.whatif_controls(saved, {})}
    assert controls["centrality_weight"].high == "7.25" and controls["centrality_weight"].value == "7.25"
    assert controls["activation_floor"].step == "any"
    assert controls["lexical_weight"].step == "0.05"
    assert controls["recency_time_constant_hours"].value == "43800"
    assert float(controls["recency_time_constant_hours"].log_value) == pytest.approx(math.log10(43800.0))
    assert not any(c.changed for c in controls.values())


def test_whatif_controls_show_the_tried_value_against_the_saved_one() -> None:
    controls = {c.knob.key: c for c in inspector.whatif_controls(DEFAULTS, {"ppr_enabled": False})}
    assert controls["ppr_enabled"].changed and not controls["ppr_enabled"].checked
    assert controls["ppr_enabled"].saved_shown == "on"


def test_setting_changes_describe_what_save_would_store() -> None:
    changes = inspector.setting_changes(
        DEFAULTS, {"recency_time_constant_hours": 8760.0, "ppr_enabled": False}, "router"
    )
    assert [(c.key, c.before, c.after, c.form_value) for c in changes] == [
        ("mode", "legacy", "router", "router"),
        ("recency_time_constant_hours", f"{DEFAULTS.recency_time_constant_hours:g} h", "8760 h", "8760"),
        ("ppr_enabled", "on", "off", "false"),
    ]


# -- a whole inspection -----------------------------------------------------------------------------


def inspect(workspace: Workspace, **overrides: object) -> inspector.Inspection:
    arguments: dict[str, object] = {
        "workspace": workspace,
        "query": QUERY,
        "session_id": "s1",
        "k": 8,
        "strategy": None,
        "mode": "router",
        "max_tokens": None,
        "override": {},
        "saved": DEFAULTS,
        "compare": False,
        "record": False,
        "memory_url": url,
        **overrides,
    }
    return inspector.inspect(**arguments)  # type: ignore[arg-type]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("profile", "expected"),
    [("calibrated", {"base", "lift", "anchor", "pin"}), ("seed", {"base", "lift", "anchor", "pin", "fresh"})],
)
def test_every_row_of_a_real_inspection_has_a_bar_that_adds_up_to_its_score(
    demo: Workspace, profile: str, expected: set[str]
) -> None:
    pinned = Memory.objects.get(workspace=demo, content__startswith="Lee set up Grafana")
    services.pin_put(workspace=demo, session_id="s1", memory=pinned, weight=2.0)
    fresh = MemoryInput(content="Fresh note: why we pick JWT signing keys weekly.", memory_type="fact")
    memory_services.memory_create(workspace=demo, actor=None, item=fresh)
    result = inspect(demo, compare=True, override={"score_profile": profile})
    rows = [*result.primary.rows, *result.declined, *(r for view in result.columns for r in view.rows)]
    keys: set[str] = set()
    for r in rows:
        assert math.isclose(sum(s.value for s in r.segments), r.score, rel_tol=1e-9, abs_tol=1e-12), r.bar_text
        keys.update(s.key for s in r.segments)
    # The calibrated profile folds freshness into its recency prior: it is part of the lift.
    assert keys == expected
    pin_row = next(r for r in result.primary.rows if r.id == str(pinned.id))
    assert pin_row.forced and pin_row.provenance.kind == "pinned"


@pytest.mark.django_db
@pytest.mark.parametrize(("override", "kind"), [({}, "context"), ({"context_hops": 0}, "spread")])
def test_graph_provenance_names_every_memory_on_its_path(
    demo: Workspace, override: dict[str, object], kind: str
) -> None:
    result = inspect(demo, k=20, override=override)
    walked = [r for r in [*result.primary.rows, *result.declined] if r.provenance.kind in inspector.WALK_KINDS]
    assert kind in {r.provenance.kind for r in walked}
    for r in walked:
        path = r.provenance.path
        assert len(path) == r.provenance.hops + 1
        assert path[-1].id == r.id and r.provenance.seed is not None and path[0].id == r.provenance.seed.id
        assert all(step.label != "(not found)" and step.url == url(step.id) for step in path)
        assert r.provenance.edge_type


@pytest.mark.django_db
def test_comparison_keeps_the_explicit_strategy_for_router_only(demo: Workspace) -> None:
    result = inspect(demo, compare=True, strategy="deep:multi-hop")
    assert result.legacy is not None and result.router is not None
    assert result.legacy.strategy_used == "fast:recency" and "router mode only" in result.legacy.note
    assert result.router.strategy_used == "deep:multi-hop"
    assert all(r.change is not None for r in [*result.legacy.rows, *result.router.rows])
