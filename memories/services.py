"""Writes of workspaces, memories, edges and conversations. Every write is atomic and audited."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from evolution import audit
from evolution.models import Action
from memories.algorithms.embedding import to_bytes
from memories.algorithms.entities import extract_entities
from memories.algorithms.sortkey import activation_sort_key
from memories.embeddings import default_embedder
from memories.errors import Conflict, InvalidInput
from memories.inputs import EDITABLE_FIELDS, MemoryInput, SessionInput, origin_tier
from memories.models import (
    AuditEntry,
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
BULK_BATCH = 1000

# Hook for write-time conflict policies (typedmem slots); the evolution app registers it so that
# every entry point that creates memories applies the same policy.
WritePolicy = Callable[[Workspace, list[Memory], datetime], None]
_write_policies: list[WritePolicy] = []


def register_write_policy(policy: WritePolicy) -> None:
    if policy not in _write_policies:
        _write_policies.append(policy)


def default_origin(actor: User | None, channel: str = "api") -> str:
    name = getattr(actor, "username", "") if actor is not None and actor.is_authenticated else ""
    return f"{channel}:{name}"


# -- workspaces -----------------------------------------------------------------------------------


@transaction.atomic
def workspace_create(*, owner: AbstractBaseUser, slug: str, name: str) -> Workspace:
    if Workspace.objects.filter(slug=slug).exists():
        raise Conflict(f"slug: a workspace {slug!r} already exists", code="slug_taken", field="slug")
    workspace = Workspace.objects.create(slug=slug, name=name)
    Membership.objects.create(workspace=workspace, user=owner, role=Role.OWNER)
    return workspace


def membership_set(*, workspace: Workspace, user: AbstractBaseUser, role: str) -> Membership:
    if role not in Role.values:
        raise InvalidInput(f"role: {role!r} is not one of {', '.join(Role.values)}", field="role")
    membership, _ = Membership.objects.update_or_create(
        workspace=workspace, user=user, defaults={"role": role}
    )
    return membership


def graph_touch(*, workspace: Workspace) -> None:
    """Invalidate cached graph snapshots of the workspace (called inside the writing transaction)."""
    Workspace.objects.filter(pk=workspace.pk).update(graph_generation=F("graph_generation") + 1)


# -- memories -------------------------------------------------------------------------------------


def _build_memory(workspace: Workspace, item: MemoryInput, origin: str, now: datetime) -> Memory:
    created = item.created_at or now
    # New memories start decaying from their creation: activation is a measure of recent use.
    memory = Memory(
        id=uuid.uuid4(),
        workspace=workspace,
        memory_type=item.memory_type,
        content=item.content,
        subject=item.subject,
        tags=list(item.tags),
        origin=item.origin or origin,
        confidence=item.confidence,
        status=item.status,
        tier=item.tier,
        pinned=item.pinned,
        activation_last_boost_at=created,
        created_at=created,
        updated_at=created,
        last_accessed=None,
        valid_from=item.valid_from,
        valid_to=item.valid_to,
        metadata=dict(item.metadata),
    )
    memory.origin_tier = origin_tier(memory.origin)
    memory.activation_sort_key = activation_sort_key(
        memory.activation_score, memory.activation_last_boost_at, memory.activation_half_life_hours
    )
    return memory


def _embed_into(memories: Sequence[Memory]) -> None:
    if not memories:
        return
    vectors = default_embedder().embed([m.content for m in memories])
    for memory, vector in zip(memories, vectors, strict=True):
        memory.embedding = to_bytes(vector)


def _insert(memories: list[Memory], now: datetime) -> None:
    _embed_into(memories)
    Memory.objects.bulk_create(memories, batch_size=BULK_BATCH)
    if memories and _write_policies:
        workspace = memories[0].workspace
        for policy in _write_policies:
            policy(workspace, memories, now)


@transaction.atomic
def memories_create(
    *, workspace: Workspace, actor: User | None, items: Sequence[MemoryInput], channel: str = "api"
) -> list[Memory]:
    """Create all `items` or none of them (one transaction); embeddings are computed in one batch."""
    now = timezone.now()
    origin = default_origin(actor, channel)
    memories = [_build_memory(workspace, item, origin, now) for item in items]
    for start in range(0, len(memories), 20 * BULK_BATCH):
        _insert(memories[start : start + 20 * BULK_BATCH], now)
    return memories


def memory_create(
    *, workspace: Workspace, actor: User | None, item: MemoryInput, channel: str = "api"
) -> Memory:
    return memories_create(workspace=workspace, actor=actor, items=[item], channel=channel)[0]


@transaction.atomic
def memory_update(
    *, workspace: Workspace, memory: Memory, actor: User | None, changes: dict[str, Any]
) -> Memory:
    """Apply a person's edit; an edited content becomes theirs (origin tier 1) and is re-embedded."""
    unknown = sorted(set(changes) - EDITABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{unknown[0]}: this field cannot be changed", field=unknown[0])
    now = timezone.now()
    changes = dict(changes)
    if (
        "status" in changes
        and changes["status"] not in (Status.ACTIVE, Status.ARCHIVED)
        and not (
            memory.memory_type == MemoryType.GOAL and changes["status"] in (Status.RESOLVED, Status.ABANDONED)
        )
    ):
        raise InvalidInput(f"status: {changes['status']!r} cannot be set by hand here", field="status")
    if "content" in changes and changes["content"] != memory.content:
        changes["origin"] = default_origin(actor, "user")
        changes["origin_tier"] = 1
        changes["version"] = memory.version + 1
        changes["embedding"] = to_bytes(default_embedder().embed([changes["content"]])[0])
    before, after = audit.memory_changes(memory, changes)
    if not before:
        return memory
    before["updated_at"] = audit.encode_value("updated_at", memory.updated_at)
    after["updated_at"] = audit.encode_value("updated_at", now)
    for name, value in changes.items():
        setattr(memory, name, value)
    memory.updated_at = now
    memory.save(update_fields=[*sorted(set(changes)), "updated_at"])
    # The embedding is bulky and reconstructible; keep it out of the audit record.
    before.pop("embedding", None)
    after.pop("embedding", None)
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
    AuditEntry.objects.create(
        workspace=workspace,
        actor=audit.actor_or_none(actor),
        action="memory.delete",
        object_id=str(memory.id),
        detail=content,
    )
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
    memory.delete()
    if had_edges:
        graph_touch(workspace=workspace)


# -- edges ----------------------------------------------------------------------------------------


@transaction.atomic
def edge_link(
    *, workspace: Workspace, source: Memory, target: Memory, edge_type: str, weight: float = 1.0
) -> Edge:
    if source.workspace_id != workspace.pk or target.workspace_id != workspace.pk:
        raise InvalidInput("source and target must belong to this workspace", field="target")
    if source.pk == target.pk:
        raise InvalidInput("target: an edge cannot join a memory to itself", field="target")
    try:
        with transaction.atomic():
            edge = Edge.objects.create(
                workspace=workspace, source=source, target=target, edge_type=edge_type, weight=weight
            )
    except IntegrityError:
        raise Conflict(
            f"an edge {edge_type} from {source.pk} to {target.pk} already exists", code="edge_exists"
        ) from None
    graph_touch(workspace=workspace)
    return edge


def edges_bulk_link(*, workspace: Workspace, edges: list[Edge]) -> None:
    """Insert many edges (duplicates of existing triples are skipped) and invalidate snapshots once."""
    if not edges:
        return
    Edge.objects.bulk_create(edges, batch_size=2 * BULK_BATCH, ignore_conflicts=True)
    graph_touch(workspace=workspace)


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
            edges.append(
                Edge(
                    workspace=workspace,
                    source=turn_memory,
                    target=session_memory,
                    edge_type=EdgeType.PART_OF,
                    created_at=now,
                )
            )
            if previous is not None:
                edges.append(
                    Edge(
                        workspace=workspace,
                        source=turn_memory,
                        target=previous,
                        edge_type=EdgeType.FOLLOWS,
                        created_at=now,
                    )
                )
            previous = turn_memory
            for entity in extract_entities(turn.text):
                entity_names.setdefault(entity.key, entity.name)
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
                MemoryInput(content=name, memory_type=MemoryType.ENTITY, subject=key, origin=entity_origin),
                entity_origin,
                now,
            )
            existing[key] = entity_memory
            new_entities.append(entity_memory)
    _insert(memories + new_entities, now)
    edges.extend(
        Edge(
            workspace=workspace,
            source=turn,
            target=existing[key],
            edge_type=EdgeType.MENTIONS,
            created_at=now,
        )
        for turn, key in mentions
    )
    edges_bulk_link(workspace=workspace, edges=edges)
    return turn_ids
