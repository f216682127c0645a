"""DuplicateMerger: propose merging near-duplicate memories; runs only when named.

Candidates are the workspace's active, unpinned memories (optionally of the types in the setting
``memory_types``) that are not waiting in a pending merge proposal. Duplicates are memories of one type
with embedding cosine >= ``threshold`` (0.95) or the same normalised content; see
evolution.algorithms.merge for the groups and the kept memory. Each group becomes one merge proposal
(evolution.merges) with its before/after preview; nothing is written to memories until a person approves.
A group proposed before, whatever was decided, is not proposed again (dedupe key = hash of its ids).

Settings under ``workspace.evolution_settings["DuplicateMerger"]``: threshold, memory_types.
"""

from __future__ import annotations

from datetime import datetime
from typing import ClassVar

import numpy as np

from core.errors import InvalidInput
from evolution import merges, typed_selectors
from evolution.algorithms.merge import DEFAULT_THRESHOLD, MergeCandidates, duplicate_groups
from evolution.evolvers.base import EvolutionResult, register
from evolution.evolvers.typed import number_setting, types_setting
from evolution.models import EvolutionRun, ProposalKind
from evolution.proposals import ProposalDraft, proposals_recorded
from history import audit
from history.models import Action
from memories.embeddings import embedder_for
from memories.models import Workspace


def _excerpt(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= merges.EXCERPT else flat[: merges.EXCERPT - 1] + "…"


class DuplicateMerger:
    """One merge proposal per group of near-duplicates (see module doc); writes proposals, never memories."""

    name: ClassVar[str] = merges.MERGE_EVOLVER

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = number_setting(workspace, self.name, "threshold", DEFAULT_THRESHOLD)
        if not 0.0 < threshold <= 1.0:
            raise InvalidInput(f"evolution settings {self.name}.threshold: expected (0, 1]", field="threshold")
        types = types_setting(workspace, self.name, "memory_types", None)
        pending = merges.pending_merge_members(workspace=workspace)
        embedder = embedder_for(workspace)
        rows = [
            r
            for r in merges.merge_candidate_rows(workspace=workspace, memory_types=types, model=embedder.name)
            if r[0] not in pending
        ]
        n = len(rows)
        type_names = sorted({r[1] for r in rows})
        code_of = {t: k for k, t in enumerate(type_names)}
        candidates = MergeCandidates(
            vectors=typed_selectors.vectors_of([(r[0], r[2], r[3]) for r in rows], embedder),
            type_codes=np.fromiter((code_of[r[1]] for r in rows), dtype=np.intp, count=n),
            contents=[r[2] for r in rows],
            origin_tier=np.fromiter((r[4] for r in rows), dtype=np.intp, count=n),
            origins=[r[5] for r in rows],
            confidence=np.fromiter((r[6] for r in rows), dtype=np.float64, count=n),
            access_count=np.fromiter((r[7] for r in rows), dtype=np.intp, count=n),
            created_ts=np.fromiter((r[8] for r in rows), dtype=np.float64, count=n),
        )
        groups = duplicate_groups(candidates, threshold=threshold)
        result.stats.update(candidates=n, groups=len(groups), proposed=0)
        if not groups:
            return result
        keys = [merges.merge_dedupe_key([rows[k][0] for k in g.members]) for g in groups]
        known = typed_selectors.proposal_keys(workspace=workspace, keys=keys)
        fresh = [(g, key) for g, key in zip(groups, keys, strict=True) if key not in known]
        result.stats["already_proposed"] = len(groups) - len(fresh)
        fields = merges.merge_fields(workspace=workspace, ids=[rows[k][0] for g, _ in fresh for k in g.members])
        drafts: list[ProposalDraft] = []
        for group, key in fresh:
            keep = rows[group.keep][0]
            merged = [rows[k][0] for k in group.merged]
            memory_type = rows[group.keep][1]
            before, after = merges.merge_plan(keep, merged, {i: fields[i][:2] for i in [keep, *merged]})
            identical = [i for i, same in zip(merged, group.same_content, strict=True) if same]
            persons = sorted({rows[k][5] for k in group.members if rows[k][4] == 1})
            rationale = [
                f"{len(merged) + 1} active {memory_type} memories say the same thing: "
                + ", ".join(
                    f"{i} (cosine {c:.4f}{', identical text' if s else ''})"
                    for i, c, s in zip(merged, group.cosine, group.same_content, strict=True)
                )
                + f" against {keep} (threshold {threshold:g}).",
                f"Keeping {keep} ({rows[group.keep][5]}, confidence {rows[group.keep][6]:g}): the others become "
                "superseded by it; it gets their tags and the highest retention. Nothing is deleted.",
            ]
            if persons:
                rationale.append(f"Written by a person ({', '.join(persons)}): only you can decide this merge.")
            drafts.append(
                ProposalDraft(
                    kind=ProposalKind.MERGE,
                    title=f"Merge {len(merged) + 1} near-duplicate {memory_type} memories",
                    rationale="\n".join(rationale),
                    payload={
                        "memory_type": memory_type,
                        "group": [keep, *merged],
                        "keep": keep,
                        "merge": merged,
                        "similarity": dict(zip(merged, group.cosine, strict=True)),
                        "identical": identical,
                        "threshold": threshold,
                        "contents": {i: _excerpt(fields[i][2]) for i in [keep, *merged]},
                        "before": before,
                        "after": after,
                    },
                    source_ids=[keep, *merged],
                    dedupe_key=key,
                    created_by=self.name,
                )
            )
        result.records.extend(
            proposals_recorded(
                workspace=workspace,
                drafts=drafts,
                dry_run=dry_run,
                now=now,
                record_for=lambda draft, after: audit.record_build(
                    workspace=workspace,
                    evolver=self.name,
                    action=Action.FLAG,
                    reason=f"proposed merging {len(draft.source_ids)} near-duplicate "
                    f"{draft.payload['memory_type']} memories into {draft.payload['keep']}; awaiting approval",
                    input_ids=draft.source_ids,
                    after=after,
                    run=run,
                    dry_run=dry_run,
                    now=now,
                ),
            )
        )
        result.stats["proposed"] = len(result.records)
        return result


register(DuplicateMerger, default=False)
