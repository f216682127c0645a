"""Write audited records of changes.

A record stores, per touched memory, the exact prior and new values of the fields it changed
(``before``/``after``), plus the rows it created. ``history.revert`` undoes it; what undoing means for the
rows of an app is that app's revert handler (memories registers the one for memories and edges).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import models
from django.utils import timezone

from history.models import EvolutionRecord, RecordLink

if TYPE_CHECKING:
    from evolution.models import EvolutionRun
    from memories.models import Workspace


def encode_value(field: str, value: Any) -> Any:
    """Make a model field value JSON-safe without losing precision (iso datetimes, base64 bytes)."""
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return value


def snapshot(obj: models.Model, fields: Iterable[str]) -> dict[str, Any]:
    return {f: encode_value(f, getattr(obj, f)) for f in fields}


def actor_or_none(actor: AbstractBaseUser | AnonymousUser | None) -> Any:
    return actor if actor is not None and actor.is_authenticated else None


def actor_name(actor: AbstractBaseUser | AnonymousUser | None) -> str:
    """The username a record's reason names ("" for the engine or an anonymous caller)."""
    return actor.get_username() if actor is not None and actor.is_authenticated else ""


def approval(kind: str, proposal_pk: object, actor: AbstractBaseUser | AnonymousUser | None) -> str:
    """How an applied proposal's record reason starts: "merge proposal 12 approved by alice"."""
    who = actor_name(actor)
    return f"{kind} proposal {proposal_pk} approved" + (f" by {who}" if who else "")


def record_build(
    *,
    workspace: Workspace,
    evolver: str,
    action: str,
    reason: str,
    input_ids: Sequence[Any] = (),
    output_ids: Sequence[Any] = (),
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    run: EvolutionRun | None = None,
    dry_run: bool = False,
    actor: AbstractBaseUser | AnonymousUser | None = None,
    now: datetime | None = None,
) -> EvolutionRecord:
    """Build (not save) a record; pair with records_save to write many in two queries."""
    return EvolutionRecord(
        workspace=workspace,
        run=run,
        evolver=evolver,
        action=action,
        reason=reason,
        input_ids=[str(i) for i in input_ids],
        output_ids=[str(i) for i in output_ids],
        before=dict(before or {}),
        after=dict(after or {}),
        dry_run=dry_run,
        actor=actor_or_none(actor),
        timestamp=now or timezone.now(),
    )


def record_save(record: EvolutionRecord) -> EvolutionRecord:
    """Insert one built record and its memory links (records_save of one)."""
    (saved,) = records_save([record])
    return saved


def records_save(records: Sequence[EvolutionRecord], *, batch_size: int = 500) -> list[EvolutionRecord]:
    """Insert records and their memory links in batches (ids are needed for the links)."""
    if not records:
        return []
    saved = EvolutionRecord.objects.bulk_create(records, batch_size=batch_size)
    if any(r.pk is None for r in saved):
        # Backends without RETURNING on bulk insert: fall back to one insert per record.
        saved = []
        for r in records:
            r.save()
            saved.append(r)
    links: list[RecordLink] = []
    for record in saved:
        ids = {str(i) for i in record.input_ids} | {str(i) for i in record.output_ids}
        for key in record.before:
            if is_uuid(key):
                ids.add(key)
        for mid in ids:
            if is_uuid(mid):
                links.append(RecordLink(record=record, memory_id=uuid.UUID(mid)))
    RecordLink.objects.bulk_create(links, batch_size=2000)
    return saved


def is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def memory_changes(memory: models.Model, changes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Return (before, after) JSON snapshots of just the fields that `changes` alters."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    for name, value in changes.items():
        old = getattr(memory, name)
        if old != value:
            before[name] = encode_value(name, old)
            after[name] = encode_value(name, value)
    return before, after


# Keys of before/after that are not memory ids.
CREATED_MEMORIES = "created_memories"
CREATED_EDGES = "created_edges"
EDGE_CHANGES = "edges"
DELETED = "deleted"
SETTINGS = "settings"
"""Key of a configure record's before/after: the workspace's stored settings overrides."""
LINEAGE = "lineage"
"""Key of an import record's after: where the imported directory came from, and what it created."""


def memory_fields(record: EvolutionRecord, key: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (before, after) field values a record holds for the memory whose id text is `key` ({} when none)."""
    before, after = record.before.get(key), record.after.get(key)
    return (before if isinstance(before, dict) else {}), (after if isinstance(after, dict) else {})
