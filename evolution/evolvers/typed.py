"""The typed-memory evolvers (in the style of the typedmem project's typed slots) over whole workspaces.

- ContradictionSurfacer (read-only): connected components of the conflicts_with graph.
- PreferenceDriftDetector: >= 3 REPLACEs within 30 days -> a drift_flags entry; idempotent per window.
- GoalResolver: an active goal whose best event/outcome/finding cosine is >= 0.85 is resolved, keeping
  previous_status, resolved_by and resolved_score in metadata; `goal_resolution_revert` undoes one goal.
- SummaryEvolver: (type, subject) groups of >= 3 stale memories become a summary *proposal*; nothing is
  written to memories until a person approves it (evolution.proposals.proposal_apply_summary).

Settings per evolver under workspace.evolution_settings[<name>] (see docs/evolution-typed.md).
Evolver writes leave `updated_at` alone, as the enhanced evolvers do.
"""

from __future__ import annotations

import hashlib
import math
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import numpy as np

from core.errors import InvalidInput, NotFound
from evolution import typed_selectors
from evolution.algorithms.typed import DriftFlag, drift_flags, goal_matches, summary_groups
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register, submit_updates
from evolution.llm import LLMClient, default_client
from evolution.models import EvolutionRun, ProposalKind
from evolution.proposals import ProposalDraft, proposals_recorded
from history import audit
from history.models import Action, EvolutionRecord, RecordLink
from memories.embeddings import embedder_for
from memories.models import MemoryType, Status, Workspace
from memories.services import record_revert

SECONDS_PER_DAY = 86_400.0


def settings_of(workspace: Workspace, evolver: str) -> Mapping[str, Any]:
    section = (workspace.evolution_settings or {}).get(evolver) or {}
    return section if isinstance(section, Mapping) else {}


def number_setting(workspace: Workspace, evolver: str, key: str, default: float) -> float:
    """A finite number from workspace.evolution_settings[evolver][key], else `default`."""
    value = settings_of(workspace, evolver).get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"evolution settings {evolver}.{key}: {value!r} is not a number", field=key)
    return float(value)


def types_setting(workspace: Workspace, evolver: str, key: str, default: Sequence[str] | None) -> list[str] | None:
    """A list of memory types from the settings (None keeps `default`)."""
    value = settings_of(workspace, evolver).get(key)
    if value is None:
        return list(default) if default is not None else None
    if not isinstance(value, list) or not all(t in MemoryType.values for t in value):
        raise InvalidInput(f"evolution settings {evolver}.{key}: {value!r} is not a list of memory types", field=key)
    return list(value)


def _slot_label(memory_type: str, subject: str) -> str:
    return f"{memory_type}[{subject}]" if subject else memory_type


# -- ContradictionSurfacer ------------------------------------------------------------------------


class ContradictionSurfacer:
    """Read-only: one `flag` record per contradiction cluster (its ids in input_ids), nothing written.

    Runs only when named (its records would otherwise repeat every cycle); GET .../contradictions/ serves
    the same clusters without a run.
    """

    name: ClassVar[str] = "ContradictionSurfacer"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        clusters = typed_selectors.contradiction_id_clusters(workspace=workspace)
        slots = typed_selectors.slots_of(workspace=workspace, ids=[i for c in clusters for i in c])
        for ids in clusters:
            labels = sorted({_slot_label(*slots[i]) for i in ids})
            result.records.append(
                audit.record_build(
                    workspace=workspace,
                    evolver=self.name,
                    action=Action.FLAG,
                    reason=f"contradiction cluster of {len(ids)} memories: {', '.join(labels)}",
                    input_ids=ids,
                    run=run,
                    dry_run=dry_run,
                    now=now,
                )
            )
        result.stats.update(clusters=len(clusters), memories=sum(len(c) for c in clusters))
        return result


# -- PreferenceDriftDetector ----------------------------------------------------------------------


def _existing_flags(raw: Sequence[Any]) -> list[DriftFlag]:
    flags: list[DriftFlag] = []
    for item in raw or ():
        if isinstance(item, Mapping):
            try:
                flags.append(DriftFlag.from_dict(item))
            except (KeyError, TypeError, ValueError):
                continue
    return flags


class PreferenceDriftDetector:
    """Annotate memories whose replace_log has >= min_replaces entries within window_days.

    Reason: "preference[editor] changed 3x in last 30d". Idempotent per window: a memory whose existing
    flag already covers a replace of the current window gets no second flag, so re-running changes
    nothing; a new burst after the flagged one flags again. Settings: min_replaces (3), window_days
    (30), memory_types (default: any type with a replace_log).
    """

    name: ClassVar[str] = "PreferenceDriftDetector"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_replaces = int(number_setting(workspace, self.name, "min_replaces", 3))
        window_days = number_setting(workspace, self.name, "window_days", 30.0)
        types = types_setting(workspace, self.name, "memory_types", None)
        rows = typed_selectors.drift_inputs(workspace=workspace, memory_types=types)
        by_id = {row[0]: row for row in rows}
        flags = drift_flags(
            {key: list(row[3] or ()) for key, row in by_id.items()},
            now,
            min_replaces=min_replaces,
            window_days=window_days,
            existing_flags={key: _existing_flags(row[4]) for key, row in by_id.items()},
            labels={key: _slot_label(row[1], row[2]) for key, row in by_id.items()},
        )
        updates = MemoryUpdates(self.name, Action.ANNOTATE, f"drift: >= {min_replaces} replaces in {window_days:g}d")
        for flag in flags:
            row = by_id[flag.memory_id]
            old = list(row[4] or ())
            updates.add(row[0], {"drift_flags": (old, [*old, flag.to_dict()])}, flag.reason)
        result.records = apply_updates([updates], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(candidates=len(rows), flagged=len(updates))
        return result


# -- GoalResolver ---------------------------------------------------------------------------------

EVIDENCE_TYPES = (MemoryType.EVENT, MemoryType.OUTCOME, MemoryType.FINDING)


class GoalResolver:
    """Resolve active goals that recent evidence achieved: best cosine >= threshold (0.85, strict).

    Evidence: active event, outcome and finding memories (setting evidence_types). Vectors are the stored
    embeddings (a memory without one is embedded on the fly). A resolved goal gets status resolved and
    metadata previous_status, resolved_by (evidence id), resolved_score (cosine) and resolved_at. One
    record per goal, so `goal_resolution_revert` undoes exactly one goal. Settings: threshold,
    evidence_types.
    """

    name: ClassVar[str] = "GoalResolver"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = number_setting(workspace, self.name, "threshold", 0.85)
        evidence_types = types_setting(workspace, self.name, "evidence_types", EVIDENCE_TYPES) or []
        embedder = embedder_for(workspace)
        goals = typed_selectors.active_goals(workspace=workspace, model=embedder.name)
        result.stats.update(goals=len(goals), evidence=0, resolved=0)
        if not goals:
            return result
        evidence = typed_selectors.evidence_rows(workspace=workspace, memory_types=evidence_types, model=embedder.name)
        result.stats["evidence"] = len(evidence)
        if not evidence:
            return result
        goal_vectors = typed_selectors.vectors_of([(g[0], g[1], g[2]) for g in goals], embedder)
        matches = goal_matches(goal_vectors, typed_selectors.vectors_of(evidence, embedder), threshold)
        evidence_ids = [e[0] for e in evidence]
        updates = MemoryUpdates(self.name, Action.RESOLVE, f"goal resolved by evidence (cosine >= {threshold:g})")
        for k in np.flatnonzero(matches.resolved).tolist():
            goal_id, _, _, metadata = goals[k]
            j = int(matches.best_index[k])
            new_meta = {
                **(metadata or {}),
                "previous_status": Status.ACTIVE.value,
                "resolved_by": evidence_ids[j],
                "resolved_score": round(float(matches.best_score[k]), 6),
                "resolved_at": now.isoformat(),
            }
            updates.add(
                goal_id,
                {"status": (Status.ACTIVE.value, Status.RESOLVED.value), "metadata": (metadata, new_meta)},
                f"goal resolved: {matches.reason(k, evidence_ids)}",
            )
        # One record per goal, read better with its own sentence than with the batch summary.
        result.records = submit_updates(
            updates, workspace=workspace, run=run, dry_run=dry_run, now=now, chunk=1, own_reasons=True
        )
        result.stats["resolved"] = len(updates)
        return result


def goal_resolution_revert(*, workspace: Workspace, goal_id: object, actor: Any) -> EvolutionRecord:
    """Undo the newest GoalResolver resolution of one goal (status and metadata back as they were).

    NotFound when the goal has no applied, unreverted resolution; Conflict when the goal changed since
    (revert the later change first), both raised by the record revert service.
    """
    try:
        mid = uuid.UUID(str(goal_id))
    except ValueError:
        raise NotFound(f"goal {goal_id!r} not found", field="goal_id") from None
    record_id = (
        RecordLink.objects.filter(
            memory_id=mid,
            record__workspace=workspace,
            record__evolver=GoalResolver.name,
            record__action=Action.RESOLVE,
            record__dry_run=False,
            record__reverted_at__isnull=True,
        )
        .order_by("-record_id")
        .values_list("record_id", flat=True)
        .first()
    )
    if record_id is None:
        raise NotFound(f"goal {mid} has no resolution to revert in workspace {workspace.slug!r}", field="goal_id")
    return record_revert(workspace=workspace, record_id=record_id, actor=actor)


# -- SummaryEvolver -------------------------------------------------------------------------------

SUMMARY_TYPES = (MemoryType.EVENT, MemoryType.OBSERVATION)


def summary_dedupe_key(ids: Sequence[str]) -> str:
    """Stable identity of a summary proposal: the hash of its sorted source ids."""
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()[:40]
    return f"summary:{digest}"


class SummaryEvolver:
    """Propose one summary fact per (type, subject) group of >= 3 stale memories; never writes memories.

    Stale: decayed confidence = confidence * 0.5 ** (age_days / half_life) < 0.3 (event 14 d, observation
    7 d, others 30 d). Memories that are summaries, already summarized, or waiting in a pending summary
    proposal never join a group. The proposal payload: {memory_type "fact", subject, content (the
    LLMClient's condensed line), confidence 0.7, summarizes [ids], source_type, decayed_confidence}.
    A group proposed before (any decision) is not proposed again. Settings: confidence_floor,
    min_cluster_size, cluster_types, target_type, summary_confidence.
    """

    name: ClassVar[str] = "SummaryEvolver"
    writes_in_chunks: ClassVar[bool] = True

    def __init__(self, client: LLMClient | None = None) -> None:
        self.client = client

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        floor = number_setting(workspace, self.name, "confidence_floor", 0.3)
        min_size = int(number_setting(workspace, self.name, "min_cluster_size", 3))
        cluster_types = types_setting(workspace, self.name, "cluster_types", SUMMARY_TYPES) or []
        target_type = str(settings_of(workspace, self.name).get("target_type", MemoryType.FACT))
        if target_type not in MemoryType.values:
            raise InvalidInput(f"evolution settings {self.name}.target_type: {target_type!r}", field="target_type")
        confidence = number_setting(workspace, self.name, "summary_confidence", 0.7)
        rows = typed_selectors.summary_rows(workspace=workspace, memory_types=cluster_types)
        pending = typed_selectors.pending_summary_sources(workspace=workspace)
        now_ts = now.timestamp()
        age_days = (now_ts - np.fromiter((r[4] for r in rows), dtype=np.float64, count=len(rows))) / SECONDS_PER_DAY
        excluded = np.fromiter(
            (bool(r[5]) or r[6] is not None or r[0] in pending for r in rows), dtype=bool, count=len(rows)
        )
        groups = summary_groups(
            [r[1] for r in rows],
            [r[2] for r in rows],
            np.fromiter((r[3] for r in rows), dtype=np.float64, count=len(rows)),
            age_days,
            excluded,
            confidence_floor=floor,
            min_size=min_size,
            cluster_types=cluster_types,
        )
        result.stats.update(candidates=len(rows), groups=len(groups), proposed=0)
        if not groups:
            return result
        client = self.client or default_client()
        keys = [summary_dedupe_key([rows[k][0] for k in g.indices]) for g in groups]
        known = typed_selectors.proposal_keys(workspace=workspace, keys=keys)
        fresh = [(g, key) for g, key in zip(groups, keys, strict=True) if key not in known]
        result.stats["already_proposed"] = len(groups) - len(fresh)
        contents = typed_selectors.contents_of(
            workspace=workspace, ids=[rows[k][0] for g, _ in fresh for k in g.indices]
        )
        drafts: list[ProposalDraft] = []
        for group, key in fresh:
            ids = [rows[k][0] for k in group.indices]
            text = client.condense([contents[rows[k][0]] for k in group.indices], subject=group.subject)
            label = _slot_label(group.memory_type, group.subject)
            drafts.append(
                ProposalDraft(
                    kind=ProposalKind.SUMMARY,
                    title=f"Summarize {len(ids)} stale {label} memories",
                    rationale=(
                        f"{len(ids)} {group.memory_type} memories about {group.subject!r} have decayed below "
                        f"confidence {floor:g} (lowest {min(group.decayed_confidence):.6f}); one {target_type} "
                        "can stand for them. The originals stay as they are."
                    ),
                    payload={
                        "memory_type": target_type,
                        "subject": group.subject,
                        "content": text,
                        "confidence": confidence,
                        "summarizes": ids,
                        "source_type": group.memory_type,
                        "decayed_confidence": {
                            i: round(c, 6) for i, c in zip(ids, group.decayed_confidence, strict=True)
                        },
                        "client": client.name,
                    },
                    source_ids=ids,
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
                    action=Action.CREATE,
                    reason=(
                        f"proposed a summary of {len(draft.source_ids)} stale "
                        f"{_slot_label(draft.payload['source_type'], draft.payload['subject'])} memories; "
                        "awaiting approval"
                    ),
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


register(PreferenceDriftDetector)
register(GoalResolver)
register(SummaryEvolver)
register(ContradictionSurfacer, default=False)
