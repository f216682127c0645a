"""Write-time conflict policies on the (workspace, memory_type, subject) slot (as in the typedmem project).

Every path that creates memories calls `write_policy_hook` inside its transaction, right after the
rows are inserted (memories.services registers it; see EvolutionConfig.ready). The decision itself is
`evolution.algorithms.typed.decide_conflict`; this module loads the slot holders, applies the decisions
to the rows and writes one EvolutionRecord (evolver "WritePolicy") per action, so every policy action
shows in a memory's history and reverts exactly.

Policies by type (workspace overrides in `evolution_settings["conflict_policies"]`): preference and
goal REPLACE; fact, event, observation KEEP_BOTH; state FLAG; every other type KEEP_BOTH. A memory
without a subject never collides, and neither does one written with a status other than active.

What each action writes (E = the active memory holding the slot, I = the incoming memory):

- REPLACE: E keeps its id and takes I's content, confidence, origin, origin tier and embedding;
  replace_log gets `now` (last 20 kept), replace_count + 1, version + 1, and
  `metadata["content_source"] = {memory_id, created_at}` names where the content came from (its
  created_at is what the "incoming is older" guard compares next time). Because the hook runs after
  the insert, I cannot be "not inserted": it is retired instead, status superseded, superseded_by E,
  `metadata["replaced_into"] = E`. One record holds both rows' before/after.
- SKIP (REPLACE/SUPERSEDE guard: same content, lower source authority, older or less confident): the
  slot is untouched; I is retired the same way with `metadata["skipped_by_policy"] = {into, reason}`,
  so a stale or lower-authority value never shows as a second active preference.
- FLAG (state): both stay active; conflicts_with cross-links I with every differing holder.
- SUPERSEDE (corrections, or a SUPERSEDE override): E becomes superseded, superseded_by I.
- REINFORCE (override only): same content again raises E's confidence to 1 - (1-a)(1-b), version + 1;
  I is retired with `metadata["reinforced_into"] = E`.
- KEEP_BOTH: nothing to do and nothing recorded.

Corrections win every conflict. A memory of type "correction" collides with every active memory of
its subject whatever their type: REPLACE holders take its content, all others are superseded by it;
the correction itself always stays active (it is the record of what the person said). A memory of
another type written with `metadata["correction"] = true` (POST /corrections/) replaces without the
guards and is retired into the holder like any REPLACE.

Speed: memories without a subject, or whose type can never collide, cost nothing. Otherwise one query
per inserted batch loads the active holders of all the batch's slots; decisions run in memory (later
memories of the batch see the effect of earlier ones, oldest created_at first); changed rows are
written with one prepared UPDATE per changed field set and the records in bulk.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db.models.functions import Lower, Trim

from core.errors import InvalidInput
from evolution.algorithms.typed import (
    CORRECTION_TYPE,
    ConflictAction,
    ConflictDecision,
    ConflictPolicy,
    SlotMemory,
    decide_conflict,
    parse_timestamp,
    policy_for,
)
from history import audit
from history.models import Action, EvolutionRecord
from memories.bulk import write_rows
from memories.models import Memory, MemoryType, Status, Workspace

EVOLVER = "WritePolicy"
SETTING = "conflict_policies"
CORRECTION_FLAG = "correction"

# Fields of a holder that a decision reads or writes; loading only these keeps the query narrow.
_HOLDER_FIELDS = (
    "id",
    "memory_type",
    "subject",
    "content",
    "confidence",
    "origin",
    "origin_tier",
    "created_at",
    "updated_at",
    "status",
    "replace_log",
    "replace_count",
    "version",
    "conflicts_with",
    "superseded_by",
    "metadata",
    "embedding",
    "pinned",
    "embedding_model",
    "embedded_at",
)


@dataclass(slots=True)
class _Holder:
    """A stored slot holder as plain values: building thousands of model instances per batch would cost
    more than the decisions themselves."""

    id: uuid.UUID
    memory_type: str
    subject: str
    content: str
    confidence: float
    origin: str
    origin_tier: int
    created_at: datetime
    updated_at: datetime
    status: str
    replace_log: list[str]
    replace_count: int
    version: int
    conflicts_with: list[str]
    superseded_by: uuid.UUID | None
    metadata: dict[str, Any]
    embedding: bytes | None
    pinned: bool
    embedding_model: str
    embedded_at: datetime | None


Row = Memory | _Holder


def validate_policy_overrides(value: Any) -> dict[str, str]:
    """Check a `conflict_policies` setting: {memory_type: replace|flag|keep_both|supersede|reinforce}."""
    if not isinstance(value, Mapping):
        raise InvalidInput(f"{SETTING}: expected an object of memory type -> policy", field=SETTING)
    cleaned: dict[str, str] = {}
    for memory_type, policy in value.items():
        if memory_type not in MemoryType.values:
            raise InvalidInput(f"{SETTING}.{memory_type}: not a memory type", field=f"{SETTING}.{memory_type}")
        if policy not in {p.value for p in ConflictPolicy}:
            choices = ", ".join(p.value for p in ConflictPolicy)
            raise InvalidInput(f"{SETTING}.{memory_type}: {policy!r} is not one of {choices}", field=SETTING)
        cleaned[str(memory_type)] = str(policy)
    return cleaned


def policy_overrides(workspace: Workspace) -> dict[str, ConflictPolicy]:
    """The workspace's policy overrides; entries that do not validate are ignored (defaults apply)."""
    raw = (workspace.evolution_settings or {}).get(SETTING)
    if not isinstance(raw, Mapping):
        return {}
    valid = {p.value for p in ConflictPolicy}
    return {str(t): ConflictPolicy(p) for t, p in raw.items() if isinstance(p, str) and p in valid}


def _subject_key(subject: str) -> str:
    # Same normalisation as typed.SlotMemory.subject_key: case- and whitespace-insensitive.
    return " ".join(subject.split()).casefold()


def _is_correction_type(memory: Row) -> bool:
    return memory.memory_type == CORRECTION_TYPE


def _flagged_correction(memory: Row) -> bool:
    return isinstance(memory.metadata, dict) and memory.metadata.get(CORRECTION_FLAG) is True


def _can_collide(memory: Memory, overrides: Mapping[str, ConflictPolicy]) -> bool:
    if memory.status != Status.ACTIVE or not memory.subject.strip():
        return False
    if _is_correction_type(memory) or _flagged_correction(memory):
        return True
    return policy_for(memory.memory_type, overrides) is not ConflictPolicy.KEEP_BOTH


def _content_time(memory: Row) -> datetime:
    """When the memory's current content was written: a REPLACE moves it to the incoming memory's time."""
    source = memory.metadata.get("content_source") if isinstance(memory.metadata, dict) else None
    if isinstance(source, dict) and isinstance(source.get("created_at"), str):
        try:
            return parse_timestamp(source["created_at"])
        except ValueError:
            pass
    return memory.created_at


def _slot(memory: Row) -> SlotMemory:
    return SlotMemory(
        id=str(memory.id),
        memory_type=memory.memory_type,
        subject=memory.subject,
        content=memory.content,
        confidence=memory.confidence,
        origin=memory.origin,
        created_at=_content_time(memory),
        replace_log=tuple(memory.replace_log or ()),
        replace_count=memory.replace_count,
        version=memory.version,
        is_correction=_flagged_correction(memory),
        origin_tier=memory.origin_tier,
    )


class _Batch:
    """Holders by slot, the rows changed so far and the records written, for one inserted batch."""

    def __init__(self, workspace: Workspace, overrides: Mapping[str, ConflictPolicy], now: datetime) -> None:
        self.workspace = workspace
        self.overrides = overrides
        self.now = now
        self.by_subject: dict[str, list[Row]] = {}
        self.changed: dict[uuid.UUID, tuple[Row, set[str]]] = {}
        self.records: list[EvolutionRecord] = []

    def add_holder(self, memory: Row) -> None:
        self.by_subject.setdefault(_subject_key(memory.subject), []).append(memory)

    def holders_for(self, incoming: Memory) -> list[Row]:
        """Active memories of the incoming memory's slot, oldest first (any type for a correction)."""
        candidates = self.by_subject.get(_subject_key(incoming.subject), [])
        return [
            m
            for m in candidates
            if m.status == Status.ACTIVE
            and m.id != incoming.id
            and (_is_correction_type(incoming) or m.memory_type == incoming.memory_type)
        ]

    def change(self, memory: Row, values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Set `values` on the row (in memory) and return the JSON before/after of what really changed."""
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        for name, value in values.items():
            old = getattr(memory, name)
            if old != value:
                before[name] = audit.encode_value(name, old)
                after[name] = audit.encode_value(name, value)
                setattr(memory, name, value)
        if after:
            _, fields = self.changed.setdefault(memory.id, (memory, set()))
            fields.update(after)
        return before, after

    def stamp(self, memory: Row, embedded_at: datetime | None) -> None:
        """Write `embedded_at` with the row's other changes, outside the audited before/after."""
        memory.embedded_at = embedded_at
        _, fields = self.changed.setdefault(memory.id, (memory, set()))
        fields.add("embedded_at")

    def record(
        self,
        action: str,
        reason: str,
        decision: ConflictDecision,
        changes: Sequence[tuple[Row, tuple[dict[str, Any], dict[str, Any]]]],
    ) -> None:
        before = {str(m.id): b for m, (b, a) in changes if a}
        after = {str(m.id): a for m, (b, a) in changes if a}
        if not after:
            return
        self.records.append(
            audit.record_build(
                workspace=self.workspace,
                evolver=EVOLVER,
                action=action,
                reason=f"{decision.policy.value}: {reason}",
                input_ids=[decision.incoming_id, decision.existing_id],
                output_ids=list(after),
                before=before,
                after=after,
                now=self.now,
            )
        )


def _retire(
    batch: _Batch, incoming: Memory, into: Row, marker: str, detail: Any
) -> tuple[dict[str, Any], dict[str, Any]]:
    metadata = {**(incoming.metadata or {}), marker: detail}
    return batch.change(incoming, {"status": Status.SUPERSEDED, "superseded_by": into.id, "metadata": metadata})


def _apply(batch: _Batch, holder: Row, incoming: Memory, decision: ConflictDecision) -> None:
    now = batch.now
    action = decision.action
    keeps_incoming = _is_correction_type(incoming)
    if action is ConflictAction.REPLACE:
        metadata = {
            **(holder.metadata or {}),
            "content_source": {"memory_id": str(incoming.id), "created_at": incoming.created_at.isoformat()},
        }
        held = batch.change(
            holder,
            {
                "content": decision.content,
                "confidence": decision.confidence,
                "origin": incoming.origin,
                "origin_tier": incoming.origin_tier,
                "embedding": incoming.embedding,
                # With the vector, so a revert puts back the old vector with its own model's name.
                "embedding_model": incoming.embedding_model,
                "replace_log": list(decision.replace_log),
                "replace_count": decision.replace_count,
                "version": decision.version,
                "metadata": metadata,
                "updated_at": now,
            },
        )
        if "embedding" in held[1]:
            # The write time is not audited (a revert stamps the vector it restores anew): it follows the
            # vector here, stamped when this transaction touched the workspace's vectors.
            batch.stamp(holder, incoming.embedded_at)
        changes = [(holder, held)]
        if not keeps_incoming:
            changes.append((incoming, _retire(batch, incoming, holder, "replaced_into", str(holder.id))))
        batch.record(Action.REPLACE, decision.reason, decision, changes)
    elif action is ConflictAction.SKIP:
        if keeps_incoming:
            return
        detail = {"into": str(holder.id), "reason": decision.reason}
        changes = [(incoming, _retire(batch, incoming, holder, "skipped_by_policy", detail))]
        batch.record(Action.SUPERSEDE, f"kept the current value: {decision.reason}", decision, changes)
    elif action is ConflictAction.FLAG:
        held = batch.change(
            holder,
            {"conflicts_with": _linked(holder.conflicts_with, incoming.id), "updated_at": now},
        )
        came = batch.change(incoming, {"conflicts_with": _linked(incoming.conflicts_with, holder.id)})
        batch.record(Action.FLAG, decision.reason, decision, [(holder, held), (incoming, came)])
    elif action is ConflictAction.SUPERSEDE:
        held = batch.change(holder, {"status": Status.SUPERSEDED, "superseded_by": incoming.id, "updated_at": now})
        batch.record(Action.SUPERSEDE, decision.reason, decision, [(holder, held)])
    elif action is ConflictAction.REINFORCE:
        held = batch.change(holder, {"confidence": decision.confidence, "version": decision.version, "updated_at": now})
        changes = [(holder, held)]
        if not keeps_incoming:
            changes.append((incoming, _retire(batch, incoming, holder, "reinforced_into", str(holder.id))))
        batch.record(Action.UPDATE, decision.reason, decision, changes)


def _respect_pin(holder: Row, incoming: Memory, decision: ConflictDecision) -> ConflictDecision:
    """A value a person pinned is not replaced or superseded by a new write: both stay, flagged.

    Only a correction overrides a pin; anything else becomes a contradiction for a person to settle.
    """
    if not holder.pinned or _is_correction_type(incoming):
        return decision
    if decision.action not in (ConflictAction.REPLACE, ConflictAction.SUPERSEDE):
        return decision
    return replace(
        decision,
        action=ConflictAction.FLAG,
        reason=f"{decision.reason}; flagged instead because memory {holder.id} is pinned",
    )


def _linked(ids: Sequence[Any], other: uuid.UUID) -> list[str]:
    current = [str(i) for i in ids or ()]
    return current if str(other) in current else [*current, str(other)]


def _load_holders(workspace: Workspace, candidates: Sequence[Memory], batch: _Batch, skip: set[uuid.UUID]) -> None:
    """One query: active memories whose subject matches any candidate's slot, oldest first.

    The database compares lower(trim(subject)) (ASCII case folding on SQLite); the exact slot match,
    with Unicode case folding and collapsed inner whitespace, is re-checked in Python by holders_for.
    """
    keys: set[str] = set()
    for m in candidates:
        keys.add(" ".join(m.subject.split()).lower())
        keys.add(m.subject.strip().lower())
    query = Memory.objects.filter(workspace=workspace, status=Status.ACTIVE)
    if not any(_is_correction_type(m) for m in candidates):
        query = query.filter(memory_type__in=sorted({m.memory_type for m in candidates}))
    rows = (
        query.annotate(subject_key=Lower(Trim("subject")))
        .filter(subject_key__in=sorted(keys))
        .order_by("created_at", "id")
        .values_list(*_HOLDER_FIELDS)
    )
    for values in rows:
        if values[0] not in skip:
            holder = _Holder(*values)
            if holder.embedding is not None:
                holder.embedding = bytes(holder.embedding)
            batch.add_holder(holder)


def apply_write_policies(workspace: Workspace, memories: Sequence[Memory], now: datetime) -> list[EvolutionRecord]:
    """Resolve the slot conflicts of freshly inserted `memories`; returns the saved records.

    The rows of `memories` are updated in place too, so the caller's objects (and the API response
    built from them) show the outcome, e.g. an incoming preference retired into the existing one.
    """
    overrides = policy_overrides(workspace)
    candidates = [m for m in memories if _can_collide(m, overrides)]
    if not candidates:
        return []
    batch = _Batch(workspace, overrides, now)
    _load_holders(workspace, candidates, batch, skip={m.id for m in memories})
    # Oldest first so an imported history replays in order; equal times keep the batch order.
    for incoming in sorted(candidates, key=lambda m: m.created_at):
        if incoming.status != Status.ACTIVE:
            continue
        holders = batch.holders_for(incoming)
        if _is_correction_type(incoming):
            targets = holders
        else:
            policy = policy_for(incoming.memory_type, overrides)
            targets = holders if policy is ConflictPolicy.FLAG else holders[-1:]
        for holder in targets:
            if incoming.status != Status.ACTIVE:
                break
            decision = decide_conflict(_slot(holder), _slot(incoming), policy_for(holder.memory_type, overrides), now)
            decision = _respect_pin(holder, incoming, decision)
            _apply(batch, holder, incoming, decision)
        if incoming.status == Status.ACTIVE:
            batch.add_holder(incoming)
    _write(batch)
    return audit.records_save(batch.records)


def _write(batch: _Batch) -> None:
    groups: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
    for memory, fields in batch.changed.values():
        names = tuple(sorted(fields))
        groups.setdefault(names, []).append((*(getattr(memory, n) for n in names), memory.id))
    for names, rows in groups.items():
        write_rows(Memory, names, rows)


def write_policy_hook(workspace: Workspace, memories: list[Memory], now: datetime) -> None:
    """The callable registered with memories.services.register_write_policy."""
    apply_write_policies(workspace, memories, now)
