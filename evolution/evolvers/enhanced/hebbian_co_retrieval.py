"""The enhanced evolvers (the SmartMemory project's evolvers of how use and disuse change memory) as services
over whole workspaces.

Each evolver loads its inputs in one or two `values_list` queries, hands plain arrays to the pure
algorithms in `evolution.algorithms`, writes only the rows whose values change (prepared UPDATEs in
batches, see `base.write_rows`) and returns records holding the exact before/after values. There is no
per-cycle cap: the arithmetic is vectorised over the whole workspace.

Cycle order (registration order below): EnhancedWorkingToEpisodic, ExponentialDecay,
InterferenceBasedConsolidation, RetrievalBasedStrengthening, HebbianCoRetrieval.

Evolver writes leave `updated_at` alone: it means "last edited", and a decay sweep that touched every
row would make every memory look freshly edited (and would defeat recency-ordered reads).
"""

from __future__ import annotations

import json
import math
import uuid
import zlib
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import orjson
from scipy import sparse

from core.errors import InvalidInput
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
from evolution.algorithms.decay import days_since_reference, decay_plan
from evolution.algorithms.hebbian import hebbian_boosts, timed_co_retrieval_pairs
from evolution.algorithms.interference import apply_interference, interference_pairs
from evolution.algorithms.retrieval import SHORT_WINDOW_DAYS, RetrievalProfile, strengthening
from evolution.algorithms.text import word_set
from evolution.evolvers.base import (
    EvolutionResult,
    MemoryUpdates,
    apply_updates,
    insert_rows,
    register,
    write_memory_updates,
    write_rows,
)
from evolution.models import EvolutionRun
from graph.store import CO_RETRIEVED_FULL_COUNT
from graph.writes import graph_mirror, graph_touch
from history import audit
from history.models import Action, EvolutionRecord
from memories.algorithms.embedding import stack_embeddings
from memories.algorithms.sortkey import activation_sort_key
from memories.embedding_service import memories_embed
from memories.embeddings import embedder_for
from memories.inputs import MAX_CONTENT_CHARS, MAX_TAGS, origin_tier
from memories.models import Edge, EdgeType, Memory, MemoryType, Status, Workspace

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

INTERFERENCE_MARKER = selectors.INTERFERENCE_MARKER
PROMOTED_TO_EPISODIC = "promoted_to_episodic"
WORKING_EXPIRED = "working_expired"
EDGE_RECORD_CHUNK = 500
LISTED_SOURCES = 50
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
# An item joins a seed only when exp(-|dt| / 3600 s) > 0.5, i.e. |dt| < 3600 ln 2 = 2495.3 s.
_JOIN_SECONDS = CLUSTER_TIME_SCALE_SECONDS * math.log(1.0 / CLUSTER_TIME_AFFINITY)
_CLUSTER_BLOCK = 256


def _setting(workspace: Workspace, evolver: str, key: str, default: float) -> float:
    """A number from workspace.evolution_settings[evolver][key], else ``default`` (the evolver's own)."""
    section = (workspace.evolution_settings or {}).get(evolver) or {}
    value = section.get(key, default) if isinstance(section, dict) else default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"evolution settings {evolver}.{key}: {value!r} is not a number", field=key)
    return float(value)


def _epochs(values: Sequence[float | None]) -> FloatArray:
    """Epoch seconds (as the selectors return them) as float64; NaN for None."""
    return np.fromiter((math.nan if v is None else v for v in values), dtype=np.float64, count=len(values))


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


@lru_cache(maxsize=1 << 16)
def _from_micros(value: int) -> datetime:
    # Cached: a cycle converts one or two times per counted pair, drawn from one time per result set.
    return _EPOCH + timedelta(microseconds=value)


# -- EnhancedWorkingToEpisodic --------------------------------------------------------------------


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
        edge_ids: dict[tuple[uuid.UUID, str], int] = {}
        if not dry_run:
            if episodes:
                memories_embed(workspace=workspace, memories=episodes)
                Memory.objects.bulk_create(episodes, batch_size=500)
                graph_touch(workspace=workspace)  # before the insert: see graph.writes.graph_touch
                created = Edge.objects.bulk_create(
                    [
                        Edge(
                            workspace=workspace,
                            source_id=src,
                            target_id=dst,
                            edge_type=EdgeType.DERIVED_FROM,
                            created_at=now,
                        )
                        for src, dst in edges
                    ],
                    batch_size=1000,
                )
                graph_mirror(
                    workspace=workspace, added=((e.source_id, e.target_id, e.edge_type, e.weight) for e in created)
                )
                edge_ids = {pair: e.pk for pair, e in zip(edges, created, strict=True)}
            write_memory_updates([source_updates])
        changes = dict(zip(source_updates.ids, source_updates.changes, strict=True))
        for cluster, episode in plans:
            result.records.append(
                self._record(workspace, run, dry_run, now, rows, cluster, episode, changes, edge_ids, threshold)
            )
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
        edge_ids: dict[tuple[uuid.UUID, str], int],
        threshold: int,
    ) -> EvolutionRecord:
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
            if not dry_run:
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


# -- ExponentialDecay -----------------------------------------------------------------------------


@register
class ExponentialDecay:
    """retention = exp(-days / stability) for active episodic memories; archive below 0.1.

    days: since last access, else the event time (valid_from), else creation; stability: the memory's
    e-folding time in days (default 30). Pinned memories are decayed but never archived: a person
    pinned them. Settings: memory_types (list), archive_threshold, default_stability.
    """

    name: ClassVar[str] = "ExponentialDecay"

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "archive_threshold", 0.1)
        default_stability = _setting(workspace, self.name, "default_stability", 30.0)
        types = ((workspace.evolution_settings or {}).get(self.name) or {}).get("memory_types") or [MemoryType.EPISODIC]
        if not isinstance(types, list) or not all(t in MemoryType.values for t in types):
            raise InvalidInput(
                f"evolution settings {self.name}.memory_types: {types!r} is not a list of memory types",
                field="memory_types",
            )
        rows = selectors.decay_rows(workspace=workspace, memory_types=types)
        n = len(rows)
        result.stats.update(memories=n, decayed=0, archived=0)
        if n == 0:
            return result
        ids, old, stab, last, event, created, pinned = zip(*rows, strict=True)
        days = days_since_reference(now.timestamp(), _epochs(last), _epochs(event), _epochs(created))
        plan = decay_plan(
            np.arange(n), days, np.asarray(stab, np.float64), threshold, default_stability=default_stability
        )
        archive = plan.archive & ~np.asarray(pinned, dtype=bool)
        new = plan.retention.tolist()
        day_list, stab_list = plan.days.tolist(), plan.stability.tolist()
        decayed = MemoryUpdates(self.name, Action.DECAY, "retention = exp(-days / stability)")
        archived = MemoryUpdates(
            self.name, Action.ARCHIVE, f"retention = exp(-days / stability) < {threshold:g}: soft-archived"
        )
        changed = np.flatnonzero((plan.retention != np.asarray(old, np.float64)) | archive)
        for k in changed.tolist():
            head = f"retention exp(-{day_list[k]:.2f}d/{stab_list[k]:.2f}d) = {new[k]:.6f}"
            if archive[k]:
                archived.add(
                    ids[k],
                    {"retention_score": (old[k], new[k]), "status": (Status.ACTIVE, Status.ARCHIVED)},
                    f"{head} < {threshold:g}: archived",
                )
            else:
                kept = "pinned, kept" if plan.archive[k] else "kept"
                decayed.add(ids[k], {"retention_score": (old[k], new[k])}, f"{head}: {kept}")
        result.records = apply_updates([decayed, archived], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(decayed=len(decayed), archived=len(archived))
        return result


# -- InterferenceBasedConsolidation ---------------------------------------------------------------


def _embedding_fingerprint(blob: bytes) -> str:
    return f"{zlib.crc32(blob):08x}"


@register
class InterferenceBasedConsolidation:
    """Similar memories compete: score *= (1 - cosine * 0.05) for both ends of each pair.

    Pairs: cosine >= 0.85 among a memory's top 5 neighbours, each unordered pair once. Incremental:
    only memories whose embedding has not been compared yet (metadata interference_checked differs from
    the CRC-32 of the stored embedding: new memories, re-embedded ones, or ones a revert put back) are
    searched, against the whole matrix of active embedded memories. The marker is written in the same
    record as the penalty (or an "annotate" record), so reverting a run also makes its memories new
    again. Settings: similarity_threshold, interference_weight, top_k_neighbors.
    """

    name: ClassVar[str] = "InterferenceBasedConsolidation"

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "similarity_threshold", 0.85)
        weight = _setting(workspace, self.name, "interference_weight", 0.05)
        top_k = int(_setting(workspace, self.name, "top_k_neighbors", 5))
        model = embedder_for(workspace).name
        rows = [row for row in selectors.embedding_rows(workspace=workspace, model=model) if row[2]]
        result.stats.update(memories=len(rows), candidates=0, pairs=0, penalised=0)
        if not rows:
            return result
        # Only vectors of the workspace's model are read; a blob of another length under that name cannot
        # be compared either, so only the most common width takes part.
        width = Counter(len(row[2]) for row in rows).most_common(1)[0][0]
        rows = [row for row in rows if len(row[2]) == width]
        ids = [row[0] for row in rows]
        retention = np.asarray([row[1] for row in rows], dtype=np.float64)
        blobs = [row[2] for row in rows]
        fingerprints = [_embedding_fingerprint(b) for b in blobs]
        candidates = [k for k, row in enumerate(rows) if row[3] != fingerprints[k]]
        result.stats.update(memories=len(rows), candidates=len(candidates))
        if not candidates:
            return result
        matrix = stack_embeddings(blobs, width // 4)
        pairs = interference_pairs(matrix, candidates, top_k=top_k, threshold=threshold)
        applied = apply_interference(retention, pairs.i, pairs.j, pairs.sims, weight)
        partners = _partners_by_node(applied.pairs.i, applied.pairs.j, applied.pairs.sims)
        candidate_set = set(candidates)
        metadata = selectors.metadata_of(workspace=workspace, ids=[ids[k] for k in candidates])
        penalised = MemoryUpdates(self.name, Action.DECAY, f"interference: retention x (1 - cosine x {weight:g})")
        checked = MemoryUpdates(
            self.name, Action.ANNOTATE, f"compared with the workspace: no memory with cosine >= {threshold:g}"
        )
        old_list, new_list, factor_list = applied.old.tolist(), applied.new.tolist(), applied.factor.tolist()
        for k, index in enumerate(applied.indices.tolist()):
            mid = ids[index]
            changes: dict[str, tuple[Any, Any]] = {"retention_score": (old_list[k], new_list[k])}
            if index in candidate_set:
                old_meta = metadata.get(mid, {})
                changes["metadata"] = (old_meta, {**old_meta, INTERFERENCE_MARKER: fingerprints[index]})
            listed = ", ".join(f"{ids[o]} (cos {s:.4f})" for o, s in partners[index])
            penalised.add(
                mid,
                changes,
                f"interference with {len(partners[index])} similar memories [{listed}]: "
                f"retention {old_list[k]:.6f} x {factor_list[k]:.6f} = {new_list[k]:.6f}",
            )
        touched = set(applied.indices.tolist())
        for index in candidates:
            if index in touched:
                continue
            mid = ids[index]
            old_meta = metadata.get(mid, {})
            checked.add(mid, {"metadata": (old_meta, {**old_meta, INTERFERENCE_MARKER: fingerprints[index]})}, "")
        result.records = apply_updates([penalised, checked], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(pairs=int(applied.pairs.i.size), penalised=len(penalised))
        return result


def _partners_by_node(i: IntArray, j: IntArray, sims: FloatArray) -> dict[int, list[tuple[int, float]]]:
    """For every node of the pairs, its partners and cosines (one sort instead of a scan per node)."""
    nodes = np.concatenate([i, j])
    others = np.concatenate([j, i])
    cos = np.concatenate([sims, sims])
    order = np.argsort(nodes, kind="stable")
    out: dict[int, list[tuple[int, float]]] = {}
    for node, other, sim in zip(nodes[order].tolist(), others[order].tolist(), cos[order].tolist(), strict=True):
        out.setdefault(node, []).append((other, sim))
    return out


# -- RetrievalBasedStrengthening ------------------------------------------------------------------


def _empty_profile(n: int, lookback_days: float) -> RetrievalProfile:
    return RetrievalProfile(
        total_count=np.zeros(n, np.intp),
        search_count=np.zeros(n, np.intp),
        avg_rank=np.zeros(n, np.float64),
        velocity_7d=np.zeros(n, np.float64),
        velocity_30d=np.zeros(n, np.float64),
        top1_count=np.zeros(n, np.intp),
        last_retrieved_days_ago=np.full(n, np.inf, np.float64),
        lookback_days=lookback_days,
    )


class StoredProfiles:
    """The profiles kept in Memory.retrieval_profile: the keys of `RetrievalProfile.as_dict`, with
    the time of the last retrieval (ISO, UTC) instead of its age, so a stored profile only changes when its
    counts or windows do.

    Built for a whole workspace at once: the arrays become lists once (indexing numpy scalars per memory
    and key cost more than the rest of the loop), and the times are formatted by numpy, each distinct one
    once (`iso_milliseconds`; with `datetime.isoformat` per memory, 62k profiles took twice as long).
    """

    def __init__(self, profile: RetrievalProfile, last_at: FloatArray) -> None:
        columns = profile.count_columns()
        self.keys = [*columns, "last_retrieved_at"]
        texts: list[str | None] = [None] * last_at.size
        known = np.flatnonzero(np.isfinite(last_at))
        if known.size:
            distinct, inverse = np.unique(last_at[known], return_inverse=True)
            formatted = iso_milliseconds(distinct)
            for k, at in zip(known.tolist(), inverse.tolist(), strict=True):
                texts[k] = formatted[at]
        # One tuple of values per memory, in key order (zip in C), made a dict when asked for.
        self.values: list[tuple[Any, ...]] = list(
            zip(*(column.tolist() for column in columns.values()), texts, strict=True)
        )

    def __getitem__(self, k: int) -> dict[str, Any]:
        return dict(zip(self.keys, self.values[k], strict=True))


def iso_milliseconds(epochs: FloatArray) -> list[str]:
    """`datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds")` of every epoch, by numpy.

    Rounded as datetime rounds a float timestamp (to the microsecond, half to even, on the fraction), then
    truncated to milliseconds as isoformat does; identical on 600k sampled values, edge cases included.
    """
    fraction, whole = np.modf(np.asarray(epochs, dtype=np.float64))
    micros = whole.astype(np.int64) * 1_000_000 + np.rint(fraction * 1e6).astype(np.int64)
    texts: list[str] = np.datetime_as_string(micros.astype("datetime64[us]"), unit="ms").tolist()
    return [f"{text}+00:00" for text in texts]


def _profile_value(stored: Any) -> Any:
    """The stored profile as a value: the column as read is JSON text on SQLite, decoded by orjson (the
    stdlib takes what orjson refuses). Decoding with orjson costs ~1 us a profile, encoding the new profile
    with the stdlib to compare texts cost ~6 us; a cycle reads one per retrieved memory (62k here)."""
    if isinstance(stored, str | bytes):
        try:
            return orjson.loads(stored)
        except orjson.JSONDecodeError:
            return json.loads(stored)
    return stored


@register
class RetrievalBasedStrengthening:
    """The testing effect: retrieved memories gain retention, unretrieved ones slowly lose it.

    Profiles (stored in Memory.retrieval_profile) come from the workspace's retrieval events of used
    sources (search, get, context, helpful; never inspector reads): total, search count, average
    0-based search rank, velocity_7d / velocity_30d in retrievals per day, top-1 count, time of the
    last retrieval. Retrieved within 30 days: retention = min(1, base + 0.1 ln(1 + total) / (1 + rank) *
    v7 / (v30 + 1e-6)); otherwise retention *= 1 - 0.005 * elapsed_days. elapsed_days is capped by the
    time since this evolver's previous applied run, so running it hourly or daily decays alike instead
    of compounding a full window per run. Settings: retrieval_weight, unretrieved_decay_rate, lookback_days.
    """

    name: ClassVar[str] = "RetrievalBasedStrengthening"

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        weight = _setting(workspace, self.name, "retrieval_weight", 0.1)
        decay_rate = _setting(workspace, self.name, "unretrieved_decay_rate", 0.005)
        lookback = _setting(workspace, self.name, "lookback_days", 30.0)
        if lookback <= SHORT_WINDOW_DAYS:
            raise InvalidInput("evolution settings lookback_days must exceed 7", field="lookback_days")
        rows = selectors.retention_rows(workspace=workspace)
        n = len(rows)
        result.stats.update(memories=n, boosted=0, decayed=0, profiles=0)
        if n == 0:
            return result
        ids = [row[0] for row in rows]
        old_retention = [row[1] for row in rows]
        position = {mid: k for k, mid in enumerate(ids)}
        profile = _empty_profile(n, lookback)
        now_ts = now.timestamp()
        search_count = profile.search_count
        rank_sum = np.zeros(n, np.float64)
        in_short = np.zeros(n, np.float64)
        in_lookback = np.zeros(n, np.float64)
        aggregates = selectors.retrieval_aggregates(
            workspace=workspace, now=now, lookback_days=lookback, short_days=SHORT_WINDOW_DAYS
        )
        # Positions of the retrieved memories among the active ones (-1: not active, left out).
        at = np.fromiter(
            (position.get(mid, -1) for mid in aggregates.memory_ids), dtype=np.intp, count=len(aggregates.memory_ids)
        )
        known = at >= 0
        k_at = at[known]
        profile.total_count[k_at] = aggregates.total[known]
        search_count[k_at] = aggregates.search[known]
        rank_sum[k_at] = aggregates.rank_sum[known]
        profile.top1_count[k_at] = aggregates.top1[known]
        in_short[k_at] = aggregates.in_short[known]
        in_lookback[k_at] = aggregates.in_lookback[known]
        profile.last_retrieved_days_ago[k_at] = np.maximum(now_ts - aggregates.last_at[known], 0.0) / 86_400.0
        last_at_array = np.full(n, math.nan)
        last_at_array[k_at] = aggregates.last_at[known]
        np.divide(rank_sum, search_count, out=profile.avg_rank, where=search_count > 0)
        profile.velocity_7d[:] = in_short / SHORT_WINDOW_DAYS
        profile.velocity_30d[:] = in_lookback / lookback
        cursor = selectors.evolver_cursor(workspace=workspace, name=self.name)
        since_previous = (now - cursor.ran_at).total_seconds() / 86_400.0 if cursor.ran_at else math.inf
        age = np.minimum((now_ts - _epochs([row[2] for row in rows])) / 86_400.0, since_previous)
        outcome = strengthening(
            old_retention,
            profile.total_count,
            profile.avg_rank,
            profile.velocity_7d,
            profile.velocity_30d,
            profile.last_retrieved_days_ago,
            weight,
            decay_rate,
            lookback,
            age_days=age,
        )
        boosted = MemoryUpdates(self.name, Action.BOOST, "retrieval strengthening (testing effect)")
        decayed = MemoryUpdates(self.name, Action.DECAY, f"not retrieved in {lookback:g} days: unretrieved decay")
        new_ret = outcome.retention.tolist()
        boost, elapsed, factor = outcome.boost.tolist(), outcome.elapsed_days.tolist(), outcome.decay_factor.tolist()
        retrieved = outcome.retrieved.tolist()
        has_events_array = profile.total_count > 0
        touched = np.flatnonzero((outcome.retention != np.asarray(old_retention)) | has_events_array)
        has_events = has_events_array.tolist()
        stored_profiles = StoredProfiles(profile, last_at_array)
        profiles = 0
        for k in touched.tolist():
            old_ret = old_retention[k]
            changes: dict[str, tuple[Any, Any]] = {"retention_score": (old_ret, new_ret[k])}
            if has_events[k]:
                new_profile = stored_profiles[k]
                old_profile = _profile_value(rows[k][3])
                changes["retrieval_profile"] = (old_profile, new_profile)
                profiles += new_profile != old_profile
            if retrieved[k]:
                boosted.add(
                    ids[k], changes, f"retrieval boost {boost[k]:.6f}: retention {old_ret:.6f} -> {new_ret[k]:.6f}"
                )
            else:
                decayed.add(
                    ids[k],
                    changes,
                    f"not retrieved in {lookback:g}d: retention x (1 - {decay_rate:g} x {elapsed[k]:.2f}d) = "
                    f"x {factor[k]:.6f}; {old_ret:.6f} -> {new_ret[k]:.6f}",
                )
        result.records = apply_updates([boosted, decayed], workspace=workspace, run=run, dry_run=dry_run, now=now)
        result.stats.update(boosted=len(boosted), decayed=len(decayed), profiles=profiles)
        # Every active memory's retention as it stands once this commits (untouched ones kept theirs), for
        # the Hebbian evolver that follows in the cycle.
        selectors.hand_over_active_retention(
            workspace=workspace, rows=list(zip(ids, old_retention if dry_run else new_ret, strict=True))
        )
        return result


# -- HebbianCoRetrieval ---------------------------------------------------------------------------


def _pair_text(edge: tuple[Any, ...]) -> tuple[str, str]:
    """Sort key of a (source, target, ...) edge row: the ids as text, as the unique index orders them."""
    return str(edge[0]), str(edge[1])


@register
class HebbianCoRetrieval:
    """Memories retrieved together wire together: CO_RETRIEVED counts, then capped retention boosts.

    Counting: every 2-combination of each result set read since the previous applied run (event-id
    watermark in the run state) adds 1 to its CO_RETRIEVED edge (created on first co-retrieval;
    first/last_co_retrieved_at kept). Only used sources count: search, get, context, helpful; the
    inspector's dry reads never do (docs/evolution.md, hub bias). Boost: for every edge with count >= 3,
    both active ends get min(0.3, (count - 3) * 0.02), each node once per run by its strongest edge.
    Settings: weight_threshold, retention_boost_per_unit, max_boost.
    """

    name: ClassVar[str] = "HebbianCoRetrieval"

    def evolve(
        self, workspace: Workspace, *, dry_run: bool, run: EvolutionRun | None, now: datetime
    ) -> EvolutionResult:
        result = EvolutionResult(evolver=self.name, dry_run=dry_run)
        threshold = _setting(workspace, self.name, "weight_threshold", 3.0)
        per_unit = _setting(workspace, self.name, "retention_boost_per_unit", 0.02)
        max_boost = _setting(workspace, self.name, "max_boost", 0.3)
        cursor = selectors.evolver_cursor(workspace=workspace, name=self.name)
        watermark = int(cursor.state.get("event_watermark", 0))
        sets, last_event = selectors.used_result_sets(workspace=workspace, after_event_id=watermark)
        active = selectors.active_retention(workspace=workspace)
        result.state = {"event_watermark": last_event}

        ids: list[str] = [mid for mid, _ in active]
        position = {mid: k for k, mid in enumerate(ids)}

        def pos(mid: str) -> int:
            k = position.get(mid)
            if k is None:
                k = position[mid] = len(ids)
                ids.append(mid)
            return k

        def positions(values: list[str]) -> npt.NDArray[np.int64]:
            # map() over dict.get runs in C; only ids outside the active set take the Python path.
            found: list[int | None] = list(map(position.get, values))
            if None in found:
                found = [pos(v) if k is None else k for v, k in zip(values, found, strict=True)]
            return np.asarray(found, dtype=np.int64)

        set_positions = [[pos(m) for m in members] for _, members, _ in sets]
        # The counts and, per pair, the first and last time of the sets holding it, in one expansion.
        counts = timed_co_retrieval_pairs(set_positions, [_micros(t) for _, _, t in sets])
        # The edges that matter: those of the pairs counted now, and those already strong enough to boost
        # (an edge below the threshold that no new set touches cannot boost anything this run).
        strong = selectors.co_retrieved_edges(workspace=workspace, min_count=threshold)
        counted = selectors.co_retrieved_between(
            workspace=workspace,
            pairs=[(ids[i], ids[j]) for i, j in zip(counts.i.tolist(), counts.j.tolist(), strict=True)],
        )
        edges = sorted({e[0]: e for e in [*strong, *counted]}.values())
        edge_s = positions([e[1] for e in edges])
        edge_t = positions([e[2] for e in edges])
        n = len(ids)
        keys = counts.i.astype(np.int64) * n + counts.j
        first, last = counts.first, counts.last
        # Existing edges, either direction; a pair stored twice is counted on its older edge.
        edge_keys = np.minimum(edge_s, edge_t) * n + np.maximum(edge_s, edge_t)
        edge_order = np.lexsort((np.arange(edge_keys.size), edge_keys))
        sorted_keys = edge_keys[edge_order]
        at = np.searchsorted(sorted_keys, keys)
        found = np.zeros(keys.size, dtype=bool)
        if sorted_keys.size:
            found = (at < sorted_keys.size) & (sorted_keys[np.minimum(at, sorted_keys.size - 1)] == keys)
        edge_counts = np.asarray([e[3] for e in edges], dtype=np.float64)
        edge_updates: list[tuple[int, dict[str, tuple[Any, Any]]]] = []
        hits = np.flatnonzero(found).tolist()
        times = selectors.edge_times(workspace=workspace, ids=[edges[int(edge_order[at[k]])][0] for k in hits])
        for k in hits:
            row = int(edge_order[at[k]])
            eid, _, _, old_count = edges[row]
            old_first, old_last = times[eid]
            new_count = old_count + int(counts.counts[k])
            new_first = _from_micros(int(first[k]))
            new_last = _from_micros(int(last[k]))
            new_first = min(old_first, new_first) if old_first is not None else new_first
            new_last = max(old_last, new_last) if old_last is not None else new_last
            edge_updates.append(
                (
                    eid,
                    {
                        "co_retrieval_count": (old_count, new_count),
                        "first_co_retrieved_at": (old_first, new_first),
                        "last_co_retrieved_at": (old_last, new_last),
                    },
                )
            )
            edge_counts[row] = new_count
        new_pairs = np.flatnonzero(~found)
        created: list[tuple[str, str, int, datetime, datetime]] = []
        for k in new_pairs.tolist():
            a, b = ids[int(keys[k] // n)], ids[int(keys[k] % n)]
            source, target = (a, b) if str(a) < str(b) else (b, a)
            created.append(
                (source, target, int(counts.counts[k]), _from_micros(int(first[k])), _from_micros(int(last[k])))
            )
        created_ids: list[int] = []
        if not dry_run:
            write_rows(
                Edge,
                ["co_retrieval_count", "first_co_retrieved_at", "last_co_retrieved_at"],
                (
                    (
                        ch["co_retrieval_count"][1],
                        ch["first_co_retrieved_at"][1],
                        ch["last_co_retrieved_at"][1],
                        eid,
                    )
                    for eid, ch in edge_updates
                ),
            )
            # A snapshot weighs a CO_RETRIEVED edge by its count until CO_RETRIEVED_FULL_COUNT: a count that
            # moves below it re-weights an edge, which appending cannot express (the next read rebuilds).
            reweighted = any(ch["co_retrieval_count"][0] < CO_RETRIEVED_FULL_COUNT for _, ch in edge_updates)
            if reweighted and not created:
                graph_touch(workspace=workspace, rewrites=True)
            if created:
                # New edges change the graph snapshot, and the touch goes first: see
                # graph.writes.graph_touch.
                graph_touch(workspace=workspace, rewrites=reweighted)
                last_id = selectors.edge_last_id()
                insert_rows(
                    Edge,
                    [
                        "workspace",
                        "source",
                        "target",
                        "edge_type",
                        "weight",
                        "co_retrieval_count",
                        "first_co_retrieved_at",
                        "last_co_retrieved_at",
                        "created_at",
                        "metadata",
                    ],
                    # In (source, target) order, the order of the unique index, so consecutive rows land on
                    # the same index pages instead of random ones.
                    (
                        (workspace.pk, s, t, EdgeType.CO_RETRIEVED, 1.0, c, f, la, now, {})
                        for s, t, c, f, la in sorted(created, key=_pair_text)
                    ),
                )
                graph_mirror(workspace=workspace, added=((s, t, EdgeType.CO_RETRIEVED, 1.0) for s, t, *_ in created))
                by_pair = {
                    (s, t): eid
                    for eid, s, t in selectors.co_retrieved_created(workspace=workspace, at=now, after_id=last_id)
                }
                created_ids = [by_pair[(s, t)] for s, t, *_ in created]
        ends = {edges[int(edge_order[at[k]])][0]: edges[int(edge_order[at[k]])][1:3] for k in hits}
        result.records.extend(
            self._edge_records(workspace, run, dry_run, now, ends, edge_updates, created, created_ids)
        )

        # Boosts over every CO_RETRIEVED edge as it stands after counting (the ones below the threshold
        # were not read).
        all_s = np.concatenate([edge_s, np.asarray([position[c[0]] for c in created], dtype=np.int64)])
        all_t = np.concatenate([edge_t, np.asarray([position[c[1]] for c in created], dtype=np.int64)])
        all_counts = np.concatenate([edge_counts, np.asarray([c[2] for c in created], dtype=np.float64)])
        n_active = len(active)
        retention = np.zeros(n, dtype=np.float64)
        retention[:n_active] = [r for _, r in active]
        boosts = hebbian_boosts(all_s, all_t, all_counts, retention, threshold, per_unit, max_boost)
        updates = MemoryUpdates(
            self.name,
            Action.BOOST,
            f"Hebbian co-retrieval: + min({max_boost:g}, (count - {threshold:g}) x {per_unit:g})",
        )
        old_list, new_list, boost_list = boosts.old.tolist(), boosts.new.tolist(), boosts.boost.tolist()
        partner_list, count_list = boosts.partner.tolist(), boosts.edge_count.tolist()
        for k, node in enumerate(boosts.indices.tolist()):
            if node >= n_active:
                continue
            capped = " (capped at 1.0)" if new_list[k] < old_list[k] + boost_list[k] else ""
            updates.add(
                ids[node],
                {"retention_score": (active[node][1], new_list[k])},
                f"co-retrieved with {ids[partner_list[k]]} {count_list[k]:g}x (>= {threshold:g}): retention "
                f"{old_list[k]:.6f} + {boost_list[k]:.6f} -> {new_list[k]:.6f}{capped}",
            )
        result.records.extend(apply_updates([updates], workspace=workspace, run=run, dry_run=dry_run, now=now))
        result.stats.update(
            result_sets=len(sets),
            edges_updated=len(edge_updates),
            edges_created=len(created),
            boosted=len(updates),
        )
        return result

    def _edge_records(
        self,
        workspace: Workspace,
        run: EvolutionRun | None,
        dry_run: bool,
        now: datetime,
        ends: dict[int, tuple[str, str]],
        updates: Sequence[tuple[int, dict[str, tuple[Any, Any]]]],
        created: Sequence[tuple[str, str, int, datetime, datetime]],
        created_ids: Sequence[int],
    ) -> list[EvolutionRecord]:
        """Records of CO_RETRIEVED counting, EDGE_RECORD_CHUNK edges each.

        Updated edges: before/after["edges"][id] = the three fields. Created edges: after["created_edges"]
        lists them and after["edges"] holds their values too, so a revert refuses when a later run has
        counted on them (dry runs list the planned pairs in after["planned_edges"] instead).
        """
        items: list[tuple[str, Any]] = [("update", u) for u in updates] + [("create", k) for k in range(len(created))]
        records: list[EvolutionRecord] = []
        # ISO text per distinct value: the times come from a few thousand result sets, the edges number
        # tens of thousands.
        texts: dict[Any, Any] = {}

        def encode(name: str, value: Any) -> Any:
            if not isinstance(value, datetime):
                return audit.encode_value(name, value)
            text = texts.get(value)
            if text is None:
                text = texts[value] = audit.encode_value(name, value)
            return text

        for start in range(0, len(items), EDGE_RECORD_CHUNK):
            chunk = items[start : start + EDGE_RECORD_CHUNK]
            before_edges: dict[str, Any] = {}
            after_edges: dict[str, Any] = {}
            created_chunk: list[int] = []
            planned: list[list[Any]] = []
            memory_ids: dict[str, None] = {}
            for kind, item in chunk:
                if kind == "update":
                    eid, changes = item
                    before_edges[str(eid)] = {f: encode(f, old) for f, (old, _) in changes.items()}
                    after_edges[str(eid)] = {f: encode(f, new) for f, (_, new) in changes.items()}
                    source, target = ends[eid]
                else:
                    source, target, count, first, last = created[item]
                    values = {
                        "co_retrieval_count": count,
                        "first_co_retrieved_at": encode("first_co_retrieved_at", first),
                        "last_co_retrieved_at": encode("last_co_retrieved_at", last),
                    }
                    if dry_run:
                        planned.append([str(source), str(target), values])
                    else:
                        eid = created_ids[item]
                        created_chunk.append(eid)
                        after_edges[str(eid)] = values
                memory_ids[source] = None
                memory_ids[target] = None
            after: dict[str, Any] = {audit.EDGE_CHANGES: after_edges}
            if created_chunk:
                after[audit.CREATED_EDGES] = created_chunk
            if planned:
                after["planned_edges"] = planned
            n_created = sum(1 for kind, _ in chunk if kind == "create")
            records.append(
                audit.record_build(
                    workspace=workspace,
                    evolver=self.name,
                    action=Action.LINK,
                    reason=(
                        f"CO_RETRIEVED counts from result sets: {len(chunk) - n_created} edges incremented, "
                        f"{n_created} created"
                    ),
                    input_ids=list(memory_ids),
                    output_ids=[],
                    before={audit.EDGE_CHANGES: before_edges} if before_edges else {},
                    after=after,
                    run=run,
                    dry_run=dry_run,
                    now=now,
                )
            )
        return records
