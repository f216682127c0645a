from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from evolution.algorithms.interference import apply_interference, interference_pairs


def _unit(rows: npt.ArrayLike) -> npt.NDArray[np.float32]:
    m = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    out = np.zeros_like(m)
    np.divide(m, norms, out=out, where=norms > 0)
    return out


def _brute_force(
    m: npt.NDArray[np.float32], candidates: npt.NDArray[np.intp], top_k: int, threshold: float
) -> set[tuple[int, int]]:
    sims = m.astype(np.float64) @ m.astype(np.float64).T
    usable = np.linalg.norm(m, axis=1) > 0
    pairs: set[tuple[int, int]] = set()
    for c in candidates:
        if not usable[c]:
            continue
        row = sims[c].copy()
        row[c] = -np.inf
        row[~usable] = -np.inf
        order = sorted(range(len(row)), key=lambda j: (-row[j], j))[:top_k]
        pairs.update((min(c, j), max(c, j)) for j in order if row[j] >= threshold)
    return pairs


def _clustered(n: int, d: int, seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(n // 6, 1), d))
    rows = centres[rng.integers(0, centres.shape[0], n)] + 0.25 * rng.standard_normal((n, d))
    return _unit(rows)


def test_pairs_match_a_brute_force_top_k_search() -> None:
    m = _clustered(300, 16, seed=3)
    candidates = np.arange(0, 300, 3)
    found = interference_pairs(m, candidates, top_k=5, threshold=0.85, chunk=7)
    assert set(zip(found.i.tolist(), found.j.tolist(), strict=True)) == _brute_force(m, candidates, 5, 0.85)
    assert len(found.i) > 0


def test_each_unordered_pair_is_returned_once_with_i_below_j() -> None:
    m = _unit([[1.0, 0.0], [1.0, 0.01], [0.0, 1.0]])
    found = interference_pairs(m, [0, 1])
    assert found.i.tolist() == [0]
    assert found.j.tolist() == [1]
    assert found.sims[0] == pytest.approx(1 / np.sqrt(1 + 0.01**2), abs=1e-6)


def test_self_and_zero_vectors_are_never_neighbours() -> None:
    m = _unit([[1, 0], [0, 0], [0, 1]])
    found = interference_pairs(m, [0, 1, 2], threshold=-1.0)
    assert list(zip(found.i.tolist(), found.j.tolist(), strict=True)) == [(0, 2)]


def test_only_the_top_k_neighbours_of_a_candidate_count() -> None:
    base = np.array([1.0, 0.0])
    rows = [base] + [base + np.array([0.0, 0.01 * k]) for k in range(1, 9)]
    found = interference_pairs(_unit(rows), [0], top_k=3, threshold=0.85)
    assert found.i.tolist() == [0, 0, 0]
    assert found.j.tolist() == [1, 2, 3]


def test_pairs_below_the_threshold_are_ignored() -> None:
    m = _unit([[1.0, 0.0], [0.8, 0.6]])
    assert interference_pairs(m, [0]).i.size == 0


def test_no_candidates_give_no_pairs() -> None:
    assert interference_pairs(_unit([[1, 0], [1, 0]]), []).i.size == 0


def test_out_of_range_candidates_are_refused() -> None:
    with pytest.raises(ValueError):
        interference_pairs(_unit([[1, 0]]), [3])


def test_interference_multiplies_both_ends_by_one_minus_sim_times_weight() -> None:
    result = apply_interference([0.8, 0.5, 0.9], [0], [1], [0.9])
    assert result.scores == pytest.approx([0.8 * (1 - 0.045), 0.5 * (1 - 0.045), 0.9])
    assert result.indices.tolist() == [0, 1]
    assert result.old.tolist() == [0.8, 0.5]
    assert result.pair_count.tolist() == [1, 1]


def test_a_memory_in_several_pairs_is_penalised_for_each() -> None:
    result = apply_interference([1.0, 1.0, 1.0], [0, 0], [1, 2], [0.9, 0.95])
    assert result.scores[0] == pytest.approx((1 - 0.045) * (1 - 0.0475))
    assert result.pair_count.tolist() == [2, 1, 1]


def test_interference_reason_names_partners_and_values() -> None:
    result = apply_interference([0.8, 0.5], [0], [1], [0.9])
    assert result.reason(0, ids=["m-a", "m-b"]) == (
        "interference with 1 similar memories [m-b (cos 0.9000)]: score 0.800000 x 0.955000 = 0.764000"
    )


def test_interference_does_not_modify_the_input() -> None:
    scores = np.array([0.8, 0.5])
    apply_interference(scores, [0], [1], [0.9])
    assert scores.tolist() == [0.8, 0.5]


def test_interference_rejects_a_weight_outside_zero_to_one() -> None:
    with pytest.raises(ValueError):
        apply_interference([0.5, 0.5], [0], [1], [0.9], weight=1.5)


def test_pairs_feed_apply_interference_directly() -> None:
    m = _clustered(200, 8, seed=5)
    pairs = interference_pairs(m, np.arange(200))
    result = apply_interference(np.full(200, 0.7), *pairs)
    assert set(result.indices.tolist()) == set(pairs.i.tolist()) | set(pairs.j.tolist())


@given(
    hnp.arrays(np.float64, 6, elements=st.floats(0, 1)),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.floats(-1, 1, allow_nan=False)), max_size=12),
    st.floats(0, 1),
)
def test_interference_never_increases_a_score(
    scores: npt.NDArray[np.float64], pairs: list[tuple[int, int, float]], weight: float
) -> None:
    pi = [p[0] for p in pairs]
    pj = [p[1] for p in pairs]
    ps = [p[2] for p in pairs]
    result = apply_interference(scores, pi, pj, ps, weight)
    assert np.all(result.scores <= scores)
    assert np.all(result.scores >= 0.0)
