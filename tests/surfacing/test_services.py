from __future__ import annotations

import math
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from django.utils import timezone

from core.errors import InvalidInput
from graph.algorithms import SPREAD_EDGE_TYPES, build_csr, edge_type_codes, edge_type_mask
from graph.algorithms import top_neighbours as one_node
from graph.store import Subgraph
from memories import services as memory_services
from memories.algorithms.activation import decayed_activation
from memories.demo import demo_load
from memories.embedding_service import embed_pending
from memories.inputs import SessionInput, TurnInput
from memories.models import Memory, MemoryScore, RetrievalEvent, Status, Workspace
from memories.signalbus import LocalSignalBus
from surfacing import retrieval, services
from surfacing.pins import pin_store
from surfacing.settings import DEFAULTS

pytestmark = [pytest.mark.django_db, pytest.mark.api, pytest.mark.usefixtures("stores")]

Make = Callable[..., Memory]


@pytest.fixture
def now() -> datetime:
    return timezone.now()


def aged(make_memory: Make, now: datetime, content: str, hours: float, **fields: Any) -> Memory:
    return make_memory(content, created_at=now - timedelta(hours=hours), **fields)


def link(workspace: Workspace, a: Memory, b: Memory, edge_type: str = "RELATED") -> None:
    memory_services.edge_link(workspace=workspace, source=a, target=b, edge_type=edge_type)


def ids(context: retrieval.WorkingContext) -> list[Any]:
    return [item.id for item in context.items]


# -- scoring against the reference values -----------------------------------------------------------


def test_legacy_mode_scores_relevance_times_recency_times_floored_activation(
    workspace: Workspace, make_memory: Make, now: datetime
) -> None:
    memory = aged(make_memory, now, "postgres connection pool settings", 1.0)
    seed = {"score_profile": "seed"}
    ctx = retrieval.get_working_context(
        workspace, "s", "postgres pool", k=5, mode="legacy", settings_override=seed, record=False, now=now
    )

    (item,) = ctx.items
    breakdown = item.score_breakdown
    activation = decayed_activation(0.5, memory.created_at, 720.0, now)
    assert breakdown["recency"] == pytest.approx(0.959189, abs=1e-6)  # (ran) 1 h
    assert breakdown["relevance"] == pytest.approx(1.0)
    assert breakdown["activation"] == pytest.approx(activation, abs=1e-9)
    assert item.score == pytest.approx(1.0 * 0.959189 * activation, abs=1e-6)
    assert breakdown["centrality"] == breakdown["session_pin_boost"] == breakdown["freshness_boost"] == 0.0
    assert ctx.strategy_used == "fast:recency"
    assert ctx.reasons == ["legacy_mode"]
    assert item.provenance == {"kind": "lexical", "seed": None, "edge_type": None, "hops": 0, "path": [str(memory.id)]}


def test_router_mode_adds_freshness_for_new_memories(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    one = aged(make_memory, now, "deploy checklist for friday", 1.0)
    twelve = aged(make_memory, now, "deploy rollback notes", 12.0)
    old = aged(make_memory, now, "deploy history of last year", 48.0)
    ctx = retrieval.get_working_context(
        workspace,
        "s",
        "deploy",
        k=5,
        mode="router",
        strategy="fast:recency",
        settings_override={"score_profile": "seed"},
        record=False,
        now=now,
    )
    by_id = {item.id: item.score_breakdown for item in ctx.items}
    assert by_id[one.id]["freshness_boost"] == pytest.approx(0.191667, abs=1e-6)
    assert by_id[twelve.id]["freshness_boost"] == pytest.approx(0.1, abs=1e-6)
    assert by_id[twelve.id]["recency"] == pytest.approx(0.606531, abs=1e-6)
    assert by_id[old.id]["freshness_boost"] == 0.0


def test_recency_time_constant_is_a_setting(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    aged(make_memory, now, "quarterly budget review", 24.0 * 30)
    default = retrieval.get_working_context(workspace, "s", "budget", mode="legacy", record=False, now=now)
    seed = retrieval.get_working_context(
        workspace, "s", "budget", mode="legacy", record=False, now=now, settings_override={"score_profile": "seed"}
    )
    tuned = retrieval.get_working_context(
        workspace,
        "s",
        "budget",
        mode="legacy",
        record=False,
        now=now,
        settings_override={"recency_time_constant_hours": 24.0 * 365},
    )
    assert default.items[0].score_breakdown["recency"] == pytest.approx(math.exp(-1), rel=1e-6)  # 30 days
    assert seed.items[0].score_breakdown["recency"] == pytest.approx(math.exp(-30), rel=1e-6)  # seed: 24 h
    assert tuned.items[0].score_breakdown["recency"] == pytest.approx(math.exp(-30 / 365), rel=1e-6)
    assert tuned.settings.recency_time_constant_hours == 24.0 * 365


def test_ranking_follows_the_composite(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    stale = aged(make_memory, now, "invoice export format", 24.0 * 5)
    fresh = aged(make_memory, now, "invoice export format", 2.0)
    ctx = retrieval.get_working_context(workspace, "s", "invoice export", mode="legacy", record=False, now=now)
    assert ids(ctx) == [fresh.id, stale.id]
    assert ctx.items[0].score > ctx.items[1].score


# -- strategies ---------------------------------------------------------------------------------------


def test_deep_multi_hop_surfaces_graph_neighbours_that_share_no_word(
    workspace: Workspace, make_memory: Make, now: datetime
) -> None:
    decision = make_memory("We picked JWT for authentication", memory_type="decision")
    balancer = make_memory("The load balancer has no sticky sessions")
    rfc = make_memory("RFC 7519 reference kept for the team")
    make_memory("Lunch is at noon")
    link(workspace, decision, balancer, "RELATED")
    link(workspace, balancer, rfc, "MENTIONS")

    # Context off: the RELATED neighbour would be lifted by the decision's links before spreading reached it.
    ctx = retrieval.get_working_context(
        workspace,
        "s",
        "why did we pick JWT?",
        mode="router",
        settings_override={"context_hops": 0},
        record=False,
        now=now,
    )

    assert ctx.strategy_used == "deep:multi-hop"
    assert ctx.reasons[0] == "keyword:why"
    by_id = {item.id: item for item in ctx.items}
    assert set(by_id) == {decision.id, balancer.id, rfc.id}
    seed_relevance = by_id[decision.id].score_breakdown["relevance"]
    hop1, hop2 = by_id[balancer.id], by_id[rfc.id]
    assert hop1.provenance == {
        "kind": "spread",
        "seed": str(decision.id),
        "edge_type": "RELATED",
        "hops": 1,
        "path": [str(decision.id), str(balancer.id)],
    }
    assert hop2.provenance["hops"] == 2
    assert hop2.provenance["edge_type"] == "MENTIONS"
    assert hop2.provenance["path"] == [str(decision.id), str(balancer.id), str(rfc.id)]
    assert hop1.score_breakdown["relevance"] == pytest.approx(0.5 * seed_relevance)
    assert hop2.score_breakdown["relevance"] == pytest.approx(0.25 * seed_relevance)
    centrality = [item.score_breakdown["centrality"] for item in ctx.items]
    assert max(centrality) == pytest.approx(1.0)  # normalised by the maximum over the candidates
    assert min(centrality) > 0.0
    assert hop2.score_breakdown["centrality"] < hop1.score_breakdown["centrality"]


def test_fast_recency_and_legacy_never_spread(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    decision = make_memory("We picked JWT for authentication")
    neighbour = make_memory("The load balancer has no sticky sessions")
    link(workspace, decision, neighbour, "MENTIONS")
    for mode, strategy in (("router", "fast:recency"), ("legacy", None)):
        ctx = retrieval.get_working_context(
            workspace, "s", "why JWT", mode=mode, strategy=strategy, record=False, now=now
        )
        assert ids(ctx) == [decision.id]
        assert ctx.items[0].score_breakdown["centrality"] == 0.0


def test_what_a_hit_links_to_is_its_context_in_every_mode_but_the_seed_legacy(
    workspace: Workspace, make_memory: Make, now: datetime
) -> None:
    decision = make_memory("We picked JWT for authentication")
    reason = make_memory("The load balancer has no sticky sessions")
    citing = make_memory("Goal: ship the login flow")
    link(workspace, decision, reason, "RELATED")
    link(workspace, citing, decision, "RELATED")
    for mode, strategy in (("router", "fast:recency"), ("router", "deep:multi-hop"), ("legacy", None)):
        ctx = retrieval.get_working_context(workspace, "s", "JWT", mode=mode, strategy=strategy, record=False, now=now)
        by_id = {item.id: item for item in ctx.items}
        assert ids(ctx)[0] == decision.id
        relevance = by_id[decision.id].score_breakdown["relevance"]
        assert by_id[reason.id].provenance == {
            "kind": "context",
            "seed": str(decision.id),
            "edge_type": "RELATED",
            "hops": 1,
            "path": [str(decision.id), str(reason.id)],
        }
        assert by_id[reason.id].score_breakdown["relevance"] == pytest.approx(0.8 * relevance)
        # What links to the hit is about it, and weaker context than what the hit links to.
        assert by_id[citing.id].score_breakdown["relevance"] == pytest.approx(0.6 * relevance)
        assert any(r.startswith("context:2_from_") for r in ctx.reasons)
    seed = retrieval.get_working_context(
        workspace, "s", "JWT", mode="legacy", settings_override={"score_profile": "seed"}, record=False, now=now
    )
    assert ids(seed) == [decision.id]


def test_factual_point_query_skips_the_semantic_pool(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    make_memory("invoices are sent on the first of the month")
    unrelated = make_memory("The cafeteria closes early on Fridays")
    loose = {"semantic_min_similarity": -1.0}
    fast = retrieval.get_working_context(
        workspace, "s", "invoices", mode="router", strategy="fast:recency", settings_override=loose, record=False
    )
    factual = retrieval.get_working_context(
        workspace, "s", "invoices", mode="router", settings_override=loose, record=False
    )
    assert factual.strategy_used == "factual:point-query"
    assert factual.reasons == ["bare_noun"]
    assert unrelated.id in ids(fast)
    assert {i.provenance["kind"] for i in fast.items if i.id == unrelated.id} == {"semantic"}
    assert unrelated.id not in ids(factual)


def ingest(workspace: Workspace, user: Any, day: int, lines: list[str], speaker: str = "Ana") -> list[Any]:
    return memory_services.conversation_ingest(
        workspace=workspace,
        actor=user,
        sessions=[
            SessionInput(
                started_at=datetime(2025, 3, day, 9, tzinfo=UTC),
                turns=tuple(TurnInput(speaker=speaker, text=text) for text in lines),
            )
        ],
    )


def entity_memory(workspace: Workspace, key: str) -> Memory:
    return Memory.objects.get(workspace=workspace, memory_type="entity", subject=key)


def test_a_point_query_naming_an_entity_returns_it_and_the_memories_that_mention_it(
    workspace: Workspace, user: Any, make_memory: Make
) -> None:
    # "pg" is an alias: the turn mentions PostgreSQL without the word, so only the graph can find it.
    alias_turn, named_turn, _ = ingest(
        workspace, user, 1, ["We moved the shards to pg last night", "PostgreSQL upgrade is done", "Lunch?"]
    )
    note = make_memory("PostgreSQL tuning checklist for the reporting box")  # API note: no MENTIONS edge
    entity = entity_memory(workspace, "postgresql")
    slow = {"recency_time_constant_hours": 24.0 * 3650}

    ctx = retrieval.get_working_context(
        workspace, "s", "PostgreSQL", mode="router", settings_override=slow, record=False
    )

    assert ctx.strategy_used == "factual:point-query"
    assert ctx.reasons == ["bare_noun", "entity:1_named", "entity_mentions:2_of_2"]
    by_id = {item.id: item for item in ctx.items}
    assert set(by_id) == {entity.id, alias_turn, named_turn, note.id}
    assert by_id[entity.id].provenance == {
        "kind": "entity",
        "seed": None,
        "edge_type": None,
        "hops": 0,
        "path": [str(entity.id)],
    }
    for turn in (alias_turn, named_turn):
        assert by_id[turn].provenance == {
            "kind": "spread",
            "seed": str(entity.id),
            "edge_type": "MENTIONS",
            "hops": 1,
            "path": [str(entity.id), str(turn)],
        }
    assert by_id[note.id].provenance["kind"] == "lexical"
    assert by_id[entity.id].score_breakdown["relevance"] == 1.0
    assert by_id[alias_turn].score_breakdown["relevance"] == 0.5  # damping ** 1: no shared word
    assert by_id[named_turn].score_breakdown["relevance"] >= 0.5  # its lexical score when higher
    assert by_id[alias_turn].score_breakdown["centrality"] == 0.0  # no PPR for point queries


def test_a_point_query_without_an_entity_memory_stays_lexical(workspace: Workspace, user: Any) -> None:
    ingest(workspace, user, 1, ["We moved the shards to pg last night"])
    ctx = retrieval.get_working_context(workspace, "s", "show shards", mode="router", record=False)
    assert ctx.strategy_used == "factual:point-query"
    assert ctx.reasons == ["lookup_prefix:show"]
    assert {item.provenance["kind"] for item in ctx.items} == {"lexical"}


def test_a_popular_entity_brings_its_most_recent_mentions_and_every_mention_that_matches_lexically(
    workspace: Workspace, user: Any
) -> None:
    turns = {day: ingest(workspace, user, day, [f"pg shard {day} rebalanced"])[0] for day in range(1, 9)}
    worded = ingest(workspace, user, 9, ["the rebalanced pg shard is PostgreSQL 16"])[0]  # day 9, also lexical
    slow = {"recency_time_constant_hours": 24.0 * 3650}

    # k=1: the candidate limit is max(5 * 1, 1) = 5 mentions besides the lexical ones.
    ctx = retrieval.get_working_context(
        workspace, "s", "PostgreSQL", k=1, mode="router", settings_override=slow, record=False, explain=True
    )

    assert ctx.reasons[-1] == "entity_mentions:6_of_9"
    assert ctx.declined is not None
    seen = {item.id for item in ctx.items} | {item.id for item in ctx.declined}
    assert worded in seen
    assert {turns[day] for day in range(4, 9)} <= seen
    assert not {turns[day] for day in range(1, 4)} & seen


def test_an_archived_mention_is_not_surfaced_by_a_point_query(workspace: Workspace, user: Any) -> None:
    kept, gone = ingest(workspace, user, 1, ["pg is fast", "pg is slow"])
    memory_services.memory_archive(workspace=workspace, memory=Memory.objects.get(pk=gone), actor=user)
    ctx = retrieval.get_working_context(workspace, "s", "PostgreSQL", mode="router", record=False)
    assert kept in ids(ctx)
    assert gone not in ids(ctx)


def test_legacy_mode_never_takes_the_entity_path(workspace: Workspace, user: Any) -> None:
    alias_turn = ingest(workspace, user, 1, ["We moved the shards to pg last night"])[0]
    ctx = retrieval.get_working_context(workspace, "s", "PostgreSQL", mode="legacy", record=False)
    assert alias_turn not in ids(ctx)
    # The entity memory itself is no context for a query that is not a lookup: nothing is found.
    assert ctx.reasons == ["legacy_mode", "no_search_hits"]


def test_soft_degraded_strategy_runs_fast_recency(workspace: Workspace, make_memory: Make) -> None:
    make_memory("how to rotate keys")
    ctx = retrieval.get_working_context(workspace, "s", "rotate keys", mode="router", strategy="procedural:lookup")
    assert ctx.strategy_used == "fast:recency"
    assert ctx.requested_strategy == "procedural:lookup"
    assert ctx.confidence == 1.0
    assert ctx.reasons == ["caller_explicit", "unimplemented_strategy_soft_degrade"]


# -- pins and anchors ---------------------------------------------------------------------------------


def test_pinned_memory_is_forced_first_with_its_boost(workspace: Workspace, make_memory: Make, now: datetime) -> None:
    hit = make_memory("kafka consumer lag alert")
    pinned = make_memory("Project requirements document")
    services.pin_put(workspace=workspace, session_id="chat-1", memory=pinned, weight=2.0)

    ctx = retrieval.get_working_context(workspace, "chat-1", "kafka lag", mode="router", record=False, now=now)

    assert ids(ctx) == [pinned.id, hit.id]
    assert ctx.items[0].score_breakdown["session_pin_boost"] == pytest.approx(0.6)
    assert ctx.items[0].provenance["kind"] == "pinned"
    other_session = retrieval.get_working_context(workspace, "chat-2", "kafka lag", mode="router", record=False)
    legacy = retrieval.get_working_context(workspace, "chat-1", "kafka lag", mode="legacy", record=False)
    assert ids(other_session) == ids(legacy) == [hit.id]


def test_anchors_are_always_returned_with_drift_warnings(
    workspace: Workspace, make_memory: Make, now: datetime
) -> None:
    anchor = aged(make_memory, now, "Deploys happen on Tuesdays", 48.0, memory_type="anchor", subject="deploy day")
    newer = aged(make_memory, now, "Deploys moved to Thursdays", 2.0, subject="deploy day")
    make_memory("kafka consumer lag alert")

    ctx = retrieval.get_working_context(workspace, "s", "kafka lag", mode="legacy", record=False, now=now)

    assert ids(ctx)[0] == anchor.id
    assert ctx.items[0].score_breakdown["anchor_forced"] is True
    assert ctx.items[0].provenance["kind"] == "anchor"
    (warning,) = ctx.drift_warnings
    assert warning["kind"] == "newer_subject"
    assert warning["anchor_id"] == str(anchor.id)
    assert warning["related_ids"] == [str(newer.id)]


def test_max_tokens_below_the_smallest_anchor_is_refused(workspace: Workspace, make_memory: Make) -> None:
    make_memory("x" * 40, memory_type="anchor")  # 10 tokens
    with pytest.raises(InvalidInput) as err:
        retrieval.get_working_context(workspace, "s", "anything", max_tokens=9, record=False)
    assert err.value.field == "max_tokens"
    assert "10 tokens" in err.value.detail
    retrieval.get_working_context(workspace, "s", "anything", max_tokens=10, record=False)


def test_budget_keeps_tokens_under_max_and_says_what_it_left_out(workspace: Workspace, make_memory: Make) -> None:
    big = make_memory("release " + "notes " * 100)  # ~150 tokens
    small = make_memory("release date is friday")
    ctx = retrieval.get_working_context(
        workspace, "s", "release notes", max_tokens=40, mode="legacy", record=False, explain=True
    )
    assert ids(ctx) == [small.id]
    assert ctx.tokens_used <= 40
    assert any(r.startswith("budget:max_tokens=40") for r in ctx.reasons)
    assert ctx.declined is not None
    assert [(d.id, d.factor) for d in ctx.declined] == [(big.id, "budget")]


def test_explain_names_what_held_each_declined_candidate_down(
    workspace: Workspace, make_memory: Make, now: datetime
) -> None:
    aged(make_memory, now, "grafana dashboard for payments", 1.0)
    old = aged(make_memory, now, "grafana dashboard for payments", 24.0 * 20)
    ctx = retrieval.get_working_context(
        workspace, "s", "grafana payments", k=1, mode="legacy", record=False, explain=True
    )
    assert ctx.declined is not None
    (declined,) = ctx.declined
    assert declined.id == old.id
    assert declined.factor == "recency"
    assert declined.rank == 2


# -- validation ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"k": 0}, "k"),
        ({"k": 101}, "k"),
        ({"k": "5"}, "k"),
        ({"k": True}, "k"),
        ({"strategy": "deep"}, "strategy"),
        ({"mode": "turbo"}, "mode"),
        ({"mode": "legacy", "strategy": "deep:multi-hop"}, "strategy"),
        ({"mode": "legacy", "strategy": "procedural:lookup"}, "strategy"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"query": "   "}, "query"),
    ],
)
def test_bad_input_names_the_field(workspace: Workspace, kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {"query": "anything", **kwargs}
    query = args.pop("query")
    with pytest.raises(InvalidInput) as err:
        retrieval.get_working_context(workspace, "s", query, record=False, **args)
    assert err.value.field == field


def test_legacy_mode_accepts_an_explicit_fast_recency(workspace: Workspace) -> None:
    ctx = retrieval.get_working_context(workspace, "s", "x", mode="legacy", strategy="fast:recency", record=False)
    assert ctx.reasons[:2] == ["legacy_mode", "caller_explicit"]


# -- what surfaces and what does not -------------------------------------------------------------------


def test_archived_memories_never_surface(workspace: Workspace, make_memory: Make, user: Any) -> None:
    kept = make_memory("sprint retro notes")
    gone = make_memory("sprint retro notes draft")
    memory_services.memory_archive(workspace=workspace, memory=gone, actor=user)
    assert ids(retrieval.get_working_context(workspace, "s", "sprint retro", record=False)) == [kept.id]
    assert [h.memory.id for h in retrieval.search(workspace, "sprint retro", record=False).hits] == [kept.id]


def test_another_workspaces_memory_never_appears_even_through_a_pin(
    workspace: Workspace, other_workspace: Workspace, make_memory: Make
) -> None:
    mine = make_memory("roadmap for the mobile app")
    foreign = make_memory("roadmap for the mobile app (secret)", ws=other_workspace)
    # Bypass the service's ownership check: the context must still never read the foreign row.
    pin_store().pin(workspace=workspace, session_id="s", memory_id=foreign.id, weight=1.0, now=timezone.now())
    ctx = retrieval.get_working_context(workspace, "s", "mobile roadmap", mode="router", record=False)
    assert ids(ctx) == [mine.id]
    assert [h.memory.id for h in retrieval.search(workspace, "mobile roadmap", record=False).hits] == [mine.id]


def test_pinning_a_memory_of_another_workspace_is_refused(
    workspace: Workspace, other_workspace: Workspace, make_memory: Make
) -> None:
    foreign = make_memory("their plan", ws=other_workspace)
    with pytest.raises(InvalidInput):
        services.pin_put(workspace=workspace, session_id="s", memory=foreign)


# -- signals ------------------------------------------------------------------------------------------


def test_context_boosts_returned_memories_and_their_partners(
    workspace: Workspace, make_memory: Make, fresh_signal_bus: LocalSignalBus
) -> None:
    top = make_memory("terraform state lock timeout")
    second = make_memory("terraform plan output")
    partner = make_memory("infrastructure repository layout")
    link(workspace, top, partner, "MENTIONS")  # a partner, and no context of the hit

    ctx = retrieval.get_working_context(workspace, "sess", "terraform state lock", k=2, mode="legacy")
    assert ids(ctx) == [top.id, second.id]
    fresh_signal_bus.flush()

    events = list(RetrievalEvent.objects.filter(result_set=ctx.decision_id).order_by("rank"))
    assert [(e.memory_id, e.rank, e.source, e.session_id) for e in events] == [
        (top.id, 1, "context", "sess"),
        (second.id, 2, "context", "sess"),
    ]
    scores = dict(Memory.objects.values_list("id", "activation_score"))
    assert scores[top.id] == pytest.approx(0.52)
    assert scores[second.id] == pytest.approx(0.52)
    assert scores[partner.id] == pytest.approx(0.51)


def test_dry_read_does_not_boost_or_record(
    workspace: Workspace, make_memory: Make, fresh_signal_bus: LocalSignalBus
) -> None:
    make_memory("terraform state lock timeout")
    ctx = retrieval.get_working_context(workspace, "s", "terraform", record=False)
    assert ctx.items and not ctx.recorded
    assert fresh_signal_bus.pending() == 0
    retrieval.search(workspace, "terraform", record=False)
    assert fresh_signal_bus.pending() == 0


def test_search_returns_scored_hits_and_boosts_them_by_a_direct_retrieval(
    workspace: Workspace, make_memory: Make, fresh_signal_bus: LocalSignalBus
) -> None:
    best = make_memory("redis eviction policy is allkeys-lru")
    other = make_memory("redis version upgrade")
    make_memory("unrelated lunch menu")
    result = retrieval.search(workspace, "redis eviction policy", k=5)
    assert [h.memory.id for h in result.hits] == [best.id, other.id]
    assert 1.0 >= result.hits[0].score > result.hits[1].score > 0.0
    fresh_signal_bus.flush()
    assert Memory.objects.get(id=best.id).activation_score == pytest.approx(0.55)
    assert set(RetrievalEvent.objects.filter(result_set=result.result_set).values_list("source", flat=True)) == {
        "search"
    }


def test_search_validates_k(workspace: Workspace) -> None:
    with pytest.raises(InvalidInput) as err:
        retrieval.search(workspace, "x", k=0)
    assert err.value.field == "k"


# -- settings -----------------------------------------------------------------------------------------


def test_workspace_settings_drive_the_mode_and_are_echoed(workspace: Workspace, user: Any, make_memory: Make) -> None:
    make_memory("kafka consumer lag alert")
    services.settings_update(workspace=workspace, actor=user, surfacing={"mode": "router", "pin_multiplier": 0.5})
    ctx = retrieval.get_working_context(workspace, "s", "kafka", record=False)
    assert ctx.mode == "router"
    assert ctx.settings.pin_multiplier == 0.5
    services.settings_update(workspace=workspace, actor=user, surfacing={"mode": None})
    assert retrieval.get_working_context(workspace, "s", "kafka", record=False).mode == "legacy"


def test_invalid_settings_change_writes_nothing(workspace: Workspace, user: Any) -> None:
    with pytest.raises(InvalidInput) as err:
        services.settings_update(
            workspace=workspace, actor=user, surfacing={"mode": "router"}, evolution={"compression_enabled": "yes"}
        )
    assert err.value.field == "evolution.compression_enabled"
    workspace.refresh_from_db()
    assert workspace.surfacing_settings == {}


def test_status_filter_keeps_only_active(workspace: Workspace, make_memory: Make) -> None:
    memory = make_memory("superseded fact about billing")
    Memory.objects.filter(id=memory.id).update(status=Status.SUPERSEDED)
    assert retrieval.get_working_context(workspace, "s", "billing", record=False).items == []


def test_a_ppr_work_cap_keeps_the_estimate_and_says_so(workspace: Workspace, make_memory: Make) -> None:
    decision = make_memory("We picked JWT for authentication")
    others = [make_memory(f"note {i} on sessions") for i in range(4)]
    for other in others:
        link(workspace, decision, other)
    ctx = retrieval.get_working_context(
        workspace, "s", "why JWT", mode="router", record=False, settings_override={"ppr_max_pushes": 1}
    )
    (reason,) = [r for r in ctx.reasons if r.startswith("ppr_not_converged")]
    assert "max_pushes=1" in reason and "best estimate used" in reason
    assert max(item.score_breakdown["centrality"] for item in ctx.items) == pytest.approx(1.0)


def test_declined_memory_held_down_by_interference_says_so(workspace: Workspace, make_memory: Make) -> None:
    make_memory("vault token rotation schedule")
    weak = make_memory("vault token rotation schedule (copy)")
    Memory.objects.filter(id=weak.id).update(activation_score=0.001, metadata={"interference": {"partners": 1}})
    MemoryScore.objects.filter(memory=weak).update(retention_score=0.93)
    ctx = retrieval.get_working_context(
        workspace, "s", "vault token rotation", k=1, mode="legacy", record=False, explain=True
    )
    assert ctx.declined is not None
    (declined,) = ctx.declined
    assert declined.id == weak.id
    assert declined.factor == "interference"
    assert "retention 0.9300" in declined.detail


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("limit", [1, 7, 50])
def test_partners_take_an_equal_share_per_returned_memory_heaviest_first(seed: int, limit: int) -> None:
    """The vectorised partner choice equals the rule node by node: each returned memory in turn takes up
    to ceil(limit / returned) of its heaviest neighbours that are neither returned nor already taken."""
    rng = np.random.default_rng(seed)
    n, m = 60, 400
    types = [*SPREAD_EDGE_TYPES, "MENTIONS"]
    csr = build_csr(
        n,
        rng.integers(0, n, m),
        rng.integers(0, n, m),
        rng.integers(1, 5, m).astype(np.float32) / 4,
        edge_type_codes(rng.choice(types, m).tolist()),
    )
    ids = [uuid.UUID(int=i + 1) for i in range(n)]
    subgraph = Subgraph(csr=csr, ids=ids, index={mid: i for i, mid in enumerate(ids)})
    returned = [ids[i] for i in rng.choice(n, 12, replace=False).tolist()] + [uuid.uuid4()]

    nodes = subgraph.nodes_of(returned)
    per_item = math.ceil(limit / len(nodes))
    taken, expected = set(nodes), []
    for node in nodes:
        count = 0
        for v in one_node(csr, node, per_item + len(nodes), edge_type_mask(retrieval.SPREAD_EDGE_CODES)).nodes.tolist():
            if len(expected) == limit or count == per_item:
                break
            if v not in taken:
                taken.add(v)
                expected.append(ids[v])
                count += 1
    assert retrieval._partners(subgraph, returned, limit) == expected
    assert retrieval._partners(None, returned, limit) == [] and retrieval._partners(subgraph, [], limit) == []


# -- the demo's "why did we pick JWT" story ------------------------------------------------------------

SEED_EXAMPLE = (
    "Decision: we picked JWT",
    "The nginx load balancer",
    "Incident: users were logged out",
    "Reference: RFC",
)


@pytest.mark.parametrize("mode", ["router", "legacy"])
def test_why_did_we_pick_jwt_brings_the_decision_and_its_reasons_first(demo: Workspace, mode: str) -> None:
    """The demo's story: the decision, the load-balancer note, the session-cookie incident and the RFC reference,
    though only the decision says "JWT" and "pick"; the anchor is forced in on its own."""
    ctx = retrieval.get_working_context(demo, "s1", "Why did we pick JWT?", k=10, mode=mode, record=False)
    top = [item.content for item in ctx.items if item.memory_type != "anchor"][:5]
    for start in SEED_EXAMPLE:
        assert any(content.startswith(start) for content in top), (start, top)


@pytest.mark.parametrize("mode", ["router", "legacy"])
def test_why_did_we_pick_jwt_with_the_site_s_quality_model(stores: None, settings: Any, mode: str) -> None:
    """The same with minilm, the embedder `make run` gives the demo (its conversation embedded by the job)."""
    settings.EMBEDDER = "minilm"
    demo = demo_load(slug="demo").workspace
    assert embed_pending(workspace=demo).left == 0
    assert not demo.memories.filter(embedding_model="").exists()
    ctx = retrieval.get_working_context(demo, "s1", "Why did we pick JWT?", k=10, mode=mode, record=False)
    top = [item.content for item in ctx.items if item.memory_type != "anchor"][:5]
    for start in SEED_EXAMPLE:
        assert any(content.startswith(start) for content in top), (start, top)


def test_a_when_question_prefers_the_turn_that_says_when(workspace: Workspace, user: Any) -> None:
    vague, dated = ingest(
        workspace,
        user,
        2,
        ["The support group was really moving for me", "I went to the support group yesterday, it helped"],
    )
    asked = retrieval.get_working_context(
        workspace, "s", "When did Ana go to the support group?", k=5, mode="router", record=False
    )
    by_id = {item.id: item.score_breakdown for item in asked.items}
    assert by_id[dated]["time_cue"] == 1.0 and by_id[vague]["time_cue"] == 0.0
    assert by_id[dated]["factors"]["time"] == pytest.approx(1.0 + DEFAULTS.time_weight)
    assert any(r.startswith("time_cue:") for r in asked.reasons)
    assert ids(asked).index(dated) < ids(asked).index(vague)
    plain = retrieval.get_working_context(workspace, "s", "Ana and the support group", k=5, mode="router", record=False)
    assert all(item.score_breakdown["time_cue"] == 0.0 for item in plain.items)
    assert not any(r.startswith("time_cue:") for r in plain.reasons)
