"""HebbianCoRetrieval: memories retrieved together are linked, and their retention boosted."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import lru_cache, partial
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from evolution import selectors
from evolution.algorithms.hebbian import hebbian_boosts, timed_co_retrieval_pairs
from evolution.evolvers.base import EvolutionResult, MemoryUpdates, apply_updates, register
from evolution.evolvers.enhanced.common import _setting
from evolution.models import EvolutionRun
from evolution.writes import Applied, stale_edges, submit
from graph.store import CO_RETRIEVED_FULL_COUNT
from graph.writes import graph_mirror, graph_touch
from history import audit
from history.models import Action, EvolutionRecord
from memories.bulk import insert_rows, write_rows
from memories.models import Edge, EdgeType, Workspace

EDGE_RECORD_CHUNK = 500
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


@lru_cache(maxsize=1 << 16)
def _from_micros(value: int) -> datetime:
    # Cached: a cycle converts one or two times per counted pair, drawn from one time per result set.
    return _EPOCH + timedelta(microseconds=value)


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
    writes_in_chunks: ClassVar[bool] = True

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
        ends = {edges[int(edge_order[at[k]])][0]: edges[int(edge_order[at[k]])][1:3] for k in hits}
        counting = _Counting(self.name, workspace, run, dry_run, now, ends, created)
        items: list[tuple[str, Any]] = [("update", u) for u in edge_updates] + [
            ("create", k) for k in range(len(created))
        ]
        for start in range(0, len(items), EDGE_RECORD_CHUNK):
            chunk = items[start : start + EDGE_RECORD_CHUNK]
            planned = [counting.record(chunk, None)]
            result.records.extend(submit(planned, None if dry_run else partial(counting.apply, chunk)))

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


@dataclass
class _Counting:
    """The CO_RETRIEVED counting of one Hebbian run, in units of EDGE_RECORD_CHUNK edges, each unit one record.

    Updated edges: before/after["edges"][id] = the three fields. Created edges: after["created_edges"]
    lists them and after["edges"] holds their values too, so a revert refuses when a later run has
    counted on them (dry runs list the planned pairs in after["planned_edges"] instead).
    """

    evolver: str
    workspace: Workspace
    run: EvolutionRun | None
    dry_run: bool
    now: datetime
    ends: dict[int, tuple[str, str]]
    created: Sequence[tuple[str, str, int, datetime, datetime]]
    # ISO text per distinct value: the times come from a few thousand result sets, the edges number
    # tens of thousands.
    texts: dict[Any, Any] = field(default_factory=dict)

    def encode(self, name: str, value: Any) -> Any:
        if not isinstance(value, datetime):
            return audit.encode_value(name, value)
        text = self.texts.get(value)
        if text is None:
            text = self.texts[value] = audit.encode_value(name, value)
        return text

    def apply(self, chunk: Sequence[tuple[str, Any]]) -> Applied:
        """Write one unit: the counts of its edges that nobody changed since they were read, its new edges."""
        workspace, now = self.workspace, self.now
        updates = [item for kind, item in chunk if kind == "update"]
        stale = stale_edges(updates)
        if stale:
            updates = [u for u in updates if u[0] not in stale]
            chunk = [(kind, item) for kind, item in chunk if kind != "update" or item[0] not in stale]
        creates = [self.created[k] for kind, k in chunk if kind == "create"]
        write_rows(
            Edge,
            ["co_retrieval_count", "first_co_retrieved_at", "last_co_retrieved_at"],
            (
                (ch["co_retrieval_count"][1], ch["first_co_retrieved_at"][1], ch["last_co_retrieved_at"][1], eid)
                for eid, ch in updates
            ),
        )
        # A snapshot weighs a CO_RETRIEVED edge by its count until CO_RETRIEVED_FULL_COUNT: a count that
        # moves below it re-weights an edge, which appending cannot express (the next read rebuilds).
        reweighted = any(ch["co_retrieval_count"][0] < CO_RETRIEVED_FULL_COUNT for _, ch in updates)
        if reweighted and not creates:
            graph_touch(workspace=workspace, rewrites=True)
        created_ids: dict[int, int] = {}
        if creates:
            # New edges change the graph snapshot, and the touch goes first: see graph.writes.graph_touch.
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
                    for s, t, c, f, la in sorted(creates, key=_pair_text)
                ),
            )
            graph_mirror(workspace=workspace, added=((s, t, EdgeType.CO_RETRIEVED, 1.0) for s, t, *_ in creates))
            by_pair = {
                (s, t): eid
                for eid, s, t in selectors.co_retrieved_created(workspace=workspace, at=now, after_id=last_id)
            }
            created_ids = {k: by_pair[self.created[k][:2]] for kind, k in chunk if kind == "create"}
        return ([self.record(chunk, created_ids)] if chunk else []), len(stale)

    def record(self, chunk: Sequence[tuple[str, Any]], created_ids: dict[int, int] | None) -> EvolutionRecord:
        """The record of one unit; created_ids None while planning (new edges get their ids when inserted)."""
        encode = self.encode
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
                source, target = self.ends[eid]
            else:
                source, target, count, first, last = self.created[item]
                values = {
                    "co_retrieval_count": count,
                    "first_co_retrieved_at": encode("first_co_retrieved_at", first),
                    "last_co_retrieved_at": encode("last_co_retrieved_at", last),
                }
                if self.dry_run:
                    planned.append([str(source), str(target), values])
                elif created_ids is not None:
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
        return audit.record_build(
            workspace=self.workspace,
            evolver=self.evolver,
            action=Action.LINK,
            reason=(
                f"CO_RETRIEVED counts from result sets: {len(chunk) - n_created} edges incremented, {n_created} created"
            ),
            input_ids=list(memory_ids),
            output_ids=[],
            before={audit.EDGE_CHANGES: before_edges} if before_edges else {},
            after=after,
            run=self.run,
            dry_run=self.dry_run,
            now=self.now,
        )
