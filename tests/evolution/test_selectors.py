"""Whole-workspace reads for the evolvers: ids and epochs from the database, raw rows, cursors."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from core.sql import EpochSeconds, IdText, uuid_hex
from evolution import selectors
from evolution.models import EvolutionRun, RunStatus
from memories.embeddings import default_embedder
from memories.models import Edge, EdgeType, Memory

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def test_id_text_and_epoch_seconds_match_python(kit: Any) -> None:
    m = kit.mem("x", age_days=3.25, last_accessed=kit.NOW - timedelta(hours=5, microseconds=1500))
    ((mid, created, accessed),) = Memory.objects.filter(id=m.id).values_list(
        IdText("id"), EpochSeconds("created_at"), EpochSeconds("last_accessed")
    )
    assert mid == str(m.id)
    assert created == pytest.approx(m.created_at.timestamp(), abs=1e-3)
    assert accessed == pytest.approx(m.last_accessed.timestamp(), abs=2e-3)


def test_raw_rows_keep_the_requested_column_order(kit: Any) -> None:
    kit.mem("x", retention_score=0.25, metadata={"k": [1, 2]})
    query = Memory.objects.values_list("score__retention_score", IdText("id"), "content", "metadata")
    (raw,) = selectors._raw_rows(query)
    (converted,) = list(query)
    assert raw[:3] == converted[:3]
    assert selectors._json(raw[3]) == converted[3] == {"k": [1, 2]}


def test_decay_rows_and_retention_rows_are_plain_values(kit: Any) -> None:
    m = kit.mem("e", memory_type="episodic", pinned=True, stability=12.0, retrieval_profile={"total_count": 2})
    kit.mem("archived", memory_type="episodic", status="archived")
    ((mid, retention, stability, accessed, event, created, pinned),) = selectors.decay_rows(
        workspace=kit.workspace, memory_types=["episodic"]
    )
    assert (mid, retention, stability, accessed, event, pinned) == (str(m.id), 1.0, 12.0, None, None, True)
    assert created == pytest.approx(m.created_at.timestamp(), abs=1e-3)
    rows = {row[0]: row for row in selectors.retention_rows(workspace=kit.workspace)}
    assert selectors._json(rows[str(m.id)][3]) == {"total_count": 2}


def test_embedding_rows_hold_retention_from_the_scores_and_the_marker_as_text(kit: Any) -> None:
    other = kit.workspace.__class__.objects.create(slug="other-ws", name="other")
    vec = kit.unit(1.0, 0.0)
    marked = kit.mem(
        "marked", embedding=vec, retention_score=0.25, metadata={selectors.INTERFERENCE_MARKER: "0a1b2c3d"}
    )
    number = kit.mem("number", embedding=vec, age_days=0.5, metadata={selectors.INTERFERENCE_MARKER: 12345678})
    plain = kit.mem("plain", embedding=vec, age_days=0.25, retention_score=0.5)
    kit.mem("no vector")
    kit.mem("archived", embedding=vec, status="archived")
    kit.mem("elsewhere", embedding=vec, ws=other)
    rows = selectors.embedding_rows(workspace=kit.workspace, model=default_embedder().name)
    assert [(mid, ret, marker) for mid, ret, _, marker in rows] == [
        (str(marked.id), 0.25, "0a1b2c3d"),
        (str(number.id), 1.0, "12345678"),
        (str(plain.id), 0.5, None),
    ]
    assert all(blob == bytes(marked.embedding) for _, _, blob, _ in rows)


def test_id_texts_format_raw_keys_as_canonical_text() -> None:
    keys = [uuid.uuid4() for _ in range(50)]
    assert selectors.id_texts([k.hex for k in keys]) == [str(k) for k in keys]
    assert selectors.id_texts(keys) == [str(k) for k in keys]  # PostgreSQL hands UUID objects back
    # Anything but 32 ASCII hex digits per key takes the per-key path and is formatted the same way.
    assert selectors.id_texts([keys[0].hex, keys[1]]) == [str(keys[0]), str(keys[1])]
    assert selectors.id_texts([keys[0].hex, "é" * 32]) == [str(keys[0]), "éééééééé-éééé-éééé-éééé-éééééééééééé"]
    # Lengths that only add up to 32 per key are not taken for 32-digit keys.
    assert selectors.id_texts(["a" * 31, "b" * 33]) == [
        "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaa",
        "bbbbbbbb-bbbb-bbbb-bbbb-bbbbbbbbbbbbb",
    ]
    assert selectors.id_texts([]) == []


def test_uuid_hex_is_the_stored_form_and_undoes_id_texts() -> None:
    keys = [uuid.uuid4() for _ in range(5)]
    texts = [str(k) for k in keys]
    assert [uuid_hex(t) for t in texts] == [k.hex for k in keys]
    assert [uuid_hex(t.upper()) for t in texts] == [k.hex for k in keys]
    assert [uuid_hex(k) for k in keys] == [k.hex for k in keys]
    assert selectors.id_texts([uuid_hex(t) for t in texts]) == texts
    assert uuid_hex(None) is None
    assert uuid_hex("{" + texts[0] + "}") == keys[0].hex  # another form uuid.UUID reads
    for bad in ("not-a-uuid", "g" * 32, "ab " * 10 + "ab"):
        with pytest.raises(ValueError):
            uuid_hex(bad)


def test_retrieval_aggregates_count_used_events_up_to_now_per_memory(kit: Any) -> None:
    a, b, c = kit.mem("a"), kit.mem("b"), kit.mem("c")
    kit.retrieve([a, b], age_days=1)  # a rank 0, b rank 1
    kit.retrieve([b, a], age_days=10)  # b rank 0, a rank 1
    kit.retrieve([a], source="get", age_days=40)
    kit.retrieve([a, c], source="inspector", age_days=0.1)  # a dry read: never counted
    kit.retrieve([c], age_days=-1)  # after now: not yet
    found = selectors.retrieval_aggregates(workspace=kit.workspace, now=kit.NOW, lookback_days=30, short_days=7)
    got = {
        mid: (
            int(found.total[k]),
            int(found.search[k]),
            int(found.rank_sum[k]),
            int(found.top1[k]),
            int(found.in_short[k]),
            int(found.in_lookback[k]),
            round(float(found.last_at[k]), 3),
        )
        for k, mid in enumerate(found.memory_ids)
    }
    day = (kit.NOW - timedelta(days=1)).timestamp()
    assert got == {
        str(a.id): (3, 2, 1, 1, 1, 2, round(day, 3)),
        str(b.id): (2, 2, 1, 1, 1, 2, round(day, 3)),
    }
    empty = selectors.retrieval_aggregates(
        workspace=kit.workspace, now=kit.NOW - timedelta(days=99), lookback_days=30, short_days=7
    )
    assert empty.memory_ids == [] and empty.total.size == empty.last_at.size == 0


def test_metadata_of_answers_in_the_id_form_it_was_asked_in(kit: Any) -> None:
    m = kit.mem("x", metadata={"a": 1})
    assert selectors.metadata_of(workspace=kit.workspace, ids=[m.id]) == {m.id: {"a": 1}}
    assert selectors.metadata_of(workspace=kit.workspace, ids=[str(m.id)]) == {str(m.id): {"a": 1}}


def test_evolver_cursor_skips_dry_reverted_and_failed_runs(kit: Any) -> None:
    def run(minutes: int, *, dry: bool = False, status: str = RunStatus.COMPLETED, ok: bool = True) -> None:
        EvolutionRun.objects.create(
            workspace=kit.workspace,
            dry_run=dry,
            status=status,
            started_at=kit.NOW + timedelta(minutes=minutes),
            summary={"evolvers": [{"name": "E", "status": "ok" if ok else "failed", "state": {"n": minutes}}]},
        )

    assert selectors.evolver_cursor(workspace=kit.workspace, name="E").state == {}
    run(1)
    run(2, dry=True)
    run(3, status=RunStatus.REVERTED)
    run(4, ok=False)
    cursor = selectors.evolver_cursor(workspace=kit.workspace, name="E")
    assert cursor.state == {"n": 1}
    assert cursor.ran_at == kit.NOW + timedelta(minutes=1)


def test_used_result_sets_skip_inspector_reads_but_move_the_watermark_past_them(kit: Any) -> None:
    a, b = kit.mem("a"), kit.mem("b")
    used = kit.retrieve([a, b], age_days=1)
    kit.retrieve([a, b], source="inspector")
    sets, last = selectors.used_result_sets(workspace=kit.workspace, after_event_id=0)
    assert [(key, members) for key, members, _ in sets] == [(str(used), [str(a.id), str(b.id)])]
    assert sets[0][2] == kit.NOW - timedelta(days=1)
    assert selectors.used_result_sets(workspace=kit.workspace, after_event_id=last) == ([], last)


def test_co_retrieved_between_finds_the_asked_pairs_in_either_direction_only(kit: Any) -> None:
    a, b, c, d = (kit.mem(name) for name in "abcd")

    def edge(source: Memory, target: Memory, count: int, kind: str = EdgeType.CO_RETRIEVED) -> Edge:
        return Edge.objects.create(
            workspace=kit.workspace, source=source, target=target, edge_type=kind, co_retrieval_count=count
        )

    ab, ba, cd = edge(a, b, 1), edge(b, a, 4), edge(c, d, 2)
    edge(a, c, 5)  # not asked for, though both ends are
    edge(b, c, 7, EdgeType.RELATED)  # another edge type
    asked = [(str(a.id), str(b.id)), (str(d.id), str(c.id)), (str(b.id), str(c.id))]
    found = selectors.co_retrieved_between(workspace=kit.workspace, pairs=asked)
    assert found == [
        (ab.pk, str(a.id), str(b.id), 1),
        (ba.pk, str(b.id), str(a.id), 4),
        (cd.pk, str(c.id), str(d.id), 2),
    ]
    assert selectors.co_retrieved_between(workspace=kit.workspace, pairs=[]) == []
    upper = (str(d.id).upper(), str(c.id))
    assert selectors.co_retrieved_between(workspace=kit.workspace, pairs=[upper]) == [(cd.pk, upper[1], upper[0], 2)]
    strong = selectors.co_retrieved_edges(workspace=kit.workspace, min_count=4)
    assert [row[3] for row in strong] == [4, 5]


def test_a_memory_ranked_first_by_every_search_counts_as_top_with_rank_zero(kit: Any) -> None:
    # Written the way every real retrieval is (retrieval_signals numbers a result set from 1), then flushed.
    from memories.signalbus import retrieval_signals, signal_bus

    first, second = kit.mem("first"), kit.mem("second")
    for _ in range(10):
        retrieval_signals(workspace_id=kit.workspace.pk, memory_ids=[first.id, second.id], source="search", delta=0.05)
    signal_bus().flush()
    found = selectors.retrieval_aggregates(
        workspace=kit.workspace, now=timezone.now() + timedelta(seconds=1), lookback_days=30, short_days=7
    )
    at = {mid: k for k, mid in enumerate(found.memory_ids)}
    assert int(found.top1[at[str(first.id)]]) == 10 and int(found.rank_sum[at[str(first.id)]]) == 0
    assert int(found.top1[at[str(second.id)]]) == 0 and int(found.rank_sum[at[str(second.id)]]) == 10
