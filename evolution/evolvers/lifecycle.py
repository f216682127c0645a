"""The lifecycle evolvers over whole workspaces: memories moving between kinds (after the SmartMemory
project's evolvers of the same names).

- EpisodicToSemantic: episodic, confidence >= 0.9 and >= 3 days old -> a semantic copy (DERIVED_FROM the
  episode); the episode is archived with metadata promoted_to_semantic.
- EpisodicToZettel: the episodes of each finished calendar day (>= 2) -> one zettel note "Daily rollup
  YYYY-MM-DD"; episodes stay active and are marked rolled_up_into.
- WorkingToProcedural: >= 5 working items with word-set Jaccard >= 0.8 -> one procedural memory; the
  items are archived with metadata promoted_to_procedural.
- OpinionSynthesis: a tag seen in n memories becomes an opinion when
  strength * (1 - 0.3 * 0.5) * (0.5 + 0.5 * strength) >= 0.5, strength = min(1, n / 10) (n = 7 is the
  first that passes); an existing opinion of the topic is updated when n changes.
- ObservationSynthesis: >= 2 distinct facts about one subject -> "Summary of X: f1; f2; ..."; the
  existing observation of the subject is updated when its facts change.

They restructure memory (new memories, archived sources), so they run when named (`evolve --evolver
EpisodicToSemantic`, or `evolvers` in POST .../evolution/runs/), not in the default cycle. Every new
memory and every source change is in a record that reverts exactly (created rows removed, sources
restored). Settings per evolver under workspace.evolution_settings[<name>].
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

import numpy as np

from evolution import selectors, typed_selectors
from evolution.algorithms.lifecycle import (
    daily_rollups,
    observation_groups,
    opinion_candidates,
    procedural_clusters,
    semantic_eligible,
)
from evolution.derived import MAX_LINKED_SOURCES, created_after, derived_memory, insert_derived
from evolution.evolvers.base import (
    REASONS,
    EvolutionResult,
    MemoryUpdates,
    apply_updates,
    register,
    write_memory_updates,
)
from evolution.evolvers.typed import number_setting, types_setting
from evolution.models import EvolutionRun
from evolution.writes import Applied, stale_memories, submit
from history import audit
from history.models import Action, EvolutionRecord
from memories.algorithms.embedding import Embedder, FloatMatrix
from memories.embedding_service import memories_vectors
from memories.inputs import MAX_CONTENT_CHARS
from memories.models import EdgeType, Memory, MemoryType, Status, Workspace

SECONDS_PER_DAY = 86_400.0
PROMOTED_TO_SEMANTIC = "promoted_to_semantic"
ROLLED_UP_INTO = "rolled_up_into"
PROMOTED_TO_PROCEDURAL = "promoted_to_procedural"
# Working items compared at once by WorkingToProcedural: the Jaccard matrix is dense (n x n float64),
# so a 2000-item window bounds it at 32 MB. Items are taken oldest first.
PROCEDURAL_WINDOW = 2000
# Memories per record when one evolver makes many independent copies (EpisodicToSemantic).
SEMANTIC_RECORD_CHUNK = 500


@dataclass
class Derivation:
    """One new memory, the sources it came from, and which of them get an edge."""

    memory: Memory
    sources: list[str]
    reason: str
    edge_type: str = EdgeType.DERIVED_FROM
    linked: list[str] = field(default_factory=list)


def derive(
    evolver: str,
    action: str,
    derivations: Sequence[Derivation],
    source_updates: MemoryUpdates,
    *,
    workspace: Workspace,
    run: EvolutionRun | None,
    dry_run: bool,
    now: datetime,
    per_record: int = 1,
) -> list[EvolutionRecord]:
    """Insert the new memories and edges and apply the source changes (unless dry_run); return records.

    A record covers `per_record` derivations: the created memories and edges (removed by a revert) and
    the sources' before/after (restored by a revert). Each record is a write unit (evolution.writes): its
    memories, edges and source changes commit with it, and a derivation whose sources changed since they
    were read is left out (made again by a later run). Embeddings are computed here, before any unit.
    """
    changes = dict(zip(source_updates.ids, source_updates.changes, strict=True))
    plan = _DerivePlan(evolver, action, changes, workspace=workspace, run=run, dry_run=dry_run, now=now)
    vectors = (
        None
        if dry_run or not derivations
        else memories_vectors(workspace=workspace, memories=[d.memory for d in derivations])
    )
    records: list[EvolutionRecord] = []
    for start in range(0, len(derivations), per_record):
        chunk = list(derivations[start : start + per_record])
        planned = [plan.record(chunk, [])]
        if vectors is None:
            records.extend(submit(planned))
        else:
            embedder, matrix = vectors
            records.extend(submit(planned, partial(plan.apply, chunk, (embedder, matrix[start : start + len(chunk)]))))
    return records


@dataclass
class _DerivePlan:
    """What every write unit of one `derive` call shares: the source changes and the record's context."""

    evolver: str
    action: str
    changes: dict[str, dict[str, tuple[Any, Any]]]
    workspace: Workspace
    run: EvolutionRun | None
    dry_run: bool
    now: datetime

    def sources(self, chunk: Sequence[Derivation]) -> list[str]:
        """The changed sources of `chunk`, each once, in order."""
        return list(dict.fromkeys(mid for d in chunk for mid in d.sources if mid in self.changes))

    def apply(self, chunk: Sequence[Derivation], vectors: tuple[Embedder, FloatMatrix]) -> Applied:
        ids = self.sources(chunk)
        stale = stale_memories(ids, [self.changes[mid] for mid in ids])
        kept = [k for k, d in enumerate(chunk) if not stale.intersection(d.sources)]
        if not kept:
            return [], len(stale)
        derivations = [chunk[k] for k in kept]
        embedder, matrix = vectors
        edges = [(d.memory.id, s, d.edge_type) for d in derivations for s in d.linked]
        edge_ids = insert_derived(
            workspace=self.workspace,
            memories=[d.memory for d in derivations],
            edges=edges,
            now=self.now,
            vectors=(embedder, matrix[kept]),
        )
        updates = MemoryUpdates(self.evolver, self.action, "")
        for mid in self.sources(derivations):
            updates.ids.append(mid)
            updates.changes.append(self.changes[mid])
            updates.reasons.append("")
        write_memory_updates([updates])
        return [self.record(derivations, edge_ids)], len(stale)

    def record(self, chunk: Sequence[Derivation], edge_ids: Sequence[int]) -> EvolutionRecord:
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        for d in chunk:
            for mid in d.sources:
                if mid in self.changes:
                    before[str(mid)] = {n: audit.encode_value(n, old) for n, (old, _) in self.changes[mid].items()}
                    after[str(mid)] = {n: audit.encode_value(n, new) for n, (_, new) in self.changes[mid].items()}
        created_after(after, [d.memory for d in chunk], edge_ids, dry_run=self.dry_run)
        if len(chunk) == 1:
            reason = chunk[0].reason
        else:
            reason = f"{self.evolver}: {len(chunk)} memories derived"
            after[REASONS] = {str(d.memory.id): d.reason for d in chunk}
        return audit.record_build(
            workspace=self.workspace,
            evolver=self.evolver,
            action=self.action,
            reason=reason,
            input_ids=[mid for d in chunk for mid in d.sources],
            output_ids=[d.memory.id for d in chunk],
            before=before,
            after=after,
            run=self.run,
            dry_run=self.dry_run,
            now=self.now,
        )


def bounded_content(lines: Sequence[str], *, head: str = "") -> str:
    """Join `lines` (after `head`) with newlines, stopping before MAX_CONTENT_CHARS with "- ... N more"."""
    out = [head] if head else []
    used = len(head)
    for k, line in enumerate(lines):
        if used + len(line) + 1 > MAX_CONTENT_CHARS - 40:
            out.append(f"- ... {len(lines) - k} more")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def _marked(metadata: dict[str, Any], key: str, value: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    return metadata, {**metadata, key: value}


# -- EpisodicToSemantic ---------------------------------------------------------------------------


class EpisodicToSemantic:
    """Promote confident, settled episodes to semantic knowledge (settings min_confidence 0.9,
    min_age_days 3)."""

    name: ClassVar[str] = "EpisodicToSemantic"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_confidence = number_setting(workspace, self.name, "min_confidence", 0.9)
        min_age = number_setting(workspace, self.name, "min_age_days", 3.0)
        rows = typed_selectors.active_rows(
            workspace=workspace, memory_types=[MemoryType.EPISODIC], fields=("id", "confidence", "created_at")
        )
        now_ts = now.timestamp()
        confidence = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        age = (now_ts - np.fromiter((r[2] for r in rows), np.float64, len(rows))) / SECONDS_PER_DAY
        chosen = np.flatnonzero(
            semantic_eligible(confidence, age, min_confidence=min_confidence, min_age_days=min_age)
        ).tolist()
        result.stats.update(episodes=len(rows), promoted=len(chosen))
        if not chosen:
            return result
        details = typed_selectors.details_of(workspace=workspace, ids=[rows[k][0] for k in chosen])
        derivations: list[Derivation] = []
        sources = MemoryUpdates(self.name, Action.PROMOTE, "episodic -> semantic")
        for k in chosen:
            mid = rows[k][0]
            content, subject, tags, metadata = details[mid]
            memory = derived_memory(
                workspace=workspace,
                memory_type=MemoryType.SEMANTIC,
                content=content,
                evolver=self.name,
                now=now,
                subject=subject,
                tags=tags,
                confidence=float(confidence[k]),
                metadata={"derived_from": [str(mid)]},
            )
            reason = (
                f"episode {mid}: confidence {confidence[k]:.3f} >= {min_confidence:g} and {age[k]:.1f}d >= "
                f"{min_age:g}d old -> semantic {memory.id}"
            )
            derivations.append(Derivation(memory, [mid], reason, linked=[mid]))
            sources.add(
                mid,
                {
                    "status": (Status.ACTIVE.value, Status.ARCHIVED.value),
                    "metadata": _marked(metadata, PROMOTED_TO_SEMANTIC, str(memory.id)),
                },
                reason,
            )
        result.records = derive(
            self.name,
            Action.PROMOTE,
            derivations,
            sources,
            workspace=workspace,
            run=run,
            dry_run=dry_run,
            now=now,
            per_record=SEMANTIC_RECORD_CHUNK,
        )
        return result


# -- EpisodicToZettel -----------------------------------------------------------------------------


class EpisodicToZettel:
    """One zettel note per finished day with >= 2 episodes not rolled up yet (settings min_items 2,
    utc_offset_hours 0)."""

    name: ClassVar[str] = "EpisodicToZettel"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_items = int(number_setting(workspace, self.name, "min_items", 2))
        offset_hours = number_setting(workspace, self.name, "utc_offset_hours", 0.0)
        rows = typed_selectors.active_rows(
            workspace=workspace,
            memory_types=[MemoryType.EPISODIC],
            fields=("id", "created_at", "content"),
            exclude_key=ROLLED_UP_INTO,
        )
        rollups = daily_rollups(
            np.fromiter((r[1] for r in rows), np.float64, len(rows)),
            [r[2] for r in rows],
            now.timestamp(),
            utc_offset_seconds=offset_hours * 3600.0,
            min_items=min_items,
        )
        result.stats.update(episodes=len(rows), rollups=len(rollups))
        if not rollups:
            return result
        metadata = selectors.metadata_of(workspace=workspace, ids=[rows[k][0] for r in rollups for k in r.indices])
        derivations: list[Derivation] = []
        sources = MemoryUpdates(self.name, Action.CREATE, "daily rollup")
        for rollup in rollups:
            ids = [rows[k][0] for k in rollup.indices]
            head, *lines = rollup.content.split("\n")
            memory = derived_memory(
                workspace=workspace,
                memory_type=MemoryType.ZETTEL,
                content=bounded_content(lines, head=head),
                evolver=self.name,
                now=now,
                tags=["daily-rollup"],
                metadata={
                    "rollup_day": rollup.day.isoformat(),
                    "title": rollup.title,
                    "source_count": len(ids),
                    "sources": [str(i) for i in ids[:MAX_LINKED_SOURCES]],
                },
            )
            reason = f"{len(ids)} episodes of {rollup.day.isoformat()} rolled up into zettel {memory.id}"
            derivations.append(Derivation(memory, ids, reason, linked=ids[:MAX_LINKED_SOURCES]))
            for mid in ids:
                sources.add(mid, {"metadata": _marked(metadata.get(mid, {}), ROLLED_UP_INTO, str(memory.id))}, reason)
        result.records = derive(
            self.name, Action.CREATE, derivations, sources, workspace=workspace, run=run, dry_run=dry_run, now=now
        )
        return result


# -- WorkingToProcedural --------------------------------------------------------------------------


class WorkingToProcedural:
    """>= 5 near-identical working items (word Jaccard >= 0.8 with the cluster seed) become one procedural
    memory holding the most central item's content (settings min_items 5, min_jaccard 0.8)."""

    name: ClassVar[str] = "WorkingToProcedural"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_items = int(number_setting(workspace, self.name, "min_items", 5))
        min_jaccard = number_setting(workspace, self.name, "min_jaccard", 0.8)
        rows = selectors.working_buffer(workspace=workspace)
        clusters: list[tuple[list[int], int, float]] = []
        for start in range(0, len(rows), PROCEDURAL_WINDOW):
            window = rows[start : start + PROCEDURAL_WINDOW]
            for c in procedural_clusters([r[1] for r in window], min_items=min_items, min_jaccard=min_jaccard):
                clusters.append(([start + k for k in c.indices], start + c.representative, c.mean_similarity))
        result.stats.update(working=len(rows), procedures=len(clusters))
        if not clusters:
            return result
        metadata = selectors.metadata_of(workspace=workspace, ids=[rows[k][0] for c in clusters for k in c[0]])
        derivations: list[Derivation] = []
        sources = MemoryUpdates(self.name, Action.PROMOTE, "working -> procedural")
        for members, representative, similarity in clusters:
            ids = [rows[k][0] for k in members]
            memory = derived_memory(
                workspace=workspace,
                memory_type=MemoryType.PROCEDURAL,
                content=rows[representative][1],
                evolver=self.name,
                now=now,
                subject=rows[representative][3],
                tags=[t for k in members for t in rows[k][4]],
                confidence=float(np.mean([rows[k][5] for k in members])),
                metadata={
                    "derived_from": [str(i) for i in ids[:MAX_LINKED_SOURCES]],
                    "source_count": len(ids),
                    "mean_similarity": round(similarity, 6),
                },
            )
            reason = (
                f"{len(ids)} working items repeat one procedure (mean word Jaccard {similarity:.3f} >= "
                f"{min_jaccard:g}) -> procedural {memory.id}"
            )
            derivations.append(Derivation(memory, ids, reason, linked=ids[:MAX_LINKED_SOURCES]))
            for mid in ids:
                sources.add(
                    mid,
                    {
                        "status": (Status.ACTIVE.value, Status.ARCHIVED.value),
                        "metadata": _marked(metadata.get(mid, {}), PROMOTED_TO_PROCEDURAL, str(memory.id)),
                    },
                    reason,
                )
        result.records = derive(
            self.name, Action.PROMOTE, derivations, sources, workspace=workspace, run=run, dry_run=dry_run, now=now
        )
        return result


# -- OpinionSynthesis -----------------------------------------------------------------------------

OPINION_SOURCE_TYPES = (
    MemoryType.EPISODIC,
    MemoryType.SEMANTIC,
    MemoryType.FACT,
    MemoryType.EVENT,
    MemoryType.OBSERVATION,
    MemoryType.FINDING,
    MemoryType.OUTCOME,
    MemoryType.DECISION,
)


class OpinionSynthesis:
    """Recurring tags become opinions: confidence = s * 0.85 * (0.5 + 0.5 s), s = min(1, n/10), >= 0.5.

    n counts active memories of the source types (setting source_types) carrying the tag. An opinion
    made earlier for the topic is updated (content, confidence, metadata) when n changed; otherwise
    left alone. Settings: min_confidence (0.5), source_types.
    """

    name: ClassVar[str] = "OpinionSynthesis"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_confidence = number_setting(workspace, self.name, "min_confidence", 0.5)
        types = types_setting(workspace, self.name, "source_types", OPINION_SOURCE_TYPES) or []
        rows = [
            r
            for r in typed_selectors.active_rows(workspace=workspace, memory_types=types, fields=("id", "tags"))
            if r[1]
        ]
        candidates = opinion_candidates([r[1] for r in rows], min_confidence=min_confidence)
        existing = {
            row[1].strip().casefold(): row
            for row in typed_selectors.derived_by(
                workspace=workspace, memory_type=MemoryType.OPINION, evolver=self.name
            )
        }
        derivations: list[Derivation] = []
        updates = MemoryUpdates(self.name, Action.UPDATE, "opinion strength changed")
        for c in candidates:
            ids = [rows[k][0] for k in c.indices]
            metadata = {
                "topic": c.topic,
                "count": c.count,
                "strength": round(c.strength, 6),
                "supporting": [str(i) for i in ids[:MAX_LINKED_SOURCES]],
            }
            reason = (
                f"tag {c.topic!r} seen in {c.count} memories: strength {c.strength:.2f}, confidence "
                f"{c.confidence:.5f} >= {min_confidence:g}"
            )
            found = existing.get(c.topic.casefold())
            if found is not None:
                mid, _, content, confidence, old_meta = found
                if old_meta.get("count") == c.count and content == c.content:
                    continue
                updates.add(
                    mid,
                    {
                        "content": (content, c.content),
                        "confidence": (confidence, c.confidence),
                        "metadata": (old_meta, {**old_meta, **metadata}),
                    },
                    reason,
                )
                continue
            memory = derived_memory(
                workspace=workspace,
                memory_type=MemoryType.OPINION,
                content=c.content,
                evolver=self.name,
                now=now,
                subject=c.topic,
                tags=[c.topic],
                confidence=c.confidence,
                metadata=metadata,
            )
            derivations.append(
                Derivation(memory, ids, f"{reason} -> opinion {memory.id}", linked=ids[:MAX_LINKED_SOURCES])
            )
        empty = MemoryUpdates(self.name, Action.CREATE, "")
        result.records = derive(
            self.name, Action.CREATE, derivations, empty, workspace=workspace, run=run, dry_run=dry_run, now=now
        )
        result.records += apply_updates([updates], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(tagged=len(rows), topics=len(candidates), created=len(derivations), updated=len(updates))
        return result


# -- ObservationSynthesis -------------------------------------------------------------------------


class ObservationSynthesis:
    """>= 2 distinct facts about one subject -> an observation "Summary of X: f1; f2; ..." (setting
    min_facts 2). The observation made earlier for a subject is updated when its facts change."""

    name: ClassVar[str] = "ObservationSynthesis"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        min_facts = int(number_setting(workspace, self.name, "min_facts", 2))
        rows = typed_selectors.active_rows(
            workspace=workspace, memory_types=[MemoryType.FACT], fields=("id", "subject", "content")
        )
        groups = observation_groups([r[1] for r in rows], [r[2] for r in rows], min_facts=min_facts)
        existing = {
            row[1].strip().casefold(): row
            for row in typed_selectors.derived_by(
                workspace=workspace, memory_type=MemoryType.OBSERVATION, evolver=self.name
            )
        }
        derivations: list[Derivation] = []
        updates = MemoryUpdates(self.name, Action.UPDATE, "observation facts changed")
        for group in groups:
            ids = [rows[k][0] for k in group.indices]
            content = group.content[:MAX_CONTENT_CHARS]
            metadata = {"source_count": len(ids), "sources": [str(i) for i in ids[:MAX_LINKED_SOURCES]]}
            reason = f"{len(ids)} facts about {group.subject!r} summarised"
            found = existing.get(group.subject.casefold())
            if found is not None:
                mid, _, old_content, _, old_meta = found
                if old_content != content:
                    updates.add(
                        mid,
                        {"content": (old_content, content), "metadata": (old_meta, {**old_meta, **metadata})},
                        reason,
                    )
                continue
            memory = derived_memory(
                workspace=workspace,
                memory_type=MemoryType.OBSERVATION,
                content=content,
                evolver=self.name,
                now=now,
                subject=group.subject,
                metadata=metadata,
            )
            derivations.append(
                Derivation(memory, ids, f"{reason} -> observation {memory.id}", linked=ids[:MAX_LINKED_SOURCES])
            )
        empty = MemoryUpdates(self.name, Action.CREATE, "")
        result.records = derive(
            self.name, Action.CREATE, derivations, empty, workspace=workspace, run=run, dry_run=dry_run, now=now
        )
        result.records += apply_updates([updates], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(facts=len(rows), subjects=len(groups), created=len(derivations), updated=len(updates))
        return result


for _evolver in (EpisodicToSemantic, EpisodicToZettel, OpinionSynthesis, ObservationSynthesis, WorkingToProcedural):
    register(_evolver, default=False)
