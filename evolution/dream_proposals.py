"""What the dream proposes for a person to decide: reflections it noticed and lessons to promote to HOT.

* **reflection** proposals: the patterns of the week in evolution.algorithms.reflection (a task type whose
  success rate dropped, an issue that keeps failing tasks), in the three lines CONTEXT / REFLECTION / LESSON
  every reflection has, written by the LLM from the detector's draft when one is configured (payload
  ``written_by``; ``llm_error`` and the draft when it failed). A pattern is proposed at most once per 7 days
  (payload ``pattern``, the detector's key). Approving
  (``reflection_apply``) writes the reflection memory through ``engine.reflection_record``, as
  POST /reflections/ does, with topic ``dream`` (its lesson rests on outcomes the engine already counts);
  the reviewer may rewrite the three lines (then the origin is theirs).
* **promotion** proposals: a lesson in 3 reflections within 7 days (same ``engine.lesson_key``; the engine's
  sliding window, ``engine.propose_strategies``): the rule "the same pattern 3 times in 7 days -> HOT" that
  the tiers apply to use.
  The engine already turns such lessons into *strategy* proposals, except for the dream's own reflections,
  which it never counts; a lesson that has a strategy proposal, or a promotion, or an active HOT rule with the
  same text is not proposed again, and the covenant's vetoes apply. Approving (``promotion_apply``) raises
  an active WARM/COLD rule with the same text to HOT, or creates the HOT rule as an approved engine strategy
  is stored (memory type strategy, origin ``engine:strategy``, or the reviewer's when they rewrote it), with
  a DERIVED_FROM edge to each source reflection.

Each applied change is one EvolutionRecord (evolver Dream) that the record revert service undoes exactly.
Rejecting needs nothing beyond the stored decision and reason: the dedupe key keeps a rejected pattern or
lesson from coming back.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser

from core.errors import Conflict, InvalidInput
from evolution import engine, engine_inputs, engine_selectors
from evolution.algorithms import engine as algo
from evolution.algorithms.reflection import week_patterns
from evolution.derived import created_after, derived_memory, insert_derived
from evolution.llm import LLMClient, written_reflection
from evolution.models import Proposal, ProposalKind, ProposalStatus
from evolution.proposals import ProposalDraft, proposals_create, register_proposal_applier, reviewer_changed
from history import audit
from history.models import Action, EvolutionRecord
from memories.inputs import MAX_CONTENT_CHARS, origin_tier
from memories.models import Edge, EdgeType, Memory, MemoryType, Status, Tier, Workspace
from memories.services import default_origin

User = AbstractBaseUser | AnonymousUser

DREAM_EVOLVER: Final = "Dream"
REFLECTION_EDITABLE: Final = frozenset({"context", "reflection", "lesson"})
PROMOTION_EDITABLE: Final = frozenset({"rule", "task_type"})
RULE_TYPES: Final = (MemoryType.STRATEGY, MemoryType.CORRECTION)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _summary(p: Proposal | ProposalDraft, pk: int | None) -> dict[str, Any]:
    return {"id": pk, "kind": p.kind, "title": p.title}


# -- reflections ----------------------------------------------------------------------------------


def reflection_drafts(
    *, workspace: Workspace, now: datetime, client: LLMClient | None = None, client_error: str = ""
) -> list[ProposalDraft]:
    """The week's patterns not proposed in the 7 days up to `now`, as reflection proposal drafts.

    `client` writes the REFLECTION and LESSON lines from the detector's draft when an LLM is configured
    (``llm.written_reflection``; the payload's ``written_by``, and ``llm_error`` when it failed and the draft
    was kept); the payload's ``pattern`` stays the detector's key, so the model's wording never re-proposes."""
    outcomes = engine_selectors.engine_outcomes(engine_selectors.outcomes_in_order(workspace=workspace))
    since = now - timedelta(days=algo.LESSON_WINDOW_DAYS)
    recent = Proposal.objects.filter(
        workspace=workspace, kind=ProposalKind.REFLECTION, created_at__gte=since, created_at__lte=now
    ).values_list("payload", flat=True)
    known = {p.get("pattern") for p in recent if isinstance(p, dict)}
    drafts: list[ProposalDraft] = []
    for pattern in week_patterns(outcomes, now):
        if pattern.key in known:
            continue
        written = written_reflection(
            client, context=pattern.context, reflection=pattern.reflection, lesson=pattern.lesson, error=client_error
        )
        extra: dict[str, Any] = {"written_by": written.written_by}
        if written.llm_error:
            extra["llm_error"] = written.llm_error
        drafts.append(
            ProposalDraft(
                kind=ProposalKind.REFLECTION,
                title=f"Reflect on {pattern.context}: {written.reflection}"[:300],
                rationale=(
                    f"The dream noticed this in the outcomes of the last {algo.LESSON_WINDOW_DAYS} days "
                    f"({len(pattern.evidence)} readings). Approving adds it to the reflection log (memory type "
                    "reflection, topic dream); its lesson counts towards a promotion to HOT when it recurs."
                ),
                payload={
                    "pattern": pattern.key,
                    "pattern_kind": pattern.kind,
                    "context": pattern.context,
                    "reflection": written.reflection,
                    "lesson": written.lesson,
                    "evidence": list(pattern.evidence),
                    **extra,
                },
                dedupe_key=f"reflection:{_digest(pattern.key)}:{now:%Y-%m-%d}",
                created_by=DREAM_EVOLVER,
            )
        )
    return drafts


def reflection_apply(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> EvolutionRecord:
    """Write the approved reflection (see module doc); one record holding the created memory."""
    payload = proposal.payload if isinstance(proposal.payload, dict) else {}
    modified = reviewer_changed(payload, REFLECTION_EDITABLE)
    # A part the payload lacks (or holds as null) is missing, as a body leaving it out would be.
    fields = {k: payload[k] for k in sorted(REFLECTION_EDITABLE) if payload.get(k) is not None}
    try:
        item = engine_inputs.reflection_input(fields)
    except InvalidInput as exc:
        name = f"payload.{exc.field}" if exc.field else "payload"
        raise InvalidInput(f"payload.{exc.detail}", field=name) from None
    item = engine_inputs.ReflectionInput(
        context=item.context,
        reflection=item.reflection,
        lesson=item.lesson,
        topic=engine_inputs.DREAM_TOPIC,
        created_at=now,
    )
    origin = default_origin(actor, "user") if modified else engine.DREAM_ORIGIN
    memory = engine.reflection_record(workspace=workspace, actor=actor, item=item, origin=origin, now=now).memory
    after: dict[str, Any] = {}
    created_after(after, [memory], [], dry_run=False)
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=DREAM_EVOLVER,
            action=Action.CREATE,
            reason=f"{audit.approval('reflection', proposal.pk, actor)}: reflection {memory.id} added to the log",
            output_ids=[memory.id],
            after=after,
            actor=actor,
            now=now,
        )
    )
    return record


# -- promotions -----------------------------------------------------------------------------------


def _rules(workspace: Workspace) -> list[tuple[uuid.UUID, str, str, str]]:
    """Active rules and corrections: (id, memory_type, content, tier)."""
    return list(
        Memory.objects.filter(workspace=workspace, status=Status.ACTIVE, memory_type__in=RULE_TYPES).values_list(
            "id", "memory_type", "content", "tier"
        )
    )


def promotion_drafts(*, workspace: Workspace, now: datetime) -> list[ProposalDraft]:
    """Lessons in 3 reflections within 7 days that nothing has proposed or made HOT yet (see module doc)."""
    lessons: list[algo.Lesson] = []
    ids: dict[str, str] = {}
    rows = Memory.objects.filter(workspace=workspace, memory_type=MemoryType.REFLECTION, status=Status.ACTIVE).only(
        "id", "metadata", "created_at"
    )
    for memory in rows:
        meta = engine_selectors.reflection_fields(memory)
        if meta is None:
            continue
        ref = f"reflection:{memory.id}"
        ids[ref] = str(memory.id)
        lessons.append(algo.Lesson(text=meta["lesson"], at=memory.created_at, ref=ref, task_type=meta["context"]))
    if not lessons:
        return []
    taken: set[str] = set()
    approved: set[str] = set()
    for kind, key, status in Proposal.objects.filter(
        workspace=workspace, kind__in=[ProposalKind.STRATEGY, ProposalKind.PROMOTION]
    ).values_list("kind", "dedupe_key", "status"):
        taken.add(key.removeprefix("promotion:"))
        if kind == ProposalKind.STRATEGY and status in (ProposalStatus.APPROVED, ProposalStatus.MODIFIED):
            approved.add(key)
    found = algo.propose_strategies([], lessons, now, existing_keys=taken)
    if not found:
        return []
    rules = _rules(workspace)
    drafts: list[ProposalDraft] = []
    for candidate in found:
        rule_key = algo.lesson_key(candidate.rule_text)
        same = [r for r in rules if algo.lesson_key(r[2]) == rule_key]
        if any(r[3] == Tier.HOT for r in same):
            continue
        if not algo.covenant_check(candidate, known_rule_keys=approved).allowed:
            continue
        target = next((r for r in same if r[1] == MemoryType.STRATEGY), None)
        sources = [ids[r] for r in candidate.evidence]
        change = (
            f"Approving raises the existing {target[3]} rule {target[0]} to HOT."
            if target is not None
            else "Approving creates it as a HOT rule (memory type strategy), linked to these reflections."
        )
        drafts.append(
            ProposalDraft(
                kind=ProposalKind.PROMOTION,
                title=f"Promote to HOT: {candidate.title.split(': ', 1)[-1]}",
                rationale=(
                    f"The lesson {candidate.rule_text!r} appears in {len(sources)} reflections within "
                    f"{algo.LESSON_WINDOW_DAYS} days. The same pattern 3 times in 7 days is promoted to "
                    f"HOT. {change}"
                ),
                payload={
                    "key": candidate.key,
                    "rule": candidate.rule_text,
                    "task_type": candidate.task_type,
                    "evidence": list(candidate.evidence),
                    "reflections": sources,
                    "target": str(target[0]) if target is not None else None,
                    "target_tier": target[3] if target is not None else None,
                },
                source_ids=sources,
                dedupe_key=f"promotion:{candidate.key}",
                created_by=DREAM_EVOLVER,
            )
        )
    return drafts


def _promotion_fields(payload: Mapping[str, Any]) -> tuple[str, str | None, list[uuid.UUID]]:
    rule = payload.get("rule")
    if not isinstance(rule, str) or not engine_inputs.one_line(rule):
        raise InvalidInput("payload.rule: expected the rule text (a non-blank string)", field="payload.rule")
    if len(rule) > MAX_CONTENT_CHARS:
        raise InvalidInput(f"payload.rule: longer than {MAX_CONTENT_CHARS} characters", field="payload.rule")
    task_type = payload.get("task_type")
    if task_type is not None and (not isinstance(task_type, str) or len(task_type) > engine_inputs.MAX_TOPIC):
        raise InvalidInput("payload.task_type: expected a string of at most 200 characters", field="payload.task_type")
    raw = payload.get("reflections") or []
    if not isinstance(raw, list):
        raise InvalidInput("payload.reflections: expected a list of memory ids", field="payload.reflections")
    try:
        reflections = [uuid.UUID(str(r)) for r in raw]
    except ValueError:
        raise InvalidInput("payload.reflections: expected memory ids (UUIDs)", field="payload.reflections") from None
    topic = (
        engine_inputs.one_line(task_type) if isinstance(task_type, str) and engine_inputs.one_line(task_type) else None
    )
    return engine_inputs.one_line(rule), topic, reflections


def _raise_target(workspace: Workspace, payload: Mapping[str, Any], rule: str) -> Memory | None:
    """The rule to raise to HOT: the payload's target while it is an active, not-HOT rule with this text."""
    raw = payload.get("target")
    if not isinstance(raw, str):
        return None
    try:
        target_id = uuid.UUID(raw)
    except ValueError:
        return None
    target = Memory.objects.select_for_update().filter(workspace=workspace, id=target_id).first()
    if target is None or target.status != Status.ACTIVE or algo.lesson_key(target.content) != algo.lesson_key(rule):
        return None
    if target.tier == Tier.HOT:
        raise Conflict(f"rule {target.id} is HOT already", code="stale_proposal")
    return target


def promotion_apply(workspace: Workspace, proposal: Proposal, actor: User | None, now: datetime) -> EvolutionRecord:
    """Raise or create the HOT rule of an approved promotion (see module doc); one revertible record."""
    payload = proposal.payload if isinstance(proposal.payload, dict) else {}
    modified = reviewer_changed(payload, PROMOTION_EDITABLE)
    rule, task_type, reflection_ids = _promotion_fields(payload)
    key = proposal.dedupe_key.removeprefix("promotion:") or algo.strategy_key(rule)
    claim = algo.StrategyProposal(key=key, title=rule, rule_text=rule, task_type=task_type)
    verdict = algo.covenant_check(claim, known_rule_keys=())
    if not verdict.allowed:
        raise InvalidInput(
            f"payload.rule: the covenant refuses this rule: {' '.join(verdict.reasons)}", field="payload.rule"
        )
    sources = list(
        Memory.objects.filter(workspace=workspace, id__in=reflection_ids)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    target = _raise_target(workspace, payload, rule)
    if target is not None:
        before[str(target.id)] = {"tier": target.tier}
        after[str(target.id)] = {"tier": Tier.HOT.value}
        target.tier = Tier.HOT
        target.save(update_fields=["tier"])
        linked = set(
            Edge.objects.filter(source=target, target_id__in=sources, edge_type=EdgeType.DERIVED_FROM).values_list(
                "target_id", flat=True
            )
        )
        edges = [(target.id, s, EdgeType.DERIVED_FROM.value) for s in sources if s not in linked]
        edge_ids = insert_derived(workspace=workspace, memories=[], edges=edges, now=now)
        if edge_ids:
            after[audit.CREATED_EDGES] = edge_ids
        rule_id = target.id
    else:
        origin = default_origin(actor, "user") if modified else engine.ENGINE_ORIGIN
        memory = derived_memory(
            workspace=workspace,
            memory_type=MemoryType.STRATEGY,
            content=rule,
            evolver=DREAM_EVOLVER,
            now=now,
            subject=task_type or "",
            metadata={
                "strategy": {
                    "key": key,
                    "proposal_id": proposal.pk,
                    "task_type": task_type,
                    "weight": algo.INITIAL_STRATEGY_WEIGHT,
                },
                "promotion": {"reflections": [str(s) for s in sources]},
            },
        )
        memory.origin = origin
        memory.origin_tier = origin_tier(origin)
        memory.tier = Tier.HOT
        edge_ids = insert_derived(
            workspace=workspace,
            memories=[memory],
            edges=[(memory.id, s, EdgeType.DERIVED_FROM.value) for s in sources],
            now=now,
        )
        created_after(after, [memory], edge_ids, dry_run=False)
        rule_id = memory.id
    record = audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=DREAM_EVOLVER,
            action=Action.PROMOTE,
            reason=f"{audit.approval('promotion', proposal.pk, actor)}: rule {rule_id} "
            f"{'raised' if target is not None else 'created'} in HOT from {len(sources)} reflections",
            input_ids=sources,
            output_ids=[rule_id],
            before=before,
            after=after,
            actor=actor,
            now=now,
        )
    )
    return record


# -- the dream's step -----------------------------------------------------------------------------


def dream_propose(
    *,
    workspace: Workspace,
    now: datetime,
    dry_run: bool,
    client: LLMClient | None = None,
    client_error: str = "",
) -> list[dict[str, Any]]:
    """Propose the week's reflections and the lessons due for HOT; returns {id, kind, title} of each (id None
    in a dry run, which creates nothing). `client` writes the reflections (see ``reflection_drafts``)."""
    drafts: Sequence[ProposalDraft] = [
        *reflection_drafts(workspace=workspace, now=now, client=client, client_error=client_error),
        *promotion_drafts(workspace=workspace, now=now),
    ]
    if dry_run:
        return [_summary(d, None) for d in drafts]
    return [_summary(p, p.pk) for p in proposals_create(workspace=workspace, drafts=drafts, now=now)]


register_proposal_applier(ProposalKind.REFLECTION, reflection_apply)
register_proposal_applier(ProposalKind.PROMOTION, promotion_apply)
