"""Embedders: vector properties, similarity thresholds, determinism, specs, model2vec, stored blobs."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from memories.algorithms import embedding
from memories.algorithms.embedding import (
    DEFAULT_MODEL2VEC_MODEL,
    Embedder,
    EmbedderUnavailable,
    HashingEmbedder,
    Model2VecEmbedder,
    from_bytes,
    get_embedder,
    rows_to_bytes,
    stack_embeddings,
    to_bytes,
)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
# The project's own prose: a few thousand distinct English words, in the repository itself.
CORPUS = sorted((PROJECT_ROOT / "docs").glob("*.md"))

FIXED_SENTENCE = "Why did we pick JWT over session cookies behind the load balancer?"
# sha256 of the 256-d hashing vector of FIXED_SENTENCE rounded to 6 decimals. It pins the hashing
# scheme: a change here silently invalidates every stored embedding, so it must be deliberate.
FIXED_SENTENCE_CHECKSUM = "6311fa83c32b6c71ea635be3633e76d55345d54b0a834b5581624e824df6a956"

NEAR_DUPLICATES = [
    (
        "We chose JWT over session cookies because the load balancer does not support sticky sessions at all.",
        "We chose JWT over session cookies because the load balancer does not support sticky routing at all.",
    ),
    (
        "The nightly backup job copies the production database to the cold storage bucket every night at two.",
        "The nightly backup job copies the production database to the cold storage bucket every night at three.",
    ),
    (
        "Alice asked the team to rotate the signing keys before the security audit starts next Monday morning.",
        "Alice asked the team to rotate the signing keys before the compliance audit starts next Monday morning.",
    ),
    (
        "Remember that the customer prefers dark mode in the editor and wants tabs rendered as four spaces.",
        "Remember that the customer prefers dark mode in the editor and wants tabs rendered as two spaces.",
    ),
    (
        "Our staging cluster runs out of memory whenever the import worker processes more than ten thousand rows.",
        "Our staging cluster runs out of memory whenever the export worker processes more than ten thousand rows.",
    ),
]

PARAPHRASES = [
    (
        "We chose JWT over session cookies because the load balancer does not support sticky sessions.",
        "Token-based auth was picked since our traffic distributor cannot pin users to one server.",
    ),
    (
        "Ship the release candidate to staging tomorrow morning.",
        "Deploy the RC build onto pre-production early next day.",
    ),
    ("The user likes concise answers without filler.", "This person prefers short replies with no padding."),
    ("Fix the login bug", "Repair the sign-in defect"),
    (
        "Resolve the flaky integration test in the payment service",
        "The checkout module's end-to-end check fails intermittently; make it reliable",
    ),
]

UNRELATED = [
    (
        "We chose JWT over session cookies because the load balancer does not support sticky sessions.",
        "Buy milk, eggs and bread on the way home tonight.",
    ),
    (
        "The quarterly revenue grew by twelve percent in Europe.",
        "Kubernetes pods restart when the liveness probe fails.",
    ),
    ("My favourite editor theme is solarized dark.", "The invoice for March is overdue by two weeks."),
    ("Alice prefers Python for data analysis work.", "The database migration finished without errors."),
]


def cosine(embedder: Embedder, a: str, b: str) -> float:
    va, vb = embedder.embed([a, b])
    return float(va @ vb)


def checksum(vec: NDArray[np.float32]) -> str:
    # + 0.0 turns -0.0 into 0.0 so the bytes depend only on the values.
    return hashlib.sha256((np.round(vec.astype(np.float64), 6) + 0.0).tobytes()).hexdigest()


def corpus_vocabulary() -> list[str]:
    text = " ".join(p.read_text(encoding="utf-8") for p in CORPUS)
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{2,}", text)})
    assert len(words) > 1000, "the docs corpus is too small to draw random sentences from"
    return words


@pytest.fixture
def hashing() -> HashingEmbedder:
    return HashingEmbedder()


# --- HashingEmbedder: shape, norms, zero rows ----------------------------------------------------


def test_hashing_embedder_satisfies_the_protocol_and_names_its_space() -> None:
    emb = HashingEmbedder()
    assert isinstance(emb, Embedder)
    assert (emb.name, emb.dim) == ("hashing:256", 256)
    assert HashingEmbedder(512).name == "hashing:512"


def test_rows_are_float32_unit_vectors_and_empty_texts_are_zero_rows(hashing: HashingEmbedder) -> None:
    texts = ["Why did we pick JWT?", "", "   \n\t", "!!! ... ???", "café crème brûlée", "x"]
    vecs = hashing.embed(texts)
    assert vecs.dtype == np.float32 and vecs.shape == (6, 256)
    norms = np.linalg.norm(vecs.astype(np.float64), axis=1)
    np.testing.assert_allclose(norms[[0, 4, 5]], 1.0, atol=1e-6)
    assert not vecs[[1, 2, 3]].any()


def test_an_empty_batch_gives_an_empty_matrix(hashing: HashingEmbedder) -> None:
    assert hashing.embed([]).shape == (0, 256)


def test_dim_outside_16_to_4096_is_refused() -> None:
    with pytest.raises(ValueError, match="EMBEDDER"):
        HashingEmbedder(8)
    with pytest.raises(ValueError, match="EMBEDDER"):
        HashingEmbedder(8192)


# --- HashingEmbedder: similarity ------------------------------------------------------------------


def test_identical_text_has_cosine_one(hashing: HashingEmbedder) -> None:
    assert cosine(hashing, FIXED_SENTENCE, FIXED_SENTENCE) == pytest.approx(1.0, abs=1e-6)


def test_case_and_punctuation_do_not_change_the_vector(hashing: HashingEmbedder) -> None:
    assert cosine(hashing, "Why did we pick JWT?", "why did we pick jwt") == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize(("a", "b"), NEAR_DUPLICATES)
def test_one_changed_word_in_fifteen_stays_at_or_above_085(hashing: HashingEmbedder, a: str, b: str) -> None:
    assert cosine(hashing, a, b) >= 0.85


@pytest.mark.parametrize(("a", "b"), PARAPHRASES)
def test_a_paraphrase_in_other_words_stays_well_below_085(hashing: HashingEmbedder, a: str, b: str) -> None:
    assert cosine(hashing, a, b) < 0.5


@pytest.mark.parametrize(("a", "b"), UNRELATED)
def test_unrelated_sentences_are_near_zero(hashing: HashingEmbedder, a: str, b: str) -> None:
    assert abs(cosine(hashing, a, b)) < 0.25


def test_near_duplicates_clear_085_across_many_random_sentences(hashing: HashingEmbedder) -> None:
    words = corpus_vocabulary()
    rng = random.Random(20240601)
    originals, edited, unrelated = [], [], []
    for _ in range(400):
        sentence = [rng.choice(words) for _ in range(15)]
        changed = list(sentence)
        changed[rng.randrange(15)] = rng.choice(words)
        originals.append(" ".join(sentence))
        edited.append(" ".join(changed))
        unrelated.append(" ".join(rng.choice(words) for _ in range(15)))
    va, vb, vc = hashing.embed(originals), hashing.embed(edited), hashing.embed(unrelated)
    near = np.einsum("ij,ij->i", va, vb)
    far = np.einsum("ij,ij->i", va, vc)
    assert np.mean(near >= 0.85) >= 0.98
    assert near.mean() >= 0.9
    assert abs(far.mean()) < 0.05 and far.std() < 0.1


def test_word_order_matters_through_bigrams(hashing: HashingEmbedder) -> None:
    assert 0.5 < cosine(hashing, "dog bites man", "man bites dog") < 0.95


def test_a_long_identifier_weighs_no_more_than_a_short_word(hashing: HashingEmbedder) -> None:
    base = "the nightly job retries the upload of the report to the shared storage bucket twice"
    short_swap = base.replace("report", "ledger")
    long_swap = base.replace("report", "interferencebasedconsolidationevolveroutput")
    assert cosine(hashing, base, long_swap) >= cosine(hashing, base, short_swap) - 0.05


# --- HashingEmbedder: determinism and batching -----------------------------------------------------


def test_fixed_sentence_has_a_fixed_vector(hashing: HashingEmbedder) -> None:
    assert checksum(hashing.embed([FIXED_SENTENCE])[0]) == FIXED_SENTENCE_CHECKSUM


@pytest.mark.parametrize("hash_seed", ["0", "12345"])
def test_the_vector_is_identical_in_another_process_with_another_hash_seed(
    hashing: HashingEmbedder, hash_seed: str
) -> None:
    script = (
        "import sys; from memories.algorithms.embedding import HashingEmbedder; "
        "sys.stdout.buffer.write(HashingEmbedder().embed([sys.argv[1]]).tobytes())"
    )
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", script, FIXED_SENTENCE], cwd=PROJECT_ROOT, env=env, capture_output=True, check=True
    ).stdout
    assert out == hashing.embed([FIXED_SENTENCE]).tobytes()


def test_a_text_embeds_the_same_alone_or_inside_any_batch(hashing: HashingEmbedder) -> None:
    rng = random.Random(3)
    words = corpus_vocabulary()
    # More texts than one internal block, so some rows cross the block boundary.
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 12))) for _ in range(9000)]
    batch = hashing.embed(texts)
    for i in (0, 1, 4095, 4096, 4097, 8191, 8192, 8999):
        np.testing.assert_array_equal(batch[i], hashing.embed([texts[i]])[0])


def test_ascii_and_unicode_batches_tokenise_alike(hashing: HashingEmbedder) -> None:
    text = "Deploy v2.3 to eu-west_1 (see PR #41): it's the user's call!"
    ascii_only = hashing.embed([text])[0]
    mixed = hashing.embed(["naïve café", text])[1]
    np.testing.assert_array_equal(ascii_only, mixed)


def test_nul_characters_inside_a_text_do_not_split_the_batch(hashing: HashingEmbedder) -> None:
    vecs = hashing.embed(["alpha\x00beta", "gamma"])
    np.testing.assert_array_equal(vecs[0], hashing.embed(["alpha beta"])[0])
    np.testing.assert_array_equal(vecs[1], hashing.embed(["gamma"])[0])


def test_concurrent_threads_get_the_same_vectors_as_one_thread(hashing: HashingEmbedder) -> None:
    rng = random.Random(11)
    # Fresh made-up words force concurrent additions to the shared token table.
    batches = [[" ".join(f"tok{rng.randrange(10**9)}" for _ in range(8)) for _ in range(300)] for _ in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        parallel = list(pool.map(hashing.embed, batches))
    for batch, vecs in zip(batches, parallel, strict=True):
        np.testing.assert_array_equal(vecs, hashing.embed(batch))


def test_clearing_the_token_cache_does_not_change_vectors(
    hashing: HashingEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"memory {i} about topic{i % 37} and owner{i % 11}" for i in range(500)]
    expected = hashing.embed(texts)
    monkeypatch.setattr(embedding, "_TOKENS", embedding._TokenTable(max_words=40))
    for start in range(0, 500, 25):
        np.testing.assert_array_equal(hashing.embed(texts[start : start + 25]), expected[start : start + 25])


def test_bulk_embedding_returns_one_unit_row_per_text(hashing: HashingEmbedder) -> None:
    # Sanity check at ingestion scale (the throughput itself is measured outside the test suite).
    words = corpus_vocabulary()
    rng = random.Random(5)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(4, 14))) for _ in range(30_000)]
    vecs = hashing.embed(texts)
    assert vecs.shape == (30_000, 256)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


# --- get_embedder ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "name", "dim"), [("hashing", "hashing:256", 256), ("hashing:512", "hashing:512", 512)]
)
def test_hashing_specs_build_hashing_embedders(spec: str, name: str, dim: int) -> None:
    emb = get_embedder(spec)
    assert isinstance(emb, HashingEmbedder)
    assert (emb.name, emb.dim) == (name, dim)


def test_get_embedder_defaults_to_hashing_and_reuses_instances() -> None:
    assert get_embedder().name == "hashing:256"
    assert get_embedder("hashing:128") is get_embedder("hashing:128")


@pytest.mark.parametrize("spec", ["bogus", "openai", "hashing:abc", "hashing:", "hashing:8", "model2vec:", ""])
def test_an_unknown_spec_names_the_setting_and_the_allowed_values(spec: str) -> None:
    with pytest.raises(ValueError, match=r"EMBEDDER.*hashing.*model2vec"):
        get_embedder(spec)


# --- Model2VecEmbedder -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def model2vec_embedder() -> Iterator[Model2VecEmbedder]:
    """The bundled model, loaded with every hub download path made to fail: it must come from disk."""
    import huggingface_hub

    def no_network(*args: object, **kwargs: object) -> None:
        raise AssertionError("model2vec tried to reach the Hugging Face hub")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(huggingface_hub, "snapshot_download", no_network)
        mp.setattr(huggingface_hub, "hf_hub_download", no_network)
        emb = Model2VecEmbedder()
    yield emb


def test_model2vec_loads_the_bundled_static_model_offline(model2vec_embedder: Model2VecEmbedder) -> None:
    spec = importlib.util.find_spec("static_model")
    assert spec is not None and spec.origin is not None
    assert model2vec_embedder.model_dir == Path(spec.origin).resolve().parent / "model"
    assert (model2vec_embedder.name, model2vec_embedder.dim) == ("model2vec", 64)
    assert isinstance(model2vec_embedder, Embedder)
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_model2vec_rows_are_unit_vectors_with_zero_rows_for_empty_text(
    model2vec_embedder: Model2VecEmbedder,
) -> None:
    vecs = model2vec_embedder.embed(["Why did we pick JWT?", "", "the load balancer drops session cookies"])
    assert vecs.dtype == np.float32 and vecs.shape == (3, 64)
    np.testing.assert_allclose(np.linalg.norm(vecs[[0, 2]], axis=1), 1.0, atol=1e-6)
    assert not vecs[1].any()
    assert model2vec_embedder.embed([]).shape == (0, 64)


def test_model2vec_scores_a_paraphrase_above_an_unrelated_sentence(model2vec_embedder: Model2VecEmbedder) -> None:
    a, b = PARAPHRASES[0]
    related = cosine(model2vec_embedder, a, b)
    unrelated = cosine(model2vec_embedder, a, UNRELATED[0][1])
    assert related > unrelated + 0.2


def test_model2vec_matches_the_packages_own_encoder(model2vec_embedder: Model2VecEmbedder) -> None:
    import static_model

    texts = ["Why did we pick JWT?", "Postgres connection pool settings for prod"]
    reference = np.asarray(static_model.get_embeddings(texts), dtype=np.float64)
    ours = model2vec_embedder.embed(texts).astype(np.float64)
    np.testing.assert_allclose(np.einsum("ij,ij->i", ours, reference), 1.0, atol=1e-5)


def test_model2vec_spec_with_a_directory_loads_from_that_directory(
    model2vec_embedder: Model2VecEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import model2vec

    model_dir = tmp_path / "my-model"
    shutil.copytree(model2vec_embedder.model_dir, model_dir)
    loaded_from: list[str] = []

    def from_pretrained(path: str) -> object:
        # Record the path; hand back the model already in memory instead of parsing it again (~10 s).
        loaded_from.append(path)
        return model2vec_embedder._model

    monkeypatch.setattr(model2vec.StaticModel, "from_pretrained", from_pretrained)
    spec = f"model2vec:{model_dir}"
    emb = get_embedder(spec)
    assert isinstance(emb, Model2VecEmbedder)
    assert loaded_from == [str(model_dir)]
    assert (emb.name, emb.dim, emb.model_dir) == (spec, 64, model_dir)


def test_model2vec_with_a_missing_directory_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match=r"EMBEDDER='model2vec:.*missing config\.json"):
        Model2VecEmbedder(str(tmp_path / "nowhere"))


def test_model2vec_without_the_package_names_the_setting_and_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "model2vec", None)  # makes `import model2vec` raise ImportError
    with pytest.raises(EmbedderUnavailable, match=r"EMBEDDER='model2vec'.*pip install -e \.\[model2vec\]"):
        Model2VecEmbedder(DEFAULT_MODEL2VEC_MODEL)


# --- Stored blobs ----------------------------------------------------------------------------------


def test_blobs_are_float32_little_endian_and_round_trip() -> None:
    vec = np.array([1.0, -2.5, 0.125], dtype=np.float32)
    blob = to_bytes(vec)
    assert blob == struct.pack("<3f", 1.0, -2.5, 0.125)
    back = from_bytes(blob, 3)
    np.testing.assert_array_equal(back, vec)
    back[0] = 7.0  # the returned array is a private, writable copy
    assert from_bytes(blob, 3)[0] == 1.0


def test_big_endian_or_float64_input_is_stored_as_float32_little_endian() -> None:
    assert to_bytes(np.array([1.5, 2.0], dtype=">f8")) == struct.pack("<2f", 1.5, 2.0)


def test_from_bytes_refuses_a_blob_of_another_dimension() -> None:
    with pytest.raises(ValueError, match="expected 16"):
        from_bytes(bytes(12), 4)


def test_rows_to_bytes_gives_one_blob_per_row(hashing: HashingEmbedder) -> None:
    vecs = hashing.embed(["a b c", "d e f", ""])
    blobs = rows_to_bytes(vecs)
    assert blobs == [to_bytes(v) for v in vecs]
    with pytest.raises(ValueError, match=r"\(n, dim\)"):
        rows_to_bytes(vecs[0])


def test_stack_embeddings_fills_missing_blobs_with_zero_rows(hashing: HashingEmbedder) -> None:
    vecs = hashing.embed(["alpha", "beta", "gamma"])
    blobs: Sequence[bytes | bytearray | memoryview | None] = [
        to_bytes(vecs[0]),
        None,
        memoryview(to_bytes(vecs[1])),  # psycopg returns bytea as memoryview
        b"",
        bytearray(to_bytes(vecs[2])),
    ]
    matrix = stack_embeddings(blobs, 256)
    assert matrix.dtype == np.float32 and matrix.shape == (5, 256)
    np.testing.assert_array_equal(matrix[[0, 2, 4]], vecs)
    assert not matrix[[1, 3]].any()
    matrix[0, 0] = 5.0  # writable
    assert stack_embeddings([], 256).shape == (0, 256)


def test_stack_embeddings_refuses_blobs_from_another_embedder() -> None:
    blobs = [to_bytes(np.ones(4)), to_bytes(np.ones(8)), to_bytes(np.ones(4))]
    with pytest.raises(ValueError, match=r"blob 1 holds 32 bytes, expected 16.*EMBEDDER"):
        stack_embeddings(blobs, 4)
    # Lengths that happen to add up still do not line up row by row.
    with pytest.raises(ValueError, match=r"blob 0 holds 20 bytes"):
        stack_embeddings([bytes(20), bytes(12)], 4)


def test_stack_embeddings_handles_a_workspace_of_blobs(hashing: HashingEmbedder) -> None:
    vecs = hashing.embed([f"memory number {i}" for i in range(20_000)])
    blobs: list[bytes | None] = list(rows_to_bytes(vecs))
    blobs[123] = None
    matrix = stack_embeddings(blobs, 256)
    np.testing.assert_array_equal(np.delete(matrix, 123, axis=0), np.delete(vecs, 123, axis=0))
    assert not matrix[123].any()
