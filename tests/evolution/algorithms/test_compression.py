from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from evolution.algorithms.compression import (
    CompressionTier,
    compressed_content,
    compression_plan,
    forget_mask,
    ladder_tier,
    target_tier,
    tombstone_text,
)

FULL, SUMMARY, SKELETON, TOMBSTONE, FORGOTTEN = (
    CompressionTier.FULL,
    CompressionTier.SUMMARY,
    CompressionTier.SKELETON,
    CompressionTier.TOMBSTONE,
    CompressionTier.FORGOTTEN,
)


def test_tiers_are_ordered_from_full_to_forgotten() -> None:
    assert [int(t) for t in CompressionTier] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize(
    ("activation", "age", "expected"),
    [
        (0.39, 1.0, SUMMARY),
        (0.149, 1.0, SKELETON),
        (0.049, 10.0, SKELETON),
        (0.049, 30.0, TOMBSTONE),
        (0.40, 100.0, FULL),
        (0.15, 100.0, SUMMARY),
        (0.05, 100.0, SKELETON),
        (0.0, 29.99, SKELETON),
    ],
)
def test_target_tier_matches_the_reference_vectors(activation: float, age: float, expected: int) -> None:
    assert target_tier([activation], [age], [2], [FULL]).tolist() == [expected]


def test_origin_tier_one_never_leaves_full() -> None:
    assert target_tier([0.0], [365.0], [1], [FULL]).tolist() == [FULL]


def test_compression_never_goes_back_up() -> None:
    assert target_tier([0.9], [1.0], [2], [SKELETON]).tolist() == [SKELETON]


def test_forgotten_is_never_a_target_and_stays_forgotten() -> None:
    assert ladder_tier(np.linspace(0, 1, 11), np.full(11, 1000.0)).max() == TOMBSTONE
    assert target_tier([0.9], [1.0], [2], [FORGOTTEN]).tolist() == [FORGOTTEN]


def test_missing_activation_keeps_the_current_tier() -> None:
    assert target_tier([np.nan], [100.0], [2], [FULL]).tolist() == [FULL]


def test_compression_plan_lists_only_downward_moves_with_reasons() -> None:
    plan = compression_plan([0.39, 0.9, 0.049, 0.01], [1.0, 1.0, 45.0, 45.0], [2, 2, 2, 1], [FULL] * 4)
    assert plan.indices.tolist() == [0, 2]
    assert plan.to_tier.tolist() == [SUMMARY, TOMBSTONE]
    assert plan.reason(0) == "compress FULL -> SUMMARY: activation 0.390 < 0.40"
    assert plan.reason(1) == "compress FULL -> TOMBSTONE: activation 0.049 < 0.05 and 45.0d >= 30d old"


def test_tombstone_names_the_original_length() -> None:
    assert tombstone_text(1234) == "[compressed: 1234 chars original]"


def test_compressed_content_at_each_rung() -> None:
    text = (
        "Alice decided to move billing to Postgres 15 because replication failed. "
        "The team had lunch. Bob will migrate 3 tables by Friday. The weather was nice and warm today."
    )
    assert compressed_content(text, FULL) == text
    summary = compressed_content(text, SUMMARY)
    assert 0 < len(summary) <= 0.4 * len(text)
    skeleton = compressed_content(text, SKELETON)
    assert 5 <= len(skeleton.split("; ")) <= 10
    assert compressed_content(text, TOMBSTONE) == f"[compressed: {len(text)} chars original]"
    assert compressed_content(text, FORGOTTEN) == ""
    assert compressed_content(text, 3) == compressed_content(text, TOMBSTONE)  # type: ignore[arg-type]


@given(
    hnp.arrays(np.float64, 8, elements=st.floats(0, 1)),
    hnp.arrays(np.float64, 8, elements=st.floats(0, 400)),
    hnp.arrays(np.int64, 8, elements=st.integers(1, 3)),
    hnp.arrays(np.int8, 8, elements=st.integers(0, 4)),
)
def test_compression_target_never_goes_upward(
    activation: npt.NDArray[np.float64],
    age: npt.NDArray[np.float64],
    origin: npt.NDArray[np.int64],
    current: npt.NDArray[np.int8],
) -> None:
    target = target_tier(activation, age, origin, current)
    assert np.all(target >= current)
    assert np.all((target <= TOMBSTONE) | (current == FORGOTTEN))
    assert np.all(target[origin == 1] == current[origin == 1])


def test_the_forgetting_policy_selects_only_old_cold_tombstones_of_agents() -> None:
    activation = [0.01, 0.01, 0.06, 0.01, 0.01, 0.01, np.nan]
    age = [180.0, 179.9, 400.0, 400.0, 400.0, 400.0, 400.0]
    origin = [2, 2, 2, 1, 3, 2, 2]
    current = [TOMBSTONE, TOMBSTONE, TOMBSTONE, TOMBSTONE, TOMBSTONE, SKELETON, TOMBSTONE]
    assert forget_mask(activation, age, origin, current).tolist() == [True, False, False, False, True, False, False]


def test_the_forgetting_age_is_a_setting() -> None:
    assert forget_mask([0.0], [40.0], [2], [TOMBSTONE], after_days=30.0).tolist() == [True]
    assert forget_mask([0.0], [40.0], [2], [TOMBSTONE], after_days=41.0).tolist() == [False]
