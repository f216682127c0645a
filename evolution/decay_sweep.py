"""The hourly decay sweep: decayed activation and retention materialised into the stored columns.

Activation (all memories but pinned ones, REFERENCE seed 001): readers decay the stored score from
``last_boost_at`` with the memory's half-life, ``stored * 2^(-hours / half_life)``. The sweep writes that
value as the stored score and ``now`` as ``last_boost_at`` when it moved by ACTIVATION_STEP (0.001) or
more. Every reader sees the same activation before and after (the decay of a decayed value from ``now``
is the decay of the original from its boost: exp(-a) * exp(-b) = exp(-(a + b))), so this is bookkeeping,
not a change, and writes no record (as boosts write none); what changes is that the stored column says
what the memory's activation is, for SQL that reads it as stored. ``last_boost_at`` then means "the time
the stored score refers to", which is what the decay and the boost flush already take it for. A boost
flushed meanwhile wins: each write is conditional on the row still holding the score and time read.

Retention (active memories of the ExponentialDecay evolver's types, default episodic, but pinned ones):
the forgetting curve ``exp(-days / stability)`` from the last access (else the event time, else the
creation; evolution.algorithms.decay, with the evolver's own settings) is where retention stands without
use. The sweep lowers a stored retention above the curve to it when the drop is RETENTION_STEP (0.01) or
more, never raises one (boosts belong to the evolvers) and never archives (the cycle's ExponentialDecay
does, with its record). Retention is an evolution value, so each batch is one EvolutionRecord (evolver
``DecaySweep``, action decay, no run) with the exact before/after values: revertible like any other, and a
run's revert is refused, naming it, rather than silently undone. The coarser step keeps those records to
about one per memory per 7-30 hours.

Vectorised per batch (numpy), written with one executemany per batch, each batch its own transaction
(ACTIVATION_BATCH / RETENTION_BATCH rows), so a sweep of a 100k-memory workspace never holds the database
for long and a worker killed mid-sweep loses only its open batch; the next sweep finishes the rest.
Idempotent at a fixed ``now``: a second sweep finds every activation already decayed to ``now`` and every
retention at or under the curve, and writes nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import numpy as np
from django.db import connection, transaction

from core.errors import InvalidInput
from core.sql import EpochSeconds, db_datetime
from evolution import selectors
from evolution.algorithms.decay import (
    DEFAULT_ARCHIVE_THRESHOLD,
    DEFAULT_STABILITY_DAYS,
    days_since_reference,
    decay_plan,
)
from evolution.evolvers.enhanced.common import _setting
from history import audit
from history.models import Action
from memories.algorithms.activation import decayed_activation_array
from memories.bulk import write_rows
from memories.models import Memory, MemoryType, Status, Workspace

EVOLVER: Final = "DecaySweep"
DECAY_EVOLVER: Final = "ExponentialDecay"
ACTIVATION_STEP: Final = 0.001
RETENTION_STEP: Final = 0.01
ACTIVATION_BATCH: Final = 2000
RETENTION_BATCH: Final = 500
_LN2: Final = math.log(2.0)
_MIN_SCORE: Final = 1e-12


@dataclass
class SweepStats:
    activation_read: int = 0
    activation_written: int = 0
    retention_read: int = 0
    retention_written: int = 0
    records: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


def decay_sweep(*, workspace: Workspace, now: datetime) -> SweepStats:
    """Sweep the workspace at `now` (see the module docstring); returns what was read and written."""
    stats = SweepStats()
    _sweep_activation(workspace, now, stats)
    _sweep_retention(workspace, now, stats)
    return stats


# -- activation ----------------------------------------------------------------------------------


def _sweep_activation(workspace: Workspace, now: datetime, stats: SweepStats) -> None:
    qn = connection.ops.quote_name
    table = qn(Memory._meta.db_table)
    score, at, key, pk = (
        qn(str(Memory._meta.get_field(name).column))  # type: ignore[union-attr]
        for name in ("activation_score", "activation_last_boost_at", "activation_sort_key", "id")
    )
    update = f"UPDATE {table} SET {score} = %s, {at} = %s, {key} = %s WHERE {pk} = %s AND {score} = %s AND {at} = %s"
    now_ts = now.timestamp()
    stored_now = db_datetime(now)
    after: Any = None
    while True:
        rows = Memory.objects.filter(
            workspace=workspace, pinned=False, activation_last_boost_at__isnull=False, activation_last_boost_at__lt=now
        )
        if after is not None:
            rows = rows.filter(id__gt=after)
        batch = selectors._raw_rows(
            rows.order_by("id").values_list(
                "id",
                "activation_score",
                "activation_last_boost_at",
                EpochSeconds("activation_last_boost_at"),
                "activation_half_life_hours",
            )[:ACTIVATION_BATCH]
        )
        if not batch:
            return
        after = batch[-1][0]
        stats.activation_read += len(batch)
        ids, scores, raw_at, boost_ts, half_life = zip(*batch, strict=True)
        stored = np.asarray(scores, dtype=np.float64)
        hl = np.asarray(half_life, dtype=np.float64)
        hours = (now_ts - np.asarray(boost_ts, dtype=np.float64)) / 3600.0
        decayed = decayed_activation_array(stored, hours, hl)
        # A half-life <= 0 reads as 0 whatever is stored: nothing to materialise, the clock stays.
        moved = np.flatnonzero((stored - decayed >= ACTIVATION_STEP) & (hl > 0))
        if moved.size == 0:
            continue
        new = decayed[moved]
        # activation_sort_key(new, now, half_life), vectorised: ln(score) + ln2 * hours_since_epoch / half_life.
        keys = np.log(np.maximum(new, _MIN_SCORE)) + _LN2 * (now_ts / 3600.0) / hl[moved]
        params = [
            (value, stored_now, sort_key, ids[k], scores[k], raw_at[k])
            for k, value, sort_key in zip(moved.tolist(), new.tolist(), keys.tolist(), strict=True)
        ]
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(update, params)
            written = cursor.rowcount
        stats.activation_written += max(int(written), 0)


# -- retention -----------------------------------------------------------------------------------


def _decay_settings(workspace: Workspace) -> tuple[list[str], float]:
    """The ExponentialDecay evolver's memory types and default stability (days) for this workspace."""
    section = (workspace.evolution_settings or {}).get(DECAY_EVOLVER) or {}
    types = (section.get("memory_types") if isinstance(section, dict) else None) or [MemoryType.EPISODIC]
    if not isinstance(types, list) or not all(t in MemoryType.values for t in types):
        raise InvalidInput(
            f"evolution settings {DECAY_EVOLVER}.memory_types: {types!r} is not a list of memory types",
            field="memory_types",
        )
    return [str(t) for t in types], _setting(workspace, DECAY_EVOLVER, "default_stability", DEFAULT_STABILITY_DAYS)


def _sweep_retention(workspace: Workspace, now: datetime, stats: SweepStats) -> None:
    types, default_stability = _decay_settings(workspace)
    now_ts = now.timestamp()
    after: Any = None
    while True:
        with transaction.atomic():
            # The cycle runner's lock: a batch never interleaves with an evolver writing retention.
            Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
            rows = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, pinned=False, memory_type__in=types)
            if after is not None:
                rows = rows.filter(id__gt=after)
            batch = selectors._raw_rows(
                rows.order_by("id").values_list(
                    "id",
                    "score__retention_score",
                    "stability",
                    EpochSeconds("last_accessed"),
                    EpochSeconds("valid_from"),
                    EpochSeconds("created_at"),
                )[:RETENTION_BATCH]
            )
            if not batch:
                return
            after = batch[-1][0]
            stats.retention_read += len(batch)
            raw_ids, old, stab, last, event, created = zip(*batch, strict=True)
            old_arr = np.asarray([math.nan if v is None else v for v in old], dtype=np.float64)
            days = days_since_reference(now_ts, _floats(last), _floats(event), _floats(created))
            plan = decay_plan(
                np.arange(len(batch)),
                days,
                _floats(stab),
                DEFAULT_ARCHIVE_THRESHOLD,
                default_stability=default_stability,
            )
            lower = np.flatnonzero(old_arr - plan.retention >= RETENTION_STEP)
            if lower.size == 0:
                continue
            ids = selectors.id_texts([raw_ids[k] for k in lower.tolist()])
            new = plan.retention[lower].tolist()
            before_values = old_arr[lower].tolist()
            write_rows(Memory, ["retention_score"], list(zip(new, ids, strict=True)))
            reasons = {
                mid: f"retention exp(-{plan.days[k]:.2f}d/{plan.stability[k]:.2f}d) = {value:.6f} < {was:.6f}: lowered"
                for mid, k, was, value in zip(ids, lower.tolist(), before_values, new, strict=True)
            }
            record = audit.record_build(
                workspace=workspace,
                evolver=EVOLVER,
                action=Action.DECAY,
                reason=f"decay sweep: retention lowered to exp(-days / stability) ({len(ids)} memories)",
                input_ids=ids,
                output_ids=ids,
                before={mid: {"retention_score": was} for mid, was in zip(ids, before_values, strict=True)},
                after={
                    **{mid: {"retention_score": value} for mid, value in zip(ids, new, strict=True)},
                    "reasons": reasons,
                },
                now=now,
            )
            audit.records_save([record])
            stats.retention_written += len(ids)
            stats.records += 1


def _floats(values: tuple[Any, ...]) -> Any:
    return np.asarray([math.nan if v is None else v for v in values], dtype=np.float64)
