from __future__ import annotations

import datetime as dt
import itertools
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import InvalidInput
from evolution.policies import EVOLVER, apply_write_policies, validate_policy_overrides
from history.models import EvolutionRecord
from memories import services
from memories.algorithms.embedding import to_bytes
from memories.embeddings import default_embedder
from memories.inputs import MemoryInput
from memories.models import Memory, Status, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

MakeMemory = Callable[..., Memory]
T0 = dt.datetime(2026, 1, 10, 9, 0, tzinfo=dt.UTC)


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def policy_records() -> list[EvolutionRecord]:
    return list(EvolutionRecord.objects.filter(evolver=EVOLVER).order_by("id"))


def test_preference_replace_keeps_the_existing_id_and_takes_the_newest_content(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    second = make_memory("uses emacs", memory_type="preference", subject="editor")

    holder = fresh(first)
    assert holder.content == "uses emacs"
    assert holder.replace_count == 1
    assert holder.version == 2
    assert len(holder.replace_log) == 1
    assert holder.metadata["content_source"]["memory_id"] == str(second.id)
    assert holder.embedding == fresh(second).embedding
    retired = fresh(second)
    assert retired.status == Status.SUPERSEDED
    assert retired.superseded_by == first.id
    assert retired.metadata["replaced_into"] == str(first.id)
    # The caller's object reflects the outcome too (the API answers with it).
    assert second.status == Status.SUPERSEDED
    (record,) = policy_records()
    assert record.action == "replace"
    assert set(record.after) == {str(first.id), str(second.id)}
    assert Memory.objects.filter(memory_type="preference", status=Status.ACTIVE).count() == 1


def test_replace_log_keeps_only_the_last_twenty(make_memory: MakeMemory) -> None:
    first = make_memory("value 0", memory_type="preference", subject="theme")
    for k in range(1, 23):
        make_memory(f"value {k}", memory_type="preference", subject="theme")
    holder = fresh(first)
    assert holder.content == "value 22"
    assert holder.replace_count == 22
    assert holder.version == 23
    assert len(holder.replace_log) == 20


def test_subject_matching_ignores_case_and_spacing(make_memory: MakeMemory) -> None:
    first = make_memory("dark", memory_type="preference", subject="Colour Scheme")
    make_memory("light", memory_type="preference", subject="  colour   scheme ")
    assert fresh(first).content == "light"


def test_memories_without_subject_never_collide(make_memory: MakeMemory) -> None:
    make_memory("uses vim", memory_type="preference")
    make_memory("uses emacs", memory_type="preference")
    assert Memory.objects.filter(status=Status.ACTIVE).count() == 2
    assert policy_records() == []


def test_lower_authority_incoming_is_skipped_and_retired(workspace: Workspace, make_memory: MakeMemory) -> None:
    mine = make_memory("dark mode", memory_type="preference", subject="theme")
    agent = services.memory_create(
        workspace=workspace,
        actor=None,
        item=MemoryInput(content="light mode", memory_type="preference", subject="theme", origin="agent:bot"),
    )
    assert fresh(mine).content == "dark mode"
    assert fresh(mine).replace_count == 0
    retired = fresh(agent)
    assert retired.status == Status.SUPERSEDED
    assert retired.superseded_by == mine.id
    assert "lower source authority" in retired.metadata["skipped_by_policy"]["reason"]
    (record,) = policy_records()
    assert record.action == "supersede"


def test_older_or_less_confident_incoming_does_not_replace(make_memory: MakeMemory) -> None:
    current = make_memory("ship friday", memory_type="goal", subject="release", created_at=T0)
    make_memory("ship monday", memory_type="goal", subject="release", created_at=T0 - dt.timedelta(days=1))
    make_memory("ship sunday", memory_type="goal", subject="release", created_at=T0, confidence=0.4)
    holder = fresh(current)
    assert holder.content == "ship friday"
    assert holder.replace_count == 0
    assert Memory.objects.filter(memory_type="goal", status=Status.ACTIVE).count() == 1


def test_identical_content_is_not_a_replace_and_does_not_count_as_drift(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    again = make_memory("Uses  VIM", memory_type="preference", subject="editor")
    assert fresh(first).replace_count == 0
    assert fresh(again).status == Status.SUPERSEDED


def test_facts_events_and_observations_keep_both(make_memory: MakeMemory) -> None:
    for memory_type in ("fact", "event", "observation"):
        make_memory("one", memory_type=memory_type, subject="db")
        make_memory("two", memory_type=memory_type, subject="db")
    assert Memory.objects.filter(status=Status.ACTIVE).count() == 6
    assert policy_records() == []


def test_state_conflicts_are_flagged_and_cross_linked(make_memory: MakeMemory) -> None:
    a = make_memory("server is up", memory_type="state", subject="prod")
    b = make_memory("server is down", memory_type="state", subject="prod")
    c = make_memory("server is degraded", memory_type="state", subject="prod")
    assert fresh(a).conflicts_with == [str(b.id), str(c.id)]
    assert fresh(b).conflicts_with == [str(a.id), str(c.id)]
    assert fresh(c).conflicts_with == [str(a.id), str(b.id)]
    assert all(fresh(m).status == Status.ACTIVE for m in (a, b, c))
    assert [r.action for r in policy_records()] == ["flag", "flag", "flag"]


def test_repeated_state_is_no_contradiction(make_memory: MakeMemory) -> None:
    a = make_memory("server is up", memory_type="state", subject="prod")
    make_memory("server is up", memory_type="state", subject="prod")
    assert fresh(a).conflicts_with == []


def test_a_correction_wins_over_every_memory_of_its_subject(workspace: Workspace, make_memory: MakeMemory) -> None:
    pref = make_memory("editor is emacs", memory_type="preference", subject="editor", created_at=T0)
    fact = make_memory("team standard is emacs", memory_type="fact", subject="editor", created_at=T0)
    # Older and less confident than both, from an agent: a correction still wins.
    correction = services.memory_create(
        workspace=workspace,
        actor=None,
        item=MemoryInput(
            content="editor is vim",
            memory_type="correction",
            subject="editor",
            origin="agent:bot",
            confidence=0.2,
            created_at=T0 - dt.timedelta(days=3),
        ),
    )
    assert fresh(pref).content == "editor is vim"
    assert fresh(fact).status == Status.SUPERSEDED
    assert fresh(fact).superseded_by == correction.id
    assert fresh(correction).status == Status.ACTIVE


def test_a_flagged_correction_replaces_without_the_guards(workspace: Workspace, make_memory: MakeMemory) -> None:
    pref = make_memory("tabs", memory_type="preference", subject="indent", created_at=T0)
    services.memory_create(
        workspace=workspace,
        actor=None,
        item=MemoryInput(
            content="spaces",
            memory_type="preference",
            subject="indent",
            origin="agent:bot",
            confidence=0.1,
            created_at=T0 - dt.timedelta(days=1),
            metadata={"correction": True},
        ),
    )
    assert fresh(pref).content == "spaces"


def test_one_bulk_batch_replays_in_order_with_one_holder_query(workspace: Workspace, user: Any) -> None:
    items = [MemoryInput(content=f"v{k}", memory_type="preference", subject=f"s{k % 3}") for k in range(9)]
    items += [MemoryInput(content=f"plain {k}") for k in range(50)]
    with CaptureQueriesContext(connection) as ctx:
        services.memories_create(workspace=workspace, actor=user, items=items)
    selects = [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]
    holder_queries = [s for s in selects if "memories_memory" in s]
    assert len(holder_queries) == 1
    active = dict(
        Memory.objects.filter(memory_type="preference", status=Status.ACTIVE).values_list("subject", "content")
    )
    assert active == {"s0": "v6", "s1": "v7", "s2": "v8"}
    assert Memory.objects.get(subject="s0", status=Status.ACTIVE).replace_count == 2


def test_batches_without_colliding_memories_query_nothing(workspace: Workspace, user: Any) -> None:
    items = [MemoryInput(content=f"fact {k}", memory_type="fact", subject="db") for k in range(20)]
    with CaptureQueriesContext(connection) as ctx:
        services.memories_create(workspace=workspace, actor=user, items=items)
    selects = [q["sql"] for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith("SELECT")]
    assert not [s for s in selects if "memories_memory" in s]


def test_revert_of_a_replace_restores_both_rows_exactly(workspace: Workspace, make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    snapshot = Memory.objects.filter(id=first.id).values().get()
    second = make_memory("uses emacs", memory_type="preference", subject="editor")
    # The holder took the newcomer's vector with its content (the snapshot comparison covers the revert).
    assert fresh(first).embedding == fresh(second).embedding != snapshot["embedding"]
    (record,) = policy_records()
    services.record_revert(workspace=workspace, record_id=record.pk, actor=None)
    reverted = Memory.objects.filter(id=first.id).values().get()
    # Putting the old vector back is a vector write: stamped anew, so vector indexes catch it up.
    assert reverted.pop("embedded_at") > snapshot.pop("embedded_at")
    assert reverted == snapshot
    restored = fresh(second)
    assert restored.status == Status.ACTIVE
    assert restored.superseded_by is None
    assert "replaced_into" not in restored.metadata


def test_workspace_override_changes_the_policy(workspace: Workspace, make_memory: MakeMemory) -> None:
    workspace.evolution_settings = {"conflict_policies": {"fact": "flag"}}
    workspace.save()
    a = make_memory("db is postgres", memory_type="fact", subject="db")
    b = make_memory("db is mysql", memory_type="fact", subject="db")
    assert fresh(a).conflicts_with == [str(b.id)]


def test_reinforce_override_raises_confidence_of_the_holder(workspace: Workspace, make_memory: MakeMemory) -> None:
    workspace.evolution_settings = {"conflict_policies": {"fact": "reinforce"}}
    workspace.save()
    a = make_memory("db is postgres", memory_type="fact", subject="db", confidence=0.5)
    b = make_memory("db is postgres", memory_type="fact", subject="db", confidence=0.5)
    assert fresh(a).confidence == pytest.approx(0.75, abs=1e-9)
    assert fresh(b).status == Status.SUPERSEDED


def test_incoming_memories_that_are_not_active_are_left_alone(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    make_memory("uses emacs", memory_type="preference", subject="editor", status="archived")
    assert fresh(first).content == "uses vim"


def test_apply_returns_nothing_for_an_empty_batch(workspace: Workspace) -> None:
    assert apply_write_policies(workspace, [], T0) == []


def test_override_validation_names_the_bad_entry() -> None:
    assert validate_policy_overrides({"fact": "flag"}) == {"fact": "flag"}
    with pytest.raises(InvalidInput, match=r"conflict_policies\.fact"):
        validate_policy_overrides({"fact": "explode"})
    with pytest.raises(InvalidInput, match="not a memory type"):
        validate_policy_overrides({"nonsense": "flag"})


def test_records_link_both_memories_into_their_history(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor")
    second = make_memory("uses emacs", memory_type="preference", subject="editor")
    (record,) = policy_records()
    linked = {uuid.UUID(str(m)) for m in record.links.values_list("memory_id", flat=True)}
    assert linked == {first.id, second.id}


# -- properties over generated write sequences ----------------------------------------------------

_slugs = itertools.count()
write_spec = st.lists(
    st.lists(
        st.fixed_dictionaries(
            {
                "memory_type": st.sampled_from(["preference", "goal", "state", "fact", "correction"]),
                "subject": st.sampled_from(["editor", "Editor ", "theme", ""]),
                "content": st.sampled_from(["vim", "emacs", "dark", "light"]),
                "origin": st.sampled_from(["api:alice", "agent:bot", "engine:x"]),
                "confidence": st.sampled_from([0.3, 0.7, 1.0]),
                "age_days": st.integers(0, 5),
                "flagged": st.booleans(),
            }
        ),
        min_size=1,
        max_size=6,
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=write_spec)
def test_policies_keep_one_value_per_replace_slot_and_revert_to_the_inserted_rows(
    user: Any, batches: list[list[dict[str, Any]]]
) -> None:
    ws = Workspace.objects.create(slug=f"policy-prop-{next(_slugs)}", name="prop")
    inputs: dict[uuid.UUID, MemoryInput] = {}
    count = 0
    for batch in batches:
        items = [
            MemoryInput(
                content=spec["content"],
                memory_type=spec["memory_type"],
                subject=spec["subject"],
                origin=spec["origin"],
                confidence=spec["confidence"],
                created_at=T0 - dt.timedelta(days=spec["age_days"]),
                metadata={"correction": True} if spec["flagged"] else {},
            )
            for spec in batch
        ]
        created = services.memories_create(workspace=ws, actor=user, items=items)
        inputs.update((m.id, item) for m, item in zip(created, items, strict=True))
        count += len(items)
        assert Memory.objects.filter(workspace=ws).count() == count  # nothing is ever deleted
    active = Memory.objects.filter(workspace=ws, status=Status.ACTIVE, memory_type__in=["preference", "goal"])
    slots = [(m.memory_type, " ".join(m.subject.split()).casefold()) for m in active if m.subject.strip()]
    assert len(slots) == len(set(slots))
    for memory in Memory.objects.filter(workspace=ws):
        for other in memory.conflicts_with:
            assert str(memory.id) in Memory.objects.get(id=other).conflicts_with
    records = EvolutionRecord.objects.filter(workspace=ws, evolver=EVOLVER).order_by("-id")
    for record in records:
        services.record_revert(workspace=ws, record_id=record.pk, actor=None)
    for memory in Memory.objects.filter(workspace=ws):
        item = inputs[memory.id]
        assert (memory.content, memory.confidence, memory.origin) == (item.content, item.confidence, item.origin)
        assert memory.status == Status.ACTIVE and memory.superseded_by is None
        assert (memory.replace_log, memory.replace_count, memory.version) == ([], 0, 1)
        assert memory.conflicts_with == []
        assert memory.metadata == item.metadata
        assert memory.updated_at == memory.created_at
        assert bytes(memory.embedding or b"") == to_bytes(default_embedder().embed([item.content])[0])


def test_a_pinned_preference_is_not_replaced_but_flagged_against_the_newcomer(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor", pinned=True)
    second = make_memory("uses emacs", memory_type="preference", subject="editor")

    holder = fresh(first)
    assert holder.content == "uses vim"
    assert holder.replace_count == 0
    assert holder.conflicts_with == [str(second.id)]
    newcomer = fresh(second)
    assert newcomer.status == Status.ACTIVE
    assert newcomer.conflicts_with == [str(first.id)]
    (record,) = policy_records()
    assert record.action == "flag"
    assert "pinned" in record.reason


def test_a_correction_still_overrides_a_pinned_value(make_memory: MakeMemory) -> None:
    first = make_memory("uses vim", memory_type="preference", subject="editor", pinned=True)
    make_memory("the editor is emacs, not vim", memory_type="correction", subject="editor")

    assert fresh(first).content == "the editor is emacs, not vim"
