"""The compression ladder, opt-in per workspace: FULL -> SUMMARY -> SKELETON -> TOMBSTONE.

Off unless `workspace.evolution_settings["compression_enabled"]` is true. Target tier by activation
decayed to the run's time (the value the last boost wrote, faded since with the memory's half-life):
>= 0.40 FULL, >= 0.15 SUMMARY, >= 0.05 SKELETON, below that SKELETON until 30 days old, then TOMBSTONE
(evolution.algorithms.compression). Only downward; FORGOTTEN only by explicit action. Never compressed:
origin tier 1 (written by a person: user:, cli:, api:, import:), pinned memories, and memories that are
neither active nor archived.

Content at each rung is computed from the FULL content, through the LLMClient (extractive and offline
by default): SUMMARY = a digest of at most 40% of the length keeping names, numbers and decisions;
SKELETON = 5-10 key phrases joined by "; "; TOMBSTONE = "[compressed: N chars original]". The row keeps
only its current rung: each step's record holds exactly what its revert needs, the content it replaced
and the tier (so the FULL text is kept once, in the record of the step that left FULL, and each
intermediate rung in the record of the step that replaced it). `memories.selectors.compressed_originals`
finds the FULL text there for the next rung, `memory_rehydrate`, the memory page and re-embedding. Rows
compressed before this rule keep their `snapshots` as they are. The embedding is left as it is: it still
describes the full content, so a compressed memory is found by meaning and can be rehydrated.

Every LLM call happens before the first write, so an unreachable endpoint fails the evolver (the
runner records the error) without a half-compressed workspace.

FORGOTTEN, the last rung, is never applied here: with the workspace policy `forgotten_enabled` on, the
ladder proposes the old, still cold tombstones to a person (evolution.forgetting; a dry run records the
drafts only), and approving the proposal takes them TOMBSTONE -> FORGOTTEN as one revertible record.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from evolution import forgetting, typed_selectors
from evolution.algorithms.compression import (
    SUMMARY_MAX_RATIO,
    CompressionPlan,
    CompressionTier,
    compression_plan,
    tombstone_text,
)
from evolution.algorithms.text import join_phrases
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, register, submit_updates
from evolution.llm import LLMClient, default_client
from evolution.models import EvolutionRun
from evolution.proposals import ProposalDraft, proposals_recorded
from history import audit
from history.models import Action, EvolutionRecord
from memories.models import Workspace

SETTING = "compression_enabled"
SECONDS_PER_DAY = 86_400.0
# Memories per compression record: each holds the replaced content (up to the 100k-character cap of a
# memory), so a record stays a few MB where the update chunk of other evolvers (500) could reach 100 MB.
COMPRESSION_RECORD_CHUNK = 100


def compression_enabled(workspace: Workspace) -> bool:
    return (workspace.evolution_settings or {}).get(SETTING) is True


def rung_content(full: str, current: str, tier: CompressionTier, client: LLMClient) -> str:
    """Content of `tier` made from the FULL text; a digest or skeleton that comes out empty keeps the
    current content (a very short memory has nothing to drop)."""
    if tier is CompressionTier.TOMBSTONE:
        return tombstone_text(len(full))
    if tier is CompressionTier.SUMMARY:
        text = client.digest(full, max_ratio=SUMMARY_MAX_RATIO)
    else:
        text = join_phrases(client.key_phrases(full))
    return text if text.strip() else current


class CompressionLadder:
    """Move cold memories down the ladder with a snapshot of every replaced content (see module doc)."""

    name: ClassVar[str] = "CompressionLadder"
    writes_in_chunks: ClassVar[bool] = True

    def __init__(self, client: LLMClient | None = None) -> None:
        self.client = client

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        if not compression_enabled(workspace):
            result.stats.update(enabled=0, compressed=0)
            return result
        rows = typed_selectors.compression_rows(workspace=workspace, now=now)
        n = len(rows)
        now_ts = now.timestamp()
        plan = compression_plan(
            np.fromiter((r[1] for r in rows), np.float64, n),
            (now_ts - np.fromiter((r[2] for r in rows), np.float64, n)) / SECONDS_PER_DAY,
            np.fromiter((r[3] for r in rows), np.int64, n),
            np.fromiter((r[4] for r in rows), np.int8, n),
        )
        moving = plan.indices.tolist()
        result.stats.update(enabled=1, candidates=n, compressed=len(moving))
        if moving:
            self._compress(workspace, rows, plan, moving, result, dry_run=dry_run, run=run, now=now)
        after_days = forgetting.forget_after_days(workspace)
        if after_days is not None:
            self._propose_forgetting(workspace, after_days, result, dry_run=dry_run, run=run, now=now)
        return result

    def _compress(
        self,
        workspace: Workspace,
        rows: list[tuple[str, float, float, int, int]],
        plan: CompressionPlan,
        moving: list[int],
        result: EvolutionResult,
        *,
        dry_run: bool,
        run: EvolutionRun | None,
        now: datetime,
    ) -> None:
        client = self.client or default_client()
        stored = typed_selectors.compression_contents(workspace=workspace, ids=[rows[k][0] for k in moving])
        updates = MemoryUpdates(self.name, Action.COMPRESS, "compression ladder")
        counts = {t.name: 0 for t in CompressionTier}
        for j, k in enumerate(moving):
            mid = rows[k][0]
            content, full = stored[mid]
            old_tier = int(plan.from_tier[j])
            new_tier = CompressionTier(int(plan.to_tier[j]))
            new_content = rung_content(full, content, new_tier, client)
            updates.add(
                mid,
                {"content": (content, new_content), "compression_tier": (old_tier, int(new_tier))},
                plan.reason(j),
            )
            counts[new_tier.name] += 1
        result.records.extend(
            submit_updates(
                updates, workspace=workspace, run=run, dry_run=dry_run, now=now, chunk=COMPRESSION_RECORD_CHUNK
            )
        )
        result.stats.update({f"to_{name.lower()}": c for name, c in counts.items() if c})

    def _propose_forgetting(
        self,
        workspace: Workspace,
        after_days: float,
        result: EvolutionResult,
        *,
        dry_run: bool,
        run: EvolutionRun | None,
        now: datetime,
    ) -> None:
        """Propose the tombstones the forgetting policy selects (nothing is forgotten until approved)."""
        rows = typed_selectors.tombstone_rows(workspace=workspace, now=now)
        drafts = forgetting.forget_drafts(rows, after_days=after_days, now=now)

        def record_for(draft: ProposalDraft, after: dict[str, Any]) -> EvolutionRecord:
            return audit.record_build(
                workspace=workspace,
                evolver=self.name,
                action=Action.FLAG,
                reason=f"proposed forgetting {len(draft.source_ids)} tombstones older than {after_days:g} days; "
                "awaiting approval",
                input_ids=draft.source_ids,
                after=after,
                run=run,
                dry_run=dry_run,
                now=now,
            )

        records = proposals_recorded(
            workspace=workspace, drafts=drafts, dry_run=dry_run, now=now, record_for=record_for
        )
        result.records.extend(records)
        result.stats.update(
            forget_candidates=sum(len(d.source_ids) for d in drafts),
            forget_proposed=sum(len(r.input_ids) for r in records),
        )


register(CompressionLadder)
