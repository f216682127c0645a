"""How the evolution dashboard shows a proposal: previews of what approving it would change, the cards of
the queue, and the formatting they share. Pure presentation over rows the views read; no request."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from django.urls import reverse
from django.utils import timezone

from core.errors import InvalidInput
from evolution import engine, engine_inputs, forgetting, merges, page_selectors, proposals
from evolution.algorithms.engine import REVIEW_TASK_TYPE
from evolution.models import Proposal, ProposalKind, ProposalStatus
from memories.models import EdgeType, Memory, MemoryType, Status
from memories.selectors import WorkspaceAccess
from memories.values import value_text
from memories.views import Change

EXCERPT: Final = 160
_SENTINEL: Final = uuid.UUID(int=0)


def excerpt(text: str, length: int = EXCERPT) -> str:
    flat = " ".join(str(text).split())
    return flat if len(flat) <= length else flat[: length - 1].rstrip() + "…"


def value_true_since(after: Mapping[str, Any], written: datetime) -> datetime:
    """When the value a REPLACE record wrote became true: the created_at of the memory it came from (an agent
    may post a preference of 25 days ago today), else the record's own time ``written``."""
    metadata = after.get("metadata")
    source = metadata.get("content_source") if isinstance(metadata, dict) else None
    raw = source.get("created_at") if isinstance(source, dict) else None
    if isinstance(raw, str):
        try:
            moment = datetime.fromisoformat(raw)
        except ValueError:
            return written
        if moment.tzinfo is not None:
            return min(moment, written)
    return written


class MemoryUrls:
    """Memory page URLs without a reverse() per link (a page links hundreds of memories)."""

    def __init__(self, ws: str) -> None:
        self.pattern = reverse("memories:detail", kwargs={"ws": ws, "memory_id": _SENTINEL})

    def __call__(self, memory_id: object) -> str:
        return self.pattern.replace(str(_SENTINEL), str(memory_id))


@dataclass(frozen=True)
class MemoryRef:
    """A linked memory: `memory` is None when it no longer exists (its id and history remain)."""

    id: str
    url: str
    memory: Memory | None

    @property
    def label(self) -> str:
        return excerpt(self.memory.content) if self.memory is not None else f"memory {self.id} (no longer exists)"


def memory_refs(ids: Sequence[Any], rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> list[MemoryRef]:
    return [MemoryRef(str(i), urls(i), rows.get(i)) for i in page_selectors.as_uuids(ids)]


@dataclass(frozen=True)
class RowChange:
    ref: MemoryRef
    changes: list[Change]
    reason: str = ""


@dataclass(frozen=True)
class NewMemory:
    memory_type: str
    subject: str
    content: str
    details: list[tuple[str, str]] = field(default_factory=list)


# -- proposals: previews --------------------------------------------------------------------------


@dataclass(frozen=True)
class Preview:
    """Exactly what approving would change: memories created, fields of existing memories, and why not."""

    creates: list[NewMemory] = field(default_factory=list)
    changes: list[RowChange] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def proposal_payload(proposal: Proposal) -> dict[str, Any]:
    return dict(proposal.payload) if isinstance(proposal.payload, dict) else {}


def _summary_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    payload = proposal_payload(proposal)
    sources = payload.get("summarizes") or proposal.source_ids
    confidence = payload.get("confidence", 0.7)
    preview = Preview(
        creates=[
            NewMemory(
                memory_type=str(payload.get("memory_type") or MemoryType.FACT),
                subject=str(payload.get("subject") or ""),
                content=str(payload.get("content") or ""),
                details=[
                    ("Confidence", f"{float(confidence):.2f}" if isinstance(confidence, int | float) else "—"),
                    ("Origin", f"evolver:{proposals.SUMMARY_EVOLVER} (tier 2)"),
                    ("Edges", f"SUMMARIZES each of the {len(page_selectors.as_uuids(sources))} sources"),
                ],
            )
        ],
        notes=["The sources keep their content and status; each only gets summarized_by set."],
    )
    for ref in memory_refs(sources, rows, urls):
        if ref.memory is None:
            preview.problems.append(f"Memory {ref.id} no longer exists: approving will be refused.")
            continue
        if ref.memory.summarized_by is not None:
            preview.problems.append(
                f"Memory {ref.id} was summarized by {ref.memory.summarized_by} since: approving will be refused."
            )
        preview.changes.append(RowChange(ref, [Change("summarized_by", "—", "the new summary")]))
    return preview


def _strategy_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    payload = proposal_payload(proposal)
    weight = payload.get("weight")
    task_type = payload.get("task_type") or ""
    preview = Preview(
        creates=[
            NewMemory(
                memory_type=MemoryType.STRATEGY,
                subject=str(task_type),
                content=str(payload.get("rule") or ""),
                details=[
                    ("Tier", "HOT (always loaded)"),
                    ("Origin", f"{engine.ENGINE_ORIGIN}; yours (user:) if you modify the rule"),
                    ("Weight", f"{float(weight):.2f}" if isinstance(weight, int | float) else "—"),
                ],
            )
        ],
        notes=[
            f"The world model records a success for this review (task type {REVIEW_TASK_TYPE}).",
            "Rejecting records a failure and lowers the weight of similar strategies by 0.7×.",
        ],
    )
    for ref in memory_refs(payload.get("supersedes") or [], rows, urls):
        m = ref.memory
        if m is None or m.status != Status.ACTIVE or m.memory_type != MemoryType.STRATEGY or m.origin_tier != 3:
            preview.notes.append(f"Rule {ref.id} is no longer an active engine rule: it stays as it is.")
            continue
        preview.changes.append(
            RowChange(
                ref,
                [Change("status", m.status, Status.SUPERSEDED), Change("superseded_by", "—", "the new rule")],
            )
        )
    return preview


def _conflict_preview(proposal: Proposal) -> Preview:
    options = proposal_payload(proposal).get("options") or []
    notes = [
        "Approving records your answer only; it changes no memory. To act, approve or reject the strategy "
        f"proposal #{proposal_payload(proposal).get('strategy_proposal')} it asks about."
    ]
    notes += [f"{o.get('origin', '?')}: {excerpt(str(o.get('content', '')))}" for o in options if isinstance(o, dict)]
    return Preview(notes=notes)


def _merge_value(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(str(v) for v in value) or "—"
    return value_text(value)


def _merge_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    """The fields each memory of the group would change, from the rows as they are now."""
    payload = proposal_payload(proposal)
    try:
        keep, merge = merges.merge_choice(payload)
    except InvalidInput as exc:
        return Preview(problems=[f"Not applicable as it stands: {exc.detail}"])
    preview = Preview(
        notes=[
            f"Each merged memory gets a {EdgeType.SUPERSEDES} edge from the kept one. Nothing is deleted; "
            "the change is one record that can be reverted exactly.",
        ]
    )
    refs = {ref.id: ref for ref in memory_refs([keep, *merge], rows, urls)}
    fields: dict[str, tuple[list[str], float]] = {}
    for mid, ref in refs.items():
        m = ref.memory
        if m is None:
            preview.problems.append(f"Memory {mid} no longer exists: approving will be refused.")
        elif m.status != Status.ACTIVE:
            preview.problems.append(f"Memory {mid} is {m.status} now: approving will be refused.")
        elif m.pinned:
            preview.problems.append(f"Memory {mid} was pinned since: approving will be refused.")
        else:
            fields[mid] = (list(m.tags or []), float(m.score.retention_score))
    if preview.problems:
        return preview
    before, after = merges.merge_plan(keep, merge, fields)
    kept = refs[keep]
    similarity = payload.get("similarity") if isinstance(payload.get("similarity"), dict) else {}
    for mid in [keep, *merge]:
        if mid not in after:
            continue
        changes = [
            Change(
                name,
                _merge_value(before[mid].get(name)),
                kept.label if name == "superseded_by" else _merge_value(value),
            )
            for name, value in after[mid].items()
        ]
        cos = similarity.get(mid) if similarity else None
        reason = "kept" if mid == keep else (f"cosine {float(cos):.4f} to the kept memory" if cos is not None else "")
        preview.changes.append(RowChange(refs[mid], changes, reason))
    if keep not in after:
        preview.notes.append("The kept memory already has every tag and the highest retention: it stays as it is.")
    return preview


def _reflection_preview(proposal: Proposal) -> Preview:
    payload = proposal_payload(proposal)
    content = engine_inputs.reflection_content(
        str(payload.get("context") or ""), str(payload.get("reflection") or ""), str(payload.get("lesson") or "")
    )
    return Preview(
        creates=[
            NewMemory(
                memory_type=MemoryType.REFLECTION,
                subject="",
                content=content,
                details=[
                    ("Topic", engine_inputs.DREAM_TOPIC),
                    ("Origin", f"{engine.DREAM_ORIGIN}; yours if you modify it"),
                ],
            )
        ],
        notes=["No other memory changes. The reflection is one record that can be reverted."],
    )


def _promotion_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    payload = proposal_payload(proposal)
    rule = str(payload.get("rule") or "")
    (target,) = memory_refs([payload["target"]], rows, urls) if isinstance(payload.get("target"), str) else (None,)
    linked = f"DERIVED_FROM each of the {len(proposal.source_ids)} source reflections"
    m = target.memory if target is not None else None
    if target is not None and m is not None and m.status == Status.ACTIVE:
        if m.tier == "hot":
            return Preview(problems=[f"Rule {target.id} is HOT already: approving will be refused."])
        return Preview(
            changes=[RowChange(target, [Change("tier", m.tier, "hot")], "the rule with this text")],
            notes=[f"New edges: {linked}. If you rewrite the rule, a new HOT rule is created instead."],
        )
    return Preview(
        creates=[
            NewMemory(
                memory_type=MemoryType.STRATEGY,
                subject=str(payload.get("task_type") or ""),
                content=rule,
                details=[
                    ("Tier", "HOT (always loaded)"),
                    ("Origin", f"{engine.ENGINE_ORIGIN}; yours (user:) if you modify the rule"),
                    ("Edges", linked),
                ],
            )
        ],
        notes=["No other memory changes. The rule and its edges are one record that can be reverted."],
    )


def _forget_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    """Each tombstone that approving would forget, from the rows as they are now."""
    payload = proposal_payload(proposal)
    try:
        ids = forgetting.forget_ids(payload, proposal.source_ids)
        after_days = forgetting.forget_after_days_of(payload)
    except InvalidInput as exc:
        return Preview(problems=[f"Not applicable as it stands: {exc.detail}"])
    preview = Preview(
        notes=[
            "Each memory becomes forgotten: it leaves every search and working context and its row keeps only "
            "its id, edges and history. Nothing is deleted: the change is one record that keeps what the rows "
            "held, and reverting it brings them back exactly. What people wrote is never forgotten this way."
        ]
    )
    now = timezone.now()
    for ref in memory_refs(ids, rows, urls):
        m = ref.memory
        why = "no longer exists" if m is None else forgetting.why_not_forgettable(m, after_days=after_days, now=now)
        if m is None or why:
            preview.problems.append(f"Memory {ref.id} is left as it is: {why}.")
            continue
        changes = [
            Change("compression_tier", "TOMBSTONE", "FORGOTTEN"),
            Change("status", str(m.status), Status.FORGOTTEN),
            Change("content", excerpt(m.content), "(empty)"),
        ]
        preview.changes.append(RowChange(ref, changes, f"{(now - m.created_at).days} days old"))
    if not preview.changes:
        preview.problems.append("No memory of this proposal can be forgotten now: approving will be refused.")
    return preview


def _generic_preview(proposal: Proposal) -> Preview:
    # Read-only look at the registry: the preview must say whether approval changes anything at all.
    if proposals._APPLIERS.get(proposal.kind) is None:
        return Preview(
            notes=[
                f"No change is registered for {proposal.kind} proposals: approving records the decision (who, "
                "when, why) and changes no memory."
            ]
        )
    return Preview(notes=[f"Approving applies this {proposal.kind} proposal through its registered applier."])


def proposal_preview(proposal: Proposal, rows: Mapping[uuid.UUID, Memory], urls: MemoryUrls) -> Preview:
    if proposal.kind == ProposalKind.SUMMARY:
        return _summary_preview(proposal, rows, urls)
    if proposal.kind == ProposalKind.STRATEGY:
        return _strategy_preview(proposal, rows, urls)
    if proposal.kind == ProposalKind.CONFLICT:
        return _conflict_preview(proposal)
    if proposal.kind == ProposalKind.MERGE:
        return _merge_preview(proposal, rows, urls)
    if proposal.kind == ProposalKind.REFLECTION:
        return _reflection_preview(proposal)
    if proposal.kind == ProposalKind.PROMOTION:
        return _promotion_preview(proposal, rows, urls)
    if proposal.kind == ProposalKind.FORGET:
        return _forget_preview(proposal, rows, urls)
    return _generic_preview(proposal)


@dataclass(frozen=True)
class Card:
    """One proposal as the queue shows it."""

    proposal: Proposal
    sources: list[MemoryRef]
    preview: Preview | None
    vetoes: list[str]
    evidence: list[str]
    payload_rows: list[tuple[str, str]]
    can_decide: bool
    notice: str = ""
    notice_kind: str = "error"
    reject_error: str = ""

    @property
    def pending(self) -> bool:
        return self.proposal.status == ProposalStatus.PENDING


# Payload keys the card shows elsewhere (the preview, the sources), left out of its "Payload" details.
_SHOWN_KEYS: Final = frozenset(
    {"content", "rule", "summarizes", "options", "vetoes", "evidence", "proposed"}
    | {"group", "contents", "before", "after"}
    | {"forget", "activation", "age_days"}
)


def proposal_card(
    access: WorkspaceAccess,
    proposal: Proposal,
    rows: Mapping[uuid.UUID, Memory],
    urls: MemoryUrls,
    **extra: Any,
) -> Card:
    payload = proposal_payload(proposal)
    pending = proposal.status == ProposalStatus.PENDING
    vetoes = payload.get("vetoes")
    evidence = payload.get("evidence")
    return Card(
        proposal=proposal,
        sources=memory_refs(proposal.source_ids, rows, urls),
        preview=proposal_preview(proposal, rows, urls) if pending else None,
        vetoes=[str(v) for v in vetoes] if isinstance(vetoes, list) else [],
        evidence=[str(e) for e in evidence] if isinstance(evidence, list) else [],
        payload_rows=[(k, value_text(v)) for k, v in payload.items() if k not in _SHOWN_KEYS],
        can_decide=pending and access.can_edit,
        **extra,
    )


def card_memory_ids(items: Sequence[Proposal]) -> list[Any]:
    ids: list[Any] = []
    for p in items:
        ids.extend(p.source_ids or ())
        payload = proposal_payload(p)
        ids.extend(payload.get("summarizes") or ())
        ids.extend(payload.get("supersedes") or ())
        if p.kind == ProposalKind.MERGE:
            ids.extend(payload.get("group") or ())
        if p.kind == ProposalKind.PROMOTION and isinstance(payload.get("target"), str):
            ids.append(payload["target"])
    return ids


def proposal_cards(access: WorkspaceAccess, items: Sequence[Proposal]) -> list[Card]:
    rows = page_selectors.memories_shown(workspace=access.workspace, ids=card_memory_ids(items))
    urls = MemoryUrls(access.workspace.slug)
    return [proposal_card(access, p, rows, urls) for p in items]


def one_proposal_card(access: WorkspaceAccess, proposal: Proposal, **extra: Any) -> Card:
    rows = page_selectors.memories_shown(workspace=access.workspace, ids=card_memory_ids([proposal]))
    return proposal_card(access, proposal, rows, MemoryUrls(access.workspace.slug), **extra)


def decided_words(proposal: Proposal) -> str:
    who = proposal.decided_by.get_username() if proposal.decided_by is not None else "the engine"
    when = f" at {proposal.decided_at:%Y-%m-%d %H:%M} UTC" if proposal.decided_at else ""
    return f"{proposal.status} by {who}{when}"
