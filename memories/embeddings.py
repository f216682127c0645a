"""The Embedder of the site (the EMBEDDER setting) and of each workspace (Workspace.embedder)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

from django.conf import settings

from memories.algorithms.embedding import Embedder, FloatMatrix, get_embedder
from memories.algorithms.embedding_minilm import MINILM_NAME
from memories.models import Memory, Workspace

#: Texts an embedder embeds inside a write by default (EMBED_INLINE_MAX overrides); an embedder not named
#: here embeds every write inline. MiniLM needs ~10 ms of CPU per text: 16 keep a write of a few memories
#: (an agent's turn) searchable at once, and a bulk import is embedded by the scheduler's embed job.
INLINE_DEFAULTS: dict[str, int] = {MINILM_NAME: 16}

#: Longest embedder name Memory.embedding_model stores.
MODEL_NAME_MAX: int = Memory._meta.get_field("embedding_model").max_length or 64


@lru_cache(maxsize=8)
def _embedder_for(spec: str) -> Embedder:
    embedder = get_embedder(spec)
    if len(embedder.name) > MODEL_NAME_MAX:
        # A cut name could equal another model's; refusing keeps vectors of two models from being compared.
        raise ValueError(
            f"EMBEDDER {spec!r}: its name {embedder.name!r} is longer than the {MODEL_NAME_MAX} characters "
            "Memory.embedding_model stores; give the model a shorter path"
        )
    return embedder


def default_embedder() -> Embedder:
    """The site's embedder (EMBEDDER): what a workspace without its own uses."""
    return _embedder_for(settings.EMBEDDER)


def embedder_for_spec(spec: str) -> Embedder:
    """The embedder of an EMBEDDER spec, loaded once per process (ValueError or EmbedderUnavailable)."""
    return _embedder_for(spec.strip())


def embedder_for(workspace: Workspace) -> Embedder:
    """The embedder of `workspace`'s vectors: its own spec, else the site's. Every vector written for the
    workspace comes from it, and only stored vectors whose embedding_model equals its name are compared."""
    return _embedder_for(workspace.embedder.strip() or settings.EMBEDDER)


# Query vectors are computed here while the caller's thread reads the database: onnxruntime and SQLite's
# and psycopg's reads release the GIL, so a MiniLM query vector (~4 ms) overlaps the full-text search
# (~3-4 ms at 100k memories) instead of adding to it. A handful of threads serve every request thread.
_QUERY_THREADS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="query-embed")


def query_vector_soon(embedder: Embedder, text: str) -> Callable[[], FloatMatrix]:
    """Start embedding `text` with `embedder` on a helper thread; the returned callable waits for the
    vector (a 1 x dim matrix) and raises what the embedder raised."""
    future = _QUERY_THREADS.submit(embedder.embed, [text])
    return future.result


def inline_limit(embedder: Embedder) -> int | None:
    """How many memories one write embeds inline with `embedder` (None: any number); a larger write stores
    them without a vector, for the embed job (memories.embedding_service.embed_pending)."""
    configured = getattr(settings, "EMBED_INLINE_MAX", None)
    if configured is not None:
        return int(configured)
    return INLINE_DEFAULTS.get(embedder.name)
