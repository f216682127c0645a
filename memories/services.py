"""Writes of workspaces, memories, edges and conversations. Every write is atomic and audited."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from graph.writes import graph_mirror, graph_touch
from history import audit, revert
from history.models import Action, EvolutionRecord
from memories import live, selectors
from memories.algorithms.entities import extract_entities
from memories.algorithms.sortkey import activation_sort_key
from memories.bulk import bulk_insert, new_instance
from memories.embedding_service import embedding_changes, embedding_text, memories_embed
from memories.inputs import EDITABLE_FIELDS, MemoryInput, SessionInput, origin_tier
from memories.models import (
    CompressionTier,
    Edge,
    EdgeType,
    Membership,
    Memory,
    MemoryType,
    Role,
    Status,
    Workspace,
)

User = AbstractBaseUser | AnonymousUser
_ORIGIN_MAX: int = Memory._meta.get_field("origin").max_length or 120
_SUBJECT_MAX: int = Memory._meta.get_field("subject").max_length or 200
BULK_BATCH = 1000

# Hook for write-time conflict policies (typedmem slots); the evolution app registers it so that
# every entry point that creates memories applies the same policy.
WritePolicy = Callable[[Workspace, list[Memory], datetime], None]
_write_policies: list[WritePolicy] = []


def register_write_policy(policy: WritePolicy) -> None:
    if policy not in _write_policies:
        _write_policies.append(policy)


# Hook for the write-time evolve stage, the last stage of ingestion: each stage runs once the creating
# transaction has committed (robust: a failing stage is logged and never fails the committed ingestion).
IngestStage = Callable[[Workspace, list[Memory], datetime], object]
_ingest_stages: list[IngestStage] = []


def register_ingest_stage(stage: IngestStage) -> None:
    if stage not in _ingest_stages:
        _ingest_stages.append(stage)


def _stage_call(stage: IngestStage, workspace: Workspace, memories: list[Memory], now: datetime) -> Callable[[], None]:
    """The on-commit callback of one stage (a named function: Django logs a robust callback's failure by it)."""

    def ingest_stage() -> None:
        stage(workspace, memories, now)

    return ingest_stage


def _username(actor: User | None) -> str:
    """The actor's username; "" for the engine or an anonymous caller."""
    return getattr(actor, "username", "") if actor is not None and actor.is_authenticated else ""


def default_origin(actor: User | None, channel: str = "api") -> str:
    name = _username(actor)
    # Usernames may be 150 characters; the origin column holds 120.
    return f"{channel}:{name}"[:_ORIGIN_MAX]


IDENTITY_PREFIXES = ("user:", "api:", "cli:")
"""Origins that name the person who wrote a memory (tier 1: never compressed, shown as theirs)."""
RESERVED_PREFIXES = ("engine:", "evolver:")
"""Origins the engine and the evolvers write: a client claiming one would pass for them."""


def _foreign_claim(origin: str, actor: User | None) -> bool:
    """True when `origin` is the engine's or an evolver's, or names a person other than `actor`."""
    if origin.startswith(RESERVED_PREFIXES):
        return True
    return origin.startswith(IDENTITY_PREFIXES) and origin.split(":", 1)[1] != _username(actor)


def check_origin_claim(*, origin: str, actor: User | None, trusted: bool, field: str = "origin") -> None:
    """Refuse an origin a client may not claim: another person's identity (``user:admin``) or the
    engine's and evolvers' own (``engine:strategy``). The caller's own identity and source labels
    (``import:wiki``, ``agent:planner``) are fine; a trusted caller (a workspace owner, ingesting for
    others) may set any origin."""
    if not origin or trusted or not _foreign_claim(origin, actor):
        return
    if origin.startswith(RESERVED_PREFIXES):
        raise InvalidInput(f"{field}: {origin!r} is written by the engine and the evolvers only", field=field)
    raise InvalidInput(
        f"{field}: {origin!r} names someone else; write as yourself ({origin.split(':', 1)[0]}:{_username(actor)}) "
        "or name the source (import:<source>)",
        field=field,
    )


@transaction.atomic
def client_memories_create(
    *, workspace: Workspace, actor: User | None, items: Sequence[MemoryInput], trusted: bool, bulk: bool
) -> list[Memory]:
    """memories_create for an API client. Origins it may not claim are refused naming the field
    (``origin``, or ``items[k].origin`` for a bulk body); when a trusted caller writes memories in another's
    name, one record names who did (evolver ``api``, action ``import``, linked to those memories)."""
    claimed: list[int] = []
    for k, item in enumerate(items):
        if item.origin and _foreign_claim(item.origin, actor):
            check_origin_claim(
                origin=item.origin, actor=actor, trusted=trusted, field=f"items[{k}].origin" if bulk else "origin"
            )
            claimed.append(k)
    memories = memories_create(workspace=workspace, actor=actor, items=items)
    if claimed:
        origins = {str(memories[k].id): items[k].origin for k in claimed}
        audit.record_save(
            audit.record_build(
                workspace=workspace,
                evolver="api",
                action=Action.IMPORT,
                reason=(
                    f"{default_origin(actor)} wrote {len(claimed)} memories in another's name: "
                    + ", ".join(sorted(set(origins.values())))
                )[:2000],
                output_ids=[memories[k].id for k in claimed],
                after={"origins": origins},
                actor=actor,
            )
        )
    return memories


# -- workspaces -----------------------------------------------------------------------------------


@transaction.atomic
def workspace_create(*, owner: AbstractBaseUser, slug: str, name: str) -> Workspace:
    """Create a workspace owned by `owner`.

    A taken slug tells a member of that workspace so (Conflict, 409 ``slug_taken``); anyone else learns only
    that the slug is not available, with a free one to use instead (InvalidInput, 400 ``slug_unavailable``),
    the same answer whatever the workspace holds or whoever owns it."""
    # The unique index decides, not a prior SELECT: of two requests racing for one slug, one gets it.
    try:
        with transaction.atomic():
            workspace = Workspace.objects.create(slug=slug, name=name)
    except IntegrityError:
        if Membership.objects.filter(workspace__slug=slug, user_id=owner.pk).exists():
            raise Conflict(
                f"slug: you are already a member of the workspace {slug!r}", code="slug_taken", field="slug"
            ) from None
        raise InvalidInput(
            f"slug: {slug!r} is not available; {_free_slug(slug)!r} is", code="slug_unavailable", field="slug"
        ) from None
    Membership.objects.create(workspace=workspace, user_id=owner.pk, role=Role.OWNER)
    return workspace


def _free_slug(slug: str) -> str:
    """`slug` with a random suffix that no workspace has (a counter would tell which neighbours exist)."""
    max_length = Workspace._meta.get_field("slug").max_length or 64
    while True:
        candidate = f"{slug[: max_length - 7]}-{secrets.token_hex(3)}"
        if not Workspace.objects.filter(slug=candidate).exists():
            return candidate


def membership_set(*, workspace: Workspace, user: AbstractBaseUser, role: str) -> Membership:
    if role not in Role.values:
        raise InvalidInput(f"role: {role!r} is not one of {', '.join(Role.values)}", field="role")
    membership, _ = Membership.objects.update_or_create(workspace=workspace, user=user, defaults={"role": role})
    return membership


# -- memories -------------------------------------------------------------------------------------


def _build_memory(workspace: Workspace, item: MemoryInput, origin: str, now: datetime) -> Memory:
    created = item.created_at or now
    final_origin = item.origin or origin
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "workspace_id": workspace.pk,
        "memory_type": item.memory_type,
        "content": item.content,
        "subject": item.subject,
        "tags": list(item.tags),
        "origin": final_origin,
        "origin_tier": origin_tier(final_origin),
        "confidence": item.confidence,
        "status": item.status,
        "tier": item.tier,
        "pinned": item.pinned,
        # New memories start decaying from their creation: activation measures recent use.
        "activation_last_boost_at": created,
        "created_at": created,
        "updated_at": created,
        "valid_from": item.valid_from,
        "valid_to": item.valid_to,
        "metadata": dict(item.metadata),
    }
    memory = new_instance(Memory, values, {"workspace": workspace})
    memory.activation_sort_key = activation_sort_key(
        memory.activation_score, created, memory.activation_half_life_hours
    )
    return memory


def _new_edge(workspace: Workspace, source: Memory, target: Memory, edge_type: str, now: datetime) -> Edge:
    return new_instance(
        Edge,
        {
            "workspace_id": workspace.pk,
            "source_id": source.pk,
            "target_id": target.pk,
            "edge_type": edge_type,
            "created_at": now,
        },
    )


def _insert(workspace: Workspace, memories: list[Memory], now: datetime) -> None:
    memories_embed(workspace=workspace, memories=memories)
    bulk_insert(Memory, memories)
    if memories and _write_policies:
        for policy in _write_policies:
            policy(workspace, memories, now)
    for stage in _ingest_stages if memories else ():
        transaction.on_commit(_stage_call(stage, workspace, memories, now), robust=True)


@transaction.atomic
def memories_create(
    *, workspace: Workspace, actor: User | None, items: Sequence[MemoryInput], channel: str = "api"
) -> list[Memory]:
    """Create all `items` or none of them (one transaction); embeddings are computed in one batch."""
    now = timezone.now()
    origin = default_origin(actor, channel)
    memories = [_build_memory(workspace, item, origin, now) for item in items]
    for start in range(0, len(memories), 20 * BULK_BATCH):
        _insert(workspace, memories[start : start + 20 * BULK_BATCH], now)
    return memories


def memory_create(*, workspace: Workspace, actor: User | None, item: MemoryInput, channel: str = "api") -> Memory:
    return memories_create(workspace=workspace, actor=actor, items=[item], channel=channel)[0]


@transaction.atomic
def memory_update(*, workspace: Workspace, memory: Memory, actor: User | None, changes: dict[str, Any]) -> Memory:
    """Apply a person's edit; an edited content becomes theirs (origin tier 1) and is re-embedded."""
    unknown = sorted(set(changes) - EDITABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{unknown[0]}: this field cannot be changed", field=unknown[0])
    now = timezone.now()
    changes = dict(changes)
    if (
        "status" in changes
        and changes["status"] not in (Status.ACTIVE, Status.ARCHIVED)
        and not (memory.memory_type == MemoryType.GOAL and changes["status"] in (Status.RESOLVED, Status.ABANDONED))
    ):
        raise InvalidInput(f"status: {changes['status']!r} cannot be set by hand here", field="status")
    # A patch may move one end of the validity window; check it against the end it leaves in place.
    valid_from = changes.get("valid_from", memory.valid_from)
    valid_to = changes.get("valid_to", memory.valid_to)
    if valid_from is not None and valid_to is not None and valid_to < valid_from:
        raise InvalidInput("valid_to: earlier than valid_from", field="valid_to")
    if "content" in changes and changes["content"] != memory.content:
        changes["origin"] = default_origin(actor, "user")
        changes["origin_tier"] = 1
        changes["version"] = memory.version + 1
        changes.update(embedding_changes(workspace=workspace, text=changes["content"]))
    before, after = audit.memory_changes(memory, changes)
    if not before:
        return memory
    before["updated_at"] = audit.encode_value("updated_at", memory.updated_at)
    after["updated_at"] = audit.encode_value("updated_at", now)
    for name, value in changes.items():
        setattr(memory, name, value)
    memory.updated_at = now
    memory.save(update_fields=[*sorted(set(changes)), "updated_at"])
    # The embedding is bulky and reconstructible; keep it out of the audit record (with its model and time,
    # so a revert of the content leaves vector and model name together).
    for name in ("embedding", "embedding_model", "embedded_at"):
        before.pop(name, None)
        after.pop(name, None)
    action = (
        Action.ARCHIVE
        if after.get("status") == Status.ARCHIVED
        else (Action.RESTORE if before.get("status") == Status.ARCHIVED else Action.UPDATE)
    )
    audit.records_save(
        [
            audit.record_build(
                workspace=workspace,
                evolver="user",
                action=action,
                reason=f"edited by {default_origin(actor, 'user')}: {', '.join(sorted(set(after) - {'updated_at'}))}",
                input_ids=[memory.id],
                output_ids=[memory.id],
                before={str(memory.id): before},
                after={str(memory.id): after},
                actor=actor,
                now=now,
            )
        ]
    )
    return memory


def memory_archive(*, workspace: Workspace, memory: Memory, actor: User | None) -> Memory:
    if memory.status == Status.ARCHIVED:
        return memory
    return memory_update(workspace=workspace, memory=memory, actor=actor, changes={"status": Status.ARCHIVED})


@transaction.atomic
def memory_delete_hard(*, workspace: Workspace, memory: Memory, actor: User | None) -> None:
    """Delete a memory and its edges for good, keeping its content in the audit log first."""
    content = {
        name: audit.encode_value(name, getattr(memory, name))
        for name in (
            "content",
            "memory_type",
            "subject",
            "tags",
            "origin",
            "status",
            "created_at",
            "metadata",
        )
    }
    audit.records_save(
        [
            audit.record_build(
                workspace=workspace,
                evolver="user",
                action=Action.DELETE,
                reason=f"hard delete confirmed by {default_origin(actor, 'user')}",
                input_ids=[memory.id],
                before={audit.DELETED: {str(memory.id): content}},
                actor=actor,
            )
        ]
    )
    had_edges = (
        Edge.objects.filter(workspace=workspace, source=memory).exists()
        or Edge.objects.filter(workspace=workspace, target=memory).exists()
    )
    if had_edges:
        # Before the cascade deletes them: a Bolt graph store reads which edges go (the sql one reads nothing).
        graph_mirror(
            workspace=workspace,
            removed=Edge.objects.filter(Q(source=memory) | Q(target=memory), workspace=workspace).values_list(
                "source_id", "target_id", "edge_type", "weight"
            ),
        )
    memory.delete()
    if had_edges:
        graph_touch(workspace=workspace, rewrites=True)


# -- edges ----------------------------------------------------------------------------------------


@transaction.atomic
def edge_link(*, workspace: Workspace, source: Memory, target: Memory, edge_type: str, weight: float = 1.0) -> Edge:
    if source.workspace_id != workspace.pk or target.workspace_id != workspace.pk:
        raise InvalidInput("source and target must belong to this workspace", field="target")
    if source.pk == target.pk:
        raise InvalidInput("target: an edge cannot join a memory to itself", field="target")
    graph_touch(workspace=workspace)  # before the insert: see graph_touch
    try:
        with transaction.atomic():
            edge = Edge.objects.create(
                workspace=workspace, source=source, target=target, edge_type=edge_type, weight=weight
            )
    except IntegrityError:
        raise Conflict(
            f"an edge {edge_type} from {source.pk} to {target.pk} already exists", code="edge_exists"
        ) from None
    graph_mirror(workspace=workspace, added=[(source.pk, target.pk, edge_type, weight)])
    return edge


@transaction.atomic
def edges_bulk_link(*, workspace: Workspace, edges: list[Edge]) -> None:
    """Insert many edges (duplicates of existing triples are skipped) and tell snapshots once.

    One transaction, so the graph_touch that comes first holds the workspace row over the inserts."""
    if not edges:
        return
    graph_touch(workspace=workspace)  # before the insert: see graph_touch
    bulk_insert(Edge, edges, ignore_conflicts=True)
    graph_mirror(workspace=workspace, added=((e.source_id, e.target_id, e.edge_type, e.weight) for e in edges))


# -- conversations --------------------------------------------------------------------------------


@transaction.atomic
def conversation_ingest(
    *, workspace: Workspace, actor: User | None, sessions: Sequence[SessionInput], channel: str = "api"
) -> list[uuid.UUID]:
    """Store each turn as an episodic memory and wire the conversation graph; return turn ids in order.

    Per session: one `session` memory; every turn PART_OF it and FOLLOWS the turn before it. Every
    entity named in a turn becomes (or reuses) one `entity` memory per workspace, MENTIONS-linked.
    """
    now = timezone.now()
    origin = default_origin(actor, channel)
    entity_origin = "evolver:ConversationIngest"
    memories: list[Memory] = []
    edges: list[Edge] = []
    turn_ids: list[uuid.UUID] = []
    mentions: list[tuple[Memory, str]] = []
    entity_names: dict[str, str] = {}
    # An entity is as old as its first mention, so imported history does not look brand new.
    first_seen: dict[str, datetime] = {}
    for s_index, session in enumerate(sessions):
        speakers = sorted({t.speaker for t in session.turns})
        session_memory = _build_memory(
            workspace,
            MemoryInput(
                content=f"Conversation on {session.started_at:%Y-%m-%d %H:%M} between {', '.join(speakers)}"
                f" ({len(session.turns)} turns)",
                memory_type=MemoryType.SESSION,
                created_at=session.started_at,
                metadata={"session_index": s_index, "session_id": session.session_id, "speakers": speakers},
            ),
            origin,
            now,
        )
        memories.append(session_memory)
        previous: Memory | None = None
        for t_index, turn in enumerate(session.turns):
            meta: dict[str, Any] = {"speaker": turn.speaker, "turn_index": t_index, "session_index": s_index}
            if turn.ref:
                meta["ref"] = turn.ref
            turn_memory = _build_memory(
                workspace,
                MemoryInput(
                    content=f"{turn.speaker}: {turn.text}",
                    memory_type=MemoryType.EPISODIC,
                    subject=turn.speaker,
                    created_at=session.started_at,
                    metadata=meta,
                ),
                origin,
                now,
            )
            memories.append(turn_memory)
            turn_ids.append(turn_memory.id)
            edges.append(_new_edge(workspace, turn_memory, session_memory, EdgeType.PART_OF, now))
            if previous is not None:
                edges.append(_new_edge(workspace, turn_memory, previous, EdgeType.FOLLOWS, now))
            previous = turn_memory
            for entity in extract_entities(turn.text):
                if len(entity.key) > _SUBJECT_MAX:
                    # A run of capitalised words can join into a "name" of any length; none that long
                    # is a real entity, and the key must fit the subject column it is matched on.
                    continue
                entity_names.setdefault(entity.key, entity.name)
                first_seen.setdefault(entity.key, session.started_at)
                mentions.append((turn_memory, entity.key))

    existing = (
        {
            m.subject: m
            for m in Memory.objects.filter(
                workspace=workspace, memory_type=MemoryType.ENTITY, subject__in=list(entity_names)
            ).only("id", "subject")
        }
        if entity_names
        else {}
    )
    new_entities = []
    for key, name in entity_names.items():
        if key not in existing:
            entity_memory = _build_memory(
                workspace,
                MemoryInput(
                    content=name,
                    memory_type=MemoryType.ENTITY,
                    subject=key,
                    origin=entity_origin,
                    created_at=first_seen[key],
                ),
                entity_origin,
                now,
            )
            existing[key] = entity_memory
            new_entities.append(entity_memory)
    _insert(workspace, memories + new_entities, now)
    edges.extend(_new_edge(workspace, turn, existing[key], EdgeType.MENTIONS, now) for turn, key in mentions)
    edges_bulk_link(workspace=workspace, edges=edges)
    return turn_ids


# -- memory browser: bulk curation, rehydrate, revert, API tokens ---------------------------------

BULK_MAX = 500
BULK_ACTIONS: dict[str, str] = {
    # name: the field it changes
    "archive": "status",
    "restore": "status",
    "pin": "pinned",
    "unpin": "pinned",
    "set_type": "memory_type",
    "add_tag": "tags",
}
TAG_MAX_LENGTH = 64


@dataclass(frozen=True)
class BulkResult:
    """What a bulk action did: `record` is None when every selected memory already had the value."""

    action: str
    selected: int
    changed: int
    record: EvolutionRecord | None


def _bulk_new_value(memory: Memory, action: str, value: str) -> Any:
    if action == "archive":
        return Status.ARCHIVED if memory.status != Status.ARCHIVED else memory.status
    if action == "restore":
        # Only archived memories come back; superseded or forgotten ones keep their lifecycle state.
        return Status.ACTIVE if memory.status == Status.ARCHIVED else memory.status
    if action in ("pin", "unpin"):
        return action == "pin"
    if action == "set_type":
        return value
    tags = list(memory.tags)
    return tags if value in tags else [*tags, value]


def _bulk_value(action: str, value: str) -> str:
    if action not in BULK_ACTIONS:
        raise InvalidInput(f"action: {action!r} is not one of {', '.join(BULK_ACTIONS)}", field="action")
    value = value.strip()
    if action == "set_type" and value not in MemoryType.values:
        raise InvalidInput(f"value: {value!r} is not a memory type", field="value")
    if action == "add_tag" and not 1 <= len(value) <= TAG_MAX_LENGTH:
        raise InvalidInput(f"value: a tag is 1 to {TAG_MAX_LENGTH} characters", field="value")
    return value


@transaction.atomic
def memories_bulk_action(
    *, workspace: Workspace, actor: User | None, ids: Sequence[uuid.UUID], action: str, value: str = ""
) -> BulkResult:
    """Apply one curation action to many memories as ONE evolution record (so one revert undoes it).

    All or nothing: an id outside the workspace fails the whole action. Memories that already hold
    the target value are left out of the record, so reverting never touches what the action did not.
    """
    value = _bulk_value(action, value)
    unique = list(dict.fromkeys(ids))
    if not unique:
        raise InvalidInput("ids: select at least one memory", field="ids")
    if len(unique) > BULK_MAX:
        raise InvalidInput(f"ids: at most {BULK_MAX} memories per bulk action", field="ids")
    field_name = BULK_ACTIONS[action]
    rows = (
        Memory.objects.select_for_update()
        .filter(workspace=workspace, id__in=unique)
        .only("id", "workspace_id", "status", "pinned", "memory_type", "tags", "updated_at")
    )
    found = {m.id: m for m in rows}
    missing = [str(i) for i in unique if i not in found]
    if missing:
        raise NotFound(f"ids: no memory {missing[0]} in workspace {workspace.slug!r}", field="ids")
    now = timezone.now()
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    changed: list[Memory] = []
    for mid in unique:
        memory = found[mid]
        new = _bulk_new_value(memory, action, value)
        old = getattr(memory, field_name)
        if new == old:
            continue
        before[str(mid)] = {
            field_name: audit.encode_value(field_name, old),
            "updated_at": audit.encode_value("updated_at", memory.updated_at),
        }
        after[str(mid)] = {
            field_name: audit.encode_value(field_name, new),
            "updated_at": audit.encode_value("updated_at", now),
        }
        setattr(memory, field_name, new)
        memory.updated_at = now
        changed.append(memory)
    if not changed:
        return BulkResult(action=action, selected=len(unique), changed=0, record=None)
    Memory.objects.bulk_update(changed, [field_name, "updated_at"], batch_size=BULK_BATCH)
    record_action = {"archive": Action.ARCHIVE, "restore": Action.RESTORE}.get(action, Action.UPDATE)
    described = f"{action} {value}".strip()
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver="user",
            action=record_action,
            reason=f"bulk {described} of {len(changed)} memories by {default_origin(actor, 'user')}",
            input_ids=[m.id for m in changed],
            output_ids=[m.id for m in changed],
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )
    return BulkResult(action=action, selected=len(unique), changed=len(changed), record=record)


@transaction.atomic
def memory_rehydrate(*, workspace: Workspace, memory: Memory, actor: User | None) -> Memory:
    """Put a compressed memory's FULL content back, as one revertible record.

    The FULL text is the one ``selectors.compressed_originals`` finds: in the record of the compression step
    that left FULL (or a legacy FULL snapshot of the row). Legacy snapshots are cleared with it (they
    describe compressions that no longer apply); the record keeps them, so reverting the rehydrate restores
    the compressed state exactly.
    """
    if memory.compression_tier == CompressionTier.FULL:
        raise Conflict(f"memory {memory.id} is not compressed", code="not_compressed")
    if memory.compression_tier == CompressionTier.FORGOTTEN:
        # Forgetting changed its status too: only reverting that record brings the memory back whole.
        raise Conflict(
            f"memory {memory.id} was forgotten by an approved proposal; revert that record (its history) to bring "
            "it back",
            code="forgotten",
        )
    original = selectors.compressed_originals(workspace=workspace, memories=[memory]).get(memory.id)
    if original is None:
        raise Conflict(
            f"memory {memory.id} kept no copy of its full content; it cannot be rehydrated",
            code="no_snapshot",
        )
    now = timezone.now()
    changes: dict[str, Any] = {
        "content": original.content,
        "compression_tier": CompressionTier.FULL,
        "snapshots": [],
        "updated_at": now,
    }
    before, after = audit.memory_changes(memory, changes)
    for name, value in changes.items():
        setattr(memory, name, value)
    vector = embedding_changes(workspace=workspace, text=embedding_text(memory))
    for name, value in vector.items():
        setattr(memory, name, value)
    memory.save(update_fields=[*changes, *vector])
    audit.records_save(
        [
            audit.record_build(
                workspace=workspace,
                evolver="user",
                action=Action.REHYDRATE,
                reason=f"rehydrated to full content by {default_origin(actor, 'user')}",
                input_ids=[memory.id],
                output_ids=[memory.id],
                before={str(memory.id): before},
                after={str(memory.id): after},
                actor=actor,
                now=now,
            )
        ]
    )
    return memory


REVERT_EVENT = "evolution.reverted"
"""Live event of a revert (the pages of the workspace refresh what it changed)."""


@transaction.atomic
def record_revert(*, workspace: Workspace, record_id: int, actor: User | None) -> EvolutionRecord:
    """Undo one record exactly and return the revert record; Conflict (409) when it cannot be.

    Refused when the record is a dry run, was already reverted, is a hard delete, or a later change
    touched the same fields, memories or edges (revert that one first); see ``history.revert``.
    """
    record = revert.record_for_revert(workspace=workspace, record_id=record_id)
    (done,) = revert.revert_records([record], actor, timezone.now())
    live.workspace_event_on_commit(workspace.pk, REVERT_EVENT, {"record_id": record.pk, "revert_record_id": done.pk})
    return done
