"""The process-wide Embedder chosen by the EMBEDDER setting."""

from __future__ import annotations

from functools import lru_cache

from django.conf import settings

from memories.algorithms.embedding import Embedder, get_embedder


@lru_cache(maxsize=4)
def _embedder_for(spec: str) -> Embedder:
    return get_embedder(spec)


def default_embedder() -> Embedder:
    return _embedder_for(settings.EMBEDDER)
