"""Forgetting by workspace policy: the last rung of the compression ladder, TOMBSTONE -> FORGOTTEN.

Off by default. With ``evolution_settings["forgotten_enabled"] = true`` (and the ladder itself enabled,
``compression_enabled``) the CompressionLadder proposes, in groups of at most FORGET_PER_PROPOSAL, the
tombstones that are still cold (activation now below 0.05) and at least ``forget_after_days`` old (default
180, `evolution.algorithms.compression.FORGET_AFTER_DAYS`). Nothing is forgotten until a person approves the
proposal (kind ``forget``) on the proposal queue or through the API; a dry run only records the drafts.

Approving (``forget_apply``) writes one record (evolver CompressionLadder, action compress, the approver as
actor) and, for every memory of the proposal that is still an eligible tombstone, sets compression_tier
FORGOTTEN, status ``forgotten`` (so no search, list of active memories or working context returns it),
content "" and snapshots [], and drops its vector (what it encoded is forgotten too). The row keeps its id,
its edges and its history; the record's ``before`` holds everything the row gave up, so reverting the record
brings each memory back byte for byte (a restored vector with a new stamp). Nothing is deleted.

What a person wrote never gets here: origin tier 1 (user:, cli:, api:, import:) never leaves FULL, and both
the proposal and the approval check it again, so only memories an evolver or agent derived can be forgotten.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

import numpy as np
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import Conflict, InvalidInput
from evolution.algorithms.compression import (
    FORGET_AFTER_DAYS,
    PROTECTED_ORIGIN_TIER,
    SKELETON_MIN_ACTIVATION,
    CompressionTier,
    forget_mask,
)
from evolution.models import Proposal, ProposalKind
from evolution.proposals import ProposalDraft, register_proposal_applier
from history import audit
from history.models import Action, EvolutionRecord
from memories.algorithms.activation import decayed_activation_array
from memories.embedding_service import vectors_touch
from memories.models import Memory, Status, Workspace
from surfacing.settings import register_evolution_setting

User = AbstractBaseUser | AnonymousUser

ENABLED_SETTING: Final = "forgotten_enabled"
AFTER_SETTING: Final = "forget_after_days"
LADDER: Final = "CompressionLadder"
FORGET_PER_PROPOSAL: Final = 100
"""Memories per forget proposal: a page a person can review, and a record of bounded size."""
MAX_AFTER_DAYS: Final = 36_500.0
SECONDS_PER_DAY: Final = 86_400.0
# The fields a forgotten memory gives up (their values before are the record's before).
FORGOTTEN_FIELDS: Final[dict[str, Any]] = {
    "content": "",
    "compression_tier": int(CompressionTier.FORGOTTEN),
    "status": Status.FORGOTTEN.value,
    "snapshots": [],
}
# ... and its vector, when it has one (a memory still waiting for one keeps waiting: see pending_vectors).
UNEMBEDDED_FIELDS: Final[dict[str, Any]] = {"embedding": None, "embedding_model": ""}


def _enabled(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{name}: expected true or false", field=name)
    return value


def _after_days(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"{name}: expected a number of days", field=name)
    if not 1.0 <= float(value) <= MAX_AFTER_DAYS:
        raise InvalidInput(f"{name}: expected 1 to {MAX_AFTER_DAYS:g} days", field=name)
    return float(value)


register_evolution_setting(ENABLED_SETTING, False, _enabled)
register_evolution_setting(AFTER_SETTING, FORGET_AFTER_DAYS, _after_days)


def forget_after_days(workspace: Workspace) -> float | None:
    """The policy's age in days when the workspace allows forgetting, else None (the default)."""
    settings = workspace.evolution_settings or {}
    if settings.get(ENABLED_SETTING) is not True:
        return None
    value = settings.get(AFTER_SETTING, FORGET_AFTER_DAYS)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else FORGET_AFTER_DAYS


def forget_dedupe_key(ids: Sequence[str]) -> str:
    return "forget:" + hashlib.sha256(",".join(sorted(ids)).encode()).hexdigest()[:40]


def forget_drafts(
    rows: Sequence[tuple[str, float, float, int, int]], *, after_days: float, now: datetime
) -> list[ProposalDraft]:
    """Forget proposals for the tombstones among `rows` (``typed_selectors.tombstone_rows``) that the policy
    selects, oldest first, FORGET_PER_PROPOSAL to a proposal."""
    n = len(rows)
    if not n:
        return []
    activation = np.fromiter((r[1] for r in rows), np.float64, n)
    age = (now.timestamp() - np.fromiter((r[2] for r in rows), np.float64, n)) / SECONDS_PER_DAY
    mask = forget_mask(
        activation,
        age,
        np.fromiter((r[3] for r in rows), np.int64, n),
        np.fromiter((r[4] for r in rows), np.int8, n),
        after_days=after_days,
    )
    chosen = sorted(np.flatnonzero(mask).tolist(), key=lambda k: (-float(age[k]), rows[k][0]))
    drafts: list[ProposalDraft] = []
    for start in range(0, len(chosen), FORGET_PER_PROPOSAL):
        part = chosen[start : start + FORGET_PER_PROPOSAL]
        ids = [rows[k][0] for k in part]
        drafts.append(
            ProposalDraft(
                kind=ProposalKind.FORGET,
                title=f"Forget {len(ids)} tombstone{'s' if len(ids) != 1 else ''} nobody used for {after_days:g}+ days",
                rationale=(
                    f"These memories were compressed to TOMBSTONE, are at least {after_days:g} days old and their "
                    f"activation is below {SKELETON_MIN_ACTIVATION:g}. Approving marks them forgotten: they leave "
                    "every search and context and keep only their id. Nothing is deleted; the record of the change "
                    "keeps what they held and reverting it brings them back exactly."
                ),
                payload={
                    "forget": ids,
                    "forget_after_days": after_days,
                    "activation": {rows[k][0]: round(float(activation[k]), 6) for k in part},
                    "age_days": {rows[k][0]: round(float(age[k]), 1) for k in part},
                },
                source_ids=ids,
                dedupe_key=forget_dedupe_key(ids),
                created_by=LADDER,
            )
        )
    return drafts


def forget_ids(payload: Mapping[str, Any], source_ids: Sequence[str]) -> list[str]:
    """The memory ids of a forget payload; InvalidInput unless they are reviewed ids (the proposal's sources)."""
    raw = payload.get("forget")
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("payload.forget: expected a list of memory ids", field="payload.forget")
    try:
        ids = [str(uuid.UUID(str(i))) for i in raw]
    except ValueError:
        raise InvalidInput("payload.forget: expected memory ids (UUIDs)", field="payload.forget") from None
    reviewed = {str(s) for s in source_ids}
    outside = [i for i in ids if i not in reviewed]
    if outside:
        raise InvalidInput(f"payload.forget: {outside[0]} was not proposed", field="payload.forget")
    return list(dict.fromkeys(ids))


def forget_after_days_of(payload: Mapping[str, Any]) -> float:
    """The policy age a forget proposal was made with (InvalidInput when a reviewer broke it)."""
    return _after_days("payload.forget_after_days", payload.get(AFTER_SETTING, FORGET_AFTER_DAYS))


def why_not_forgettable(memory: Memory, *, after_days: float, now: datetime) -> str:
    """ "" when `memory` may be forgotten now, else the reason it may not (it changed since the proposal)."""
    if memory.origin_tier == PROTECTED_ORIGIN_TIER:
        return "written by a person (origin tier 1)"
    if memory.compression_tier != CompressionTier.TOMBSTONE:
        return f"now {CompressionTier(memory.compression_tier).name}, not TOMBSTONE"
    if memory.pinned:
        return "pinned"
    if memory.status not in (Status.ACTIVE, Status.ARCHIVED):
        return f"{memory.status}"
    boosted = memory.activation_last_boost_at
    hours = np.array([np.nan if boosted is None else (now - boosted).total_seconds() / 3600.0])
    activation = decayed_activation_array(
        np.array([memory.activation_score]), hours, np.array([memory.activation_half_life_hours])
    )
    age = (now - memory.created_at).total_seconds() / SECONDS_PER_DAY
    if not forget_mask(activation, [age], [memory.origin_tier], [memory.compression_tier], after_days=after_days)[0]:
        return f"activation {float(activation[0]):.3f} now, {age:.1f} days old"
    return ""


def forget_apply(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> EvolutionRecord:
    """Forget the still-eligible tombstones of an approved forget proposal, as one revertible record.

    Memories that changed since the proposal (used again, rehydrated, pinned, ...) are left as they are and
    named in the record's reason; Conflict ``stale_proposal`` when none is left.
    """
    ids = forget_ids(proposal.payload, proposal.source_ids)
    after_days = forget_after_days_of(proposal.payload)
    rows = Memory.objects.select_for_update().filter(workspace=workspace, id__in=ids).in_bulk()
    by_id = {str(k): v for k, v in rows.items()}
    skipped: list[str] = []
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    forgotten: list[uuid.UUID] = []
    with_vector: list[uuid.UUID] = []
    for mid in ids:
        memory = by_id.get(mid)
        why = "no longer exists" if memory is None else why_not_forgettable(memory, after_days=after_days, now=now)
        if memory is None or why:
            skipped.append(f"{mid} ({why})")
            continue
        old, new = audit.memory_changes(memory, {**FORGOTTEN_FIELDS, **UNEMBEDDED_FIELDS})
        before[mid], after[mid] = old, new
        forgotten.append(memory.id)
        if memory.embedding is not None:
            with_vector.append(memory.id)
    if not forgotten:
        raise Conflict(
            f"proposal {proposal.pk}: no memory of it can be forgotten now: {'; '.join(skipped)[:500]}",
            code="stale_proposal",
        )
    Memory.objects.filter(workspace=workspace, id__in=forgotten).update(**FORGOTTEN_FIELDS)
    if with_vector:
        # The vector encodes what was forgotten: it goes too (a vector write, stamped, so the vector indexes
        # drop it at their next catch-up); the record's before keeps it for a revert.
        stamp, _ = vectors_touch(workspace=workspace)
        Memory.objects.filter(workspace=workspace, id__in=with_vector).update(**UNEMBEDDED_FIELDS, embedded_at=stamp)
    reason = (
        f"TOMBSTONE -> FORGOTTEN for {len(forgotten)} memor{'y' if len(forgotten) == 1 else 'ies'}: "
        f"{audit.approval('forget', proposal.pk, actor)}"
    )
    if skipped:
        reason += f"; left as they are: {'; '.join(skipped)}"
    return audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=LADDER,
            action=Action.COMPRESS,
            reason=reason[:2000],
            input_ids=forgotten,
            output_ids=forgotten,
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )


register_proposal_applier(ProposalKind.FORGET, forget_apply)
