"""Retrieval statistics: each memory's retrieval profile and the CO_RETRIEVED counts between memories.

Both are what the retrieval events say, kept up to date from them: the scheduled job ``retrieval``
(evolution.scheduler, every RETRIEVAL_STATS_SECONDS, 5 minutes by default) refreshes them from the events
stored since its last run, and the two evolvers that read them call the same functions first, so a cycle
run without a scheduler sees them current too (RetrievalBasedStrengthening: ``profiles_refresh``, over the
whole workspace; HebbianCoRetrieval: ``co_retrievals_count``). One implementation either way.

They are observations, not evolution decisions, so they write no EvolutionRecord, as the activation
boosts the signal flush writes do not: the events they count are never reverted, and a run's revert
undoes what its evolvers decided from them (retention), not the counts themselves. Reverting a run whose
Hebbian evolver counted result sets therefore keeps those counts, and the events are not counted again.

Profiles (``MemoryScore.retrieval_profile``, keys of ``RetrievalProfile.count_columns`` and
``last_retrieved_at``): used sources only (search, get, context, helpful; never the inspector's dry reads),
velocities per day over 7 days and the strengthening evolver's ``lookback_days`` (30). A profile changes
only when one of the memory's events is new, or crosses the 7-day or lookback boundary, so an incremental
refresh at ``now`` recomputes, from all their events, the profiles of the memories with an event stored
after the previous refresh's watermark, dated since ten minutes before its clock reading (an event
committed late by a slow flush is still seen), or dated in the stretches that crossed a boundary since.

CO_RETRIEVED counts: every 2-combination of the members of each result set read after the count watermark
adds 1 to its edge (created at the first co-retrieval, first/last_co_retrieved_at kept, an edge stored in
either direction counted on its older row).

Both write under the workspace's row lock, taken first as the cycle runner takes it, then the job's row,
so a refresh never interleaves with a cycle's evolver and the two never deadlock on PostgreSQL (SQLite
holds its write lock anyway). Their watermarks are in the ``ScheduledJob(workspace, "retrieval")`` row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson
from django.db import transaction

from core.errors import InvalidInput
from evolution import selectors
from evolution.algorithms.hebbian import timed_co_retrieval_pairs
from evolution.algorithms.retrieval import SHORT_WINDOW_DAYS, RetrievalProfile
from evolution.models import ScheduledJob
from graph.store import CO_RETRIEVED_FULL_COUNT
from graph.writes import graph_mirror, graph_touch
from memories.bulk import insert_rows, write_rows
from memories.models import Edge, EdgeType, Memory, MemoryScore, Workspace

FloatArray = npt.NDArray[np.float64]

JOB: Final = "retrieval"
STRENGTHENING: Final = "RetrievalBasedStrengthening"
HEBBIAN: Final = "HebbianCoRetrieval"
# How far before the previous refresh's clock reading new events are looked for by time: a flush commits
# its events within seconds of the retrieval (SIGNAL_FLUSH_SECONDS), after a refresh may have run.
LATE_EVENTS: Final = timedelta(minutes=10)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def lookback_days(workspace: Workspace) -> float:
    """The strengthening evolver's lookback window (days), which the profiles' velocity_30d counts over."""
    # Imported here: the evolvers import this module.
    from evolution.evolvers.enhanced.common import _setting

    days = _setting(workspace, STRENGTHENING, "lookback_days", 30.0)
    if days <= SHORT_WINDOW_DAYS:
        raise InvalidInput("evolution settings lookback_days must exceed 7", field="lookback_days")
    return days


# -- stored profiles -------------------------------------------------------------------------------


class StoredProfiles:
    """The profiles kept in Memory.retrieval_profile: the keys of `RetrievalProfile.as_dict`, with
    the time of the last retrieval (ISO, UTC) instead of its age, so a stored profile only changes when its
    counts or windows do.

    Built for many memories at once: the arrays become lists once (indexing numpy scalars per memory
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


def profile_value(stored: Any) -> Any:
    """The stored profile as a value: the column as read is JSON text on SQLite, decoded by orjson (the
    stdlib takes what orjson refuses). Decoding with orjson costs ~1 us a profile, encoding the new profile
    with the stdlib to compare texts cost ~6 us; a cycle reads one per retrieved memory (62k here)."""
    if isinstance(stored, str | bytes):
        try:
            return orjson.loads(stored)
        except orjson.JSONDecodeError:
            return json.loads(stored)
    return stored


def profile_of(aggregates: selectors.RetrievalAggregates, *, now: datetime, lookback: float) -> RetrievalProfile:
    """The retrieval profiles of the aggregated memories, in `aggregates.memory_ids` order.

    avg_search_rank = rank_sum / search_count (0-based ranks; 0 without searches); velocity_7d = events in
    the last 7 days / 7 and velocity_30d = events in the last `lookback` days / lookback (per day);
    last_retrieved_days_ago from the newest event (days).
    """
    search = aggregates.search
    avg_rank = np.zeros(search.size, np.float64)
    np.divide(aggregates.rank_sum, search, out=avg_rank, where=search > 0)
    return RetrievalProfile(
        total_count=aggregates.total,
        search_count=search,
        avg_rank=avg_rank,
        velocity_7d=aggregates.in_short / SHORT_WINDOW_DAYS,
        velocity_30d=aggregates.in_lookback / lookback,
        top1_count=aggregates.top1,
        last_retrieved_days_ago=np.maximum(now.timestamp() - aggregates.last_at, 0.0) / 86_400.0,
        lookback_days=lookback,
    )


@dataclass(frozen=True)
class ProfileRefresh:
    """What a refresh read and wrote: the aggregates it computed (all retrieved memories of the workspace
    for a full refresh, the memories whose profile could have changed otherwise), how many profiles it
    compared and how many it wrote (would write, in a dry run)."""

    aggregates: selectors.RetrievalAggregates
    compared: int
    written: int


def _job_row(workspace: Workspace) -> ScheduledJob:
    row, _ = ScheduledJob.objects.get_or_create(workspace=workspace, job=JOB)
    return row


def _lock(workspace: Workspace) -> ScheduledJob:
    """The workspace row (the cycle runner's lock, taken first) and the job's row, inside the caller's
    transaction."""
    Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
    return _job_row(workspace)


def _stored_profiles(workspace: Workspace, ids: Sequence[str] | None) -> dict[str, Any]:
    """Stored profiles (as the driver returns them) by memory id text: every memory's, or those of `ids`."""
    scores = MemoryScore.objects.filter(workspace=workspace).order_by()
    if ids is None:
        rows = selectors._raw_rows(scores.values_list("memory", "retrieval_profile"))
    else:
        keys = list(ids)
        rows = [
            row
            for start in range(0, len(keys), 900)
            for row in selectors._raw_rows(
                scores.filter(memory__in=keys[start : start + 900]).values_list("memory", "retrieval_profile")
            )
        ]
    return dict(zip(selectors.id_texts([row[0] for row in rows]), (row[1] for row in rows), strict=True))


def profiles_refresh(
    *, workspace: Workspace, now: datetime, full: bool = False, dry_run: bool = False
) -> ProfileRefresh:
    """Bring the stored retrieval profiles up to `now`; returns what was compared and written.

    Incremental unless `full` (or nothing was refreshed before): see the module docstring for which
    memories are recomputed. A dry run computes and compares the same and writes nothing (watermarks
    included). Idempotent: a second refresh at the same `now` finds every profile as it computes it.
    """
    lookback = lookback_days(workspace)
    with transaction.atomic():
        job = _job_row(workspace) if dry_run else _lock(workspace)
        state = dict(job.state or {})
        watermark = int(state.get("profile_watermark", 0))
        previous = _parse(state.get("profiles_at"))
        # Read before the events: an event stored meanwhile is above it and is looked at again next time.
        through = selectors.last_event_id(workspace=workspace, after_event_id=watermark)
        memory_ids: list[str] | None = None
        if not full and previous is not None:
            short, long = timedelta(days=SHORT_WINDOW_DAYS), timedelta(days=lookback)
            memory_ids = selectors.memories_retrieved_since(
                workspace=workspace,
                after_event_id=watermark,
                through_event_id=through,
                windows=[
                    (previous - LATE_EVENTS, now),
                    (previous - short, now - short),
                    (previous - long, now - long),
                ],
            )
        aggregates = selectors.retrieval_aggregates(
            workspace=workspace,
            now=now,
            lookback_days=lookback,
            short_days=SHORT_WINDOW_DAYS,
            memory_ids=memory_ids,
        )
        profiles = StoredProfiles(profile_of(aggregates, now=now, lookback=lookback), aggregates.last_at)
        stored = _stored_profiles(workspace, None if memory_ids is None else aggregates.memory_ids)
        changed: list[tuple[dict[str, Any], str]] = []
        for k, mid in enumerate(aggregates.memory_ids):
            if mid not in stored:
                continue  # hard-deleted since its events were read
            new = profiles[k]
            if new != profile_value(stored[mid]):
                changed.append((new, mid))
        if not dry_run:
            write_rows(Memory, ["retrieval_profile"], changed)
            state.update(profile_watermark=through, profiles_at=now.isoformat())
            ScheduledJob.objects.filter(pk=job.pk).update(state=state)
    return ProfileRefresh(aggregates=aggregates, compared=len(aggregates.memory_ids), written=len(changed))


def _parse(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


# -- CO_RETRIEVED counts ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CoRetrievalCounts:
    """What counting read and wrote. `edges`: (source, target, co_retrieval_count) after counting (as
    planned, in a dry run) of every CO_RETRIEVED edge this count touched or created and of every edge whose
    count reaches the `min_count` asked for (an edge stored in both directions comes once per row)."""

    result_sets: int
    edges_updated: int
    edges_created: int
    edges: list[tuple[str, str, float]]


def _micros(value: datetime) -> int:
    return (value - _EPOCH) // _MICROSECOND


@lru_cache(maxsize=1 << 16)
def _from_micros(value: int) -> datetime:
    # Cached: counting converts one or two times per counted pair, drawn from one time per result set.
    return _EPOCH + timedelta(microseconds=value)


def _pair_text(edge: tuple[Any, ...]) -> tuple[str, str]:
    """Sort key of a (source, target, ...) edge row: the ids as text, as the unique index orders them."""
    return str(edge[0]), str(edge[1])


def _count_watermark(workspace: Workspace, state: dict[str, Any]) -> int:
    """The largest event id counted so far. A workspace counted before the job kept its watermark here
    continues from the one its last applied Hebbian run left in that run's summary."""
    if "count_watermark" in state:
        return int(state["count_watermark"])
    return int(selectors.evolver_cursor(workspace=workspace, name=HEBBIAN).state.get("event_watermark", 0))


def co_retrievals_count(
    *, workspace: Workspace, now: datetime, dry_run: bool = False, min_count: float | None = None
) -> CoRetrievalCounts:
    """Count the result sets read since the watermark into CO_RETRIEVED edges (see the module docstring).

    New edges are inserted at `now` (weight 1.0) in (source, target) order, source the smaller id text; the
    graph store is told before (graph_touch: a new edge extends snapshots, a count that moves below
    CO_RETRIEVED_FULL_COUNT re-weights one, which makes the next read rebuild) and mirrors them after commit.
    A dry run plans the same and writes nothing (the watermark included).
    """
    with transaction.atomic():
        job = _job_row(workspace) if dry_run else _lock(workspace)
        state = dict(job.state or {})
        sets, last_event = selectors.used_result_sets(
            workspace=workspace, after_event_id=_count_watermark(workspace, state)
        )
        ids: list[str] = []
        position: dict[str, int] = {}

        def pos(mid: str) -> int:
            k = position.get(mid)
            if k is None:
                k = position[mid] = len(ids)
                ids.append(mid)
            return k

        def positions(values: list[str]) -> npt.NDArray[np.int64]:
            return np.fromiter(map(pos, values), dtype=np.int64, count=len(values))

        set_positions = [[pos(m) for m in members] for _, members, _ in sets]
        # The counts and, per pair, the first and last time of the sets holding it, in one expansion.
        counts = timed_co_retrieval_pairs(set_positions, [_micros(t) for _, _, t in sets])
        strong = [] if min_count is None else selectors.co_retrieved_edges(workspace=workspace, min_count=min_count)
        counted = selectors.co_retrieved_between(
            workspace=workspace,
            pairs=[(ids[i], ids[j]) for i, j in zip(counts.i.tolist(), counts.j.tolist(), strict=True)],
        )
        edges = sorted({e[0]: e for e in [*strong, *counted]}.values())
        edge_s = positions([e[1] for e in edges])
        edge_t = positions([e[2] for e in edges])
        n = len(ids)
        keys = counts.i.astype(np.int64) * n + counts.j
        # Existing edges, either direction; a pair stored twice is counted on its older edge.
        edge_keys = np.minimum(edge_s, edge_t) * n + np.maximum(edge_s, edge_t)
        edge_order = np.lexsort((np.arange(edge_keys.size), edge_keys))
        sorted_keys = edge_keys[edge_order]
        at = np.searchsorted(sorted_keys, keys)
        found = np.zeros(keys.size, dtype=bool)
        if sorted_keys.size:
            found = (at < sorted_keys.size) & (sorted_keys[np.minimum(at, sorted_keys.size - 1)] == keys)
        edge_counts = np.asarray([e[3] for e in edges], dtype=np.float64)
        hits = np.flatnonzero(found).tolist()
        times = selectors.edge_times(workspace=workspace, ids=[edges[int(edge_order[at[k]])][0] for k in hits])
        updates: list[tuple[int, int, datetime, datetime, int]] = []
        reweighted = False
        for k in hits:
            row = int(edge_order[at[k]])
            eid, _, _, old_count = edges[row]
            old_first, old_last = times[eid]
            new_count = old_count + int(counts.counts[k])
            new_first = _from_micros(int(counts.first[k]))
            new_last = _from_micros(int(counts.last[k]))
            new_first = min(old_first, new_first) if old_first is not None else new_first
            new_last = max(old_last, new_last) if old_last is not None else new_last
            updates.append((new_count, eid, new_first, new_last, old_count))
            reweighted = reweighted or old_count < CO_RETRIEVED_FULL_COUNT
            edge_counts[row] = new_count
        created: list[tuple[str, str, int, datetime, datetime]] = []
        for k in np.flatnonzero(~found).tolist():
            a, b = ids[int(keys[k] // n)], ids[int(keys[k] % n)]
            source, target = (a, b) if a < b else (b, a)
            created.append(
                (
                    source,
                    target,
                    int(counts.counts[k]),
                    _from_micros(int(counts.first[k])),
                    _from_micros(int(counts.last[k])),
                )
            )
        if not dry_run:
            write_rows(
                Edge,
                ["co_retrieval_count", "first_co_retrieved_at", "last_co_retrieved_at"],
                ((count, first, last, eid) for count, eid, first, last, _ in updates),
            )
            # A snapshot weighs a CO_RETRIEVED edge by its count until CO_RETRIEVED_FULL_COUNT: a count that
            # moves below it re-weights an edge, which appending cannot express (the next read rebuilds).
            if created or reweighted:
                # Before the inserts: see graph.writes.graph_touch.
                graph_touch(workspace=workspace, rewrites=reweighted)
            if created:
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
            state["count_watermark"] = last_event
            ScheduledJob.objects.filter(pk=job.pk).update(state=state)
    # `edges` holds the edges read: those reaching min_count and those this count touched.
    out = [(ids[s], ids[t], c) for s, t, c in zip(edge_s.tolist(), edge_t.tolist(), edge_counts.tolist(), strict=True)]
    out.extend((s, t, float(c)) for s, t, c, _, _ in created)
    return CoRetrievalCounts(result_sets=len(sets), edges_updated=len(updates), edges_created=len(created), edges=out)


def retrieval_stats_refresh(*, workspace: Workspace, now: datetime) -> dict[str, Any]:
    """The scheduled job: profiles (incremental) and CO_RETRIEVED counts up to `now`; returns its stats."""
    profiles = profiles_refresh(workspace=workspace, now=now)
    counts = co_retrievals_count(workspace=workspace, now=now)
    return {
        "profiles_compared": profiles.compared,
        "profiles_written": profiles.written,
        "result_sets": counts.result_sets,
        "edges_updated": counts.edges_updated,
        "edges_created": counts.edges_created,
    }
