"""EnhancedWorkingToEpisodic: the working buffer consolidated into episodic summaries."""

from __future__ import annotations

import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, ClassVar

import numpy as np
from scipy import sparse

from evolution import selectors
from evolution.algorithms.consolidation import (
    CLUSTER_JACCARD,
    CLUSTER_TIME_AFFINITY,
    CLUSTER_TIME_SCALE_SECONDS,
    EPISODE_MIN_WEIGHT,
    EPISODE_WEIGHT_HOURS,
    WorkingItem,
    buffer_threshold,
    cluster_working,
    episode_summary,
)
from evolution.algorithms.text import word_set
from evolution.evolvers.base import RECORD_CHUNK, EvolutionResult, MemoryUpdates, register, write_memory_updates
from evolution.models import EvolutionRun
from evolution.writes import Applied, stale_memories, submit
from graph.writes import graph_mirror, graph_touch
from history import audit
from history.models import Action, EvolutionRecord
from memories.algorithms.embedding import Embedder, FloatMatrix
from memories.algorithms.sortkey import activation_sort_key
from memories.bulk import bulk_insert
from memories.embedding_service import memories_embed, memories_vectors
from memories.inputs import MAX_CONTENT_CHARS, MAX_TAGS, origin_tier
from memories.models import Edge, EdgeType, Memory, MemoryType, Status, Workspace

PROMOTED_TO_EPISODIC = "promoted_to_episodic"
WORKING_EXPIRED = "working_expired"
LISTED_SOURCES = 50
# An item joins a seed only when exp(-|dt| / 3600 s) > 0.5, i.e. |dt| < 3600 ln 2 = 2495.3 s.
_JOIN_SECONDS = CLUSTER_TIME_SCALE_SECONDS * math.log(1.0 / CLUSTER_TIME_AFFINITY)
_CLUSTER_BLOCK = 256


def cluster_buffer(items: Sequence[WorkingItem], *, block: int = _CLUSTER_BLOCK) -> list[list[int]]:
    """`consolidation.cluster_working`, computed in windows so a large buffer needs no n x n matrix.

    Seeds are visited oldest first and every earlier item is already assigned when a seed is visited,
    so a seed can only take items from itself up to 2495 s later. Seeds are processed `block` at a time
    against the window of items up to that horizon, with the same Jaccard and time-affinity arithmetic
    (identical floats), hence identical clusters. Small buffers go straight to `cluster_working`.
    """
    n = len(items)
    if n <= 2 * block:
        return cluster_working(items)
    order = sorted(range(n), key=lambda k: (items[k].created_at_ts, items[k].index))
    ordered = [items[k] for k in order]
    ts = np.fromiter((it.created_at_ts for it in ordered), dtype=np.float64, count=n)
    vocab: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    for r, it in enumerate(ordered):
        for w in word_set(it.content):
            rows.append(r)
            cols.append(vocab.setdefault(w, len(vocab)))
    x = sparse.csr_matrix(
        (np.ones(len(rows), dtype=np.float64), (np.asarray(rows, np.int64), np.asarray(cols, np.int64))),
        shape=(n, max(len(vocab), 1)),
    )
    sizes = np.asarray(x.sum(axis=1), dtype=np.float64).ravel()
    assigned = np.zeros(n, dtype=bool)
    clusters: list[list[int]] = []
    for a in range(0, n, block):
        b = min(a + block, n)
        # One second of slack past the exact horizon; the affinity test below decides.
        c = int(np.searchsorted(ts, ts[b - 1] + _JOIN_SECONDS + 1.0, side="right"))
        inter = np.asarray((x[a:b] @ x[a:c].T).todense(), dtype=np.float64)
        union = sizes[a:b, None] + sizes[None, a:c] - inter
        sim = np.zeros_like(inter)
        np.divide(inter, union, out=sim, where=union > 0)
        affinity = np.exp(-np.abs(ts[a:b, None] - ts[None, a:c]) / CLUSTER_TIME_SCALE_SECONDS)
        joins = (sim > CLUSTER_JACCARD) & (affinity > CLUSTER_TIME_AFFINITY)
        for seed in range(a, b):
            if assigned[seed]:
                continue
            members = joins[seed - a] & ~assigned[a:c]
            members[seed - a] = True
            assigned[a:c] |= members
            clusters.append([ordered[a + k].index for k in np.flatnonzero(members)])
    return clusters


def _bounded(content: str) -> str:
    """Keep an episode within the memory content limit (a buffer left to grow for days can be huge)."""
    if len(content) <= MAX_CONTENT_CHARS:
        return content
    cut = content.rfind("\n", 0, MAX_CONTENT_CHARS - 80)
    kept = content[: cut if cut > 0 else MAX_CONTENT_CHARS - 80]
    return f"{kept}\n[... {content.count(chr(10)) - kept.count(chr(10))} more lines]"


def _union_tags(tag_lists: Sequence[Sequence[str]]) -> list[str]:
    seen: dict[str, None] = {}
    for tags in tag_lists:
        for tag in tags:
            seen.setdefault(tag, None)
    return list(seen)[:MAX_TAGS]


@register
class EnhancedWorkingToEpisodic:
    """Consolidate the working buffer into episodic summaries once it reaches its adaptive threshold.

    threshold = max(10, int(40 * (1 - 0.3 * ((min(1.5, avg_len / 100) + frac_younger_than_1h) / 2))));
    clusters: greedy, word-set Jaccard > 0.3 and exp(-|dt| / 3600 s) > 0.5 with the seed; one episodic
    memory per cluster with lines `[w=%.2f] content`, w = exp(-age_h / 24) > 0.1, DERIVED_FROM each
    source; sources archived with metadata promoted_to_episodic = the episode id. A cluster with no
    line left (every item older than 55.3 h) is archived with metadata working_expired = true.
    """

    name: ClassVar[str] = "EnhancedWorkingToEpisodic"
    writes_in_chunks: ClassVar[bool] = True

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        rows = selectors.working_buffer(workspace=workspace)
        now_ts = now.timestamp()
        items = [WorkingItem(index=k, content=row[1], created_at_ts=row[2]) for k, row in enumerate(rows)]
        threshold = buffer_threshold(items, now_ts)
        result.stats.update(buffer=len(items), threshold=threshold, episodes=0, archived=0)
        if not items or len(items) < threshold:
            return result
        clusters = cluster_buffer(items)
        metadata = selectors.metadata_of(workspace=workspace, ids=[row[0] for row in rows])
        origin = f"evolver:{self.name}"
        episodes: list[Memory] = []
        edges: list[tuple[uuid.UUID, str]] = []
        source_updates = MemoryUpdates(self.name, Action.PROMOTE, "working -> episodic")
        plans: list[tuple[list[int], Memory | None]] = []
        for cluster in clusters:
            members = [items[k] for k in cluster]
            content = _bounded(episode_summary(members, now_ts))
            episode: Memory | None = None
            if content:
                subjects = {rows[k][3] for k in cluster}
                episode = Memory(
                    id=uuid.uuid4(),
                    workspace=workspace,
                    memory_type=MemoryType.EPISODIC,
                    content=content,
                    subject=subjects.pop() if len(subjects) == 1 else "",
                    tags=_union_tags([rows[k][4] for k in cluster]),
                    origin=origin,
                    origin_tier=origin_tier(origin),
                    confidence=float(np.mean([rows[k][5] for k in cluster])),
                    activation_last_boost_at=now,
                    created_at=now,
                    updated_at=now,
                    # Every source is linked by a DERIVED_FROM edge; metadata names the first few only.
                    metadata={
                        "promoted_from": [str(rows[k][0]) for k in cluster[:LISTED_SOURCES]],
                        "source_count": len(cluster),
                    },
                )
                episode.activation_sort_key = activation_sort_key(
                    episode.activation_score, now, episode.activation_half_life_hours
                )
                episodes.append(episode)
                edges.extend((episode.id, rows[k][0]) for k in cluster)
            for k in cluster:
                mid = rows[k][0]
                old_meta = metadata.get(mid, {})
                mark: dict[str, Any] = (
                    {PROMOTED_TO_EPISODIC: str(episode.id)} if episode is not None else {WORKING_EXPIRED: True}
                )
                source_updates.add(
                    mid,
                    {"status": (Status.ACTIVE, Status.ARCHIVED), "metadata": (old_meta, {**old_meta, **mark})},
                    "",
                )
            plans.append((cluster, episode))
        changes = dict(zip(source_updates.ids, source_updates.changes, strict=True))
        vectors = None if dry_run or not episodes else memories_vectors(workspace=workspace, memories=episodes)
        row_of = {episode.id: k for k, episode in enumerate(episodes)}
        unit: list[tuple[list[int], Memory | None]] = []
        size = 0
        for k, (cluster, episode) in enumerate(plans):
            unit.append((cluster, episode))
            size += len(cluster)
            if size < RECORD_CHUNK and k + 1 < len(plans):
                continue
            context = _Unit(self, workspace, run, dry_run, now, rows, changes, threshold)
            planned = [context.record(cluster, episode, None) for cluster, episode in unit]
            if dry_run:
                result.records.extend(submit(planned))
            else:
                at = [row_of[episode.id] for _, episode in unit if episode is not None]
                unit_vectors = None if vectors is None or not at else (vectors[0], vectors[1][at])
                result.records.extend(submit(planned, partial(context.apply, unit, unit_vectors)))
            unit, size = [], 0
        result.stats.update(episodes=len(episodes), archived=len(source_updates))
        return result

    def _record(
        self,
        workspace: Workspace,
        run: EvolutionRun | None,
        dry_run: bool,
        now: datetime,
        rows: Sequence[tuple[Any, ...]],
        cluster: list[int],
        episode: Memory | None,
        changes: dict[str, dict[str, tuple[Any, Any]]],
        edge_ids: dict[tuple[uuid.UUID, str], int] | None,
        threshold: int,
    ) -> EvolutionRecord:
        """The record of one cluster; edge_ids None while planning (the edges get their ids when inserted)."""
        sources = [rows[k][0] for k in cluster]
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        for mid in sources:
            before[str(mid)] = {n: audit.encode_value(n, old) for n, (old, _) in changes[mid].items()}
            after[str(mid)] = {n: audit.encode_value(n, new) for n, (_, new) in changes[mid].items()}
        head = f"working buffer reached its adaptive threshold {threshold}: {len(sources)} working memories"
        if episode is None:
            reason = (
                f"{head} older than {EPISODE_WEIGHT_HOURS * math.log(1 / EPISODE_MIN_WEIGHT):.1f} h "
                "(every weight exp(-age_h/24) <= 0.1): archived without an episode"
            )
            action = Action.ARCHIVE
        else:
            reason = (
                f"{head} (word Jaccard > {CLUSTER_JACCARD} and within {_JOIN_SECONDS / 60:.1f} min of the "
                f"oldest) consolidated into episodic memory {episode.id}"
            )
            action = Action.PROMOTE
            after[audit.CREATED_MEMORIES] = [str(episode.id)]
            after["episodes"] = {str(episode.id): episode.content}
            if not dry_run and edge_ids is not None:
                after[audit.CREATED_EDGES] = [edge_ids[(episode.id, mid)] for mid in sources]
        return audit.record_build(
            workspace=workspace,
            evolver=self.name,
            action=action,
            reason=reason,
            input_ids=sources,
            output_ids=[episode.id] if episode is not None else sources,
            before=before,
            after=after,
            run=run,
            dry_run=dry_run,
            now=now,
        )


@dataclass
class _Unit:
    """One write unit of EnhancedWorkingToEpisodic: clusters of at least RECORD_CHUNK sources together (the
    last one smaller), whose episodes, edges and archived sources commit with their records."""

    evolver: EnhancedWorkingToEpisodic
    workspace: Workspace
    run: EvolutionRun | None
    dry_run: bool
    now: datetime
    rows: Sequence[tuple[Any, ...]]
    changes: dict[str, dict[str, tuple[Any, Any]]]
    threshold: int

    def record(
        self, cluster: list[int], episode: Memory | None, edge_ids: dict[tuple[uuid.UUID, str], int] | None
    ) -> EvolutionRecord:
        return self.evolver._record(
            self.workspace,
            self.run,
            self.dry_run,
            self.now,
            self.rows,
            cluster,
            episode,
            self.changes,
            edge_ids,
            self.threshold,
        )

    def apply(
        self, plans: Sequence[tuple[list[int], Memory | None]], vectors: tuple[Embedder, FloatMatrix] | None
    ) -> Applied:
        """Write the clusters none of whose sources changed since they were read (the others stay in the
        buffer for the next run) and return their records."""
        rows = self.rows
        sources = [rows[k][0] for cluster, _ in plans for k in cluster]
        stale = stale_memories(sources, [self.changes[mid] for mid in sources])
        kept: list[tuple[list[int], Memory | None]] = []
        kept_rows: list[int] = []
        at = 0
        for cluster, episode in plans:
            fresh = not any(rows[k][0] in stale for k in cluster)
            if fresh:
                kept.append((cluster, episode))
            if episode is not None:
                if fresh:
                    kept_rows.append(at)
                at += 1
        episodes = [episode for _, episode in kept if episode is not None]
        edges = [(episode.id, rows[k][0]) for cluster, episode in kept if episode is not None for k in cluster]
        edge_ids: dict[tuple[uuid.UUID, str], int] = {}
        if episodes:
            assert vectors is not None, "a unit with episodes has their vectors"
            memories_embed(workspace=self.workspace, memories=episodes, vectors=(vectors[0], vectors[1][kept_rows]))
            bulk_insert(Memory, episodes)
            graph_touch(workspace=self.workspace)  # before the insert: see graph.writes.graph_touch
            created = Edge.objects.bulk_create(
                [
                    Edge(
                        workspace=self.workspace,
                        source_id=src,
                        target_id=dst,
                        edge_type=EdgeType.DERIVED_FROM,
                        created_at=self.now,
                    )
                    for src, dst in edges
                ],
                batch_size=1000,
            )
            graph_mirror(
                workspace=self.workspace, added=((e.source_id, e.target_id, e.edge_type, e.weight) for e in created)
            )
            edge_ids = {pair: e.pk for pair, e in zip(edges, created, strict=True)}
        updates = MemoryUpdates(self.evolver.name, Action.PROMOTE, "working -> episodic")
        for cluster, _ in kept:
            for k in cluster:
                updates.ids.append(rows[k][0])
                updates.changes.append(self.changes[rows[k][0]])
                updates.reasons.append("")
        write_memory_updates([updates])
        return [self.record(cluster, episode, edge_ids) for cluster, episode in kept], len(stale)
