"""Writes of embeddings: every stored vector carries its model's name and the time it was written.

Every write path that sets ``Memory.embedding`` goes through ``vectors_touch`` (directly or through
``memories_embed``): inside the writing transaction it bumps ``Workspace.vector_generation`` and takes the
stamp for the vectors (``embedded_at``) from the workspace row: the later of now and the last stamp issued
plus a microsecond. On PostgreSQL the bump's UPDATE holds the workspace row until commit, and SQLite
serialises writers anyway, so the vector writers of one workspace commit one after another, each with
stamps strictly later than every stamp committed before it, whatever the clocks of the hosts. A reader that
has read every vector stamped up to T (memories.vectorindex) therefore finds every later commit among the
rows stamped after T, and reads nothing twice.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.errors import InvalidInput
from core.sql import db_datetime, uuid_converter
from memories.algorithms.embedding import Embedder, EmbedderUnavailable, FloatMatrix, to_bytes
from memories.embeddings import default_embedder, embedder_for, embedder_for_spec, inline_limit
from memories.models import CompressionTier, Memory, Status, Workspace
from memories.selectors import compressed_originals

log = logging.getLogger(__name__)

REEMBED_BATCH = 512
#: At most this many memories are embedded inside the transaction that moves a workspace to another model
#: (those written or edited while ``reembed`` ran); the rest is embedded outside any transaction.
REEMBED_FINAL_MAX = 32
_STRAGGLER_BATCHES = 8
_MICROSECOND = timedelta(microseconds=1)


def vectors_touch(*, workspace: Workspace) -> tuple[datetime, str]:
    """Announce a vector write of `workspace`; returns the stamp for the vectors and the workspace's embedder
    spec as stored now (another process may have re-embedded the workspace since `workspace` was read).
    Call it inside the writing transaction, after computing the vectors and before storing them.

    Two statements under the workspace row's lock: ``UPDATE ... RETURNING`` (SQLite >= 3.35, PostgreSQL)
    bumps the counter and reads the last stamp, the second stores the new one. The object's counter, spec
    and stamp are refreshed too, so a search later in the same request sees its own write.
    """
    if not connection.in_atomic_block:
        # Outside a transaction the lock would go with the bump, before the vectors are written.
        raise RuntimeError("vectors_touch must run inside the transaction that writes the vectors")
    table = connection.ops.quote_name(Workspace._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET vector_generation = vector_generation + 1 WHERE id = %s "
            "RETURNING vector_generation, embedder, vector_stamped_at",
            [workspace.pk],
        )
        row = cursor.fetchone()
        if row is None:
            raise InvalidInput(f"workspace {workspace.pk} no longer exists", field="workspace")
        last = _aware(row[2])
        now = timezone.now()
        stamp = now if last is None or now > last else last + _MICROSECOND
        cursor.execute(f"UPDATE {table} SET vector_stamped_at = %s WHERE id = %s", [db_datetime(stamp), workspace.pk])
    workspace.vector_generation, workspace.embedder, workspace.vector_stamped_at = int(row[0]), str(row[1]), stamp
    return stamp, workspace.embedder


def _aware(value: datetime | str | None) -> datetime | None:
    """A datetime column read through a raw cursor: SQLite gives Django's naive UTC text."""
    if value is None or isinstance(value, datetime):
        return value if value is None or value.tzinfo is not None else value.replace(tzinfo=UTC)
    parsed = parse_datetime(value)
    if parsed is None:
        raise ValueError(f"not a stored datetime: {value!r}")
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def embedding_text(memory: Memory, original: str | None = None) -> str:
    """The text a memory's vector describes: its FULL content, also when it was compressed since (the
    compression ladder keeps the vector of the full content, so a compressed memory is still found).
    ``original`` is that FULL text when the caller looked it up (``selectors.compressed_originals``: the
    ladder keeps it in its record); else a legacy FULL snapshot of the row, else the content."""
    if original is not None:
        return original
    if memory.compression_tier != CompressionTier.FULL:
        for snap in memory.snapshots or ():
            if (
                isinstance(snap, dict)
                and snap.get("tier") == CompressionTier.FULL
                and isinstance(snap.get("content"), str)
            ):
                return str(snap["content"])
    return memory.content


def memories_vectors(*, workspace: Workspace, memories: Sequence[Memory]) -> tuple[Embedder, FloatMatrix]:
    """The embedder of the workspace and the vectors `memories_embed` would store for `memories`, computed
    without writing anything (a caller may compute them before its write transaction opens)."""
    embedder = embedder_for(workspace)
    return embedder, embedder.embed([embedding_text(m) for m in memories])


def memories_embed(
    *, workspace: Workspace, memories: Sequence[Memory], vectors: tuple[Embedder, FloatMatrix] | None = None
) -> None:
    """Set embedding, embedding_model and embedded_at of `memories` (not saved) with the workspace's embedder.

    Computed before the workspace is touched, so the lock of the touch is held for the insert only; in the
    rare case the workspace moved to another embedder meanwhile, they are computed again with that one.
    `vectors` (from `memories_vectors`) are used instead of computing them here.

    A write of more memories than the embedder embeds inline (``inline_limit``: a bulk import with a slow
    model) stores them without a vector and without a stamp (``embedded_at`` null): they are found by
    full-text search and the graph at once, by meaning once the embed job has given them their vectors
    (``embed_pending``).
    """
    if not memories:
        return
    if vectors is None and memories_deferred(workspace=workspace, count=len(memories)):
        for memory in memories:
            memory.embedding, memory.embedding_model, memory.embedded_at = None, "", None
        transaction.on_commit(_announce_deferred)
        return
    embedder, computed = vectors if vectors is not None else memories_vectors(workspace=workspace, memories=memories)
    stamp, _ = vectors_touch(workspace=workspace)
    current = embedder_for(workspace)
    if current.name != embedder.name:
        embedder, computed = current, current.embed([embedding_text(m) for m in memories])
    for memory, vector in zip(memories, computed, strict=True):
        memory.embedding = to_bytes(vector)
        memory.embedding_model = embedder.name
        memory.embedded_at = stamp


# Called (after commit) when a write left vectors to the embed job: the embedded worker ticks its scheduler at
# once instead of at its next check (evolution.jobs registers it; memories cannot import evolution).
_deferred_listeners: list[Callable[[], None]] = []


def add_deferred_listener(listener: Callable[[], None]) -> None:
    """Call `listener` after the commit of every write that left its memories' vectors to the embed job."""
    if listener not in _deferred_listeners:
        _deferred_listeners.append(listener)


def _announce_deferred() -> None:
    for listener in _deferred_listeners:
        try:
            listener()
        except Exception:  # a wake-up that fails must not fail the write that committed
            log.exception("telling the embed job about new memories failed")


def memories_deferred(*, workspace: Workspace, count: int) -> bool:
    """Whether a write of `count` memories of `workspace` leaves their vectors to the embed job."""
    limit = inline_limit(embedder_for(workspace))
    return limit is not None and count > limit


def embedding_changes(*, workspace: Workspace, text: str) -> dict[str, Any]:
    """The field values that store `text`'s vector for one memory of `workspace` (for an update)."""
    embedder = embedder_for(workspace)
    vector = embedder.embed([text])[0]
    stamp, _ = vectors_touch(workspace=workspace)
    current = embedder_for(workspace)
    if current.name != embedder.name:
        embedder, vector = current, current.embed([text])[0]
    return {"embedding": to_bytes(vector), "embedding_model": embedder.name, "embedded_at": stamp}


# -- re-embedding a workspace ---------------------------------------------------------------------


@dataclass(frozen=True)
class ReembedProgress:
    """Where a re-embedding stands after a committed batch."""

    done: int
    total: int
    elapsed_seconds: float

    @property
    def rate(self) -> float:
        """Memories per second so far."""
        return self.done / self.elapsed_seconds if self.elapsed_seconds > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        return (self.total - self.done) / self.rate if self.rate > 0 else None


@dataclass(frozen=True)
class ReembedResult:
    """``reembedded``: memories written; ``spec``: Workspace.embedder afterwards ("" = the site's);
    ``changed``: False when there was nothing to do (every vector already of ``model``, spec unchanged)."""

    model: str
    reembedded: int
    spec: str
    changed: bool


def reembed_target(*, workspace: Workspace, spec: str | None) -> tuple[Embedder, str]:
    """The embedder to move `workspace` to and the Workspace.embedder value that names it ("" when it is
    the site's embedder). InvalidInput (field embedder) for a spec that is unknown or cannot load here."""
    if spec is None or not spec.strip():
        embedder = embedder_for(workspace)
        stored = workspace.embedder.strip()
    else:
        try:
            embedder = embedder_for_spec(spec)
        except (ValueError, EmbedderUnavailable) as exc:
            raise InvalidInput(f"embedder: {exc}", field="embedder") from None
        stored = spec.strip()
    return embedder, "" if embedder.name == default_embedder().name else stored


def _stale(workspace: Workspace, model: str) -> Any:
    return Memory.objects.filter(workspace=workspace).exclude(embedding_model=model)


def workspace_reembed(
    *,
    workspace: Workspace,
    spec: str | None = None,
    batch: int = REEMBED_BATCH,
    progress: Callable[[ReembedProgress], None] | None = None,
) -> ReembedResult:
    """Re-embed every memory of `workspace` whose vector is not of the target model, then make the target
    the workspace's embedder.

    Target: `spec` (an EMBEDDER value), else the workspace's current embedder. The memories are taken by id,
    `batch` at a time: each batch is embedded outside any transaction and written in a short one that
    touches the workspace's vectors and updates only rows unchanged since they were read, so a long run
    never holds the database while a model computes, and an interrupted run keeps what it committed (the
    next run does the rest). Memories written or edited meanwhile carry the old model: they are read again
    until at most ``REEMBED_FINAL_MAX`` are left, and those few are embedded in the transaction that moves
    the workspace to the target, so no vector of the old model can commit after the switch unnoticed
    (writers read the spec back under the same lock: see vectors_touch).
    """
    if batch < 1:
        raise InvalidInput("batch: expected a positive integer", field="batch")
    embedder, stored = reembed_target(workspace=workspace, spec=spec)
    model = embedder.name
    total = _stale(workspace, model).count()
    if total == 0 and workspace.embedder == stored:
        return ReembedResult(model=model, reembedded=0, spec=stored, changed=False)
    started = time.perf_counter()
    done = 0

    def report() -> None:
        if progress is not None:
            progress(ReembedProgress(done=done, total=max(total, done), elapsed_seconds=time.perf_counter() - started))

    rows = _stale(workspace, model).order_by("id").only(*_PENDING_FIELDS)
    after: uuid.UUID | None = None
    while chunk := list((rows if after is None else rows.filter(id__gt=after))[:batch]):
        done += _embed_unchanged(embedder, workspace, chunk)
        after = chunk[-1].id
        report()
    for _ in range(_STRAGGLER_BATCHES):
        stragglers = list(rows[:batch])
        if len(stragglers) <= REEMBED_FINAL_MAX:
            break
        done += _embed_unchanged(embedder, workspace, stragglers)
        report()
    with transaction.atomic():
        stamp, _ = vectors_touch(workspace=workspace)
        last = list(rows)
        if last:
            done += _write_vectors(last, _chunk_vectors(embedder, workspace, last), model, stamp)
        Workspace.objects.filter(pk=workspace.pk).update(embedder=stored)
        workspace.embedder = stored
    if last:
        report()
    log.info("workspace %s re-embedded with %s: %d memories", workspace.slug, model, done)
    return ReembedResult(model=model, reembedded=done, spec=stored, changed=True)


def _embed_unchanged(embedder: Embedder, workspace: Workspace, chunk: Sequence[Memory]) -> int:
    """Embed `chunk` outside any transaction, then write the vectors in a short one to the rows unchanged
    since they were read; returns how many were written."""
    vectors = _chunk_vectors(embedder, workspace, chunk)
    with transaction.atomic():
        stamp, _ = vectors_touch(workspace=workspace)
        return _write_vectors(chunk, vectors, embedder.name, stamp, unchanged=True)


def _chunk_vectors(embedder: Embedder, workspace: Workspace, chunk: Sequence[Memory]) -> FloatMatrix:
    """The vectors of `chunk` (compressed memories are embedded from their original text)."""
    originals = compressed_originals(workspace=workspace, memories=chunk)
    return embedder.embed(
        [embedding_text(m, o.content if (o := originals.get(m.id)) is not None else None) for m in chunk]
    )


def _write_vectors(
    memories: Sequence[Memory],
    vectors: Any,
    model: str,
    stamp: datetime,
    *,
    unchanged: bool = False,
    only_waiting: bool = False,
) -> int:
    """One prepared UPDATE per memory through executemany (Django's bulk_update builds a CASE per column);
    with `unchanged`, only rows unchanged since read (same updated_at); with `only_waiting`, only such rows
    that are still without a vector. Returns how many rows were written."""
    table = connection.ops.quote_name(Memory._meta.db_table)
    to_key = uuid_converter()
    when = db_datetime(stamp)
    rows = [
        (to_bytes(vector), model, when, to_key(m.id))
        + ((db_datetime(m.updated_at),) if unchanged or only_waiting else ())
        for m, vector in zip(memories, vectors, strict=True)
    ]
    where = "id = %s"
    if only_waiting:
        where += " AND embedded_at IS NULL"
    if unchanged or only_waiting:
        where += " AND updated_at = %s"
    with connection.cursor() as cursor:
        cursor.executemany(
            f"UPDATE {table} SET embedding = %s, embedding_model = %s, embedded_at = %s WHERE {where}", rows
        )
        # Both drivers sum the rows of every statement of an executemany.
        return max(int(cursor.rowcount), 0)


# -- memories waiting for a vector ------------------------------------------------------------------------

#: Memories embedded per transaction by the embed job: the vectors are computed before it opens, so a
#: transaction writes them and holds the database for a few milliseconds.
PENDING_BATCH = 128
_PENDING_FIELDS = ("id", "content", "compression_tier", "snapshots", "updated_at")


def pending_vectors(*, workspace: Workspace) -> Any:
    """The memories of `workspace` waiting for a vector (stored without one: ``embedded_at`` is null; read
    through the (workspace, embedded_at) index), forgotten ones aside (their text is gone)."""
    return Memory.objects.filter(workspace=workspace, embedded_at__isnull=True).exclude(status=Status.FORGOTTEN)


def has_pending_vectors(*, workspace: Workspace) -> bool:
    return bool(pending_vectors(workspace=workspace).exists())


@dataclass(frozen=True)
class EmbedPendingResult:
    """``embedded``: memories given a vector; ``left``: still waiting (more than the time budget allowed, or
    edited while their vector was computed: the next run takes them); ``model``: the embedder used."""

    model: str
    embedded: int
    left: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "embedded": self.embedded, "left": self.left, "seconds": round(self.seconds, 3)}


def embed_pending(
    *,
    workspace: Workspace,
    budget_seconds: float | None = None,
    batch: int = PENDING_BATCH,
    progress: Callable[[ReembedProgress], None] | None = None,
) -> EmbedPendingResult:
    """Give the memories of `workspace` that wait for a vector their vectors, `batch` at a time, until none
    waits or `budget_seconds` have passed (None: no limit). The scheduler's embed job; ``reembed`` too.

    Each batch is read and embedded outside any transaction, then written in a short one that touches the
    workspace's vectors (``vectors_touch``) and updates only rows still waiting and unchanged since they
    were read (same ``updated_at``): a memory edited meanwhile got its own vector from the edit, or is read
    again by the next batch. A workspace moved to another embedder meanwhile has its batch computed again.
    """
    if batch < 1:
        raise InvalidInput("batch: expected a positive integer", field="batch")
    started = time.perf_counter()
    total = pending_vectors(workspace=workspace).count()
    embedded = 0
    model = embedder_for(workspace).name
    unchanged_rounds = 0
    while budget_seconds is None or time.perf_counter() - started < budget_seconds:
        chunk = list(pending_vectors(workspace=workspace).only(*_PENDING_FIELDS)[:batch])
        if not chunk:
            break
        embedder = embedder_for(workspace)
        vectors = _chunk_vectors(embedder, workspace, chunk)
        with transaction.atomic():
            stamp, _ = vectors_touch(workspace=workspace)
            if embedder_for(workspace).name != embedder.name:
                continue  # moved to another model since: this batch is embedded again with it
            written = _write_vectors(chunk, vectors, embedder.name, stamp, only_waiting=True)
        model = embedder.name
        embedded += written
        # Rows edited between the read and the write are read again; a batch of only such rows many times
        # over means something rewrites them as fast as they are read: leave them to the next run.
        unchanged_rounds = unchanged_rounds + 1 if written == 0 else 0
        if unchanged_rounds >= 3:
            break
        if progress is not None:
            progress(
                ReembedProgress(
                    done=embedded, total=max(total, embedded), elapsed_seconds=time.perf_counter() - started
                )
            )
    left = pending_vectors(workspace=workspace).count()
    seconds = time.perf_counter() - started
    if embedded:
        log.info(
            "workspace %s: %d memories embedded with %s in %.1f s, %d waiting",
            workspace.slug,
            embedded,
            model,
            seconds,
            left,
        )
    return EmbedPendingResult(model=model, embedded=embedded, left=left, seconds=seconds)
