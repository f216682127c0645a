"""Conversation ingestion builds the episode graph: turns, sessions, FOLLOWS chains and entity MENTIONS."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from memories import services
from memories.inputs import SessionInput, TurnInput, conversation_input
from memories.models import Edge, EdgeType, Memory, MemoryType, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

MONDAY = datetime(2026, 1, 5, 9, 30, tzinfo=UTC)
FRIDAY = datetime(2026, 1, 9, 16, 0, tzinfo=UTC)


def session(started_at: datetime, *turns: tuple[str, str], refs: tuple[str, ...] = ()) -> SessionInput:
    padded = list(refs) + [""] * (len(turns) - len(refs))
    return SessionInput(
        started_at=started_at, turns=tuple(TurnInput(s, t, r) for (s, t), r in zip(turns, padded, strict=True))
    )


def ingest(workspace: Workspace, user: Any, *sessions: SessionInput) -> list[uuid.UUID]:
    return services.conversation_ingest(workspace=workspace, actor=user, sessions=list(sessions))


def edges(edge_type: str) -> set[tuple[uuid.UUID, uuid.UUID]]:
    return set(Edge.objects.filter(edge_type=edge_type).values_list("source_id", "target_id"))


@pytest.fixture
def two_sessions(workspace: Workspace, user: Any) -> list[uuid.UUID]:
    return ingest(
        workspace,
        user,
        session(
            MONDAY,
            ("Dana", "We should move the queue to Kafka and keep PostgreSQL."),
            ("Lee", "Kafka needs ZooKeeper-free mode; fine by me."),
            ("Dana", "Agreed."),
            refs=("D1:1", "D1:2"),
        ),
        session(FRIDAY, ("Lee", "The Kafka cluster is live."), ("Dana", "Great, thanks Lee.")),
    )


def test_each_turn_becomes_one_episodic_memory_in_turn_order(two_sessions: list[uuid.UUID]) -> None:
    turns = Memory.objects.in_bulk(two_sessions)
    assert len(two_sessions) == 5 == len(turns)
    assert [turns[i].content for i in two_sessions] == [
        "Dana: We should move the queue to Kafka and keep PostgreSQL.",
        "Lee: Kafka needs ZooKeeper-free mode; fine by me.",
        "Dana: Agreed.",
        "Lee: The Kafka cluster is live.",
        "Dana: Great, thanks Lee.",
    ]
    assert {turns[i].memory_type for i in two_sessions} == {MemoryType.EPISODIC}
    assert [turns[i].subject for i in two_sessions] == ["Dana", "Lee", "Dana", "Lee", "Dana"]
    assert [turns[i].metadata["turn_index"] for i in two_sessions] == [0, 1, 2, 0, 1]


def test_turns_take_the_time_of_their_session(two_sessions: list[uuid.UUID]) -> None:
    turns = Memory.objects.in_bulk(two_sessions)
    assert [turns[i].created_at for i in two_sessions] == [MONDAY] * 3 + [FRIDAY] * 2
    assert [turns[i].activation_last_boost_at for i in two_sessions] == [MONDAY] * 3 + [FRIDAY] * 2


def test_every_turn_is_part_of_its_session(two_sessions: list[uuid.UUID]) -> None:
    sessions = list(Memory.objects.filter(memory_type=MemoryType.SESSION).order_by("created_at"))
    assert [s.created_at for s in sessions] == [MONDAY, FRIDAY]
    assert edges(EdgeType.PART_OF) == {(t, sessions[0].id) for t in two_sessions[:3]} | {
        (t, sessions[1].id) for t in two_sessions[3:]
    }
    assert sessions[0].metadata["speakers"] == ["Dana", "Lee"]


def test_each_turn_follows_the_one_before_it_within_its_session(two_sessions: list[uuid.UUID]) -> None:
    t = two_sessions
    assert edges(EdgeType.FOLLOWS) == {(t[1], t[0]), (t[2], t[1]), (t[4], t[3])}


def test_the_ref_of_a_turn_is_kept_in_its_metadata(two_sessions: list[uuid.UUID]) -> None:
    turns = Memory.objects.in_bulk(two_sessions)
    assert [turns[i].metadata.get("ref") for i in two_sessions] == ["D1:1", "D1:2", None, None, None]


def test_turns_mention_one_entity_memory_per_entity(two_sessions: list[uuid.UUID]) -> None:
    entities = {m.subject: m for m in Memory.objects.filter(memory_type=MemoryType.ENTITY)}
    assert {"kafka", "postgresql"} <= set(entities)
    assert entities["kafka"].content == "Kafka"
    assert entities["kafka"].origin_tier == 2
    t = two_sessions
    kafka = entities["kafka"].id
    assert {src for src, dst in edges(EdgeType.MENTIONS) if dst == kafka} == {t[0], t[1], t[3]}
    assert (t[0], entities["postgresql"].id) in edges(EdgeType.MENTIONS)
    assert not any(src == t[2] for src, _ in edges(EdgeType.MENTIONS))


def test_entity_memories_are_reused_by_later_conversations(
    workspace: Workspace, user: Any, two_sessions: list[uuid.UUID]
) -> None:
    kafka = Memory.objects.get(memory_type=MemoryType.ENTITY, subject="kafka")
    later = ingest(workspace, user, session(FRIDAY, ("Sam", "Is kafka still healthy?")))
    assert Memory.objects.filter(memory_type=MemoryType.ENTITY, subject="kafka").count() == 1
    assert (later[0], kafka.id) in edges(EdgeType.MENTIONS)


def test_entities_of_another_workspace_are_not_reused(
    workspace: Workspace, other_workspace: Workspace, user: Any, two_sessions: list[uuid.UUID]
) -> None:
    ids = ingest(other_workspace, user, session(FRIDAY, ("Sam", "Kafka is down.")))
    theirs = Memory.objects.get(workspace=other_workspace, memory_type=MemoryType.ENTITY, subject="kafka")
    assert (ids[0], theirs.id) in edges(EdgeType.MENTIONS)
    assert Memory.objects.filter(memory_type=MemoryType.ENTITY, subject="kafka").count() == 2
    assert not Edge.objects.filter(workspace=other_workspace).exclude(source__workspace=other_workspace).exists()
    assert not Edge.objects.filter(workspace=other_workspace).exclude(target__workspace=other_workspace).exists()


def test_ingestion_invalidates_graph_snapshots(workspace: Workspace, user: Any) -> None:
    before = Workspace.objects.get(pk=workspace.pk).graph_generation
    ingest(workspace, user, session(MONDAY, ("A", "hi"), ("B", "hello")))
    assert Workspace.objects.get(pk=workspace.pk).graph_generation > before


def test_a_failed_ingestion_writes_nothing(workspace: Workspace, user: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing_link(**kwargs: Any) -> None:
        raise RuntimeError("edge insert failed")

    monkeypatch.setattr(services, "edges_bulk_link", failing_link)
    with pytest.raises(RuntimeError):
        ingest(workspace, user, session(MONDAY, ("Dana", "Kafka or RabbitMQ?"), ("Lee", "Kafka.")))
    assert not Memory.objects.exists()
    assert not Edge.objects.exists()


def test_the_validated_request_shape_ingests_as_given(workspace: Workspace, user: Any) -> None:
    sessions = conversation_input(
        {"sessions": [{"started_at": "2026-01-05T09:30:00Z", "turns": [{"speaker": "Dana", "text": "Hello"}]}]}
    )
    (turn,) = ingest(workspace, user, *sessions)
    stored = Memory.objects.get(id=turn)
    assert (stored.content, stored.created_at, stored.origin) == ("Dana: Hello", MONDAY, "api:alice")


def test_an_overlong_run_of_capitalised_words_does_not_break_ingestion(workspace: Workspace, user: Any) -> None:
    shouting = " ".join(f"Word{chr(97 + i % 26)}x" * 3 for i in range(60))
    (turn,) = ingest(workspace, user, session(MONDAY, ("Dana", f"We met {shouting} and Kafka today.")))
    entities = Memory.objects.filter(memory_type=MemoryType.ENTITY)
    assert all(len(e.subject) <= 200 for e in entities)
    assert "kafka" in {e.subject for e in entities}
    assert Memory.objects.filter(id=turn).exists()
