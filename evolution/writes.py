"""Evolver writes in bounded units: what lets a run change a whole workspace without holding the database.

An evolver that writes only through `submit` (the toolkit of evolution.evolvers.base does) declares
``writes_in_chunks = True``. The runner then calls it outside any transaction, inside `deferred_writes`:
it reads and computes holding no lock, and each `submit` queues a `WriteUnit` (at most a few hundred rows,
and the records that describe them) instead of writing. The runner commits the units afterwards in short
transactions, a unit's records always in the same transaction as its rows (evolution.runner).

Between the plan's reads and a unit's transaction other requests may write. A unit therefore checks, in
its own transaction, that every row it changes still holds the value the plan read (`stale_memories`); a
row that changed is left alone and taken out of the record (`drop_memories`). So a record's `before` is
always what its write replaced, and a revert puts back exactly that, whatever else happened meanwhile.

Outside `deferred_writes` (an evolver called directly, e.g. by a test) `submit` applies the unit at once in
the caller's transaction, as evolvers always did.

What an evolver declaring ``writes_in_chunks`` may not do is write its audited changes any other way: a
write made while it plans commits on its own, outside every unit, and no record or revert covers it. (Work
that is not the run's to revert, such as bringing observations up to date in a short transaction of its
own, is another matter.)
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import models

from evolution.selectors import _id_rows
from history import audit
from history.models import EvolutionRecord
from memories.models import Memory, MemoryScore

# What a unit's apply returns: the records to save with its writes, and how many rows it left alone because
# they changed after the plan read them.
Applied = tuple[list[EvolutionRecord], int]
# Key of a record's `after` holding one audit sentence per memory of a chunked record.
REASONS = "reasons"


@dataclass
class WriteUnit:
    """Rows to write and the records that describe them: the runner commits both in one transaction.

    records: the records as planned (what a dry run saves). apply: None when there is nothing to write (a dry
    run, the records of a read-only evolver); otherwise it writes in the caller's transaction and returns the
    records to save, which may be fewer or smaller than planned (rows changed since the plan are left out).
    """

    records: list[EvolutionRecord]
    apply: Callable[[], Applied] | None = None


@dataclass
class WriteSession:
    """The units one evolver queued while `deferred_writes` was active, in the order it queued them."""

    units: list[WriteUnit] = field(default_factory=list)


_SESSION: ContextVar[WriteSession | None] = ContextVar("evolution_write_session", default=None)


@contextmanager
def deferred_writes() -> Iterator[WriteSession]:
    """Queue every `submit` of the block in the yielded session instead of writing (the runner's plan)."""
    session = WriteSession()
    token = _SESSION.set(session)
    try:
        yield session
    finally:
        _SESSION.reset(token)


def writes_deferred() -> bool:
    """Whether `submit` queues (inside `deferred_writes`) rather than writes."""
    return _SESSION.get() is not None


def submit(records: list[EvolutionRecord], apply: Callable[[], Applied] | None = None) -> list[EvolutionRecord]:
    """Hand over one unit of writes: queued inside `deferred_writes` (returns the planned records), applied
    at once elsewhere, in the caller's transaction (returns the records to save)."""
    session = _SESSION.get()
    if session is not None:
        session.units.append(WriteUnit(records, apply))
        return records
    return apply()[0] if apply is not None else records


def _same(current: Any, planned: Any) -> bool:
    """Whether a value read now is the value the plan read (NaN equals NaN: it is the same stored value)."""
    if current == planned:
        return True
    return isinstance(current, float) and isinstance(planned, float) and math.isnan(current) and math.isnan(planned)


# Ids per IN (...) query of the checks (under SQLite's old limit of host parameters).
CHECK_CHUNK = 900


def _plain(name: str) -> bool:
    """Whether memory field `name` (or its scores row's) reads the same raw from the driver as through the
    ORM: numbers and text, not JSON, dates, ids or booleans."""
    model = MemoryScore if name in Memory.SCORE_FIELDS else Memory
    field = model._meta.get_field(name)
    return isinstance(field, models.FloatField | models.IntegerField | models.CharField | models.TextField)


def stale_memories(ids: Sequence[str], changes: Sequence[dict[str, tuple[Any, Any]]]) -> set[str]:
    """The ids (as given) whose current value of a field they change is no longer the planned old value, or
    that no longer exist. Read in the writing transaction, so what is not stale cannot change before it
    commits; values compare as records store them (`audit.encode_value`)."""
    fields = sorted({name for changed in changes for name in changed})
    if not ids or not fields:
        return set()
    columns = [f"score__{name}" if name in Memory.SCORE_FIELDS else name for name in fields]
    current: dict[str, tuple[Any, ...]] = {}
    # Numbers and text come from the driver as the ORM would give them: read them raw (Django's converters
    # cost more than the query), from the scores rows alone when only scores change (no join).
    raw = all(_plain(name) for name in fields)
    scores_only = raw and all(name in Memory.SCORE_FIELDS for name in fields)
    for start in range(0, len(ids), CHECK_CHUNK):
        chunk = list(ids[start : start + CHECK_CHUNK])
        if scores_only:
            rows = _id_rows(MemoryScore.objects.filter(memory__in=chunk).order_by().values_list("memory", *fields), 0)
        elif raw:
            rows = _id_rows(Memory.objects.filter(id__in=chunk).order_by().values_list("id", *columns), 0)
        else:
            rows = [(str(row[0]), *row[1:]) for row in Memory.objects.filter(id__in=chunk).values_list("id", *columns)]
        current.update((row[0], row[1:]) for row in rows)
    at = {name: k for k, name in enumerate(fields)}
    stale: set[str] = set()
    for memory_id, changed in zip(ids, changes, strict=True):
        # Ids come as canonical text (str(uuid)) from the evolvers; anything else is made so.
        row = current.get(memory_id)
        if row is None:
            row = current.get(str(uuid.UUID(str(memory_id))))
        if row is None or not all(
            _same(audit.encode_value(name, row[at[name]]), audit.encode_value(name, old))
            for name, (old, _) in changed.items()
        ):
            stale.add(memory_id)
    return stale


def drop_memories(record: EvolutionRecord, ids: Iterable[str]) -> None:
    """Take memories out of a planned record (their rows were left alone): before/after, reasons, ids."""
    gone = {str(i) for i in ids}
    for key in gone:
        record.before.pop(key, None)
        record.after.pop(key, None)
    reasons = record.after.get(REASONS)
    if isinstance(reasons, dict):
        for key in gone:
            reasons.pop(key, None)
    record.input_ids = [i for i in record.input_ids if str(i) not in gone]
    record.output_ids = [i for i in record.output_ids if str(i) not in gone]
