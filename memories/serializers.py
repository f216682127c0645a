"""JSON answers of the REST contract: plain functions build them (for speed), DRF serializers document them, and
the schema test holds the two equal for every endpoint. Request bodies are ``memories.inputs``."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rest_framework import serializers

from memories.algorithms.activation import decayed_activation
from memories.models import Edge, Memory, Workspace


def iso_z(value: datetime | None) -> str | None:
    """A datetime as the contract writes it: ISO 8601 with a Z for UTC; None stays None."""
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def memory_json(memory: Memory, now: datetime, *, workspace: Workspace) -> dict[str, Any]:
    """The contract's memory object; activation.score is the stored value decayed to `now`."""
    return {
        "id": str(memory.id),
        "workspace": workspace.slug,
        "content": memory.content,
        "memory_type": memory.memory_type,
        "subject": memory.subject,
        "tags": memory.tags,
        "origin": memory.origin,
        "origin_tier": memory.origin_tier,
        "confidence": memory.confidence,
        "status": memory.status,
        "tier": memory.tier,
        "compression_tier": memory.get_compression_tier_display(),
        "pinned": memory.pinned,
        "activation": {
            "score": decayed_activation(
                memory.activation_score,
                memory.activation_last_boost_at,
                memory.activation_half_life_hours,
                now,
            ),
            "stored": memory.activation_score,
            "last_boost_at": iso_z(memory.activation_last_boost_at),
            "half_life_hours": memory.activation_half_life_hours,
            "boost_count": memory.activation_boost_count,
        },
        "retention_score": memory.score.retention_score,
        "stability": memory.stability,
        "access_count": memory.access_count,
        "last_accessed": iso_z(memory.last_accessed),
        "created_at": iso_z(memory.created_at),
        "updated_at": iso_z(memory.updated_at),
        "valid_from": iso_z(memory.valid_from),
        "valid_to": iso_z(memory.valid_to),
        "conflicts_with": memory.conflicts_with,
        "replace_log": memory.replace_log,
        "replace_count": memory.replace_count,
        "version": memory.version,
        "drift_flags": memory.drift_flags,
        "summarizes": memory.summarizes,
        "summarized_by": str(memory.summarized_by) if memory.summarized_by else None,
        "superseded_by": str(memory.superseded_by) if memory.superseded_by else None,
        "retrieval_profile": memory.score.retrieval_profile,
        "metadata": memory.metadata,
    }


def edge_json(edge: Edge) -> dict[str, Any]:
    return {
        "id": edge.pk,
        "source": str(edge.source_id),
        "target": str(edge.target_id),
        "type": edge.edge_type,
        "weight": edge.weight,
        "co_retrieval_count": edge.co_retrieval_count,
        "first_co_retrieved_at": iso_z(edge.first_co_retrieved_at),
        "last_co_retrieved_at": iso_z(edge.last_co_retrieved_at),
        "created_at": iso_z(edge.created_at),
    }


def workspace_json(workspace: Workspace, role: str | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"id": workspace.pk, "slug": workspace.slug, "name": workspace.name}
    if role is not None:
        data["role"] = role
    return data


# -- schema documentation (drf-spectacular) -------------------------------------------------------


class ActivationOut(serializers.Serializer[Any]):
    score = serializers.FloatField(help_text="stored score decayed to now")
    stored = serializers.FloatField()
    last_boost_at = serializers.DateTimeField(allow_null=True)
    half_life_hours = serializers.FloatField()
    boost_count = serializers.IntegerField()


class MemoryOut(serializers.Serializer[Any]):
    id = serializers.UUIDField()
    workspace = serializers.CharField(help_text="the workspace's slug")
    content = serializers.CharField()
    memory_type = serializers.CharField()
    subject = serializers.CharField()
    tags = serializers.ListField(child=serializers.CharField())
    origin = serializers.CharField()
    origin_tier = serializers.IntegerField()
    confidence = serializers.FloatField()
    status = serializers.CharField()
    tier = serializers.CharField()
    compression_tier = serializers.CharField()
    pinned = serializers.BooleanField()
    activation = ActivationOut()
    retention_score = serializers.FloatField()
    stability = serializers.FloatField(help_text="Ebbinghaus stability, hours")
    access_count = serializers.IntegerField()
    last_accessed = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    valid_from = serializers.DateTimeField(allow_null=True)
    valid_to = serializers.DateTimeField(allow_null=True)
    conflicts_with = serializers.ListField(child=serializers.CharField())
    replace_log = serializers.ListField(child=serializers.JSONField())
    replace_count = serializers.IntegerField()
    version = serializers.IntegerField()
    drift_flags = serializers.ListField(child=serializers.JSONField())
    summarizes = serializers.ListField(child=serializers.CharField())
    summarized_by = serializers.UUIDField(allow_null=True)
    superseded_by = serializers.UUIDField(allow_null=True)
    retrieval_profile = serializers.JSONField(help_text="how and when this memory has been retrieved")
    metadata = serializers.JSONField()


class MemoryPageOut(serializers.Serializer[Any]):
    results = MemoryOut(many=True)
    next = serializers.CharField(allow_null=True)


class IdsOut(serializers.Serializer[Any]):
    ids = serializers.ListField(child=serializers.UUIDField())


# A field named "source" shadows Field.source in the stubs only: DRF's serializer metaclass moves
# declared fields off the class, so the attribute never exists at runtime.
class EdgeOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    source = serializers.UUIDField()  # type: ignore[assignment]
    target = serializers.UUIDField()
    type = serializers.CharField()
    weight = serializers.FloatField()
    co_retrieval_count = serializers.IntegerField()
    first_co_retrieved_at = serializers.DateTimeField(allow_null=True)
    last_co_retrieved_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class EdgePageOut(serializers.Serializer[Any]):
    results = EdgeOut(many=True)


class WorkspaceOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    slug = serializers.SlugField()
    name = serializers.CharField()
    role = serializers.CharField(required=False)


class WorkspacePageOut(serializers.Serializer[Any]):
    results = WorkspaceOut(many=True)


class ErrorOut(serializers.Serializer[Any]):
    error = serializers.CharField()
    detail = serializers.JSONField()
    field = serializers.CharField(required=False)
