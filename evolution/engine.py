"""The self-learning engine over a workspace: sensor -> world model -> evo_devo -> covenant.

* **sensor**: task outcomes (``outcome_record``), stored as ``Outcome`` rows. Decisions on strategies are
  sensor entries too (task type ``engine_strategy_review``: approve = success, reject = fail).
* **corrections** (``correction_record``): a memory of type ``correction``, authored by a person (origin tier
  1), in the HOT tier. Its topic is its subject, so the write-time slot policy makes it win every conflict on
  that subject (it supersedes, or for replace-types replaces, every other active memory of the subject).
* **reflections** (``reflection_record``): CONTEXT / REFLECTION / LESSON, a memory of type ``reflection``.
  Their lessons count for evo_devo like outcome lessons, except the dream's own log (topic ``dream``).
* **world model** (``world_model_for``): success counts and rates per (task type, approach) and per task type.
* **evo_devo + covenant** (``engine_evolve``): a lesson seen 3 times within 7 days becomes a strategy
  proposal (weight 0.5, lowered by 0.7 for every similar strategy a person rejected before), once per lesson
  (``Proposal.dedupe_key``). The covenant vetoes proposals touching secrets, self-loops and weights below
  0.3; a vetoed proposal is stored with status ``vetoed`` and its reasons (rationale and ``payload.vetoes``).
  Conflicts with existing rules on the same subject follow the precedence user correction > manual rule >
  engine strategy (then project > domain > global, then newer): a strategy that loses is vetoed with the
  reason, an ambiguous one gets a ``conflict`` proposal asking the person which rule applies.
* **decisions**: approving a strategy proposal (``strategy_apply``, the applier of kind ``strategy``) creates a
  HOT rule (memory type ``strategy``, tier hot, origin ``engine:strategy``; ``user:<name>`` when the reviewer
  rewrote it) and records a success; rejecting (``strategy_rejected``) records a failure and multiplies the
  weight of every similar (word Jaccard >= 0.5) pending or approved strategy by 0.7; a pending one that falls
  below 0.3 is vetoed.

Parsing and validating the inputs is ``evolution.engine_inputs``; the reads (sensor, world model, reflection
lessons, rules) are ``evolution.engine_selectors``. Importing this module registers the applier and the
rejecter of strategy proposals (``evolution.apps`` does it when the app is ready).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from evolution import proposals
from evolution.algorithms import engine as algo
from evolution.engine_inputs import (
    DEFAULT_APPROACH,
    DREAM_TOPIC,
    MAX_TOPIC,
    STRATEGY_EDITABLE,
    CorrectionInput,
    OutcomeInput,
    ReflectionInput,
    correction_memory_input,
    one_line,
    reflection_memory_input,
    subject_key,
)
from evolution.engine_selectors import engine_outcomes, outcomes_in_order, reflection_lessons
from evolution.models import Outcome, OutcomeResult, Proposal, ProposalKind, ProposalStatus
from history import audit
from history.models import Action, EvolutionRecord
from memories import live
from memories.inputs import MAX_CONTENT_CHARS, MemoryInput
from memories.models import Memory, MemoryType, Status, Tier, Workspace
from memories.services import default_origin, memories_create

User = AbstractBaseUser | AnonymousUser

ENGINE_EVOLVER: Final = "Engine"
# Origin of a rule the engine proposed and a person approved as written (origin tier 3: engine).
ENGINE_ORIGIN: Final = "engine:strategy"
DREAM_ORIGIN: Final = "engine:dream"
SOURCE_ENGINE: Final = "engine"


# ------------------------------------------------------------------------------------------------ results


@dataclass(frozen=True)
class EvolveResult:
    """What one ``engine_evolve`` made: pending proposals, vetoed ones, and questions for the person."""

    created: list[Proposal] = field(default_factory=list)
    vetoed: list[Proposal] = field(default_factory=list)
    questions: list[Proposal] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.created or self.vetoed or self.questions)


@dataclass(frozen=True)
class OutcomeRecorded:
    outcome: Outcome
    evolved: EvolveResult | None


@dataclass(frozen=True)
class ReflectionRecorded:
    memory: Memory
    evolved: EvolveResult | None
    # Why nothing was written, when the memory is one the workspace already had: "same_reflection" (the
    # same three lines are stored and active) or "hot_rule" (a HOT rule already holds the lesson).
    deduplicated: str = ""


# --------------------------------------------------------------------------------------------- recording


@transaction.atomic
def outcome_record(
    *, workspace: Workspace, item: OutcomeInput, source: str = "api", now: datetime | None = None
) -> OutcomeRecorded:
    """Store one sensor reading; an outcome with a lesson runs the engine, so a lesson seen for the third time
    within 7 days is proposed as a strategy right away (``evolved``; None when no lesson)."""
    now = now or timezone.now()
    outcome = Outcome.objects.create(
        workspace=workspace,
        task_type=item.task_type,
        approach=item.approach or DEFAULT_APPROACH,
        result=item.result,
        lesson=item.lesson,
        issue=item.issue,
        solution=item.solution,
        source=source[:32],
        created_at=item.created_at or now,
    )
    evolved = _evolve_for_lesson(workspace, item.lesson, now)
    return OutcomeRecorded(outcome=outcome, evolved=evolved)


@transaction.atomic
def correction_record(
    *,
    workspace: Workspace,
    actor: User | None,
    item: CorrectionInput,
    channel: str = "api",
    origin: str = "",
) -> Memory:
    """Write a user correction: memory type correction, HOT, origin tier 1, content = what to do instead.

    The fields are kept in ``metadata["correction"]``; its topic is its subject, so the write-time policy
    supersedes (or, for replace-types such as preferences, overwrites) every active memory of that subject.
    """
    final_origin = origin or default_origin(actor, channel)
    (memory,) = memories_create(
        workspace=workspace,
        actor=actor,
        channel=channel,
        items=[correction_memory_input(item, origin=final_origin)],
    )
    return memory


@transaction.atomic
def reflection_record(
    *,
    workspace: Workspace,
    actor: User | None,
    item: ReflectionInput,
    channel: str = "api",
    origin: str = "",
    evolve: bool = True,
    now: datetime | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> ReflectionRecorded:
    """Write a reflection (memory type reflection; content in the three lines CONTEXT / REFLECTION / LESSON,
    the fields in ``metadata["reflection"]``). Its lesson runs the engine like an outcome's unless ``evolve``
    is False or it is the dream's own log."""
    now = now or timezone.now()
    own_log = subject_key(item.topic or "") == DREAM_TOPIC
    if not own_log:
        known = _known_reflection(workspace, item, now)
        if known is not None:
            return ReflectionRecorded(memory=known[0], evolved=None, deduplicated=known[1])
    (memory,) = memories_create(
        workspace=workspace,
        actor=actor,
        channel=channel,
        items=[reflection_memory_input(item, origin=origin, metadata=metadata)],
    )
    counts = evolve and not own_log
    evolved = _evolve_for_lesson(workspace, item.lesson, now) if counts else None
    return ReflectionRecorded(memory=memory, evolved=evolved)


# A reflection repeated within this window (or with the same created_at) is a retry, not a recurrence.
REFLECTION_RETRY_WINDOW = timedelta(minutes=10)


def _known_reflection(workspace: Workspace, item: ReflectionInput, now: datetime) -> tuple[Memory, str] | None:
    """The memory that already holds ``item``: a HOT rule of its lesson, or the same reflection (context,
    reflection, lesson and topic compared as ``lesson_key`` compares lessons) posted again as a retry: with the
    same ``created_at``, or within ``REFLECTION_RETRY_WINDOW``. The same lesson learned on another occasion
    is stored: recurrences are what the engine counts before it proposes a rule."""
    rule = (
        Memory.objects.filter(
            workspace=workspace,
            memory_type=MemoryType.STRATEGY,
            tier=Tier.HOT,
            status=Status.ACTIVE,
            metadata__strategy__key=algo.strategy_key(item.lesson),
        )
        .order_by("-created_at")
        .first()
    )
    if rule is not None:
        return rule, "hot_rule"
    wanted = tuple(algo.lesson_key(t or "") for t in (item.context, item.reflection, item.lesson, item.topic))
    same_lesson = Memory.objects.filter(
        workspace=workspace,
        memory_type=MemoryType.REFLECTION,
        status=Status.ACTIVE,
        metadata__reflection__lesson=item.lesson,
    )
    if item.created_at is not None:
        same_lesson = same_lesson.filter(created_at=item.created_at)
    else:
        same_lesson = same_lesson.filter(created_at__gte=now - REFLECTION_RETRY_WINDOW)
    for memory in same_lesson.order_by("created_at")[:50]:
        fields = (memory.metadata or {}).get("reflection") or {}
        keys = ("context", "reflection", "lesson", "topic")
        if tuple(algo.lesson_key(str(fields.get(k) or "")) for k in keys) == wanted:
            return memory, "same_reflection"
    return None


def _evolve_for_lesson(workspace: Workspace, lesson: str, now: datetime) -> EvolveResult | None:
    """Run the engine when ``lesson`` is one it has not proposed yet (one indexed lookup otherwise)."""
    if not algo.lesson_key(lesson):
        return None
    key = algo.strategy_key(lesson)
    if Proposal.objects.filter(workspace=workspace, dedupe_key=key).exists():
        return None
    return engine_evolve(workspace=workspace, now=now)


# ------------------------------------------------------------------------------------------------ evolve


def strategy_payload(proposal: Proposal) -> dict[str, Any]:
    return dict(proposal.payload) if isinstance(proposal.payload, dict) else {}


def _weight_of(payload: Mapping[str, Any]) -> float:
    w = payload.get("weight", algo.INITIAL_STRATEGY_WEIGHT)
    return float(w) if isinstance(w, int | float) and not isinstance(w, bool) else algo.INITIAL_STRATEGY_WEIGHT


def _rule_of(proposal: Proposal) -> str:
    rule = strategy_payload(proposal).get("rule")
    return rule if isinstance(rule, str) else ""


def _initial_weight(rule: str, rejected_rules: Sequence[str]) -> float:
    """0.5, times 0.7 for every rejected strategy similar to ``rule`` (engine.adjust_weights_after_rejection)."""
    weight = algo.INITIAL_STRATEGY_WEIGHT
    for text in rejected_rules:
        weight = algo.adjust_weights_after_rejection([("new", rule, weight)], text)["new"]
    return weight


def _claim_origin(memory: Memory) -> algo.RuleOrigin:
    if memory.memory_type == MemoryType.CORRECTION:
        return "correction"
    return "engine" if memory.origin_tier == 3 else "manual"


def _claim_scope(memory: Memory) -> algo.RuleScope:
    memdir = memory.metadata.get("memdir") if isinstance(memory.metadata, dict) else None
    area = memdir.get("area") if isinstance(memdir, dict) else None
    return "project" if area == "project" else "domain" if area == "domain" else "global"


_ORIGIN_WORDS: Final = {"correction": "user correction", "manual": "manual rule", "engine": "engine rule"}


@transaction.atomic
def engine_evolve(*, workspace: Workspace, now: datetime | None = None) -> EvolveResult:
    """Propose a strategy for every lesson seen 3 times within 7 days that has none yet; idempotent.

    Each proposal passes the covenant (``engine.covenant_check``) and the precedence check against the
    active corrections and rules of its subject (its task type). Pending proposals, vetoes (status vetoed,
    reasons in rationale and ``payload.vetoes``) and conflict questions are returned.
    """
    now = now or timezone.now()
    # Serialise engine runs of one workspace so two concurrent calls cannot both create a proposal.
    Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
    rows = outcomes_in_order(workspace=workspace)
    outcomes = engine_outcomes(rows)
    lessons, reflection_ids = reflection_lessons(workspace=workspace)
    strategies = list(Proposal.objects.filter(workspace=workspace, kind=ProposalKind.STRATEGY))
    existing_keys = {p.dedupe_key for p in strategies if p.dedupe_key}
    known_rules = {
        p.dedupe_key
        for p in strategies
        if p.dedupe_key and p.status in (ProposalStatus.APPROVED, ProposalStatus.MODIFIED)
    }
    rejected = [_rule_of(p) for p in strategies if p.status == ProposalStatus.REJECTED and _rule_of(p)]
    found = algo.propose_strategies(outcomes, lessons, now, existing_keys=existing_keys)
    if not found:
        return EvolveResult()
    model = algo.world_model(outcomes)
    result = EvolveResult()
    for candidate in found:
        proposal = dataclasses.replace(candidate, weight=_initial_weight(candidate.rule_text, rejected))
        verdict = algo.covenant_check(proposal, known_rule_keys=known_rules)
        reasons = list(verdict.reasons)
        winners, supersedes, ambiguous = _precedence(workspace, proposal, now)
        reasons += [
            f"Precedence: the {_ORIGIN_WORDS[_claim_origin(m)]} {m.id} on {m.subject!r} wins over an engine strategy."
            for m in winners
        ]
        payload: dict[str, Any] = {
            "key": proposal.key,
            "rule": proposal.rule_text,
            "weight": proposal.weight,
            "task_type": proposal.task_type,
            "evidence": list(proposal.evidence),
        }
        if supersedes:
            payload["supersedes"] = [str(m.id) for m in supersedes]
        rationale = _rationale(proposal, model, supersedes)
        sources = [reflection_ids[r] for r in proposal.evidence if r in reflection_ids]
        created, _ = proposals.proposal_create(
            workspace=workspace,
            kind=ProposalKind.STRATEGY,
            title=proposal.title,
            payload=payload,
            rationale=rationale,
            source_ids=sources,
            dedupe_key=proposal.key,
            created_by="engine",
            now=now,
        )
        if reasons:
            created.status = ProposalStatus.VETOED
            created.payload = {**payload, "vetoes": reasons}
            created.rationale = f"{rationale}\nVetoed: {' '.join(reasons)}"
            created.decided_at = now
            created.decision_reason = " ".join(reasons)
            created.save(update_fields=["status", "payload", "rationale", "decided_at", "decision_reason"])
            result.vetoed.append(created)
            continue
        result.created.append(created)
        if ambiguous:
            result.questions.append(_ask(workspace, created, ambiguous, now))
    return result


def _rationale(proposal: algo.StrategyProposal, model: algo.WorldModel, supersedes: Sequence[Memory]) -> str:
    lines = [
        f"The lesson {proposal.rule_text!r} was seen {len(proposal.evidence)} times within "
        f"{algo.LESSON_WINDOW_DAYS} days ({', '.join(proposal.evidence)}).",
        f"Proposed with weight {proposal.weight:g}.",
    ]
    if proposal.task_type is not None and proposal.task_type in model.by_task_type:
        stats = model.by_task_type[proposal.task_type]
        best = algo.best_approach(model, proposal.task_type)
        lines.append(
            f"World model: {proposal.task_type} succeeded {stats.successes} of {stats.total} times "
            f"(rate {stats.rate:.2f}); best approach {best!r}."
        )
    if supersedes:
        lines.append(f"Approving it supersedes the older engine rule(s) {', '.join(str(m.id) for m in supersedes)}.")
    return "\n".join(lines)


def _subject_rules(workspace: Workspace, subject: str) -> list[Memory]:
    key = subject_key(subject)
    if not key:
        return []
    rows = Memory.objects.filter(
        workspace=workspace,
        status=Status.ACTIVE,
        memory_type__in=[MemoryType.CORRECTION, MemoryType.STRATEGY],
        subject__iexact=one_line(subject),
    )
    return [m for m in rows if subject_key(m.subject) == key]


def _precedence(
    workspace: Workspace, proposal: algo.StrategyProposal, now: datetime
) -> tuple[list[Memory], list[Memory], list[Memory]]:
    """(rules that win over the proposal, older engine rules it would supersede, rules it ties with)."""
    if not proposal.task_type:
        return [], [], []
    new = algo.RuleClaim(key=proposal.key, origin="engine", scope="global", at=now)
    rule = algo.lesson_key(proposal.rule_text)
    winners: list[Memory] = []
    losers: list[Memory] = []
    ties: list[Memory] = []
    for memory in _subject_rules(workspace, proposal.task_type):
        if algo.lesson_key(memory.content) == rule:
            continue
        existing = algo.RuleClaim(
            key=str(memory.id), origin=_claim_origin(memory), scope=_claim_scope(memory), at=memory.created_at
        )
        winner = algo.precedence(existing, new)
        if winner is None:
            ties.append(memory)
        elif winner is existing:
            winners.append(memory)
        else:
            losers.append(memory)
    return winners, losers, ties


def _ask(workspace: Workspace, strategy: Proposal, ties: Sequence[Memory], now: datetime) -> Proposal:
    """A conflict proposal asking which rule applies when precedence cannot decide."""
    subject = ties[0].subject
    question, _ = proposals.proposal_create(
        workspace=workspace,
        kind=ProposalKind.CONFLICT,
        title=f"Which rule applies to {subject!r}?",
        payload={
            "subject": subject,
            "strategy_proposal": strategy.pk,
            "options": [{"memory_id": str(m.id), "content": m.content, "origin": _claim_origin(m)} for m in ties]
            + [{"proposal_id": strategy.pk, "content": _rule_of(strategy), "origin": "engine"}],
        },
        rationale=(
            "Precedence cannot decide: the rules have the same origin, scope and time. "
            "Approve the strategy proposal to prefer it, or reject it to keep the existing rule."
        ),
        source_ids=[m.id for m in ties],
        dedupe_key=f"conflict:{strategy.dedupe_key}",
        created_by="engine",
        now=now,
    )
    return question


# --------------------------------------------------------------------------------------------- decisions


def _strategy_of(proposal: Proposal) -> algo.StrategyProposal:
    payload = strategy_payload(proposal)
    rule = payload.get("rule")
    if not isinstance(rule, str) or not one_line(rule):
        raise InvalidInput("payload.rule: expected the rule text (a non-blank string)", field="payload.rule")
    if len(rule) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"payload.rule: longer than {MAX_CONTENT_CHARS} characters", field="payload.rule")
    task_type = payload.get("task_type")
    if task_type is not None and (not isinstance(task_type, str) or len(task_type) > MAX_TOPIC):
        raise InvalidInput("payload.task_type: expected a string of at most 200 characters", field="payload.task_type")
    weight = payload.get("weight", algo.INITIAL_STRATEGY_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0.0 <= float(weight) <= 1.0:
        raise InvalidInput("payload.weight: expected a number between 0 and 1", field="payload.weight")
    evidence = payload.get("evidence") or []
    if not isinstance(evidence, list) or not all(isinstance(e, str) for e in evidence):
        raise InvalidInput("payload.evidence: expected a list of strings", field="payload.evidence")
    key = proposal.dedupe_key or algo.strategy_key(rule)
    title = payload.get("title") if isinstance(payload.get("title"), str) else proposal.title
    return algo.StrategyProposal(
        key=key,
        title=one_line(str(title)) or one_line(rule),
        rule_text=one_line(rule),
        weight=float(weight),
        evidence=tuple(evidence),
        task_type=one_line(task_type) if isinstance(task_type, str) and one_line(task_type) else None,
    )


def _record_decision(
    workspace: Workspace, strategy: algo.StrategyProposal, decision: algo.Decision, reason: str, now: datetime
) -> Outcome:
    entry = algo.record_decision(strategy, decision, now, reason=reason)
    return Outcome.objects.create(
        workspace=workspace,
        task_type=entry.task_type,
        approach=entry.approach[:200],
        result=OutcomeResult.SUCCESS if entry.result == "success" else OutcomeResult.FAIL,
        lesson="",
        issue=entry.issue,
        solution=entry.solution,
        source=SOURCE_ENGINE,
        created_at=now,
    )


def _approved_keys(workspace: Workspace, *, exclude: int) -> set[str]:
    return set(
        Proposal.objects.filter(
            workspace=workspace,
            kind=ProposalKind.STRATEGY,
            status__in=[ProposalStatus.APPROVED, ProposalStatus.MODIFIED],
        )
        .exclude(pk=exclude)
        .exclude(dedupe_key="")
        .values_list("dedupe_key", flat=True)
    )


def strategy_apply(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> EvolutionRecord:
    """Approve a strategy: a HOT rule memory, the superseded older engine rules, a success in the sensor.

    The covenant runs again on the approved text (a reviewer's rewrite included); a veto is an InvalidInput
    naming payload.rule and nothing is written. A rewritten rule is the reviewer's (origin user:<name>, a
    manual rule); one approved as proposed stays the engine's (origin engine:strategy).
    """
    strategy = _strategy_of(proposal)
    verdict = algo.covenant_check(strategy, known_rule_keys=_approved_keys(workspace, exclude=proposal.pk))
    if not verdict.allowed:
        raise InvalidInput(
            f"payload.rule: the covenant refuses this strategy: {' '.join(verdict.reasons)}", field="payload.rule"
        )
    modified = proposals.reviewer_changed(strategy_payload(proposal), STRATEGY_EDITABLE)
    origin = default_origin(actor, "user") if modified else ENGINE_ORIGIN
    (rule,) = memories_create(
        workspace=workspace,
        actor=actor,
        items=[
            MemoryInput(
                content=strategy.rule_text,
                memory_type=MemoryType.STRATEGY,
                subject=strategy.task_type or "",
                origin=origin,
                tier=Tier.HOT,
                created_at=now,
                metadata={
                    "strategy": {
                        "key": strategy.key,
                        "proposal_id": proposal.pk,
                        "task_type": strategy.task_type,
                        "weight": strategy.weight,
                    }
                },
            )
        ],
    )
    superseded = _supersede(workspace, proposal, rule, now)
    before = {str(m.id): {"status": Status.ACTIVE, "superseded_by": None} for m in superseded}
    after: dict[str, Any] = {
        str(m.id): {"status": Status.SUPERSEDED, "superseded_by": str(rule.id)} for m in superseded
    }
    after[audit.CREATED_MEMORIES] = [str(rule.id)]
    after["contents"] = {str(rule.id): rule.content}
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=ENGINE_EVOLVER,
            action=Action.PROMOTE,
            reason=f"{audit.approval('strategy', proposal.pk, actor)}: HOT rule "
            f"{rule.id} created" + (f", superseding {len(superseded)} older engine rule(s)" if superseded else ""),
            input_ids=[m.id for m in superseded],
            output_ids=[rule.id],
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )
    _record_decision(workspace, strategy, "approve", proposal.decision_reason, now)
    return record


def _supersede(workspace: Workspace, proposal: Proposal, rule: Memory, now: datetime) -> list[Memory]:
    ids = strategy_payload(proposal).get("supersedes") or []
    if not isinstance(ids, list) or not ids:
        return []
    valid: list[uuid.UUID] = []
    for raw in ids:
        try:
            valid.append(uuid.UUID(str(raw)))
        except ValueError:
            continue
    # Only engine rules still active are superseded: a person may have edited or archived one since.
    rows = list(
        Memory.objects.select_for_update().filter(
            workspace=workspace, id__in=valid, status=Status.ACTIVE, memory_type=MemoryType.STRATEGY, origin_tier=3
        )
    )
    for memory in rows:
        memory.status = Status.SUPERSEDED
        memory.superseded_by = rule.id
        memory.updated_at = now
    Memory.objects.bulk_update(rows, ["status", "superseded_by", "updated_at"])
    return rows


def strategy_rejected(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> None:
    """After a person rejected a strategy: a failure in the sensor, and every similar pending or approved
    strategy (this one included) weighs 0.7 times as much; a pending one now under 0.3 is vetoed."""
    try:
        strategy = _strategy_of(proposal)
    except InvalidInput:
        return
    _record_decision(workspace, strategy, "reject", proposal.decision_reason, now)
    lower_similar_weights(workspace=workspace, rejected=proposal, rule_text=strategy.rule_text, now=now)


def lower_similar_weights(*, workspace: Workspace, rejected: Proposal, rule_text: str, now: datetime) -> list[Proposal]:
    """Apply ``engine.adjust_weights_after_rejection`` to the workspace's live strategies; returns the changed
    proposals (each with ``payload.weight`` and a ``payload.weight_history`` entry)."""
    live_statuses = [ProposalStatus.PENDING, ProposalStatus.APPROVED, ProposalStatus.MODIFIED]
    rows = list(
        Proposal.objects.select_for_update().filter(
            workspace=workspace, kind=ProposalKind.STRATEGY, status__in=live_statuses
        )
    )
    rows.append(rejected)
    by_key = {f"p{p.pk}": p for p in rows}
    weights = algo.adjust_weights_after_rejection(
        [(k, _rule_of(p), _weight_of(strategy_payload(p))) for k, p in by_key.items()], rule_text
    )
    changed: list[Proposal] = []
    vetoed: list[Proposal] = []
    for key, proposal in by_key.items():
        payload = strategy_payload(proposal)
        old = _weight_of(payload)
        new = weights[key]
        if new == old:
            continue
        raw_history = payload.get("weight_history")
        history: list[Any] = raw_history if isinstance(raw_history, list) else []
        payload["weight"] = new
        payload["weight_history"] = [
            *history,
            {"at": now.isoformat(), "from": old, "to": new, "reason": f"similar to rejected proposal {rejected.pk}"},
        ]
        proposal.payload = payload
        if proposal.status == ProposalStatus.PENDING and new < algo.COVENANT_MIN_WEIGHT:
            reason = f"Weight {new:.2f} is below the covenant minimum {algo.COVENANT_MIN_WEIGHT:.2f}."
            proposal.status = ProposalStatus.VETOED
            proposal.payload = {**payload, "vetoes": [reason]}
            proposal.decided_at = now
            proposal.decision_reason = reason
            vetoed.append(proposal)
        changed.append(proposal)
    if changed:
        Proposal.objects.bulk_update(changed, ["payload", "status", "decided_at", "decision_reason"])
    for proposal in vetoed:
        _announce(workspace, proposal)
    return changed


def _announce(workspace: Workspace, proposal: Proposal) -> None:
    event = {"proposal_id": proposal.pk, "kind": proposal.kind, "status": proposal.status}
    live.workspace_event_on_commit(workspace.pk, proposals.DECIDED_EVENT, event)


proposals.register_proposal_applier(ProposalKind.STRATEGY, strategy_apply)
proposals.register_proposal_rejecter(ProposalKind.STRATEGY, strategy_rejected)
