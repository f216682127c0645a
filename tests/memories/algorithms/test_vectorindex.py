"""The in-memory vector index without a database: flat and graph modes, the merge buffer, replacements, files."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memories.algorithms.embedding import to_bytes
from memories.algorithms.vectorindex import HnswEngine, IndexFileError, VectorIndex

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CREATED = datetime(2025, 1, 1, tzinfo=UTC)


def unit_rows(n: int, dim: int, seed: int = 0) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def index_of(vectors: np.ndarray, *, dim: int | None = None) -> tuple[VectorIndex, list[uuid.UUID]]:
    ids = [uuid.uuid4() for _ in range(len(vectors))]
    index = VectorIndex(workspace_id=1, created_at=CREATED, model="m", dim=dim or vectors.shape[1])
    index.apply((i, T0 + timedelta(seconds=k), to_bytes(v)) for k, (i, v) in enumerate(zip(ids, vectors, strict=True)))
    return index, ids


def as_graph(index: VectorIndex) -> VectorIndex:
    """Graph mode with every vector merged."""
    index.switch_to_hnsw()
    while index.merge(500):
        pass
    return index


def brute_force(vectors: np.ndarray, query: np.ndarray, k: int) -> list[int]:
    return list(np.argsort(-(vectors @ query), kind="stable")[:k])


def test_exact_search_returns_the_nearest_vectors_best_first_with_their_cosine() -> None:
    vectors = unit_rows(500, 32)
    index, ids = index_of(vectors)
    query = vectors[7] + 0.1 * unit_rows(1, 32, seed=1)[0]
    hits = index.search(query, 10)
    expected = brute_force(vectors, query / np.linalg.norm(query), 10)
    assert [h[0] for h in hits] == [ids[k] for k in expected]
    assert hits[0][0] == ids[7]
    cosines = vectors[expected] @ (query / np.linalg.norm(query))
    assert np.allclose([h[1] for h in hits], cosines, atol=1e-5)


def test_a_limit_above_the_size_returns_every_vector_once() -> None:
    index, ids = index_of(unit_rows(5, 8))
    assert sorted(h[0] for h in index.search(unit_rows(1, 8, seed=3)[0], 50)) == sorted(ids)


def test_a_replaced_vector_is_found_by_its_new_direction_only() -> None:
    vectors = unit_rows(50, 16)
    index, ids = index_of(vectors)
    index.apply([(ids[0], T0 + timedelta(hours=1), to_bytes(vectors[1]))])
    assert len(index) == 50
    top_two = {h[0] for h in index.search(vectors[1], 2)}
    assert top_two == {ids[0], ids[1]}
    assert index.search(vectors[0], 1)[0][0] != ids[0]


def test_a_row_without_a_vector_of_this_width_removes_the_memory() -> None:
    vectors = unit_rows(20, 16)
    index, ids = index_of(vectors)
    index.apply([(ids[3], T0 + timedelta(hours=1), None), (ids[4], T0 + timedelta(hours=1), to_bytes(np.ones(8)))])
    assert len(index) == 18
    found = {h[0] for h in index.search(vectors[3], 20)}
    assert ids[3] not in found and ids[4] not in found


def test_zero_vectors_are_not_indexed_and_a_zero_query_finds_nothing() -> None:
    index, ids = index_of(np.vstack([unit_rows(3, 8), np.zeros((1, 8), np.float32)]))
    assert len(index) == 3
    assert ids[3] not in {h[0] for h in index.search(np.ones(8), 10)}
    assert index.search(np.zeros(8), 10) == []


def test_a_row_with_the_stamp_already_held_is_skipped() -> None:
    vectors = unit_rows(10, 8)
    index, ids = index_of(vectors)
    assert index.apply([(ids[2], T0 + timedelta(seconds=2), to_bytes(vectors[2]))]) == 0
    assert index.apply([(ids[2], T0 + timedelta(minutes=2), to_bytes(vectors[2]))]) == 1


def test_the_watermark_is_the_latest_stamp_applied() -> None:
    index, _ = index_of(unit_rows(10, 8))
    assert index.watermark == T0 + timedelta(seconds=9)


def test_hnsw_finds_what_exact_search_finds_on_clustered_vectors() -> None:
    rng = np.random.default_rng(5)
    centres = rng.standard_normal((20, 32)).astype(np.float32)
    vectors = centres[rng.integers(0, 20, 2000)] + 0.3 * rng.standard_normal((2000, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, ids = index_of(vectors)
    as_graph(index)
    assert isinstance(index.graph, HnswEngine)
    assert (len(index.graph), index.pending, len(index)) == (2000, 0, 2000)
    recall = []
    for k in range(20):
        query = vectors[k * 50]
        expected = {ids[j] for j in brute_force(vectors, query, 10)}
        recall.append(len(expected & {h[0] for h in index.search(query, 10)}) / 10)
    assert np.mean(recall) >= 0.9
    assert index.search(vectors[0], 1)[0] == (ids[0], pytest.approx(1.0, abs=1e-2))


def test_hnsw_replaces_and_removes_vectors() -> None:
    vectors = unit_rows(200, 16)
    index, ids = index_of(vectors)
    as_graph(index)
    index.apply([(ids[0], T0 + timedelta(hours=1), to_bytes(vectors[1])), (ids[5], T0 + timedelta(hours=1), None)])
    assert (len(index), index.pending) == (199, 1)
    assert {h[0] for h in index.search(vectors[1], 2)} == {ids[0], ids[1]}
    assert ids[5] not in {h[0] for h in index.search(vectors[5], 199)}


def test_a_file_round_trip_keeps_ids_stamps_watermark_and_results(tmp_path: Path) -> None:
    vectors = unit_rows(300, 16)
    index, _ = index_of(vectors)
    as_graph(index)
    index.generation = 12
    path = tmp_path / "sub" / "ws1.vecindex"
    index.to_file(path)
    assert index.unsaved == 0
    assert [p.name for p in path.parent.iterdir()] == ["ws1.vecindex"]
    loaded = VectorIndex.from_file(path, workspace_id=1, created_at=CREATED, model="m", dim=16)
    assert (loaded.generation, loaded.watermark, loaded.ids, loaded.stamps) == (
        12,
        index.watermark,
        index.ids,
        index.stamps,
    )
    assert loaded.search(vectors[9], 5) == index.search(vectors[9], 5)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"workspace_id": 2}, "workspace_id"),
        ({"created_at": CREATED + timedelta(seconds=1)}, "created_at"),
        ({"model": "other"}, "model"),
        ({"dim": 32}, "dim"),
    ],
)
def test_a_file_of_another_workspace_model_or_dim_is_refused(
    tmp_path: Path, change: dict[str, object], reason: str
) -> None:
    index, _ = index_of(unit_rows(10, 16))
    as_graph(index).to_file(tmp_path / "f")
    wanted: dict[str, object] = {"workspace_id": 1, "created_at": CREATED, "model": "m", "dim": 16, **change}
    with pytest.raises(IndexFileError, match=reason):
        VectorIndex.from_file(tmp_path / "f", **wanted)  # type: ignore[arg-type]


def test_a_truncated_file_is_refused(tmp_path: Path) -> None:
    index, _ = index_of(unit_rows(50, 16))
    as_graph(index).to_file(tmp_path / "f")
    data = (tmp_path / "f").read_bytes()
    (tmp_path / "f").write_bytes(data[: len(data) // 2])
    with pytest.raises(IndexFileError):
        VectorIndex.from_file(tmp_path / "f", workspace_id=1, created_at=CREATED, model="m", dim=16)


def test_pending_vectors_are_searched_exactly_until_merged_and_merging_keeps_the_answers() -> None:
    rng = np.random.default_rng(8)
    centres = rng.standard_normal((10, 32)).astype(np.float32)
    vectors = centres[rng.integers(0, 10, 600)] + 0.3 * rng.standard_normal((600, 32)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    index, ids = index_of(vectors)
    flat_answer = [h[0] for h in index.search(vectors[3], 5)]
    assert flat_answer[0] == ids[3]
    index.switch_to_hnsw()
    assert (index.is_hnsw, index.pending, len(index)) == (True, 600, 600)
    assert [h[0] for h in index.search(vectors[3], 5)] == flat_answer
    assert index.merge(250) == 250
    assert index.pending == 350
    assert [h[0] for h in index.search(vectors[3], 5)] == flat_answer
    as_graph(index)
    assert index.pending == 0
    assert [h[0] for h in index.search(vectors[3], 5)] == flat_answer


def test_a_failed_graph_insert_leaves_the_vectors_pending(monkeypatch: pytest.MonkeyPatch) -> None:
    index, ids = index_of(unit_rows(30, 8))
    index.switch_to_hnsw()
    assert index.graph is not None

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("insert failed")

    monkeypatch.setattr(index.graph, "add", broken)
    with pytest.raises(RuntimeError):
        index.merge(10)
    assert index.pending == 30
    assert sorted(h[0] for h in index.search(unit_rows(1, 8, seed=4)[0], 30)) == sorted(ids)


def test_only_a_graph_with_nothing_pending_is_written(tmp_path: Path) -> None:
    index, _ = index_of(unit_rows(30, 8))
    with pytest.raises(ValueError, match="nothing pending"):
        index.to_file(tmp_path / "exact")
    index.switch_to_hnsw()
    with pytest.raises(ValueError, match="nothing pending"):
        index.to_file(tmp_path / "pending")
    assert list(tmp_path.iterdir()) == []


def test_keep_only_drops_the_memories_not_named_from_flat_buffer_and_graph() -> None:
    vectors = unit_rows(40, 8)
    index, ids = index_of(vectors)
    as_graph(index)
    index.apply([(ids[0], T0 + timedelta(hours=1), to_bytes(vectors[0]))])  # pending again, in the buffer
    assert index.keep_only(ids[2:]) == 2
    assert len(index) == 38
    assert {ids[0], ids[1]}.isdisjoint(h[0] for h in index.search(vectors[0], 40))
