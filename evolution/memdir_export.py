"""Export a workspace to the memory-evolution directory (docs/engine.md), as files or a zip.

The layout and its file formats are ``evolution.algorithms.memdir`` (parse and render); this module maps
them to the workspace:

* rules (``hot/memory.md``, ``warm/projects/*.md``, ``warm/domains/*.md``, ``cold/archive/*.md``) are the
  memories of type ``strategy`` and ``preference`` (``kind: preference``; its section is its subject) that
  are active (by tier) or archived (always ``cold/archive``): origin ``engine:`` is ``origin: engine``,
  anything else a manual rule. A warm rule without a place of its own goes
  to ``warm/domains/<its task type or subject>.md`` (``general`` when it has neither); an approved strategy's
  section is its task type; ``source`` names the proposal it came from;
* ``hot/corrections.md``: the corrections in force (active memories of type ``correction``; one superseded
  by a later correction of its topic stays in the site's history only), in the order written;
  ``reflections/log.md``: active reflections, newest first;
* ``proposals/pending.md`` and ``engine/evo_devo.json``: every proposal of kind ``strategy`` whatever its
  status (a vetoed one with its reasons); other kinds belong to the site's review queue only;
* ``engine/sensor.json``: every outcome in recorded order (ids S-0001...; decisions on strategies included);
  ``engine/world_model.json`` is derived from it;
* ``engine/decay-scores.json``: base, access count, last access and the uses of the last 7 days of every
  exported rule (keyed by rule id) and active correction (keyed ``correction:<date>#<n>``, n counting that
  day's corrections in file order), with the relevance at the export time;
* ``meta.json``: the export time, and the workspace the directory's history started in (a workspace made by
  an import keeps naming the workspace it came from, so export -> import -> export is byte for byte the same).

The import is ``evolution.memdir_import``; what both share is ``evolution.memdir_common``.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime
from typing import Any, Final, cast

from django.utils import timezone

from evolution import dream
from evolution.algorithms import memdir, tiers
from evolution.engine_inputs import DEFAULT_APPROACH, DEFAULT_TOPIC, one_line
from evolution.engine_selectors import outcomes_in_order, reflection_fields, sensor_id
from evolution.memdir_common import (
    LINEAGE_EVOLVER,
    RULE_TYPES,
    correction_keys,
    derived_rule_ids,
    meta_section,
    text_field,
    utc_day,
)
from evolution.models import OutcomeResult, Proposal, ProposalKind, ProposalStatus
from history import audit
from history.models import Action, EvolutionRecord
from memories.models import Memory, MemoryType, Status, Tier, Workspace

ZIP_ROOT: Final = "memory-evolution/"
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)

_STRATEGY_STATUS: Final[Mapping[str, memdir.StrategyStatus]] = {
    ProposalStatus.PENDING: "proposed",
    ProposalStatus.APPROVED: "approved",
    ProposalStatus.MODIFIED: "approved",
    ProposalStatus.REJECTED: "rejected",
    ProposalStatus.VETOED: "vetoed",
}


def _seq(memory: Memory) -> int:
    seq = meta_section(memory, "memdir").get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def _token(value: object) -> str | None:
    return value if isinstance(value, str) and memdir._TOKEN_RE.fullmatch(value) else None


def _topic_of(text: str) -> str:
    """A file-name topic from free text: letters, digits and ``_ . -``; ``general`` when nothing is left."""
    slug = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "-" for c in one_line(text).lower())
    slug = "-".join(part for part in slug.split("-") if part).lstrip("._-")
    return slug[:80] if slug and memdir._TOPIC_RE.fullmatch(slug[:80]) else DEFAULT_TOPIC


def _rule_text(text: str) -> str:
    # The bullet's metadata comment starts with "<!--"; a rule may not contain it.
    return one_line(text).replace("<!--", "< !--") or "(empty)"


def _proposal_ids(rows: Sequence[Proposal]) -> dict[int, str]:
    """``P-NNN`` of every strategy proposal: the id an import gave it when still unique, else the next free
    numbers in creation order."""
    ids: dict[int, str] = {}
    taken: set[str] = set()
    for p in rows:
        stored = p.payload.get("memdir_id") if isinstance(p.payload, dict) else None
        if isinstance(stored, str) and memdir._PROPOSAL_ID_RE.fullmatch(stored) and stored not in taken:
            ids[p.pk] = stored
            taken.add(stored)
    number = max((int(i[2:]) for i in taken), default=0)
    for p in rows:
        if p.pk not in ids:
            number += 1
            ids[p.pk] = f"P-{number:03d}"
    return ids


def _evidence(payload: Mapping[str, Any]) -> tuple[str, ...]:
    raw = payload.get("evidence")
    if not isinstance(raw, list):
        return ()
    refs = (one_line(r).replace(",", ";") for r in raw if isinstance(r, str))
    return tuple(r for r in refs if r)


def _weight(payload: Mapping[str, Any]) -> float:
    w = payload.get("weight", 0.5)
    if isinstance(w, bool) or not isinstance(w, int | float):
        return 0.5
    return min(1.0, max(0.0, float(w)))


def _proposal_entries(
    rows: Sequence[Proposal], ids: Mapping[int, str]
) -> tuple[list[memdir.ProposalEntry], list[memdir.StrategyRecord]]:
    entries: list[memdir.ProposalEntry] = []
    strategies: list[memdir.StrategyRecord] = []
    keys: set[str] = set()
    for p in rows:
        payload = p.payload if isinstance(p.payload, dict) else {}
        title = one_line(p.title) or text_field(payload, "rule") or "strategy"
        rule = text_field(payload, "rule") or title
        task_type = text_field(payload, "task_type") or None
        key = _token(p.dedupe_key)
        status = p.status if p.status in _STRATEGY_STATUS else ProposalStatus.PENDING
        decided = utc_day(p.decided_at) if status != ProposalStatus.PENDING and p.decided_at else None
        entries.append(
            memdir.ProposalEntry(
                id=ids[p.pk],
                title=title,
                status=cast(memdir.ProposalStatus, status),
                rule=rule,
                weight=_weight(payload),
                created=utc_day(p.created_at),
                key=key,
                task_type=task_type,
                evidence=_evidence(payload),
                decided=decided,
                reason=one_line(p.decision_reason) or None,
            )
        )
        if key is not None and key not in keys:
            keys.add(key)
            strategies.append(
                memdir.StrategyRecord(
                    key=key,
                    title=title,
                    rule=rule,
                    weight=_weight(payload),
                    status=_STRATEGY_STATUS[status],
                    created_at=p.created_at,
                    task_type=task_type,
                    evidence=_evidence(payload),
                    proposal_id=ids[p.pk],
                )
            )
    return entries, strategies


def _in_order(rows: Iterable[Memory]) -> list[Memory]:
    """Memories in the order written: creation time, then an import's file position, then id."""
    return sorted(rows, key=lambda m: (m.created_at, _seq(m), str(m.id)))


def _rule_of(memory: Memory, ids: Mapping[int, str], used_ids: set[str]) -> memdir.Rule:
    place = meta_section(memory, "memdir")
    strat = meta_section(memory, "strategy")
    task_type = strat.get("task_type") if isinstance(strat.get("task_type"), str) else ""
    stored_area = place.get("area")
    stored_topic = place.get("topic")
    area: memdir.Area
    topic = ""
    if memory.status == Status.ARCHIVED or memory.tier == Tier.COLD:
        area = "archive"
    elif memory.tier == Tier.HOT:
        area = "hot"
    elif stored_area in ("project", "domain"):
        area = "project" if stored_area == "project" else "domain"
    else:
        area = "domain"
    if area != "hot":
        keeps = stored_area == area and isinstance(stored_topic, str) and memdir._TOPIC_RE.fullmatch(stored_topic)
        topic = str(stored_topic) if keeps else _topic_of(str(task_type) or memory.subject)
    preference = memory.memory_type == MemoryType.PREFERENCE
    if isinstance(place.get("section"), str):
        section = one_line(place["section"])
    else:
        section = one_line(memory.subject if preference else str(task_type))
    rule_id = _token(place.get("id"))
    if rule_id is None or rule_id in used_ids:
        short, full = derived_rule_ids(memory)
        rule_id = full if short in used_ids else short
    used_ids.add(rule_id)
    added: date | None = utc_day(memory.created_at)
    if "added" in place:
        raw = place["added"]
        added = date.fromisoformat(raw) if isinstance(raw, str) and memdir._DATE_RE.fullmatch(raw) else None
    proposal_pk = strat.get("proposal_id")
    source = ids.get(proposal_pk) if isinstance(proposal_pk, int) else None
    return memdir.Rule(
        area=area,
        topic=topic,
        text=_rule_text(memory.content),
        section=section,
        id=rule_id,
        added=added,
        origin="engine" if memory.origin_tier == 3 else "manual",
        source=source or _token(place.get("source")),
        kind="preference" if preference else "rule",
    )


def _correction_of(memory: Memory) -> memdir.Correction:
    meta = meta_section(memory, "correction")
    return memdir.Correction(
        date=utc_day(memory.created_at),
        topic=text_field(meta, "topic") or one_line(memory.subject) or DEFAULT_TOPIC,
        wrong=text_field(meta, "what_i_did_wrong") or "(not recorded)",
        should=text_field(meta, "what_i_should_do") or one_line(memory.content) or "(not recorded)",
        context=text_field(meta, "context") or "(not recorded)",
    )


def _reflection_of(memory: Memory) -> memdir.Reflection:
    meta = reflection_fields(memory) or {}
    content = one_line(memory.content) or "(empty)"
    topic = meta.get("topic")
    return memdir.Reflection(
        date=utc_day(memory.created_at),
        context=text_field(meta, "context") or one_line(memory.subject) or DEFAULT_TOPIC,
        reflection=text_field(meta, "reflection") or content,
        lesson=text_field(meta, "lesson") or content,
        topic=one_line(topic) if isinstance(topic, str) and one_line(topic) else None,
    )


def _lineage(workspace: Workspace) -> str:
    first = (
        EvolutionRecord.objects.filter(workspace=workspace, evolver=LINEAGE_EVOLVER, action=Action.IMPORT)
        .order_by("timestamp", "pk")
        .first()
    )
    lineage = first.after.get(audit.LINEAGE) if first is not None else None
    origin = lineage.get("origin") if isinstance(lineage, dict) else None
    return origin if isinstance(origin, str) and one_line(origin) == origin and origin else workspace.slug


def memdir_snapshot(*, workspace: Workspace, now: datetime | None = None) -> memdir.MemoryDirectory:
    """The workspace as a ``MemoryDirectory`` at ``now`` (the export time and the decay scores' time)."""
    now = now or timezone.now()
    strategy_rows = list(
        Proposal.objects.filter(workspace=workspace, kind=ProposalKind.STRATEGY).order_by("created_at", "pk")
    )
    ids = _proposal_ids(strategy_rows)
    entries, strategies = _proposal_entries(strategy_rows, ids)

    rule_rows = _in_order(
        Memory.objects.filter(
            workspace=workspace,
            memory_type__in=RULE_TYPES,
            status__in=[Status.ACTIVE, Status.ARCHIVED],
        )
    )
    used: set[str] = set()
    rules = [_rule_of(m, ids, used) for m in rule_rows]

    correction_rows = _in_order(
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.CORRECTION, status=Status.ACTIVE)
    )
    corrections = [_correction_of(m) for m in correction_rows]

    reflection_rows = sorted(
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.REFLECTION, status=Status.ACTIVE),
        key=lambda m: (_seq(m), str(m.id)),
    )
    # Newest first; an import's same-day entries (all at midnight) keep their file order (stable sort).
    reflection_rows.sort(key=lambda m: m.created_at, reverse=True)
    reflections = [_reflection_of(m) for m in reflection_rows]

    sensor = [
        memdir.SensorRecord(
            id=sensor_id(i),
            task_type=one_line(o.task_type) or "unknown",
            approach=one_line(o.approach) or DEFAULT_APPROACH,
            result="success" if o.result == OutcomeResult.SUCCESS else "fail",
            at=o.created_at,
            lesson=o.lesson,
            issue=o.issue,
            solution=o.solution,
        )
        for i, o in enumerate(outcomes_in_order(workspace=workspace))
    ]

    tracked: list[tuple[str, Memory, tiers.Tier]] = [
        (rule.id or "", m, rule.tier) for rule, m in zip(rules, rule_rows, strict=True)
    ]
    tracked += [
        (key, m, tiers.Tier(m.tier)) for key, m in zip(correction_keys(corrections), correction_rows, strict=True)
    ]
    decay_scores = _decay_scores(workspace, tracked, now)
    return memdir.MemoryDirectory(
        rules=tuple(rules),
        corrections=tuple(corrections),
        reflections=tuple(reflections),
        proposals=tuple(entries),
        sensor=tuple(sensor),
        strategies=tuple(strategies),
        decay_scores=tuple(decay_scores),
        meta=memdir.Meta(exported_at=now, workspace=_lineage(workspace)),
    )


def _decay_scores(
    workspace: Workspace, tracked: Sequence[tuple[str, Memory, tiers.Tier]], now: datetime
) -> list[memdir.DecayScore]:
    if not tracked:
        return []
    uses = dream.recent_uses(workspace=workspace, memories=[m for _, m, _ in tracked], now=now)
    items = [dream.tier_item(m, uses[m.id], key=key, tier=tier.value) for key, m, tier in tracked]
    scores = tiers.scores(items, now).tolist()
    return [
        memdir.DecayScore(
            key=item.key,
            tier=item.tier,
            kind=item.kind,
            base=item.base,
            access_count=item.access_count,
            last_access=item.last_access,
            score=float(score),
            scored_at=now,
            is_correction=item.is_correction,
            recent_uses=tuple(uses[m.id]),
        )
        for item, score, (_, m, _) in zip(items, scores, tracked, strict=True)
    ]


def memdir_export(*, workspace: Workspace, now: datetime | None = None) -> dict[str, str]:
    """The workspace rendered as ``{relative path: text}`` (``memdir.render_directory``)."""
    return memdir.render_directory(memdir_snapshot(workspace=workspace, now=now))


def memdir_zip(files: Mapping[str, str], *, root: str = ZIP_ROOT) -> bytes:
    """A zip of ``files`` under ``root``; the same files give the same bytes (fixed times, sorted names)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(root + path, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[path].encode("utf-8"))
    return buffer.getvalue()
