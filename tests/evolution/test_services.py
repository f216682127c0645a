"""Reverting records and runs: exact restore, dependency refusals, all-or-nothing, revert records."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from core.errors import Conflict
from evolution import selectors, services
from evolution.models import RunStatus
from history.models import EvolutionRecord
from memories import services as memory_services
from memories.models import Edge, Memory, MemoryScore
from memories.services import record_revert

pytestmark = [pytest.mark.django_db, pytest.mark.api]


def busy_workspace(kit: Any) -> None:
    """Something for every enhanced evolver to do."""
    for k in range(33):
        kit.mem(f"note on the billing deploy {k}", memory_type="working", age_days=0.01, tags=["ops"])
    a = kit.mem("episode a", memory_type="episodic", age_days=75)
    b = kit.mem("episode b", memory_type="episodic", age_days=10, retention_score=0.7)
    c = kit.mem("fact c", retention_score=0.4, age_days=50)
    for _ in range(6):
        kit.retrieve([a, b, c])
    v1, v2 = kit.cosine_pair(0.96)
    kit.mem("similar one", embedding=v1)
    kit.mem("similar two", embedding=v2)


def test_record_revert_restores_the_fields_and_writes_a_revert_record(kit: Any) -> None:
    m = kit.mem("episode", memory_type="episodic", age_days=30)
    run = kit.run("ExponentialDecay")
    record = EvolutionRecord.objects.get(run=run)
    revert = record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    m.refresh_from_db()
    assert m.score.retention_score == 1.0
    record.refresh_from_db()
    assert record.reverted_at is not None
    assert record.reverted_by_id == revert.pk
    assert revert.action == "revert"
    assert revert.actor_id == kit.user.pk
    assert revert.before == {str(m.id): {"retention_score": pytest.approx(0.367879, abs=1e-6)}}
    assert revert.after[str(m.id)] == {"retention_score": 1.0}


def test_reverting_twice_or_a_dry_run_is_refused(kit: Any) -> None:
    kit.mem("episode", memory_type="episodic", age_days=30)
    record = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay"))
    record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    with pytest.raises(Conflict) as again:
        record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    assert again.value.code == "already_reverted"
    dry = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay", dry_run=True))
    with pytest.raises(Conflict) as preview:
        record_revert(workspace=kit.workspace, record_id=dry.pk, actor=kit.user)
    assert preview.value.code == "dry_run"


def test_revert_is_refused_while_a_later_change_depends_on_it(kit: Any) -> None:
    m = kit.mem("episode", memory_type="episodic", age_days=30)
    first = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay"))
    later = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay", now=kit.NOW + timedelta(days=3)))
    with pytest.raises(Conflict) as caught:
        record_revert(workspace=kit.workspace, record_id=first.pk, actor=kit.user)
    assert caught.value.code == "revert_conflict"
    assert "retention_score" in caught.value.detail
    record_revert(workspace=kit.workspace, record_id=later.pk, actor=kit.user)
    record_revert(workspace=kit.workspace, record_id=first.pk, actor=kit.user)
    m.refresh_from_db()
    assert m.score.retention_score == 1.0


def test_a_user_edit_after_an_evolver_blocks_its_revert(kit: Any) -> None:
    sources = [kit.mem(f"deploy note {k}", memory_type="working", age_days=0.01) for k in range(34)]
    record = EvolutionRecord.objects.get(run=kit.run("EnhancedWorkingToEpisodic"), action="promote")
    memory_services.memory_update(
        workspace=kit.workspace,
        memory=Memory.objects.get(id=sources[0].id),
        actor=kit.user,
        changes={"status": "active"},
    )
    with pytest.raises(Conflict):
        record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)


def test_reverting_a_promotion_deletes_the_episode_and_restores_the_sources(kit: Any) -> None:
    for k in range(34):
        kit.mem(f"deploy note {k}", memory_type="working", age_days=0.01, metadata={"ref": k})
    before = kit.memory_rows()
    record = EvolutionRecord.objects.get(run=kit.run("EnhancedWorkingToEpisodic"), action="promote")
    assert Memory.objects.filter(memory_type="episodic").count() == 1
    record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    assert kit.memory_rows() == before
    assert not Edge.objects.exists()


def test_run_revert_restores_every_row_and_marks_the_run(kit: Any) -> None:
    busy_workspace(kit)
    memories, edges = kit.memory_rows(observations=False), kit.edge_rows(observations=False)
    run = kit.run()
    assert all(e["status"] == "ok" for e in run.summary["evolvers"]), run.summary
    assert kit.memory_rows(observations=False) != memories
    observed = kit.observation_rows(among=memories)
    reverts = services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert kit.memory_rows(observations=False) == memories
    assert kit.edge_rows(observations=False) == edges
    # The retrieval profiles and CO_RETRIEVED counts the run brought up to date say what the events say:
    # a revert keeps them (evolution.retrieval_stats).
    assert kit.observation_rows(among=memories) == observed
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    assert len(reverts) == EvolutionRecord.objects.filter(run=run).count()
    assert not EvolutionRecord.objects.filter(run=run, reverted_at__isnull=True).exists()
    with pytest.raises(Conflict) as again:
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert again.value.code == "already_reverted"


def test_run_revert_is_all_or_nothing(kit: Any) -> None:
    busy_workspace(kit)
    run = kit.run()
    episode = Memory.objects.get(memory_type="episodic", origin__startswith="evolver:")
    # A change nobody recorded to a memory the first evolver created: the oldest record can no longer
    # be undone, so nothing may be.
    MemoryScore.objects.filter(memory=episode).update(retention_score=0.123)
    Memory.objects.filter(id=episode.id).update(content="edited by hand")
    EvolutionRecord.objects.create(
        workspace=kit.workspace,
        evolver="user",
        action="update",
        reason="hand edit",
        input_ids=[str(episode.id)],
        output_ids=[str(episode.id)],
    ).links.create(memory_id=episode.id)
    middle = kit.memory_rows()
    with pytest.raises(Conflict):
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert kit.memory_rows() == middle
    assert not EvolutionRecord.objects.filter(run=run, reverted_at__isnull=False).exists()
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED


def test_dry_run_runs_cannot_be_reverted(kit: Any) -> None:
    kit.mem("episode", memory_type="episodic", age_days=30)
    run = kit.run(dry_run=True)
    with pytest.raises(Conflict) as caught:
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert caught.value.code == "dry_run"


def test_a_field_revert_can_itself_be_reverted(kit: Any) -> None:
    m = kit.mem("episode", memory_type="episodic", age_days=30)
    record = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay"))
    revert = record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    record_revert(workspace=kit.workspace, record_id=revert.pk, actor=kit.user)
    m.refresh_from_db()
    assert m.score.retention_score == pytest.approx(0.367879, abs=1e-6)


def test_a_revert_that_deleted_rows_cannot_be_redone(kit: Any) -> None:
    for k in range(34):
        kit.mem(f"deploy note {k}", memory_type="working", age_days=0.01)
    record = EvolutionRecord.objects.get(run=kit.run("EnhancedWorkingToEpisodic"), action="promote")
    revert = record_revert(workspace=kit.workspace, record_id=record.pk, actor=kit.user)
    with pytest.raises(Conflict) as caught:
        record_revert(workspace=kit.workspace, record_id=revert.pk, actor=kit.user)
    assert caught.value.code == "not_revertible"


def test_history_lists_records_newest_first_with_reverts(kit: Any) -> None:
    m = kit.mem("episode", memory_type="episodic", age_days=30)
    first = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay"))
    second = EvolutionRecord.objects.get(run=kit.run("ExponentialDecay", now=kit.NOW + timedelta(days=1)))
    revert = record_revert(workspace=kit.workspace, record_id=second.pk, actor=kit.user)
    kit.run("ExponentialDecay", dry_run=True)
    records, cursor = selectors.memory_history(workspace=kit.workspace, memory_id=m.id)
    assert [r.pk for r in records] == [revert.pk, second.pk, first.pk]
    assert cursor is None
    page, cursor = selectors.memory_history(workspace=kit.workspace, memory_id=m.id, limit=2)
    assert [r.pk for r in page] == [revert.pk, second.pk]
    rest, _ = selectors.memory_history(workspace=kit.workspace, memory_id=m.id, before_id=cursor)
    assert [r.pk for r in rest] == [first.pk]


def test_records_of_a_big_evolver_are_chunked_and_each_memory_keeps_its_reason(kit: Any) -> None:
    from evolution.evolvers.base import RECORD_CHUNK
    from memories.bulk import bulk_insert
    from memories.models import Memory as M

    bulk_insert(
        M,
        [
            M(workspace=kit.workspace, content=f"e{k}", memory_type="episodic", created_at=kit.NOW - timedelta(days=5))
            for k in range(RECORD_CHUNK + 20)
        ],
    )
    run = kit.run("ExponentialDecay")
    records = list(EvolutionRecord.objects.filter(run=run).order_by("id"))
    assert [len(r.input_ids) for r in records] == [RECORD_CHUNK, 20]
    assert "part 1/2" in records[0].reason
    some = records[1].input_ids[0]
    assert records[1].after["reasons"][some].startswith("retention exp(-5.00d/30.00d)")
    history, _ = selectors.memory_history(workspace=kit.workspace, memory_id=some)
    assert [r.pk for r in history] == [records[1].pk]


# -- a run's revert in bounded transactions ------------------------------------------------------------


def test_a_run_revert_commits_record_by_record_within_the_budget_and_says_so(kit: Any, settings: Any) -> None:
    busy_workspace(kit)
    memories, edges = kit.memory_rows(observations=False), kit.edge_rows(observations=False)
    run = kit.run()
    records = EvolutionRecord.objects.filter(run=run).count()
    assert records > 3
    settings.EVOLUTION_TRANSACTION_MS = 0  # every transaction holds one record
    reverts = services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert len(reverts) == records
    assert kit.memory_rows(observations=False) == memories
    assert kit.edge_rows(observations=False) == edges
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    progress = run.summary["revert"]
    assert progress["state"] == "reverted"
    assert progress["records"] == progress["reverted"] == records
    assert progress["transactions"] == records
    assert progress["longest_transaction_ms"] >= 0.0


def test_a_change_between_two_revert_transactions_stops_the_revert_with_each_record_whole(
    kit: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    busy_workspace(kit)
    run = kit.run()
    records = list(EvolutionRecord.objects.filter(run=run).order_by("-id"))
    episode = Memory.objects.get(memory_type="episodic", origin__startswith="evolver:")
    settings.EVOLUTION_TRANSACTION_MS = 0
    real = services.revert_records
    calls = []

    def then_someone_edits(*args: Any, **kwargs: Any) -> Any:
        # After the first (newest) record is undone and committed, a person edits the episode the run's oldest
        # record created: the checks done before the revert began could not know.
        done = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            memory_services.memory_update(
                workspace=kit.workspace,
                memory=Memory.objects.get(id=episode.id),
                actor=kit.user,
                changes={"content": "edited while the revert ran"},
            )
        return done

    monkeypatch.setattr(services, "revert_records", then_someone_edits)
    with pytest.raises(Conflict) as caught:
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert caught.value.code == "revert_conflict"
    # The records newer than the one that created the episode were undone, then that one was refused.
    assert caught.value.detail.startswith(f"reverted {len(calls)} of {len(records)} records")
    assert 0 < len(calls) < len(records)
    assert caught.value.blocking_record_id is not None
    run.refresh_from_db()
    assert run.status == RunStatus.COMPLETED
    assert run.summary["revert"]["state"] == "stopped"
    undone = set(EvolutionRecord.objects.filter(run=run, reverted_at__isnull=False).values_list("id", flat=True))
    # Newest first, each record whole: the undone ones are exactly the newest, and each has its revert record.
    assert undone == {r.pk for r in records[: len(calls)]}
    assert all(r.reverted_by_id is not None for r in EvolutionRecord.objects.filter(id__in=undone))
    # The person's change is a recorded change: undo it, and the run's revert finishes what it began.
    monkeypatch.setattr(services, "revert_records", real)
    edit = EvolutionRecord.objects.filter(action="update", links__memory_id=episode.id).latest("id")
    record_revert(workspace=kit.workspace, record_id=edit.pk, actor=kit.user)
    services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED
    assert not EvolutionRecord.objects.filter(run=run, reverted_at__isnull=True).exists()
    assert not Memory.objects.filter(id=episode.id).exists()


def test_while_a_run_is_reverted_no_applied_run_is_queued_nor_a_second_revert_started(kit: Any) -> None:
    from django.utils import timezone

    from evolution import jobs

    busy_workspace(kit)
    run = kit.run()
    # A revert under way in another process: its state and heartbeat, in the summary and in the run's columns.
    beat = timezone.now()
    run.summary = {**run.summary, "revert": {"state": "reverting", "heartbeat": beat.isoformat()}}
    run.revert_state, run.heartbeat_at, run.worker = "reverting", beat, "elsewhere"
    run.save(update_fields=["summary", "revert_state", "heartbeat_at", "worker"])
    with pytest.raises(Conflict) as queued:
        jobs.run_enqueue(workspace=kit.workspace, actor=kit.user, evolvers=None, dry_run=False)
    assert queued.value.code == "run_in_progress" and "being reverted" in queued.value.detail
    with pytest.raises(Conflict) as again:
        services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    assert again.value.code == "revert_in_progress"
    assert not EvolutionRecord.objects.filter(run=run, reverted_at__isnull=False).exists()
    # A dry run changes nothing and may start; a revert that stopped answering for a lease is taken over.
    jobs.run_enqueue(workspace=kit.workspace, actor=kit.user, evolvers=None, dry_run=True)
    stale = timezone.now() - jobs.lease() - timedelta(seconds=1)
    run.summary = {**run.summary, "revert": {"state": "reverting", "heartbeat": stale.isoformat()}}
    run.heartbeat_at = stale
    run.save(update_fields=["summary", "heartbeat_at"])
    services.run_revert(workspace=kit.workspace, run=run, actor=kit.user)
    run.refresh_from_db()
    assert run.status == RunStatus.REVERTED


def test_a_memory_a_record_created_can_be_removed_once_the_later_change_to_it_was_reverted(kit: Any) -> None:
    for k in range(34):
        kit.mem(f"deploy note {k}", memory_type="working", age_days=0.01)
    promote = EvolutionRecord.objects.get(run=kit.run("EnhancedWorkingToEpisodic"), action="promote")
    episode = Memory.objects.get(memory_type="episodic", origin__startswith="evolver:")
    memory_services.memory_update(
        workspace=kit.workspace, memory=episode, actor=kit.user, changes={"content": "a better summary"}
    )
    edit = EvolutionRecord.objects.filter(action="update", links__memory_id=episode.id).latest("id")
    with pytest.raises(Conflict):
        record_revert(workspace=kit.workspace, record_id=promote.pk, actor=kit.user)
    # Undoing the edit puts the episode back as the promotion made it: the revert record of the edit is
    # no later change to it.
    record_revert(workspace=kit.workspace, record_id=edit.pk, actor=kit.user)
    record_revert(workspace=kit.workspace, record_id=promote.pk, actor=kit.user)
    assert not Memory.objects.filter(id=episode.id).exists()


def test_the_run_page_says_where_a_stopped_revert_stopped(kit: Any, client: Any) -> None:
    busy_workspace(kit)
    run = kit.run()
    run.summary = {
        **run.summary,
        "revert": {"state": "stopped", "records": 7, "reverted": 3, "error": "record 9 changed a memory"},
    }
    run.save(update_fields=["summary"])
    client.force_login(kit.user)
    page = client.get(f"/w/{kit.workspace.slug}/evolution/runs/{run.id}/").content.decode()
    assert "The last revert stopped after 3 of 7 records: record 9 changed a memory" in page
    assert 'id="run-revert"' in page
