from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from evolution.algorithms.tiers import (
    TYPE_WEIGHTS,
    ItemKind,
    Tier,
    TierItem,
    relevance,
    scores,
    tier_transitions,
)

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def item(
    *,
    key: str = "k",
    tier: Tier = Tier.HOT,
    kind: ItemKind = ItemKind.RULE,
    base: float = 1.0,
    access_count: int = 1,
    days: float = 0.0,
    uses: int = 0,
    correction: bool = False,
) -> TierItem:
    return TierItem(
        key=key,
        tier=tier,
        kind=kind,
        base=base,
        access_count=access_count,
        last_access=NOW - timedelta(days=days),
        uses_in_last_7d=uses,
        is_correction=correction,
    )


# Values worked by hand: relevance = base * exp(-0.03 d) * log2(n + 1) * w, checked to 1e-6.
@pytest.mark.parametrize(
    ("base", "days", "count", "weight", "expected"),
    [
        (1.0, 0.0, 1, 1.5, 1.5),
        (1.0, 10.0, 3, 0.8, 1.1853091530907486),  # 0.8 * e^-0.3 * 2
        (2.0, 30.0, 7, 1.2, 2.9273015),  # 2 * e^-0.9 * 3 * 1.2
        (0.5, 100.0, 1, 1.0, 0.024893534),  # 0.5 * e^-3
        (1.0, 0.0, 0, 1.0, 1.0),  # access_count 0 reads as 1, not log2(1) = 0
        (1.0, -5.0, 1, 1.0, 1.0),  # a last access in the future counts as today
    ],
)
def test_relevance_matches_the_reference_formula(
    base: float, days: float, count: int, weight: float, expected: float
) -> None:
    assert relevance(base, days, count, weight) == pytest.approx(expected, abs=1e-6)


def test_type_weights_are_the_reference_values() -> None:
    assert dict(TYPE_WEIGHTS) == {"hot": 1.5, "warm": 0.8, "correction": 1.2, "engine_strategy": 1.0}


def test_relevance_of_arrays_equals_relevance_of_each_element() -> None:
    base = np.array([1.0, 0.3, 2.0])
    days = np.array([0.0, 12.5, 40.0])
    count = np.array([1, 4, 9])
    weight = np.array([1.5, 0.8, 1.2])
    vector = relevance(base, days, count, weight)
    assert isinstance(vector, np.ndarray)
    for i in range(3):
        assert vector[i] == pytest.approx(relevance(float(base[i]), float(days[i]), int(count[i]), float(weight[i])))


def test_relevance_of_scalars_is_a_float() -> None:
    assert isinstance(relevance(1.0, 1.0, 1, 1.0), float)


@pytest.mark.parametrize(("base", "weight"), [(-0.1, 1.0), (1.0, -1.0), (math.nan, 1.0), (1.0, math.inf)])
def test_relevance_refuses_negative_or_non_finite_base_and_weight(base: float, weight: float) -> None:
    with pytest.raises(ValueError):
        relevance(base, 0.0, 1, weight)


finite = st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False)


@given(base=finite, days=st.floats(-1e3, 1e5), count=st.integers(0, 10**6), weight=finite)
def test_tier_score_is_never_negative(base: float, days: float, count: int, weight: float) -> None:
    assert relevance(base, days, count, weight) >= 0.0


@given(base=finite, days=st.floats(0, 1e4), more=st.floats(0, 1e4), count=st.integers(1, 1000))
def test_score_never_rises_while_an_item_goes_unused(base: float, days: float, more: float, count: int) -> None:
    assert relevance(base, days + more, count, 1.0) <= relevance(base, days, count, 1.0)


@given(base=finite, days=st.floats(0, 1e4), count=st.integers(1, 1000), extra=st.integers(0, 1000))
def test_score_never_falls_with_more_accesses(base: float, days: float, count: int, extra: int) -> None:
    assert relevance(base, days, count + extra, 1.0) >= relevance(base, days, count, 1.0)


def test_scores_use_the_weight_of_each_items_type() -> None:
    items = [
        item(key="hot"),
        item(key="warm", tier=Tier.WARM),
        item(key="fix", correction=True),
        item(key="strat", kind=ItemKind.ENGINE_STRATEGY),
    ]
    assert scores(items, NOW).tolist() == pytest.approx([1.5, 0.8, 1.2, 1.0])


@pytest.mark.parametrize(
    ("case", "before", "after", "reason_bits"),
    [
        ("used 3x in 7 days", item(tier=Tier.WARM, uses=3), Tier.HOT, ["Used 3 times", "last 7 days"]),
        ("cold used 3x", item(tier=Tier.COLD, uses=4, days=200), Tier.HOT, ["Used 4 times"]),
        ("unused 30 days", item(base=5.0, days=30), Tier.WARM, ["unused for 30.0 days"]),
        ("score under 0.2", item(base=0.1), Tier.WARM, ["relevance 0.1500", "below the HOT threshold 0.2"]),
        ("warm under 0.05", item(tier=Tier.WARM, base=0.05), Tier.COLD, ["relevance 0.0400", "0.05"]),
        (
            "hot that would be under 0.05 once warm",
            item(base=0.05),
            Tier.COLD,
            ["relevance 0.0750", "would give 0.0400", "Nothing is deleted"],
        ),
        ("hot under 0.05", item(days=100), Tier.COLD, ["100.0 days", "cold/archive"]),
        ("correction in warm", item(tier=Tier.WARM, correction=True, days=400), Tier.HOT, ["always stay in HOT"]),
        ("correction in cold", item(tier=Tier.COLD, correction=True), Tier.HOT, ["User correction"]),
    ],
)
def test_tier_rules_move_items_with_a_reason_that_gives_the_numbers(
    case: str, before: TierItem, after: Tier, reason_bits: list[str]
) -> None:
    [change] = tier_transitions([before], NOW)
    assert (change.key, change.from_tier, change.to_tier) == (before.key, before.tier, after), case
    for bit in reason_bits:
        assert bit in change.reason, (case, change.reason)


@pytest.mark.parametrize(
    ("case", "still"),
    [
        ("fresh hot rule", item()),
        ("hot rule unused 29.9 days", item(base=5.0, days=29.9)),
        ("warm rule above 0.05", item(tier=Tier.WARM, base=0.07)),
        ("cold rule with a fine score stays archived until used", item(tier=Tier.COLD, base=10.0)),
        ("hot rule used 3x although its score is tiny", item(base=0.001, uses=3)),
        ("correction long unused and decayed", item(correction=True, days=1000)),
        ("warm rule unused for a year but above 0.05", item(tier=Tier.WARM, base=100.0, days=100)),
    ],
)
def test_tier_rules_leave_items_alone_when_no_rule_applies(case: str, still: TierItem) -> None:
    assert tier_transitions([still], NOW) == [], case


def test_engine_strategy_is_scored_with_weight_one_in_any_tier() -> None:
    # 0.19 * 1.0 < 0.2 moves it to WARM, where its weight stays 1.0 and 0.19 >= 0.05 keeps it there.
    [change] = tier_transitions([item(kind=ItemKind.ENGINE_STRATEGY, base=0.19)], NOW)
    assert change.to_tier is Tier.WARM
    assert change.score == pytest.approx(0.19)


def test_transitions_keep_input_order_and_skip_unchanged_items() -> None:
    items = [item(key="a", base=0.1), item(key="b"), item(key="c", tier=Tier.WARM, uses=5)]
    assert [c.key for c in tier_transitions(items, NOW)] == ["a", "c"]


def test_items_sharing_a_key_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        tier_transitions([item(key="a"), item(key="a", tier=Tier.WARM)], NOW)


def test_naive_datetimes_are_refused() -> None:
    with pytest.raises(ValueError):
        tier_transitions([item()], datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        replace(item(), last_access=datetime(2026, 1, 1))


def test_an_engine_strategy_cannot_be_a_correction() -> None:
    with pytest.raises(ValueError):
        item(kind=ItemKind.ENGINE_STRATEGY, correction=True)


items_strategy = st.builds(
    lambda origin, **kw: item(kind=origin[0], correction=origin[1], **kw),
    origin=st.sampled_from([(ItemKind.RULE, False), (ItemKind.RULE, True), (ItemKind.ENGINE_STRATEGY, False)]),
    key=st.text(min_size=1, max_size=5),
    tier=st.sampled_from(Tier),
    base=st.floats(0.0, 5.0),
    access_count=st.integers(0, 50),
    days=st.floats(-2.0, 400.0),
    uses=st.integers(0, 6),
)


@given(st.lists(items_strategy, max_size=25))
def test_no_rule_ever_deletes_and_corrections_always_end_in_hot(items: list[TierItem]) -> None:
    items = [replace(i, key=f"{n}") for n, i in enumerate(items)]
    changes = {c.key: c for c in tier_transitions(items, NOW)}
    for i in items:
        change = changes.get(i.key)
        final = change.to_tier if change else i.tier
        assert final in (Tier.HOT, Tier.WARM, Tier.COLD)
        if change:
            assert change.from_tier != change.to_tier
            assert change.score >= 0.0 and change.reason
        if i.is_correction:
            assert final is Tier.HOT


@given(st.lists(items_strategy, max_size=25))
def test_applying_the_changes_and_running_again_changes_nothing(items: list[TierItem]) -> None:
    items = [replace(i, key=f"{n}") for n, i in enumerate(items)]
    moved = {c.key: c.to_tier for c in tier_transitions(items, NOW)}
    applied = [replace(i, tier=moved.get(i.key, i.tier)) for i in items]
    assert tier_transitions(applied, NOW) == []
