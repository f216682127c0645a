"""Fixtures for evolution service/API tests: `kit` writes memories straight to the ORM with controlled
times and vectors, stores retrieval events, runs evolvers at a fixed clock and snapshots every row."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest

from evolution import services
from evolution.models import EvolutionRun
from memories.algorithms.embedding import to_bytes
from memories.embeddings import default_embedder
from memories.models import Edge, EdgeType, Memory, MemoryScore, RetrievalEvent, Workspace

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class EvolutionKit:
    NOW = NOW

    def __init__(self, workspace: Workspace, user: Any) -> None:
        self.workspace = workspace
        self.user = user

    @staticmethod
    def unit(*values: float) -> bytes:
        """A float32 blob of the normalised vector (values padded to 4 dimensions)."""
        v = np.zeros(4, dtype=np.float64)
        v[: len(values)] = values
        return to_bytes(v / np.linalg.norm(v))

    def cosine_pair(self, cos: float) -> tuple[bytes, bytes]:
        return self.unit(1.0, 0.0), self.unit(cos, float(np.sqrt(1.0 - cos * cos)))

    def mem(
        self, content: str = "a memory", *, age_days: float = 1.0, ws: Workspace | None = None, **fields: Any
    ) -> Memory:
        """One memory row created `age_days` before NOW (no embedding unless given; a given one is labelled
        with the site embedder's name, as the write services label theirs, unless embedding_model is given)."""
        created = NOW - timedelta(days=age_days)
        values: dict[str, Any] = {
            "memory_type": "semantic",
            "created_at": created,
            "updated_at": created,
            "activation_last_boost_at": created,
        }
        values.update(fields)
        if values.get("embedding") is not None:
            values.setdefault("embedding_model", default_embedder().name)
        scores = {name: values.pop(name) for name in list(values) if name in Memory.SCORE_FIELDS}
        memory = Memory(id=uuid.uuid4(), workspace=ws or self.workspace, content=content, **values)
        if scores:
            memory.score = MemoryScore(**scores)  # inserted with the memory (Memory.save)
        memory.save(force_insert=True)
        return memory

    def retrieve(
        self, memories: Sequence[Memory], *, source: str = "search", age_days: float = 0.5, ws: Workspace | None = None
    ) -> uuid.UUID:
        """Store one result set: the memories in rank order (ranks from 1, as retrieval_signals stores them),
        from `source`, `age_days` before NOW."""
        result_set = uuid.uuid4()
        RetrievalEvent.objects.bulk_create(
            [
                RetrievalEvent(
                    workspace=ws or self.workspace,
                    memory=m,
                    result_set=result_set,
                    rank=rank,
                    source=source,
                    created_at=NOW - timedelta(days=age_days),
                )
                for rank, m in enumerate(memories, start=1)
            ]
        )
        return result_set

    def run(self, *names: str, dry_run: bool = False, now: datetime = NOW, ws: Workspace | None = None) -> EvolutionRun:
        return services.evolution_run(
            workspace=ws or self.workspace, actor=self.user, evolvers=list(names) or None, dry_run=dry_run, now=now
        )

    def memory_rows(self, ws: Workspace | None = None, *, observations: bool = True) -> dict[Any, tuple[Any, ...]]:
        """Every field of every memory of the workspace and of its scores row, by id (blobs as bytes); without
        `observations`, not the retrieval profile (kept from the events, evolution.retrieval_stats)."""
        names = [f.attname for f in Memory._meta.concrete_fields]
        names += [f"score__{f.attname}" for f in MemoryScore._meta.concrete_fields if not f.primary_key]
        if not observations:
            names.remove("score__retrieval_profile")
        rows = Memory.objects.filter(workspace=ws or self.workspace).values_list(*names)
        return {row[0]: tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows}

    def edge_rows(self, ws: Workspace | None = None, *, observations: bool = True) -> dict[Any, tuple[Any, ...]]:
        """Every field of every edge of the workspace, by id; without `observations`, not the CO_RETRIEVED
        edges (their counts are kept from the events, evolution.retrieval_stats)."""
        names = [f.attname for f in Edge._meta.concrete_fields]
        edges = Edge.objects.filter(workspace=ws or self.workspace)
        if not observations:
            edges = edges.exclude(edge_type=EdgeType.CO_RETRIEVED)
        return {row[0]: row for row in edges.values_list(*names)}

    def observation_rows(
        self, ws: Workspace | None = None, *, among: Iterable[Any] | None = None
    ) -> tuple[dict[Any, Any], dict[Any, tuple[Any, ...]]]:
        """What the retrieval statistics keep: the retrieval profile of every memory (of those `among`), and
        every CO_RETRIEVED edge (between two of them)."""
        workspace = ws or self.workspace
        memories = Memory.objects.filter(workspace=workspace)
        edges = Edge.objects.filter(workspace=workspace, edge_type=EdgeType.CO_RETRIEVED)
        if among is not None:
            ids = list(among)
            memories = memories.filter(id__in=ids)
            edges = edges.filter(source__in=ids, target__in=ids)
        names = [f.attname for f in Edge._meta.concrete_fields]
        profiles = dict(memories.values_list("id", "score__retrieval_profile"))
        return profiles, {row[0]: row for row in edges.values_list(*names)}

    @staticmethod
    def co_edge(a: Memory, b: Memory) -> Edge | None:
        return (
            Edge.objects.filter(edge_type=EdgeType.CO_RETRIEVED, source=a, target=b).first()
            or Edge.objects.filter(edge_type=EdgeType.CO_RETRIEVED, source=b, target=a).first()
        )

    @staticmethod
    def retention(m: Memory) -> float:
        return Memory.objects.values_list("score__retention_score", flat=True).get(id=m.id)


@pytest.fixture
def kit(workspace: Workspace, user: Any) -> EvolutionKit:
    return EvolutionKit(workspace, user)
