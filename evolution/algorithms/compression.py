"""Compression ladder: FULL -> SUMMARY -> SKELETON -> TOMBSTONE -> FORGOTTEN, only downward.

Target by stored activation: >= 0.40 FULL; >= 0.15 SUMMARY; >= 0.05 SKELETON; below 0.05 SKELETON until
the memory is 30 days old, then TOMBSTONE. FORGOTTEN is never a target of the ladder: `forget_mask` only
selects the tombstones a workspace policy may *propose* to forget, and a person decides.
Memories of origin tier 1 (user:, cli:, api:, import:) never leave their current tier automatically.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from evolution.algorithms.text import extractive_summary, join_phrases, key_phrases

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
TierArray = npt.NDArray[np.int8]

FULL_MIN_ACTIVATION = 0.40
SUMMARY_MIN_ACTIVATION = 0.15
SKELETON_MIN_ACTIVATION = 0.05
TOMBSTONE_MIN_AGE_DAYS = 30.0
PROTECTED_ORIGIN_TIER = 1
SUMMARY_MAX_RATIO = 0.4
# Days a TOMBSTONE must be old (since creation) before the forgetting policy proposes it: six 30-day
# half-lives, so a memory last boosted at creation holds under 1/64 of that activation.
FORGET_AFTER_DAYS = 180.0


class CompressionTier(IntEnum):
    """Rungs of the ladder; a larger value is more compressed."""

    FULL = 0
    SUMMARY = 1
    SKELETON = 2
    TOMBSTONE = 3
    FORGOTTEN = 4


def ladder_tier(stored_activation: npt.ArrayLike, age_days: npt.ArrayLike) -> TierArray:
    """The rung that activation and age alone call for (never FORGOTTEN).

    (ran) 0.39 SUMMARY; 0.149 SKELETON; 0.049 at 10 d SKELETON; 0.049 at 30 d TOMBSTONE.
    """
    a = np.asarray(stored_activation, dtype=np.float64)
    age = np.asarray(age_days, dtype=np.float64)
    a, age = np.broadcast_arrays(a, age)
    weak = np.where(age >= TOMBSTONE_MIN_AGE_DAYS, CompressionTier.TOMBSTONE, CompressionTier.SKELETON)
    tier = np.select(
        [a >= FULL_MIN_ACTIVATION, a >= SUMMARY_MIN_ACTIVATION, a >= SKELETON_MIN_ACTIVATION],
        [CompressionTier.FULL, CompressionTier.SUMMARY, CompressionTier.SKELETON],
        default=weak,
    )
    return tier.astype(np.int8)


def target_tier(
    stored_activation: npt.ArrayLike,
    age_days: npt.ArrayLike,
    origin_tier: npt.ArrayLike,
    current: npt.ArrayLike,
) -> TierArray:
    """Tier each memory should be at: max(current, ladder_tier), so only downward.

    Origin tier 1 keeps its current tier (a FULL user memory stays FULL). A missing (NaN) activation or
    age keeps the current tier rather than reading as "weakest". FORGOTTEN stays FORGOTTEN; nothing is
    sent there.
    """
    a = np.asarray(stored_activation, dtype=np.float64)
    age = np.asarray(age_days, dtype=np.float64)
    cur = np.asarray(current, dtype=np.int8)
    origin = np.asarray(origin_tier, dtype=np.int64)
    a, age, cur, origin = np.broadcast_arrays(a, age, cur, origin)
    proposed = ladder_tier(a, age)
    frozen = (origin == PROTECTED_ORIGIN_TIER) | ~np.isfinite(a) | ~np.isfinite(age)
    return np.where(frozen, cur, np.maximum(cur, proposed)).astype(np.int8)


def forget_mask(
    activation: npt.ArrayLike,
    age_days: npt.ArrayLike,
    origin_tier: npt.ArrayLike,
    current: npt.ArrayLike,
    after_days: float = FORGET_AFTER_DAYS,
) -> npt.NDArray[np.bool_]:
    """Which memories the forgetting policy may propose to take TOMBSTONE -> FORGOTTEN.

    A TOMBSTONE whose activation (decayed, 0..1) is still below SKELETON_MIN_ACTIVATION and whose age in days
    is at least `after_days`. Never origin tier 1 (a person's words never leave FULL, so never reach here),
    never a NaN activation or age.
    """
    a = np.asarray(activation, dtype=np.float64)
    age = np.asarray(age_days, dtype=np.float64)
    cur = np.asarray(current, dtype=np.int8)
    origin = np.asarray(origin_tier, dtype=np.int64)
    a, age, cur, origin = np.broadcast_arrays(a, age, cur, origin)
    with np.errstate(invalid="ignore"):
        cold = (a < SKELETON_MIN_ACTIVATION) & (age >= after_days)
    mask: npt.NDArray[np.bool_] = (cur == CompressionTier.TOMBSTONE) & (origin != PROTECTED_ORIGIN_TIER) & cold
    return mask


@dataclass(frozen=True, slots=True, eq=False)
class CompressionPlan:
    """Memories that move down the ladder: positions, from/to tiers and the activation/age behind it."""

    indices: IntArray
    from_tier: TierArray
    to_tier: TierArray
    activation: FloatArray
    age_days: FloatArray

    def reason(self, k: int) -> str:
        """Audit sentence for entry `k` of `indices`."""
        old = CompressionTier(int(self.from_tier[k])).name
        new = CompressionTier(int(self.to_tier[k]))
        a = float(self.activation[k])
        if new is CompressionTier.SUMMARY:
            why = f"activation {a:.3f} < {FULL_MIN_ACTIVATION:.2f}"
        elif new is CompressionTier.SKELETON:
            why = f"activation {a:.3f} < {SUMMARY_MIN_ACTIVATION:.2f}"
        else:
            why = (
                f"activation {a:.3f} < {SKELETON_MIN_ACTIVATION:.2f} and "
                f"{float(self.age_days[k]):.1f}d >= {TOMBSTONE_MIN_AGE_DAYS:g}d old"
            )
        return f"compress {old} -> {new.name}: {why}"


def compression_plan(
    stored_activation: npt.ArrayLike,
    age_days: npt.ArrayLike,
    origin_tier: npt.ArrayLike,
    current: npt.ArrayLike,
) -> CompressionPlan:
    """The memories whose `target_tier` is below their current tier, with the values that explain it."""
    a = np.asarray(stored_activation, dtype=np.float64).ravel()
    age = np.asarray(age_days, dtype=np.float64).ravel()
    cur = np.asarray(current, dtype=np.int8).ravel()
    target = target_tier(a, age, np.asarray(origin_tier).ravel(), cur)
    moving = np.flatnonzero(target != cur)
    return CompressionPlan(
        indices=moving,
        from_tier=cur[moving],
        to_tier=target[moving],
        activation=a[moving],
        age_days=age[moving],
    )


def tombstone_text(n_chars: int) -> str:
    """Content left by a tombstone: `[compressed: N chars original]`."""
    return f"[compressed: {n_chars} chars original]"


def compressed_content(original: str, tier: CompressionTier) -> str:
    """Content at `tier` computed from the original (FULL) content, with the no-network stand-ins.

    SUMMARY: extractive digest at <= 40% of the length; SKELETON: 5-10 key phrases joined by "; ";
    TOMBSTONE: `tombstone_text(len(original))`; FORGOTTEN: "". Always pass the FULL content, not the
    previous rung's, so a tombstone counts the original characters.
    """
    tier = CompressionTier(tier)
    if tier is CompressionTier.FULL:
        return original
    if tier is CompressionTier.SUMMARY:
        return extractive_summary(original, SUMMARY_MAX_RATIO)
    if tier is CompressionTier.SKELETON:
        return join_phrases(key_phrases(original))
    if tier is CompressionTier.TOMBSTONE:
        return tombstone_text(len(original))
    return ""
