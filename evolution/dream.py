"""The dream cycle: rescore the tiered memories, move them between HOT / WARM / COLD, report.

Which memories take part (the entries of the hot/, warm/ and cold/ files of the memory-evolution directory):

* **rules**: memory type ``strategy``, whether a person wrote them (manual rule) or approved an engine
  strategy (origin ``engine:``, scored with the engine-strategy weight 1.0); active ones, and archived ones
  in COLD (which come back to HOT when used 3 times in 7 days);
* **corrections**: memory type ``correction``, active. They are scored (weight 1.2) but always stay HOT;
* **preferences**: memory type ``preference``, active ones and archived ones in COLD, tiered exactly as
  rules (HOT weight 1.5, WARM/COLD 0.8, the same moves). HOT holds the confirmed rules *and preferences*
  (the skill's hot/memory.md), and the reference facts give no weight of their own for a preference, so
  one takes the weight of the entries it sits with. Confirmation is use: a preference used 3 times in 7
  days goes HOT whoever wrote it, and one left unused fades to WARM and COLD (archived, never deleted) like
  any rule; nothing is inferred from silence.

Reflections are not tiered: they are the log the directory keeps in ``reflections/log.md`` and the input the
engine counts lessons in, so they neither decay nor move. Every other memory type belongs to the enhanced
evolvers of the evolution cycle, not to this one.

Per memory: ``relevance = base * exp(-0.03 * days_since_access) * log2(access_count + 1) * type_weight``
(``evolution.algorithms.tiers``), base 1.0 unless an import set ``metadata["decay"]["base"]``; the last
access is ``last_accessed`` (else ``created_at``); the uses in the last 7 days are the retrieval events
(search, get, context, helpful) plus uses an import brought in ``metadata["decay"]["recent_uses"]``.
``tiers.tier_transitions`` decides the moves. Each move is one EvolutionRecord (evolver ``Dream``: promote,
demote or archive; before/after tier and status) of the run ``Dream``, saved before the memory changes, so
an archive logs its reason first; nothing is ever deleted, and a run or a single move can be reverted.

Then the pending proposals are listed and 1-2 patterns of the last 7 days (the task type failing most, or
one that keeps succeeding; what the tier moves say) are appended to the reflection log with topic
``dream`` (an identical reflection logged in the last 7 days is not repeated). The pattern detector drafts
each reflection from the facts; with ``LLM_BASE_URL`` set the LLM client writes its REFLECTION and LESSON
lines from that draft (``LLMClient.reflect``), and when the endpoint fails the draft is logged as it is and
the report entry says why (``written_by`` "deterministic", ``llm_error``). Repeats are recognised by the
draft, kept in the reflection's ``metadata["dream_pattern"]``, so an LLM's wording never defeats them.
Patterns that need a person's judgement (a success rate that dropped, an issue that keeps failing tasks)
and lessons reflected 3 times in 7 days become reflection and promotion proposals (evolution.dream_proposals;
report key ``proposed``). The report is stored as a ``DreamReport`` (see ``docs/engine.md`` for its shape). A dry run
computes the same report and writes nothing at all.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from core.errors import NotFound
from evolution import dream_proposals
from evolution.algorithms import tiers
from evolution.algorithms.engine import REVIEW_TASK_TYPE, lesson_key
from evolution.engine import DREAM_ORIGIN, reflection_record
from evolution.engine_inputs import DREAM_TOPIC, ReflectionInput
from evolution.engine_selectors import is_dream_reflection, reflection_fields
from evolution.llm import LLMClient, configured_client, written_reflection
from evolution.models import DreamReport, EvolutionRun, Outcome, OutcomeResult, Proposal, ProposalStatus, RunStatus
from history import audit
from history.models import Action, EvolutionRecord
from memories.models import Memory, MemoryType, RetrievalEvent, RetrievalSource, Status, Tier, Workspace

User = AbstractBaseUser | AnonymousUser
log = logging.getLogger(__name__)

DREAM_EVOLVER: Final = "Dream"
# Key of a dream reflection's metadata holding the detector's draft and who wrote the logged lines.
PATTERN_KEY: Final = "dream_pattern"
TRACKED_TYPES: Final = (MemoryType.STRATEGY, MemoryType.CORRECTION, MemoryType.PREFERENCE)
# Types that leave for COLD (archived) and come back from it; corrections always stay HOT.
COLD_TYPES: Final = (MemoryType.STRATEGY, MemoryType.PREFERENCE)
# A use is a retrieval that handed the memory to someone; the query inspector only looks at rankings.
USE_SOURCES: Final = (RetrievalSource.SEARCH, RetrievalSource.GET, RetrievalSource.CONTEXT, RetrievalSource.HELPFUL)
DEFAULT_BASE: Final = 1.0
MAX_PATTERNS: Final = 2
REPORT_LOWEST: Final = 10
CONTENT_PREVIEW: Final = 200


# ------------------------------------------------------------------------------------------------ selectors


def tracked_memories(*, workspace: Workspace) -> list[Memory]:
    """The memories the dream scores: active rules, corrections and preferences, and archived rules and
    preferences in COLD."""
    rows = Memory.objects.filter(workspace=workspace, memory_type__in=TRACKED_TYPES).filter(
        Q(status=Status.ACTIVE) | Q(memory_type__in=COLD_TYPES, status=Status.ARCHIVED, tier=Tier.COLD)
    )
    return list(rows.order_by("created_at", "id"))


def decay_meta(memory: Memory) -> dict[str, Any]:
    meta = memory.metadata.get("decay") if isinstance(memory.metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def decay_base(memory: Memory) -> float:
    """The base relevance of a memory: ``metadata["decay"]["base"]`` when a finite number >= 0, else 1.0."""
    base = decay_meta(memory).get("base")
    if isinstance(base, int | float) and not isinstance(base, bool) and math.isfinite(base) and base >= 0:
        return float(base)
    return DEFAULT_BASE


def _stored_uses(memory: Memory) -> list[datetime]:
    out: list[datetime] = []
    for raw in decay_meta(memory).get("recent_uses") or []:
        if isinstance(raw, str):
            try:
                moment = datetime.fromisoformat(raw)
            except ValueError:
                continue
            if moment.tzinfo is not None:
                out.append(moment)
    return out


def recent_uses(*, workspace: Workspace, memories: Sequence[Memory], now: datetime) -> dict[uuid.UUID, list[datetime]]:
    """Uses of each memory in the 7 days up to ``now`` (inclusive), oldest first, without repeats: retrieval
    events of the use sources plus the uses an import stored in the memory's metadata."""
    since = now - timedelta(days=tiers.HOT_WINDOW_DAYS)
    uses: dict[uuid.UUID, set[datetime]] = {m.id: set() for m in memories}
    for memory in memories:
        uses[memory.id].update(u for u in _stored_uses(memory) if since <= u <= now)
    events = RetrievalEvent.objects.filter(
        workspace=workspace,
        memory__memory_type__in=TRACKED_TYPES,
        source__in=USE_SOURCES,
        created_at__gte=since,
        created_at__lte=now,
    ).values_list("memory_id", "created_at")
    for memory_id, at in events:
        if memory_id in uses:
            uses[memory_id].add(at)
    return {mid: sorted(values) for mid, values in uses.items()}


def item_kind(memory: Memory) -> tiers.ItemKind:
    """An engine strategy when the rule's origin is the engine (origin tier 3), else a rule."""
    if memory.memory_type == MemoryType.STRATEGY and memory.origin_tier == 3:
        return tiers.ItemKind.ENGINE_STRATEGY
    return tiers.ItemKind.RULE


def tier_item(
    memory: Memory, uses: Sequence[datetime], *, key: str | None = None, tier: str | None = None
) -> tiers.TierItem:
    """The tier rules' view of ``memory`` (``key`` defaults to its id, ``tier`` to its tier)."""
    return tiers.TierItem(
        key=key or str(memory.id),
        tier=tiers.Tier(tier or memory.tier),
        kind=item_kind(memory),
        base=decay_base(memory),
        access_count=memory.access_count,
        last_access=memory.last_accessed or memory.created_at,
        uses_in_last_7d=len(uses),
        is_correction=memory.memory_type == MemoryType.CORRECTION,
    )


@dataclass(frozen=True)
class DecayRow:
    """One tracked memory with its relevance now (for the dashboard's decay table)."""

    memory: Memory
    score: float
    uses_in_last_7d: int
    kind: str


def decay_table(*, workspace: Workspace, now: datetime | None = None) -> list[DecayRow]:
    """Every tracked memory with its current relevance, lowest first (the next to fade on top)."""
    now = now or timezone.now()
    memories = tracked_memories(workspace=workspace)
    uses = recent_uses(workspace=workspace, memories=memories, now=now)
    items = [tier_item(m, uses[m.id]) for m in memories]
    scores: list[float] = tiers.scores(items, now).tolist() if items else []
    rows = [
        DecayRow(memory=m, score=float(s), uses_in_last_7d=len(uses[m.id]), kind=item.kind.value)
        for m, item, s in zip(memories, items, scores, strict=True)
    ]
    return sorted(rows, key=lambda r: (r.score, str(r.memory.id)))


def dream_report_list(*, workspace: Workspace, limit: int = 20) -> list[DreamReport]:
    """The workspace's stored dream reports, newest first."""
    limit = max(1, min(200, limit))
    return list(DreamReport.objects.filter(workspace=workspace).order_by("-created_at", "-pk")[:limit])


def dream_report_get(*, workspace: Workspace, report_id: object) -> DreamReport:
    try:
        pk = int(str(report_id))
    except ValueError:
        raise NotFound(f"dream report {report_id!r} not found", field="report_id") from None
    report = DreamReport.objects.filter(workspace=workspace, pk=pk).first()
    if report is None:
        raise NotFound(f"dream report {pk} not found in workspace {workspace.slug!r}", field="report_id")
    return report


# ------------------------------------------------------------------------------------------------- patterns


@dataclass(frozen=True)
class Pattern:
    """A reflection the dream appends: CONTEXT / REFLECTION / LESSON."""

    context: str
    reflection: str
    lesson: str


def outcome_pattern(outcomes: Sequence[Outcome]) -> Pattern | None:
    """The task type that failed most (at least twice) in ``outcomes``, with what to try instead (an
    approach doing better than the task's overall rate, else its most repeated failure lesson); else one
    that succeeded every time (at least 3 times), with the approach to keep. Decisions on strategies are
    left out (they are about the engine, not the work)."""
    work = [o for o in outcomes if o.task_type != REVIEW_TASK_TYPE]
    if not work:
        return None
    totals: Counter[str] = Counter(o.task_type for o in work)
    fails: Counter[str] = Counter(o.task_type for o in work if o.result == OutcomeResult.FAIL)
    failing = sorted((t for t in fails if fails[t] >= 2), key=lambda t: (-fails[t], -totals[t], t))
    if failing:
        task = failing[0]
        mine = [o for o in work if o.task_type == task]
        wins: Counter[str] = Counter(o.approach for o in mine if o.result == OutcomeResult.SUCCESS)
        tries: Counter[str] = Counter(o.approach for o in mine)
        reflection = f"{task} failed {fails[task]} of {totals[task]} times in the last 7 days."
        overall = (totals[task] - fails[task]) / totals[task]
        better = [a for a in wins if wins[a] / tries[a] > overall]
        if better:
            best = min(better, key=lambda a: (-wins[a] / tries[a], -tries[a], a))
            lesson = f"Prefer the approach {best!r} for {task}: it succeeded {wins[best]} of {tries[best]} times."
        else:
            lessons = Counter(o.lesson for o in mine if o.result == OutcomeResult.FAIL and lesson_key(o.lesson))
            if lessons:
                top = max(lessons.values())
                newest = next(o.lesson for o in reversed(mine) if lessons.get(o.lesson) == top)
                lesson = f"Apply the lesson recorded {top} time(s) for {task}: {newest}"
            else:
                lesson = f"Record a lesson when {task} fails, so the engine can learn what to change."
        return Pattern(context=task, reflection=reflection, lesson=lesson)
    steady = sorted((t for t in totals if t not in fails and totals[t] >= 3), key=lambda t: (-totals[t], t))
    if steady:
        task = steady[0]
        approaches: Counter[str] = Counter(o.approach for o in work if o.task_type == task)
        approach = min(approaches, key=lambda a: (-approaches[a], a))
        return Pattern(
            context=task,
            reflection=f"{task} succeeded all {totals[task]} times in the last 7 days.",
            lesson=f"Keep the approach {approach!r} for {task}.",
        )
    return None


def tier_pattern(changes: Sequence[tiers.TierChange]) -> Pattern | None:
    """What this dream's tier moves say, when there were any."""
    if not changes:
        return None
    promoted = sum(1 for c in changes if c.to_tier is tiers.Tier.HOT)
    demoted = sum(1 for c in changes if c.to_tier is tiers.Tier.WARM)
    archived = sum(1 for c in changes if c.to_tier is tiers.Tier.COLD)
    reflection = (
        f"The dream moved {len(changes)} memories: {promoted} to HOT, {demoted} demoted to WARM, "
        f"{archived} archived to COLD."
    )
    if archived:
        lesson = "Archived rules stay in cold/archive; using one 3 times in 7 days brings it back to HOT."
    elif demoted:
        lesson = "Rules unused for 30 days or scoring under 0.2 leave HOT; use or re-confirm the ones that matter."
    else:
        lesson = "Rules used 3 times in 7 days are kept in HOT."
    return Pattern(context="memory tiers", reflection=reflection, lesson=lesson)


def _recent_dream_log(workspace: Workspace, now: datetime) -> set[tuple[str, str]]:
    since = now - timedelta(days=tiers.HOT_WINDOW_DAYS)
    rows = Memory.objects.filter(
        workspace=workspace, memory_type=MemoryType.REFLECTION, created_at__gte=since, created_at__lte=now
    ).only("id", "metadata")
    seen: set[tuple[str, str]] = set()
    for memory in rows:
        meta = reflection_fields(memory)
        if meta is not None and is_dream_reflection(memory):
            draft = memory.metadata.get(PATTERN_KEY)
            said = draft.get("reflection") if isinstance(draft, dict) else None
            seen.add((lesson_key(meta["context"]), lesson_key(said if isinstance(said, str) else meta["reflection"])))
    return seen


# ---------------------------------------------------------------------------------------------------- dream


_ACTIONS: Final[Mapping[tiers.Tier, str]] = {
    tiers.Tier.HOT: Action.PROMOTE,
    tiers.Tier.WARM: Action.DEMOTE,
    tiers.Tier.COLD: Action.ARCHIVE,
}
_BUCKETS: Final[Mapping[tiers.Tier, str]] = {
    tiers.Tier.HOT: "promoted",
    tiers.Tier.WARM: "demoted",
    tiers.Tier.COLD: "archived",
}


def _target_values(memory: Memory, change: tiers.TierChange) -> dict[str, Any]:
    values: dict[str, Any] = {"tier": change.to_tier.value}
    if change.to_tier is tiers.Tier.COLD:
        values["status"] = Status.ARCHIVED
    elif memory.status == Status.ARCHIVED:
        values["status"] = Status.ACTIVE
    return values


def _preview(memory: Memory) -> str:
    text = " ".join(memory.content.split())
    return text if len(text) <= CONTENT_PREVIEW else text[: CONTENT_PREVIEW - 1] + "…"


def dream_run(
    *,
    workspace: Workspace,
    actor: User | None = None,
    now: datetime | None = None,
    dry_run: bool = False,
    client: LLMClient | None = None,
) -> DreamReport:
    """Run the dream cycle at ``now``; returns the report (unsaved, with ``pk`` None, for a dry run).

    ``client`` writes the reflections and reflection proposals (default: the settings' client, see
    ``evolution.llm.written_reflection``).
    Idempotent at a fixed ``now``: a second run finds nothing to move and nothing new to log.
    """
    now = now or timezone.now()
    if dry_run:
        return _dream(workspace, actor, now, dry_run=True, client=client)
    with transaction.atomic():
        # One dream per workspace at a time (PostgreSQL; SQLite holds its write lock anyway).
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        return _dream(workspace, actor, now, dry_run=False, client=client)


def _dream(
    workspace: Workspace, actor: User | None, now: datetime, *, dry_run: bool, client: LLMClient | None
) -> DreamReport:
    memories = tracked_memories(workspace=workspace)
    by_id = {str(m.id): m for m in memories}
    uses = recent_uses(workspace=workspace, memories=memories, now=now)
    items = [tier_item(m, uses[m.id]) for m in memories]
    scores: list[float] = tiers.scores(items, now).tolist() if items else []
    score_of = {item.key: float(s) for item, s in zip(items, scores, strict=True)}
    changes = tiers.tier_transitions(items, now)

    run: EvolutionRun | None = None
    records: list[EvolutionRecord] = []
    if not dry_run:
        run = EvolutionRun.objects.create(
            workspace=workspace,
            evolvers=[DREAM_EVOLVER],
            dry_run=False,
            status=RunStatus.RUNNING,
            started_by=audit.actor_or_none(actor),
            started_at=now,
        )
        built = []
        for change in changes:
            memory = by_id[change.key]
            before, after = audit.memory_changes(memory, _target_values(memory, change))
            built.append(
                audit.record_build(
                    workspace=workspace,
                    evolver=DREAM_EVOLVER,
                    action=_ACTIONS[change.to_tier],
                    reason=change.reason,
                    input_ids=[memory.id],
                    output_ids=[memory.id],
                    before={str(memory.id): before},
                    after={str(memory.id): after},
                    run=run,
                    actor=actor,
                    now=now,
                )
            )
        # The records (and so every archive's reason) are written before any memory moves.
        records = audit.records_save(built)
        moved: dict[tuple[str, ...], list[Memory]] = {}
        for change in changes:
            memory = by_id[change.key]
            values = _target_values(memory, change)
            for name, value in values.items():
                setattr(memory, name, value)
            moved.setdefault(tuple(sorted(values)), []).append(memory)
        for names, group in moved.items():
            Memory.objects.bulk_update(group, list(names), batch_size=500)

    record_of = {r.input_ids[0]: r.pk for r in records}
    entries: dict[str, list[dict[str, Any]]] = {"promoted": [], "demoted": [], "archived": []}
    for change in changes:
        memory = by_id[change.key]
        bucket = _BUCKETS[change.to_tier]
        entries[bucket].append(
            {
                "memory_id": change.key,
                "memory_type": memory.memory_type,
                "content": _preview(memory),
                "from": change.from_tier.value,
                "to": change.to_tier.value,
                "score": change.score,
                "reason": change.reason,
                "record_id": record_of.get(change.key),
            }
        )

    since = now - timedelta(days=tiers.HOT_WINDOW_DAYS)
    recent = list(
        Outcome.objects.filter(workspace=workspace, created_at__gte=since, created_at__lte=now).order_by(
            "created_at", "pk"
        )
    )
    logged = _recent_dream_log(workspace, now)
    patterns: list[Pattern] = []
    for pattern in (outcome_pattern(recent), tier_pattern(changes)):
        if pattern is None or len(patterns) >= MAX_PATTERNS:
            continue
        key = (lesson_key(pattern.context), lesson_key(pattern.reflection))
        if key not in logged:
            logged.add(key)
            patterns.append(pattern)
    reflections: list[dict[str, Any]] = []
    client_error = ""
    if client is None:
        # Building the client makes no request; only a pattern to write calls the endpoint.
        client, client_error = configured_client()
    for pattern in patterns:
        written = written_reflection(
            client, context=pattern.context, reflection=pattern.reflection, lesson=pattern.lesson, error=client_error
        )
        memory_id: str | None = None
        if not dry_run:
            draft = {"reflection": pattern.reflection, "lesson": pattern.lesson, "written_by": written.written_by}
            if written.llm_error:
                draft["llm_error"] = written.llm_error
            recorded = reflection_record(
                workspace=workspace,
                actor=None,
                item=ReflectionInput(
                    context=pattern.context,
                    reflection=written.reflection,
                    lesson=written.lesson,
                    topic=DREAM_TOPIC,
                    created_at=now,
                ),
                origin=DREAM_ORIGIN,
                evolve=False,
                now=now,
                metadata={PATTERN_KEY: draft},
            )
            memory_id = str(recorded.memory.id)
        entry = {
            "memory_id": memory_id,
            "context": pattern.context,
            "reflection": written.reflection,
            "lesson": written.lesson,
            "written_by": written.written_by,
        }
        if written.llm_error:
            entry["llm_error"] = written.llm_error
        reflections.append(entry)

    # After the log is written: today's reflections count towards a promotion.
    proposed = dream_proposals.dream_propose(
        workspace=workspace, now=now, dry_run=dry_run, client=client, client_error=client_error
    )
    # Listed after proposing, so the report's "waiting" counts what this dream proposed too.
    pending = list(
        Proposal.objects.filter(workspace=workspace, status=ProposalStatus.PENDING).order_by("created_at", "pk")
    )

    moved_to = {c.key: c.to_tier.value for c in changes}
    final_tiers: Counter[str] = Counter(moved_to.get(item.key, item.tier.value) for item in items)
    fading = sorted(
        (item for item in items if moved_to.get(item.key, item.tier.value) != Tier.COLD),
        key=lambda i: (score_of[i.key], i.key),
    )[:REPORT_LOWEST]
    report: dict[str, Any] = {
        "now": now.isoformat(),
        "dry_run": dry_run,
        "run_id": str(run.id) if run is not None else None,
        "tracked_types": [str(t) for t in TRACKED_TYPES],
        "scored": len(items),
        "tiers": {t: final_tiers.get(t, 0) for t in (Tier.HOT, Tier.WARM, Tier.COLD)},
        "counts": {
            "promoted": len(entries["promoted"]),
            "demoted": len(entries["demoted"]),
            "archived": len(entries["archived"]),
            "pending_proposals": len(pending),
            "reflections": len(reflections),
        },
        **entries,
        "lowest": [
            {
                "memory_id": item.key,
                "memory_type": by_id[item.key].memory_type,
                "content": _preview(by_id[item.key]),
                "tier": moved_to.get(item.key, item.tier.value),
                "score": score_of[item.key],
            }
            for item in fading
        ],
        "pending_proposals": [
            {
                "id": p.pk,
                "kind": p.kind,
                "title": p.title,
                "created_at": p.created_at.isoformat(),
                "weight": p.payload.get("weight") if isinstance(p.payload, dict) else None,
            }
            for p in pending
        ],
        "reflections": reflections,
        "proposed": proposed,
    }
    dream = DreamReport(workspace=workspace, run=run, created_at=now, report=report)
    if run is not None:
        run.status = RunStatus.COMPLETED
        run.finished_at = timezone.now()
        run.summary = {
            "evolvers": [
                {
                    "name": DREAM_EVOLVER,
                    "status": "ok",
                    "error": "",
                    "records": len(records),
                    "seconds": 0.0,
                    "stats": {k: v for k, v in report["counts"].items() if isinstance(v, int)},
                    "state": {},
                }
            ],
            "counts": {"records": len(records), "ok": 1, "failed": 0},
        }
        run.progress = {"evolver": "", "index": 1, "done": 1, "total": 1}
        run.save(update_fields=["status", "finished_at", "summary", "progress"])
        dream.save()
    return dream
