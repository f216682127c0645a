from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evolution.algorithms.merge import MergeCandidates, content_codes, duplicate_groups, merged_tags, unit_rows


def _vec(cos: float) -> list[float]:
    """A 3-d unit vector at cosine `cos` to (1, 0, 0)."""
    return [cos, float(np.sqrt(max(0.0, 1.0 - cos * cos))), 0.0]


def candidates(
    vectors: Sequence[Sequence[float]],
    *,
    types: Sequence[int] | None = None,
    contents: Sequence[str] | None = None,
    tiers: Sequence[int] | None = None,
    origins: Sequence[str] | None = None,
    confidence: Sequence[float] | None = None,
) -> MergeCandidates:
    n = len(vectors)
    return MergeCandidates(
        vectors=np.asarray(vectors, dtype=np.float32),
        type_codes=np.asarray(types if types is not None else [0] * n, dtype=np.intp),
        contents=list(contents) if contents is not None else [f"text {k}" for k in range(n)],
        origin_tier=np.asarray(tiers if tiers is not None else [2] * n, dtype=np.intp),
        origins=list(origins) if origins is not None else ["evolver:X"] * n,
        confidence=np.asarray(confidence if confidence is not None else [1.0] * n, dtype=np.float64),
        access_count=np.zeros(n, dtype=np.intp),
        created_ts=np.arange(n, dtype=np.float64),
    )


def test_memories_at_cosine_095_or_more_form_one_group_and_the_oldest_is_kept() -> None:
    groups = duplicate_groups(candidates([_vec(1.0), _vec(0.96), [0.0, 0.0, 1.0]]))
    assert len(groups) == 1
    assert groups[0].keep == 0 and groups[0].merged == (1,)
    assert groups[0].cosine[0] == pytest.approx(0.96, abs=1e-6)


def test_cosine_just_under_the_threshold_is_not_a_duplicate() -> None:
    assert duplicate_groups(candidates([_vec(1.0), _vec(0.949)])) == []


def test_the_threshold_is_a_setting() -> None:
    assert len(duplicate_groups(candidates([_vec(1.0), _vec(0.9)]), threshold=0.85)) == 1


def test_identical_normalised_content_is_a_duplicate_whatever_the_vectors() -> None:
    groups = duplicate_groups(
        candidates([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]], contents=["Deploy at 5!", "deploy  AT 5", "other"])
    )
    assert [(g.keep, g.merged, g.same_content) for g in groups] == [(0, (1,), (True,))]


def test_memories_of_different_types_are_never_grouped() -> None:
    assert duplicate_groups(candidates([_vec(1.0), _vec(1.0)], types=[0, 1], contents=["same", "same"])) == []


def test_a_person_s_memory_is_kept_over_an_evolver_s_even_when_younger() -> None:
    (group,) = duplicate_groups(candidates([_vec(1.0), _vec(0.99)], tiers=[2, 1], origins=["evolver:X", "user:ann"]))
    assert group.keep == 1 and group.merged == (0,)


def test_higher_confidence_wins_among_equal_tiers() -> None:
    (group,) = duplicate_groups(candidates([_vec(1.0), _vec(0.99)], confidence=[0.5, 0.9]))
    assert group.keep == 1


def test_a_person_s_memory_is_never_merged_into_another_person_s() -> None:
    got = duplicate_groups(
        candidates([_vec(1.0), _vec(0.99), _vec(0.98)], tiers=[1, 1, 2], origins=["user:ann", "user:bob", "x"])
    )
    assert [(g.keep, g.merged) for g in got] == [(0, (2,))]


def test_a_chain_of_near_duplicates_keeps_only_direct_duplicates_of_the_kept_one() -> None:
    # 0-1 and 1-2 are at 0.96, but 0-2 only at about 0.84.
    a = [1.0, 0.0, 0.0]
    b = [0.96, float(np.sqrt(1 - 0.96**2)), 0.0]
    angle = 2 * np.arccos(0.96)
    c = [float(np.cos(angle)), float(np.sin(angle)), 0.0]
    (group,) = duplicate_groups(candidates([a, b, c]))
    assert group.keep == 0 and group.merged == (1,)


def test_zero_vectors_are_never_similar() -> None:
    assert duplicate_groups(candidates([[0.0, 0, 0], [0.0, 0, 0]])) == []


def test_fewer_than_two_memories_make_no_group() -> None:
    assert duplicate_groups(candidates([_vec(1.0)])) == []
    assert duplicate_groups(candidates(np.zeros((0, 3)).tolist())) == []


def test_content_codes_are_equal_for_equal_normalised_text_and_minus_one_for_empty() -> None:
    codes = content_codes(["A b", "a   B!", "", "c"])
    assert codes[0] == codes[1] and codes[2] == -1 and codes[3] not in (codes[0], -1)


def test_unit_rows_have_length_one_or_zero() -> None:
    out = unit_rows([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(np.linalg.norm(out, axis=1), [1.0, 0.0])


def test_merged_tags_keep_order_without_repeats_and_respect_the_limit() -> None:
    assert merged_tags(["a", "b"], [["b", "c"], ["d", "a"]], 10) == ["a", "b", "c", "d"]
    assert merged_tags(["a"], [["b", "c"]], 2) == ["a", "b"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.floats(-1, 1, allow_nan=False), min_size=3, max_size=3), min_size=2, max_size=25),
    st.floats(0.5, 1.0),
)
def test_every_merged_member_is_a_direct_duplicate_and_belongs_to_one_group(
    rows: list[list[float]], threshold: float
) -> None:
    c = candidates(rows)
    unit = unit_rows(c.vectors).astype(np.float64)
    seen: set[int] = set()
    for group in duplicate_groups(c, threshold=threshold):
        for member, cos in zip(group.merged, group.cosine, strict=True):
            assert float(unit[member] @ unit[group.keep]) >= threshold - 1e-5
            assert cos >= threshold - 1e-5
        assert not seen & set(group.members)
        seen |= set(group.members)
