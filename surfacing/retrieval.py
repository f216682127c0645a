"""Retrieval: get_working_context and direct search.

get_working_context runs, in order (docs/surfacing.md, "Ranking", says why):

1. validate (k in 1..100, strategy and mode names, legacy mode only with fast:recency, max_tokens large
   enough for the smallest anchor) and route the query (legacy mode always runs fast:recency);
2. candidates: the lexical top ``max(candidate_multiplier * k, k)`` (BM25, normalised by the best hit)
   fused (``lexical_weight``) with the ``semantic_pool`` nearest memories of the workspace's vector index,
   their cosines scaled from the pool's lowest to its best (``normalise_dense``). Legacy mode and
   factual:point-query use lexical relevance only. Entity and session memories are candidates only for
   a point query. Anchors and pins are loaded with the candidates;
3. context (router mode, and legacy mode in the calibrated profile; not for point queries): the
   ``context_seeds`` most relevant candidates pass ``context_damping`` of their relevance per hop to the
   turns before and after them and to what they link to (``surfacing.algorithms.context``);
4. deep:multi-hop only: spreading activation from the top ``graph_seeds`` search candidates (anchors and
   pins never seed a walk); a reached memory competes with ``damping ** hops * path strength *
   relevance(seed)`` or its own relevance when higher. PPR from the same seeds gives ``centrality`` (top
   ``ppr_top_k`` nodes, normalised by the maximum over the candidates). Context and spreading read one
   graph neighbourhood. A factual:point-query that names an entity with an entity memory adds that
   memory and the memories that mention it instead (``_add_entity_mentions``);
5. pins (router mode) and anchors (both modes) join as mandatory rows; the composite score of the
   profile ranks everything (with the subject a query names and, for a "when" question, the memories
   that say when, in the calibrated profile); ``k`` and ``max_tokens`` select; anchors returned get drift
   warnings;
6. ``record=True`` queues +0.02 for every returned memory and +0.01 for up to ``max_partners`` graph
   neighbours of returned memories that were not returned, and records one retrieval event per returned
   memory (result set = ``decision_id``). ``record=False`` is a dry read that changes nothing.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.utils import timezone

from core.errors import InvalidInput
from core.schemas import check_value
from graph.algorithms import (
    SPREAD_EDGE_CODES,
    edge_type_mask,
    edge_type_name,
    top_neighbours_many,
)
from graph.store import Subgraph, graph_store
from memories.algorithms.activation import BOOST_CO_RETRIEVED, BOOST_DIRECT, BOOST_SURFACED
from memories.algorithms.entities import count_entities
from memories.algorithms.fts import query_terms
from memories.embeddings import embedder_for, query_vector_soon
from memories.models import Memory, MemoryType, RetrievalSource, Workspace
from memories.selectors import lexical_search
from memories.signalbus import retrieval_signals
from memories.vectorindex import vector_search
from surfacing import inputs, selectors
from surfacing.algorithms.anchors import anchor_drift_warnings
from surfacing.algorithms.budget import BudgetResult, apply_budget, estimate_tokens_array, min_required_tokens
from surfacing.algorithms.composite import (
    CandidateSignals,
    ScoreBreakdown,
    ScoredCandidates,
    ScoreProfile,
    SurfacingMode,
    Weights,
    score_candidates,
)
from surfacing.algorithms.context import context_damping, propagate_relevance
from surfacing.algorithms.point_query import MENTION_EDGE_CODES, entity_keys, mention_relevance
from surfacing.algorithms.ppr import candidate_centrality, ppr_push, top_k
from surfacing.algorithms.relevance import fuse, normalise_bm25, normalise_dense, subject_match
from surfacing.algorithms.router import RouteDecision, Strategy, parse_strategy, route
from surfacing.algorithms.spreading import SpreadHit, spread
from surfacing.algorithms.temporal import asks_when, says_when
from surfacing.inputs import MAX_K
from surfacing.settings import (
    SurfacingSettings,
    effective_settings,
)

__all__ = [
    "MAX_K",
    "ContextItem",
    "DeclinedItem",
    "SearchHit",
    "SearchResult",
    "WorkingContext",
    "get_working_context",
    "search",
    "validate_session",
]

User = AbstractBaseUser | AnonymousUser
FloatArray = npt.NDArray[np.float64]

DECLINED_SHOWN = 20
SCAFFOLDING_TYPES = frozenset({MemoryType.ENTITY.value, MemoryType.SESSION.value})
"""Memory types that join others in the graph and carry no content of their own."""


# -- results ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextItem:
    id: uuid.UUID
    content: str
    memory_type: str
    score: float
    score_breakdown: ScoreBreakdown
    provenance: dict[str, Any]
    tokens: int


@dataclass(frozen=True)
class DeclinedItem:
    """A candidate ranked just below the returned ones, with the factor that held it down.

    ``factor``: "budget" (it ranked inside k but max_tokens had no room), "low_activation",
    "interference" (low activation, and its retention was lowered by interference with similar
    memories), "low_relevance" or "recency": the smallest multiplicative term of its composite.
    """

    id: uuid.UUID
    content: str
    memory_type: str
    score: float
    rank: int
    score_breakdown: ScoreBreakdown
    provenance: dict[str, Any]
    factor: str
    detail: str


@dataclass(frozen=True)
class WorkingContext:
    decision_id: uuid.UUID
    strategy_used: str
    requested_strategy: str | None
    confidence: float
    reasons: list[str]
    mode: str
    settings: SurfacingSettings
    items: list[ContextItem]
    tokens_used: int
    drift_warnings: list[dict[str, object]]
    recorded: bool
    declined: list[DeclinedItem] | None = None


@dataclass(frozen=True)
class SearchHit:
    memory: Memory
    score: float


@dataclass(frozen=True)
class SearchResult:
    result_set: uuid.UUID
    hits: list[SearchHit]


# -- validation -------------------------------------------------------------------------------------


def _validate_k(k: object) -> int:
    return int(check_value(inputs.K, k, "k"))


def _validate_query(query: object) -> str:
    return str(check_value(inputs.Query, query, "query"))


def validate_session(session_id: object) -> str:
    """A session id as pins and retrieval events store it ("" for none)."""
    return str(check_value(inputs.SessionId, session_id, "session_id"))


def _validate_strategy(strategy: object) -> Strategy | None:
    name = check_value(inputs.StrategyName, strategy, "strategy")
    return None if name is None else parse_strategy(name)


def _validate_mode(mode: object, default: str) -> SurfacingMode:
    name = check_value(inputs.ModeName, mode, "mode")
    return SurfacingMode(default if name is None else name)


def _validate_max_tokens(max_tokens: object) -> int | None:
    checked: int | None = check_value(inputs.MaxTokens, max_tokens, "max_tokens")
    return checked


def _decide(query: str, mode: SurfacingMode, explicit: Strategy | None) -> RouteDecision:
    if mode is SurfacingMode.LEGACY:
        if explicit is not None and explicit is not Strategy.FAST_RECENCY:
            raise InvalidInput(
                f"strategy: legacy mode always runs {Strategy.FAST_RECENCY.value}; {explicit.value!r} needs "
                "mode 'router'",
                code="strategy_requires_router_mode",
                field="strategy",
            )
        reasons = ("legacy_mode", "caller_explicit") if explicit is not None else ("legacy_mode",)
        return RouteDecision(explicit, Strategy.FAST_RECENCY, 1.0, reasons)
    return route(query, entity_count=count_entities(query), explicit=explicit)


# -- candidate assembly -----------------------------------------------------------------------------


@dataclass
class _Candidates:
    """The candidate table, one entry per memory, in the order entries were added.

    ``row`` indexes the loaded scoring data (search rows, then graph rows); ``walk`` and ``node`` name the
    graph walk (conversation context or spreading) and its hit that gave the memory its relevance (None
    and -1 otherwise). Provenance is built only for the rows shown.
    """

    ids: list[uuid.UUID]
    relevance: list[float]
    kind: list[str]
    node: list[int]
    walk: list[_GraphResult | None]
    row: list[int]
    at: dict[uuid.UUID, int]

    @classmethod
    def empty(cls) -> _Candidates:
        return cls([], [], [], [], [], [], {})

    def add(
        self, mid: uuid.UUID, relevance: float, kind: str, row: int, node: int = -1, walk: _GraphResult | None = None
    ) -> None:
        """Add an entry, or raise an existing one's relevance; a walk that raises it becomes its provenance."""
        at = self.at.get(mid)
        if at is None:
            self.at[mid] = len(self.ids)
            self.ids.append(mid)
            self.relevance.append(relevance)
            self.kind.append(kind)
            self.node.append(node)
            self.walk.append(walk)
            self.row.append(row)
        elif relevance > self.relevance[at]:
            self.relevance[at] = relevance
            if walk is not None:
                self.kind[at], self.node[at], self.walk[at] = kind, node, walk

    def force(self, mid: uuid.UUID, kind: str, relevance: float, row: int) -> None:
        """Add or relabel a mandatory entry (pin, anchor): its provenance is why it is there."""
        self.add(mid, relevance, kind, row)
        at = self.at[mid]
        self.kind[at], self.node[at], self.walk[at] = kind, -1, None

    def claim(self, mid: uuid.UUID, relevance: float, kind: str, row: int, node: int, walk: _GraphResult) -> None:
        """Add or relabel an entry the graph brought in (point queries): the graph path is its provenance
        even when the full-text search found it too."""
        self.add(mid, relevance, kind, row, node, walk)
        at = self.at[mid]
        self.kind[at], self.node[at], self.walk[at] = kind, node, walk

    def provenance(self, i: int) -> dict[str, Any]:
        mid = self.ids[i]
        node, walk = self.node[i], self.walk[i]
        if walk is None or walk.subgraph is None or node not in walk.hits:
            return {"kind": self.kind[i], "seed": None, "edge_type": None, "hops": 0, "path": [str(mid)]}
        hit = walk.hits[node]
        return {
            "kind": self.kind[i],
            "seed": str(walk.subgraph.ids[hit.seed]),
            "edge_type": hit.edge_type,
            "hops": hit.hops,
            "path": _spread_path(node, walk.hits, walk.subgraph),
        }


def _spread_path(node: int, hits: Mapping[int, SpreadHit], subgraph: Subgraph) -> list[str]:
    path = [node]
    # Every step leads to a node of strictly higher value, so the walk ends; the bound is a guard.
    while node in hits and len(path) <= len(hits):
        node = hits[node].via
        path.append(node)
    return [str(subgraph.ids[n]) for n in reversed(path)]


@dataclass(frozen=True)
class _Search:
    """Search candidates: ids best first, normalised lexical score, fused relevance."""

    ids: list[uuid.UUID]
    lexical: FloatArray
    relevance: FloatArray
    rows: selectors.CandidateRows


def _search_candidates(
    *,
    workspace: Workspace,
    query: str,
    limit: int,
    cfg: SurfacingSettings,
    semantic: bool,
    extra_ids: Sequence[uuid.UUID],
    anchors: bool,
    now: datetime,
    exclude_types: frozenset[str] = frozenset(),
) -> _Search:
    """Lexical hits and the nearest memories by embedding, fused; rows for ``extra_ids`` too.

    The nearest ``semantic_pool`` memories come from the workspace's vector index (every vector of the
    workspace's embedder, not a recent window); their cosines are scaled by ``normalise_dense`` and those
    reaching ``semantic_min_similarity`` join as candidates. A lexical hit outside the nearest ones has
    dense relevance 0 (below the floor by definition), so no stored vector is read here.
    """
    dense_wanted = semantic and cfg.semantic_pool > 0
    embedder = embedder_for(workspace)
    # The query vector is computed while the full-text search runs (memories.embeddings).
    query_vector = query_vector_soon(embedder, query) if dense_wanted else None
    # Statuses are filtered by the row query below (skipping the full-text join is 2-3x cheaper), so a
    # little more than `limit` is asked for to make up for archived hits.
    hits = lexical_search(workspace=workspace, query=query, limit=limit + limit // 4 + 5, statuses=None)
    dense_of: dict[uuid.UUID, float] = {}
    admitted: list[uuid.UUID] = []
    if query_vector is not None:
        nearest = vector_search(
            workspace=workspace, vector=query_vector()[0], model=embedder.name, limit=cfg.semantic_pool
        )
        scaled = normalise_dense([cosine for _, cosine in nearest])
        dense_of = {mid: float(d) for (mid, _), d in zip(nearest, scaled.tolist(), strict=True)}
        admitted = [mid for mid, cosine in nearest if cosine >= cfg.semantic_min_similarity]
    rows = selectors.candidate_rows(
        workspace=workspace,
        ids=[*(mid for mid, _ in hits), *admitted, *extra_ids],
        anchors=anchors,
        now=now,
    )
    types = rows.memory_type

    def wanted(mid: uuid.UUID) -> bool:
        at = rows.position.get(mid)
        return at is not None and types[at] not in exclude_types

    active_hits = [(mid, score) for mid, score in hits if wanted(mid)][:limit]
    raw = normalise_bm25([score for _, score in active_hits])
    lexical_of = dict(zip([mid for mid, _ in active_hits], raw.tolist(), strict=True))
    ids = [*lexical_of, *(mid for mid in admitted if mid not in lexical_of and wanted(mid))]
    lexical = np.fromiter((lexical_of.get(m, 0.0) for m in ids), dtype=np.float64, count=len(ids))
    dense = np.fromiter((dense_of.get(m, 0.0) for m in ids), dtype=np.float64, count=len(ids))
    relevance = fuse(lexical, dense, cfg.lexical_weight if semantic else 1.0)
    order = np.argsort(-relevance, kind="stable")
    return _Search(
        ids=[ids[i] for i in order.tolist()],
        lexical=lexical[order],
        relevance=relevance[order],
        rows=rows,
    )


@dataclass(frozen=True)
class _GraphResult:
    subgraph: Subgraph | None
    hits: dict[int, SpreadHit]
    seeds: list[int]
    centrality_scores: dict[int, float]
    reasons: list[str]


def _walk_graph(
    workspace: Workspace, context_seeds: list[uuid.UUID], spread_seeds: list[uuid.UUID], cfg: SurfacingSettings
) -> Subgraph | None:
    """One neighbourhood read for every walk of the request: conversation context and spreading."""
    budget = 0
    hops = 0
    if context_seeds:
        # A FOLLOWS chain has two neighbours per turn; the rest of the budget is for other edges of a
        # turn (its session, its entities) that a Bolt store reads as well.
        budget += len(context_seeds) * (1 + 2 * cfg.context_hops) * 4
        hops = cfg.context_hops
    if spread_seeds:
        depth = max(cfg.spread_depth, 1)
        budget += len(spread_seeds) * (1 + cfg.spread_fan_out) ** depth
        hops = max(hops, depth)
    seeds = list(dict.fromkeys([*spread_seeds, *context_seeds]))
    if not seeds:
        return None
    return graph_store().neighbourhood(workspace, seeds, hops=hops, max_nodes=budget)


def _graph_walk(*, subgraph: Subgraph | None, seed_ids: list[uuid.UUID], cfg: SurfacingSettings) -> _GraphResult:
    """Spreading activation and PPR from ``seed_ids`` over ``subgraph`` (deep:multi-hop)."""
    reasons: list[str] = []
    if subgraph is None or not seed_ids or not (cfg.spread_enabled or cfg.ppr_enabled):
        return _GraphResult(None, {}, [], {}, reasons)
    if subgraph.truncated:
        reasons.append("graph_neighbourhood_truncated")
    seeds = subgraph.nodes_of(seed_ids)
    if not seeds:
        reasons.append("graph:seeds_have_no_edges")
        return _GraphResult(subgraph, {}, [], {}, reasons)
    hits: dict[int, SpreadHit] = {}
    if cfg.spread_enabled and cfg.spread_depth > 0:
        hits = spread(
            subgraph.csr, seeds, depth=cfg.spread_depth, fan_out=cfg.spread_fan_out, damping=cfg.spread_damping
        )
        reasons.append(f"spread:{len(hits)}_reached_from_{len(seeds)}_seeds")
    scores: dict[int, float] = {}
    if cfg.ppr_enabled:
        result = ppr_push(
            subgraph.csr,
            seeds,
            alpha=cfg.ppr_alpha,
            epsilon=cfg.ppr_epsilon,
            max_pushes=cfg.ppr_max_pushes,
            undirected=cfg.ppr_undirected,
        )
        scores = dict(top_k(result.scores, cfg.ppr_top_k))
        if not result.converged:
            reasons.append(
                f"ppr_not_converged:max_pushes={cfg.ppr_max_pushes},residual_mass={result.residual_mass:.4f}"
                " (best estimate used)"
            )
    return _GraphResult(subgraph, hits, seeds, scores, reasons)


def _partners(subgraph: Subgraph | None, returned: Sequence[uuid.UUID], limit: int) -> list[uuid.UUID]:
    """Up to ``limit`` graph neighbours of the returned memories that were not returned, heaviest edges
    first, an equal share per returned memory (so one hub cannot take every partner slot).

    Every returned memory's neighbours come from one vectorised ``top_neighbours_many`` call; the share
    is then taken in the memories' order.
    """
    if subgraph is None or limit <= 0 or not returned:
        return []
    nodes = subgraph.nodes_of(returned)
    if not nodes:
        return []
    per_item = max(1, math.ceil(limit / len(nodes)))
    many = top_neighbours_many(subgraph.csr, nodes, per_item + len(nodes), edge_type_mask(SPREAD_EDGE_CODES))
    taken = set(nodes)
    partners: list[int] = []
    counts = [0] * len(nodes)
    for owner, v in zip(many.owner.tolist(), many.nodes.tolist(), strict=True):
        if counts[owner] == per_item or v in taken:
            continue
        taken.add(v)
        partners.append(v)
        counts[owner] += 1
        if len(partners) == limit:
            break
    return subgraph.ids_of(partners)


def _declined_factor(
    breakdown: ScoreBreakdown, weights: Weights, detail_row: selectors.MemoryDetail | None
) -> tuple[str, str]:
    """The term that held a candidate down most: the smallest factor of its composite, each prior as a
    share of the most it could give in the calibrated profile."""
    factors = breakdown["factors"]
    if factors["profile"] == ScoreProfile.CALIBRATED.value:
        terms = {
            "low_activation": factors["activation"] / (1.0 + weights.activation_weight),
            "low_relevance": breakdown["relevance"],
            "recency": factors["recency"] / (1.0 + weights.recency_weight + weights.freshness_max),
        }
    else:
        terms = {
            "low_activation": factors["activation"],
            "low_relevance": breakdown["relevance"],
            "recency": breakdown["recency"],
        }
    factor = min(terms, key=lambda name: terms[name])
    detail = f"{factor.replace('_', ' ')}: {terms[factor]:.4f}"
    if (
        factor == "low_activation"
        and detail_row is not None
        and detail_row.retention_score < 1.0
        and "interference" in detail_row.metadata
    ):
        return "interference", (
            f"activation {breakdown['activation']:.4f}; retention {detail_row.retention_score:.4f} lowered by "
            "interference with similar memories"
        )
    return factor, detail


def _declined_items(
    rows: Sequence[int],
    cands: _Candidates,
    scored: ScoredCandidates,
    order: npt.NDArray[np.int64],
    budget: BudgetResult,
    tokens: npt.NDArray[np.int64],
    details: Mapping[uuid.UUID, selectors.MemoryDetail],
    cfg: SurfacingSettings,
) -> list[DeclinedItem]:
    """The candidates ranked right after the returned ones, each with what held it down."""
    dropped = set(budget.dropped_for_budget.tolist())
    rank_of = {row: i + 1 for i, row in enumerate(order.tolist())}
    weights = cfg.weights()
    declined = []
    for r in rows:
        mid = cands.ids[r]
        breakdown = scored.breakdown(r)
        if r in dropped:
            factor, detail = "budget", f"ranked inside k but {int(tokens[r])} tokens did not fit max_tokens"
        else:
            factor, detail = _declined_factor(breakdown, weights, details.get(mid))
        declined.append(
            DeclinedItem(
                id=mid,
                content=details[mid].content if mid in details else "",
                memory_type=details[mid].memory_type if mid in details else "",
                score=float(scored.composite[r]),
                rank=rank_of[r],
                score_breakdown=breakdown,
                provenance=cands.provenance(r),
                factor=factor,
                detail=detail,
            )
        )
    return declined


# -- get_working_context ----------------------------------------------------------------------------


def get_working_context(
    workspace: Workspace,
    session_id: str | None,
    query: str,
    k: int = 20,
    max_tokens: int | None = None,
    strategy: str | None = None,
    mode: str | None = None,
    settings_override: Mapping[str, Any] | None = None,
    record: bool = True,
    explain: bool = False,
    now: datetime | None = None,
) -> WorkingContext:
    """The working context for ``query``: ranked memories with score breakdowns and provenance.

    See the module docstring for the steps. ``explain`` adds ``declined``: the next 20 candidates by
    score with the factor that held each down. ``now`` defaults to the current time.
    """
    k = _validate_k(k)
    query = _validate_query(query)
    session = validate_session(session_id)
    explicit = _validate_strategy(strategy)
    max_tokens = _validate_max_tokens(max_tokens)
    cfg = effective_settings(workspace.surfacing_settings, settings_override, embedder=embedder_for(workspace).name)
    surfacing_mode = _validate_mode(mode, cfg.mode)
    cfg = replace(cfg, mode=surfacing_mode.value)
    decision = _decide(query, surfacing_mode, explicit)
    router = surfacing_mode is SurfacingMode.ROUTER
    strategy_used = decision.strategy
    now = now or timezone.now()
    reasons = list(decision.reasons)

    pins = selectors.session_pins(workspace=workspace, session_id=session, now=now) if router else {}
    point_query = router and strategy_used is Strategy.FACTUAL_POINT_QUERY
    semantic = router and not point_query
    # Entity and session memories hold the graph together (a name, "Conversation on ..."): a point query
    # may ask for one, any other query wants what they join.
    scaffolding = frozenset() if point_query else SCAFFOLDING_TYPES
    found = _search_candidates(
        workspace=workspace,
        query=query,
        limit=max(cfg.candidate_multiplier * k, k),
        cfg=cfg,
        semantic=semantic,
        extra_ids=list(pins),
        anchors=True,
        now=now,
        exclude_types=scaffolding,
    )
    rows = found.rows
    anchor_ids = {mid for mid, kind in zip(rows.ids, rows.memory_type, strict=True) if kind == MemoryType.ANCHOR}
    if max_tokens is not None and anchor_ids:
        anchor_tokens = estimate_tokens_array([rows.chars[rows.position[a]] for a in anchor_ids])
        smallest = min_required_tokens(anchor_tokens, np.ones(len(anchor_tokens), dtype=np.bool_))
        if max_tokens < smallest:
            raise InvalidInput(
                f"max_tokens: {max_tokens} cannot hold even the smallest anchor ({smallest} tokens); "
                f"ask for at least {smallest}",
                code="max_tokens_below_anchor",
                field="max_tokens",
            )

    cands = _Candidates.empty()
    for mid, rel, lex in zip(found.ids, found.relevance.tolist(), found.lexical.tolist(), strict=True):
        cands.add(mid, rel, "lexical" if lex > 0.0 else "semantic", rows.position[mid])
    if not found.ids:
        reasons.append("no_search_hits")

    # Anchors and pins are forced in on their own; they never seed a walk (an anchor matches every
    # query a little, and spreading from it would flood the results with its neighbourhood).
    forced = anchor_ids | set(pins)
    deep = router and strategy_used is Strategy.DEEP_MULTI_HOP
    spread_seeds = [mid for mid in found.ids if mid not in forced][: cfg.graph_seeds] if deep else []
    # Point queries are lookups ("invoices", "list decisions"): the memories around a hit would be noise.
    # Legacy mode reads context too, except in the seed profile: that profile keeps the project's first
    # composite exactly as it was written, and that composite read no context.
    weights = cfg.weights()
    with_context = not point_query and (router or weights.profile is ScoreProfile.CALIBRATED)
    context_seeds = _context_seeds(cands, forced, cfg) if with_context else []
    subgraph = _walk_graph(workspace, context_seeds, spread_seeds, cfg)
    walks: list[tuple[_GraphResult, str, Callable[[SpreadHit], float]]] = []
    if context_seeds and subgraph is not None:
        context = _conversation_context(
            subgraph=subgraph, seed_ids=context_seeds, cands=cands, cfg=cfg, floor=_context_floor(found, k, cfg), k=k
        )
        reasons.extend(context.reasons)
        walks.append((context, "context", _hit_score))
    graph = _GraphResult(None, {}, [], {}, [])
    if deep:
        graph = _graph_walk(subgraph=subgraph, seed_ids=spread_seeds, cfg=cfg)
        reasons.extend(graph.reasons)
        walks.append((graph, "spread", _spread_relevance(graph, cands)))
    data = _add_walks(workspace, walks, cands, found.rows, now, scaffolding)
    if point_query:
        graph, data = _add_entity_mentions(
            workspace=workspace,
            query=query,
            found=found,
            cands=cands,
            rows=data,
            cfg=cfg,
            limit=max(cfg.candidate_multiplier * k, k),
            now=now,
        )
        reasons.extend(graph.reasons)
    for pid in pins:
        if pid in rows.position:
            cands.force(pid, "pinned", 0.0, rows.position[pid])
    for aid in anchor_ids:
        cands.force(aid, "anchor", 1.0, rows.position[aid])

    n = len(cands.ids)
    data_rows = np.asarray(cands.row, dtype=np.int64)
    activation = data.activation[data_rows]
    age_hours = data.age_hours[data_rows]
    chars = data.chars[data_rows]
    if graph.subgraph is not None and graph.centrality_scores:
        index = graph.subgraph.index
        nodes = np.fromiter((index.get(mid, -1) for mid in cands.ids), dtype=np.int64, count=n)
        centrality = candidate_centrality(graph.centrality_scores, nodes)
    else:
        centrality = np.zeros(n)
    is_anchor = np.fromiter((kind == "anchor" for kind in cands.kind), dtype=np.bool_, count=n)
    is_pinned = np.fromiter((kind == "pinned" for kind in cands.kind), dtype=np.bool_, count=n)
    pin_weight = np.zeros(n)
    for pid, weight in pins.items():
        at = cands.at.get(pid)
        if at is not None and cands.kind[at] == "pinned":
            pin_weight[at] = weight
    subjects = [data.subject[r] for r in data_rows.tolist()]
    time_cue = None
    # Content is read for the returned rows anyway; a "when" question reads it for every candidate, once.
    every_detail: dict[uuid.UUID, selectors.MemoryDetail] | None = None
    if weights.profile is ScoreProfile.CALIBRATED and weights.time_weight > 0.0 and asks_when(query):
        every_detail = selectors.memory_details(workspace=workspace, ids=cands.ids)
        time_cue = says_when([d.content if (d := every_detail.get(mid)) else "" for mid in cands.ids]).astype(
            np.float64
        )
        reasons.append(f"time_cue:{int(time_cue.sum())}_say_when")
    scored = score_candidates(
        CandidateSignals(
            subject_match=subject_match(query_terms(query), subjects),
            time_cue=time_cue,
            activation=activation,
            relevance=np.asarray(cands.relevance, dtype=np.float64),
            age_hours=age_hours,
            centrality=centrality,
            is_anchor=is_anchor,
            is_pinned=is_pinned,
            pin_weight=pin_weight,
        ),
        mode=surfacing_mode,
        weights=weights,
    )
    order = scored.order()
    tokens = estimate_tokens_array(chars)
    budget = apply_budget(order, tokens, scored.mandatory, k, max_tokens)
    if budget.dropped_for_budget.size:
        reasons.append(
            f"budget:max_tokens={max_tokens} left out {budget.dropped_for_budget.size} ranked item(s) "
            f"({int(tokens[budget.dropped_for_budget].sum())} tokens)"
        )
    selected = budget.selected.tolist()
    declined_rows: list[int] = []
    if explain:
        chosen = set(selected)
        declined_rows = [r for r in order.tolist() if r not in chosen][:DECLINED_SHOWN]
    details = every_detail or selectors.memory_details(
        workspace=workspace, ids=[cands.ids[r] for r in [*selected, *declined_rows]]
    )
    items = [
        ContextItem(
            id=cands.ids[r],
            content=details[cands.ids[r]].content if cands.ids[r] in details else "",
            memory_type=details[cands.ids[r]].memory_type if cands.ids[r] in details else "",
            score=float(scored.composite[r]),
            score_breakdown=scored.breakdown(r),
            provenance=cands.provenance(r),
            tokens=int(tokens[r]),
        )
        for r in selected
        if cands.ids[r] in details
    ]
    declined = _declined_items(declined_rows, cands, scored, order, budget, tokens, details, cfg) if explain else None

    returned_ids = [item.id for item in items]
    returned_anchors = [mid for mid in returned_ids if mid in anchor_ids]
    warnings = (
        anchor_drift_warnings(
            selectors.anchors_info(
                workspace=workspace, anchors=selectors.anchor_rows(workspace=workspace, ids=returned_anchors)
            ),
            now,
        )
        if returned_anchors
        else []
    )
    if record and returned_ids:
        subgraph = graph.subgraph or subgraph
        if subgraph is None and cfg.max_partners > 0:
            subgraph = graph_store().neighbourhood(workspace, returned_ids, hops=1, max_nodes=10 * cfg.max_partners)
        decision_id = retrieval_signals(
            workspace_id=workspace.pk,
            memory_ids=returned_ids,
            source=RetrievalSource.CONTEXT,
            delta=BOOST_SURFACED,
            query=query,
            session_id=session,
            partner_ids=_partners(subgraph, returned_ids, cfg.max_partners),
            partner_delta=BOOST_CO_RETRIEVED,
        )
    else:
        decision_id = uuid.uuid4()
    return WorkingContext(
        decision_id=decision_id,
        strategy_used=strategy_used.value,
        requested_strategy=decision.requested.value if decision.requested is not None else None,
        confidence=decision.confidence,
        reasons=reasons,
        mode=surfacing_mode.value,
        settings=cfg,
        items=items,
        tokens_used=sum(item.tokens for item in items),
        drift_warnings=[w.as_dict() for w in warnings],
        recorded=record and bool(returned_ids),
        declined=declined,
    )


def _hit_score(hit: SpreadHit) -> float:
    return hit.score


def _add_walks(
    workspace: Workspace,
    walks: Sequence[tuple[_GraphResult, str, Callable[[SpreadHit], float]]],
    cands: _Candidates,
    data: selectors.CandidateRows,
    now: datetime,
    exclude_types: frozenset[str],
) -> selectors.CandidateRows:
    """Add the memories the graph walks reached to ``cands``, each walk's hits with its ``kind`` and
    relevance rule (an entry already there keeps the higher relevance, and the walk that gave it is its
    provenance), memories of ``exclude_types`` aside; return ``data`` extended by the rows it did not hold
    yet, read in one query (memories archived since the snapshot drop out there)."""
    missing: list[tuple[_GraphResult, str, int, uuid.UUID, float]] = []
    for walk, kind, relevance_of in walks:
        if walk.subgraph is None or not walk.hits:
            continue
        nodes = list(walk.hits)
        for node, mid in zip(nodes, walk.subgraph.ids_of(nodes), strict=True):
            relevance = relevance_of(walk.hits[node])
            row = data.position.get(mid)
            if row is None:
                missing.append((walk, kind, node, mid, relevance))
            elif data.memory_type[row] not in exclude_types:
                cands.add(mid, relevance, kind, row, node, walk)
    if not missing:
        return data
    extra = selectors.candidate_rows(workspace=workspace, ids=[entry[3] for entry in missing], now=now)
    offset = len(data)
    for walk, kind, node, mid, relevance in missing:
        row = extra.position.get(mid)
        if row is not None and extra.memory_type[row] not in exclude_types:
            cands.add(mid, relevance, kind, offset + row, node, walk)
    return data.concat(extra)


def _spread_relevance(graph: _GraphResult, cands: _Candidates) -> Callable[[SpreadHit], float]:
    """Relevance of a memory reached by spreading: ``damping ** hops * strength * relevance(seed)``, where
    ``strength`` is the product of its path's edge weights (capped at 1; a CO_RETRIEVED edge weighs its
    count). A memory the search found keeps its own relevance when that is higher: a neighbour needs
    query relevance or a strong path."""
    seed_relevance: dict[int, float] = {}
    if graph.subgraph is not None:
        for node, mid in zip(graph.seeds, graph.subgraph.ids_of(graph.seeds), strict=True):
            if mid in cands.at:
                seed_relevance[node] = cands.relevance[cands.at[mid]]
    return lambda hit: hit.score * hit.strength * seed_relevance.get(hit.seed, 0.0)


def _context_seeds(cands: _Candidates, forced: set[uuid.UUID], cfg: SurfacingSettings) -> list[uuid.UUID]:
    """The ``context_seeds`` most relevant candidates (anchors and pins aside) that pass relevance on."""
    if cfg.context_hops <= 0 or cfg.context_seeds <= 0:
        return []
    order = np.argsort(-np.asarray(cands.relevance, dtype=np.float64), kind="stable").tolist()
    seeds = [cands.ids[i] for i in order if cands.relevance[i] > 0.0 and cands.ids[i] not in forced]
    return seeds[: cfg.context_seeds]


CONTEXT_HITS_PER_ITEM = 4
"""Memories a context walk may lift per item asked for (k): the best of them, by propagated relevance."""


def _context_floor(found: _Search, k: int, cfg: SurfacingSettings) -> float:
    """Propagated relevance under which a memory cannot enter the first ``k``: the k-th best search
    relevance divided by the most the calibrated factors can multiply (0 for the seed profile, whose
    additive terms have no such bound)."""
    weights = cfg.weights()
    if weights.profile is not ScoreProfile.CALIBRATED or len(found.relevance) < k:
        return 0.0
    most = (
        (1.0 + weights.subject_weight)
        * (1.0 + weights.time_weight)
        * (1.0 + weights.activation_weight)
        * (1.0 + weights.recency_weight + weights.freshness_max)
        * (1.0 + weights.centrality_weight)
    )
    return float(found.relevance[k - 1]) / most


def _conversation_context(
    *,
    subgraph: Subgraph,
    seed_ids: list[uuid.UUID],
    cands: _Candidates,
    cfg: SurfacingSettings,
    floor: float,
    k: int,
) -> _GraphResult:
    """Relevance from the best candidates to the memories next to them (see
    ``surfacing.algorithms.context``), offers under ``floor`` dropped and at most
    ``CONTEXT_HITS_PER_ITEM * k`` memories lifted. Reason ``context:<lifted>_from_<seeds>_seeds``."""
    present = [mid for mid in seed_ids if mid in subgraph.index]
    if not present:
        return _GraphResult(subgraph, {}, [], {}, [])
    seeds = subgraph.nodes_of(present)
    forward, backward = context_damping(cfg.context_damping, cfg.context_backlink)
    hits = propagate_relevance(
        subgraph.csr,
        seeds,
        [cands.relevance[cands.at[mid]] for mid in present],
        hops=cfg.context_hops,
        forward=forward,
        backward=backward,
        min_value=floor,
        max_hits=CONTEXT_HITS_PER_ITEM * k,
    )
    reasons = [f"context:{len(hits)}_from_{len(present)}_seeds"] if hits else []
    return _GraphResult(subgraph, hits, seeds, {}, reasons)


MAX_ENTITY_NEIGHBOURS = 50_000
"""Mentions of one entity read from the graph for a point query (heaviest edges first, ties by node)."""


def _add_entity_mentions(
    *,
    workspace: Workspace,
    query: str,
    found: _Search,
    cands: _Candidates,
    rows: selectors.CandidateRows,
    cfg: SurfacingSettings,
    limit: int,
    now: datetime,
) -> tuple[_GraphResult, selectors.CandidateRows]:
    """factual:point-query over the graph (see ``surfacing.algorithms.point_query``).

    When the query names an entity that has an entity memory, that memory (kind ``entity``) and the
    memories joined to it by MENTIONS / MENTIONED_IN edges (kind ``spread``, seeded at the entity, one
    hop) become candidates with ``mention_relevance``. Mentions that the full-text search also returned
    always compete; of the others, the ``limit`` most recently updated do (a popular entity has
    thousands of mentions, and recency is the strongest composite term a pure mention has). The lexical
    hits stay candidates too: only conversation ingestion writes MENTIONS edges, so a note written
    through the API that names the entity is found by its words. Without an entity memory the query
    stays lexical, as before, and no reason is added. Reasons: ``entity:<n>_named`` and
    ``entity_mentions:<candidates>_of_<mentions>``.
    """
    entity_ids = selectors.entity_memories(workspace=workspace, keys=entity_keys(query))
    if not entity_ids:
        return _GraphResult(None, {}, [], {}, []), rows
    subgraph = graph_store().neighbourhood(
        workspace, entity_ids, hops=1, max_nodes=len(entity_ids) * (1 + MAX_ENTITY_NEIGHBOURS)
    )
    seeds = subgraph.nodes_of(entity_ids)
    reasons = [f"entity:{len(entity_ids)}_named"]
    nodes, owners = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    codes: npt.NDArray[np.int8] = np.empty(0, dtype=np.int8)
    if seeds:
        nb = top_neighbours_many(subgraph.csr, seeds, MAX_ENTITY_NEIGHBOURS, edge_type_mask(MENTION_EDGE_CODES))
        fresh = ~np.isin(nb.nodes, seeds)
        # A memory naming two of the entities is reached from the first one (query order).
        _, first = np.unique(nb.nodes[fresh], return_index=True)
        first.sort()
        nodes, owners, codes = nb.nodes[fresh][first], nb.owner[fresh][first], nb.edge_types[fresh][first]
    nodes_total = int(nodes.shape[0])
    searched_nodes = set(subgraph.nodes_of(found.ids))
    is_searched = np.fromiter((n in searched_nodes for n in nodes.tolist()), dtype=np.bool_, count=nodes.shape[0])
    others = nodes[~is_searched]
    if others.shape[0] > limit:
        recent = selectors.most_recent(workspace=workspace, ids=subgraph.ids_of(others), limit=limit)
        others = np.asarray(subgraph.nodes_of(recent), dtype=np.int64)
    keep = is_searched | np.isin(nodes, others)
    nodes, owners, codes = nodes[keep], owners[keep], codes[keep]
    hits = {
        node: SpreadHit(cfg.spread_damping, 1, seeds[owner], edge_type_name(code), seeds[owner])
        for node, owner, code in zip(nodes.tolist(), owners.tolist(), codes.tolist(), strict=True)
    }
    mention_ids = subgraph.ids_of(nodes)
    missing = [mid for mid in [*entity_ids, *mention_ids] if mid not in rows.position]
    extra = selectors.candidate_rows(workspace=workspace, ids=missing, now=now)
    data = rows.concat(extra)
    offset = len(rows)

    def row_of(mid: uuid.UUID) -> int | None:
        at = rows.position.get(mid)
        if at is not None:
            return at
        at = extra.position.get(mid)
        return None if at is None else offset + at

    # Entity memories first, then their mentions in graph order; both through one relevance rule.
    lexical_of = dict(zip(found.ids, found.lexical.tolist(), strict=True))
    entries = [(mid, 0, "entity", -1) for mid in entity_ids]
    entries += [(mid, 1, "spread", node) for mid, node in zip(mention_ids, hits, strict=True)]
    relevance = mention_relevance(
        [lexical_of.get(mid, 0.0) for mid, _, _, _ in entries], [hops for _, hops, _, _ in entries], cfg.spread_damping
    )
    result = _GraphResult(subgraph, hits, seeds, {}, reasons)
    reached = 0
    for (mid, _, kind, node), rel in zip(entries, relevance.tolist(), strict=True):
        row = row_of(mid)
        if row is not None:  # archived or forgotten memories have no row
            cands.claim(mid, rel, kind, row, node, result)
            reached += kind == "spread"
    reasons.append(f"entity_mentions:{reached}_of_{nodes_total}")
    return result, data


# -- search -----------------------------------------------------------------------------------------


def search(workspace: Workspace, query: str, k: int = 10, *, record: bool = True, session_id: str = "") -> SearchResult:
    """Direct retrieval: the ``k`` memories most relevant to ``query`` (lexical fused with cosine).

    ``score`` is the fused relevance in [0, 1]. With ``record`` every returned memory is boosted
    +0.05 and gets a retrieval event with source "search".
    """
    k = _validate_k(k)
    query = _validate_query(query)
    cfg = effective_settings(workspace.surfacing_settings, embedder=embedder_for(workspace).name)
    now = timezone.now()
    found = _search_candidates(
        workspace=workspace,
        query=query,
        limit=max(cfg.candidate_multiplier * k, k),
        cfg=cfg,
        semantic=True,
        extra_ids=(),
        anchors=False,
        now=now,
    )
    top = found.ids[:k]
    memories = selectors.memories_in_workspace(workspace=workspace, ids=top)
    hits = [
        SearchHit(memories[m], float(s)) for m, s in zip(top, found.relevance.tolist(), strict=False) if m in memories
    ]
    if record and hits:
        result_set = retrieval_signals(
            workspace_id=workspace.pk,
            memory_ids=[h.memory.id for h in hits],
            source=RetrievalSource.SEARCH,
            delta=BOOST_DIRECT,
            query=query,
            session_id=session_id,
        )
    else:
        result_set = uuid.uuid4()
    return SearchResult(result_set=result_set, hits=hits)
