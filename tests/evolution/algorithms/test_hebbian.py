from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from evolution.algorithms.hebbian import co_retrieval_pairs, hebbian_boosts, timed_co_retrieval_pairs


def test_every_two_combination_of_a_result_set_is_counted_once() -> None:
    counts = co_retrieval_pairs([[3, 1, 2]])
    assert list(zip(counts.i.tolist(), counts.j.tolist(), counts.counts.tolist(), strict=True)) == [
        (1, 2, 1),
        (1, 3, 1),
        (2, 3, 1),
    ]


def test_pairs_accumulate_across_result_sets_and_batch_weights() -> None:
    counts = co_retrieval_pairs([[1, 2], [2, 1, 1], [2, 5]], weights=[1, 4, 2])
    assert list(zip(counts.i.tolist(), counts.j.tolist(), counts.counts.tolist(), strict=True)) == [
        (1, 2, 5),
        (2, 5, 2),
    ]


def test_result_sets_with_one_member_add_nothing() -> None:
    assert co_retrieval_pairs([[7], [], [7, 7]]).i.size == 0


def test_weights_must_match_result_sets() -> None:
    with pytest.raises(ValueError):
        co_retrieval_pairs([[1, 2]], weights=[1, 2])


def test_count_ten_boosts_both_ends_by_point_fourteen() -> None:
    result = hebbian_boosts([0], [1], [10], [0.5, 0.6])
    assert result.retention == pytest.approx([0.64, 0.74], abs=1e-6)
    assert result.boost == pytest.approx([0.14, 0.14], abs=1e-6)
    assert result.partner.tolist() == [1, 0]


def test_max_boost_caps_the_boost() -> None:
    result = hebbian_boosts([0], [1], [10], [0.5, 0.5], max_boost=0.1)
    assert result.retention[0] == pytest.approx(0.6, abs=1e-6)


def test_retention_caps_at_one() -> None:
    result = hebbian_boosts([0], [1], [10], [0.95, 0.5])
    assert result.retention[0] == pytest.approx(1.0, abs=1e-6)
    assert result.reason(0).endswith("-> 1.000000 (capped at 1.0)")


def test_count_below_threshold_does_nothing() -> None:
    result = hebbian_boosts([0], [1], [2], [0.5, 0.6])
    assert result.retention.tolist() == [0.5, 0.6]
    assert result.indices.size == 0


def test_count_at_threshold_qualifies_but_boosts_nothing() -> None:
    assert hebbian_boosts([0], [1], [3], [0.5, 0.6]).indices.size == 0


def test_a_node_is_boosted_once_by_its_strongest_edge() -> None:
    result = hebbian_boosts([0, 0, 1], [1, 2, 2], [10, 8, 5], [0.5, 0.5, 0.5, 0.5])
    assert result.indices.tolist() == [0, 1, 2]
    assert result.retention[:3] == pytest.approx([0.64, 0.64, 0.60], abs=1e-6)
    assert result.partner.tolist() == [1, 0, 0]
    assert result.edge_count.tolist() == [10, 10, 8]


def test_max_edges_keeps_only_the_strongest_edges() -> None:
    result = hebbian_boosts([0, 2], [1, 3], [10, 20], [0.5] * 4, max_edges=1)
    assert result.indices.tolist() == [2, 3]


def test_hebbian_reason_names_the_partner_and_count() -> None:
    result = hebbian_boosts([0], [1], [10], [0.5, 0.6])
    assert (
        result.reason(0, ids=["a", "b"]) == "co-retrieved with b 10x (>= 3): retention 0.500000 + 0.140000 -> 0.640000"
    )


def test_co_retrieval_counts_feed_hebbian_boosts() -> None:
    counts = co_retrieval_pairs([[0, 1, 2]] * 10)
    result = hebbian_boosts(counts.i, counts.j, counts.counts, np.full(4, 0.5))
    assert result.indices.tolist() == [0, 1, 2]
    assert result.retention[3] == 0.5


@given(
    hnp.arrays(np.float64, 5, elements=st.floats(0, 1)),
    st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 100)), max_size=15),
    st.floats(0, 1),
)
def test_hebbian_never_exceeds_one_nor_lowers_retention(
    retention: npt.NDArray[np.float64], edges: list[tuple[int, int, int]], max_boost: float
) -> None:
    result = hebbian_boosts(
        [e[0] for e in edges], [e[1] for e in edges], [e[2] for e in edges], retention, max_boost=max_boost
    )
    assert np.all(result.retention <= 1.0)
    assert np.all(result.retention >= retention)
    assert len(set(result.indices.tolist())) == result.indices.size


def test_timed_pairs_count_like_co_retrieval_pairs_and_keep_the_first_and_last_time() -> None:
    rng = np.random.default_rng(3)
    sets = [list(rng.choice(30, size=int(rng.integers(1, 8)), replace=True)) for _ in range(60)]
    times = [int(t) for t in rng.integers(0, 10**9, size=len(sets))]
    timed = timed_co_retrieval_pairs(sets, times)
    counts = co_retrieval_pairs(sets)
    assert np.array_equal(timed.i, counts.i) and np.array_equal(timed.j, counts.j)
    assert np.array_equal(timed.counts, counts.counts)
    for i, j, lo, hi in zip(timed.i.tolist(), timed.j.tolist(), timed.first.tolist(), timed.last.tolist(), strict=True):
        containing = [t for s, t in zip(sets, times, strict=True) if i in s and j in s]
        assert (lo, hi) == (min(containing), max(containing))


def test_timed_pairs_of_sets_without_pairs_are_empty_and_times_must_match_the_sets() -> None:
    timed = timed_co_retrieval_pairs([[4], [], [4, 4]], [1, 2, 3])
    assert timed.i.size == timed.counts.size == timed.first.size == timed.last.size == 0
    with pytest.raises(ValueError, match="one entry per result set"):
        timed_co_retrieval_pairs([[1, 2]], [1, 2])
    with pytest.raises(ValueError, match="non-negative"):
        timed_co_retrieval_pairs([[-1, 2]], [1])
