"""Token budget for a working context: estimate item sizes, then take ranked items up to ``k`` and
``max_tokens``.

Token estimate: ``max(1, ceil(chars / 4))``. Four characters per token is the usual rule of thumb for
English with BPE tokenizers; the minimum of 1 charges every item something, so an empty memory cannot be
returned for free. It is an estimate: callers budget with it, they do not bill with it.

Selection (``apply_budget``): mandatory rows (anchors, pins) are considered first, in ranked order, then
the others in ranked order. Each item is taken if it fits the remaining budget, otherwise skipped, and
later, smaller items may still be taken ("greedy skip"); selection stops at ``k`` items. Mandatory rows
obey ``k`` and the budget too: they are preferred, never over-committed. Validating that ``max_tokens``
fits at least the smallest anchor (``min_required_tokens``) is the caller's job.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "CHARS_PER_TOKEN",
    "BudgetResult",
    "apply_budget",
    "estimate_tokens",
    "estimate_tokens_array",
    "estimate_tokens_many",
    "min_required_tokens",
]

IntArray = npt.NDArray[np.int64]

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """Estimated tokens of ``text``: ``max(1, ceil(len(text) / 4))``."""
    return max(1, -(-len(text) // CHARS_PER_TOKEN))


def estimate_tokens_array(char_lengths: npt.ArrayLike) -> IntArray:
    """Vectorised ``estimate_tokens`` from character lengths (e.g. ``Length(content)`` from the database)."""
    lengths = np.asarray(char_lengths, dtype=np.int64)
    if lengths.size and int(lengths.min()) < 0:
        raise ValueError("character lengths must be >= 0")
    return np.maximum(1, -(-lengths // CHARS_PER_TOKEN))


def estimate_tokens_many(texts: Iterable[str]) -> IntArray:
    """``estimate_tokens`` of each text."""
    return estimate_tokens_array(np.fromiter((len(t) for t in texts), dtype=np.int64))


@dataclass(frozen=True, eq=False)
class BudgetResult:
    """``selected``: row indices in output order. ``tokens_used``: their summed estimate.
    ``dropped_for_budget``: rows that would be in the output without ``max_tokens`` but are not, in
    ranked order (what the budget cost the caller)."""

    selected: IntArray
    tokens_used: int
    dropped_for_budget: IntArray


def _candidate_queue(order: IntArray, mandatory: npt.NDArray[np.bool_]) -> IntArray:
    # Stable partition: mandatory rows keep their relative rank, as do the others.
    is_mandatory = mandatory[order]
    return np.concatenate([order[is_mandatory], order[~is_mandatory]])


def apply_budget(
    order: npt.ArrayLike,
    tokens: npt.ArrayLike,
    mandatory: npt.ArrayLike,
    k: int,
    max_tokens: int | None,
) -> BudgetResult:
    """Select up to ``k`` rows from ``order`` (ranked row indices) within ``max_tokens`` (None: no budget).

    ``tokens`` and ``mandatory`` are indexed by row. See the module docstring for the rules.
    """
    ranked = np.asarray(order, dtype=np.int64).ravel()
    sizes = np.asarray(tokens, dtype=np.int64).ravel()
    must = np.asarray(mandatory, dtype=np.bool_).ravel()
    if sizes.shape != must.shape:
        raise ValueError(f"tokens and mandatory must align by row, got {sizes.shape} and {must.shape}")
    if ranked.size and (int(ranked.min()) < 0 or int(ranked.max()) >= sizes.shape[0]):
        raise ValueError("order must hold row indices of tokens")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    if max_tokens is not None and max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0 or None, got {max_tokens}")
    if sizes.size and int(sizes.min()) < 0:
        raise ValueError("token counts must be >= 0")

    queue = _candidate_queue(ranked, must)
    unbudgeted = queue[:k]
    if max_tokens is None or int(sizes[unbudgeted].sum()) <= max_tokens:
        return BudgetResult(unbudgeted, int(sizes[unbudgeted].sum()), np.empty(0, dtype=np.int64))

    # Greedy skip is sequential by nature; the queue is the candidate list (a few hundred rows at most).
    selected: list[int] = []
    used = 0
    for row, size in zip(queue.tolist(), sizes[queue].tolist(), strict=True):
        if len(selected) == k:
            break
        if used + size <= max_tokens:
            selected.append(row)
            used += size
    chosen = np.array(selected, dtype=np.int64)
    dropped = unbudgeted[~np.isin(unbudgeted, chosen)]
    return BudgetResult(chosen, used, dropped)


def min_required_tokens(tokens: npt.ArrayLike, rows: npt.ArrayLike) -> int:
    """Smallest token estimate among the rows selected by the boolean mask ``rows`` (0 if none).

    With ``rows`` = anchors: a ``max_tokens`` below this cannot hold even one anchor, a 400 for the caller.
    """
    sizes = np.asarray(tokens, dtype=np.int64).ravel()
    mask = np.asarray(rows, dtype=np.bool_).ravel()
    if sizes.shape != mask.shape:
        raise ValueError(f"tokens and rows must align, got {sizes.shape} and {mask.shape}")
    return int(sizes[mask].min()) if mask.any() else 0
