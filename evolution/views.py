"""Pages of the evolution dashboard: where people approve or reject what the engine wants to change.

Thin adapters, as in memories.views: parse, authorize, call one service or selector, render. Every page
works without JavaScript (plain forms, POST then redirect with a message); an htmx request aimed at a swap
target gets just that partial (the same ``{% partialdef %}`` the full page renders) plus the messages as
an out-of-band swap. Members see everything; every POST needs an editor or owner (a viewer gets 403 and
sees no buttons), and a non-member gets 404 for every URL, like a workspace that does not exist.

Sections: the proposal queue (approve, reject with a reason, modify then approve, bulk), contradiction
clusters (keep one, keep both, edit), drift flags (acknowledge, pin), evolution runs (dry-run preview with
its diff, apply, live progress, revert a run or one record) and the engine (world model, evolve, dream,
export and import of the memory-evolution directory).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import Conflict, InvalidInput
from evolution import (
    curation,
    dream,
    engine,
    engine_selectors,
    jobs,
    memdir_export,
    memdir_import,
    page_selectors,
    presenters,
    proposals,
    scheduler,
    services,
)
from evolution.evolvers.base import REASONS
from evolution.forms import (
    ApproveForm,
    BulkDecisionForm,
    ContradictionForm,
    DreamForm,
    DriftForm,
    ImportForm,
    ModifyForm,
    RejectForm,
    RunStartForm,
    modify_form,
)
from evolution.models import (
    OPEN_REVERT_STATES,
    OPEN_STATUSES,
    DreamReport,
    EvolutionRun,
    Proposal,
    ProposalKind,
    ProposalStatus,
    RunStatus,
)
from evolution.typed_selectors import contradiction_clusters
from history import audit
from history.models import Action, EvolutionRecord
from history.revert import revertible
from memories import embedding_service
from memories import selectors as memory_selectors
from memories import services as memory_services
from memories.embeddings import embedder_for
from memories.forms import MemoryEditForm
from memories.inputs import MAX_INT
from memories.models import Memory, Status
from memories.selectors import WorkspaceAccess
from memories.values import value_text
from memories.views import Change, domain_errors
from memories.web import refusal, safe_next
from surfacing import services as surfacing_services

TABS: Final = ("pending", "decided", "vetoed")
QUEUE_PAGE: Final = 50
RECORDS_PAGE: Final = 40
MEMORIES_PER_RECORD: Final = 25
CLUSTER_LIMIT: Final = 50
# Record fields that say when, not what: left out of before/after tables.
_QUIET_FIELDS: Final = frozenset({"updated_at"})


# -- shared helpers -------------------------------------------------------------------------------


def _access(request: HttpRequest, ws: str) -> WorkspaceAccess:
    return memory_selectors.workspace_access(user=request.user, slug=ws)


def _edit(request: HttpRequest, ws: str) -> WorkspaceAccess:
    return memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")


def _target(request: HttpRequest) -> str | None:
    """The swap target of an htmx request (None for a full page load or an htmx history restore)."""
    htmx = getattr(request, "htmx", None)
    if not htmx or htmx.history_restore_request:
        return None
    target: str | None = htmx.target
    return target


def _partial(request: HttpRequest, template: str, context: dict[str, Any], status: int = 200) -> HttpResponse:
    """A partial plus the pending messages, swapped out of band into the page's #messages."""
    html = render_to_string(template, context, request=request)
    html += render_to_string("evolution/_messages.html", {"oob": True}, request=request)
    return HttpResponse(html, status=status)


def _int(raw: str | None) -> int:
    """A page cursor from the query string: garbage, negative or beyond a BIGINT reads as the first page."""
    try:
        value = int(raw or 0)
    except ValueError:
        return 0
    return value if 0 <= value <= MAX_INT else 0


def _url(name: str, ws: str, **kwargs: Any) -> str:
    return reverse(f"evolution:{name}", kwargs={"ws": ws, **kwargs})


def _revert_button(request: HttpRequest, ws: str, record_id: int, back: str, label: str = "Revert") -> str:
    """A POST button for a flash message (this session's CSRF token is valid on the next page)."""
    return format_html(
        '<form method="post" action="{}" class="inline">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<input type="hidden" name="next" value="{}">'
        '<button type="submit" class="link">{}</button></form>',
        _url("record-revert", ws, record_id=record_id),
        get_token(request),
        back,
        label,
    )


# -- counters -------------------------------------------------------------------------------------


@login_required
@require_GET
@domain_errors
def counts(request: HttpRequest, ws: str) -> HttpResponse:
    """Every proposal counter a page may show (the nav badges, the queue's tabs), each swapped out of band by id.

    Pages load it on ``counts-changed``, the event the htmx middleware triggers after an inline write; a page
    swaps the counters it holds. One grouped COUNT.
    """
    access = _access(request, ws)
    totals = page_selectors.proposal_counts(workspace=access.workspace)
    context = {"counts": totals, "decided_count": sum(totals[s] for s in page_selectors.DECIDED)}
    return render(request, "evolution/_counts.html", context)


# -- proposals: pages -----------------------------------------------------------------------------


QUEUE: Final = "evolution/proposals.html"


def _queue_context(request: HttpRequest, access: WorkspaceAccess, **extra: Any) -> dict[str, Any]:
    tab = request.GET.get("status") or "pending"
    tab = tab if tab in TABS else "pending"
    kind = request.GET.get("kind") or ""
    kind = kind if kind in ProposalKind.values else ""
    page = page_selectors.proposal_queue(
        workspace=access.workspace, tab=tab, kind=kind, after=_int(request.GET.get("after")), limit=QUEUE_PAGE
    )
    vetoed = page_selectors.vetoed_strategies(workspace=access.workspace) if tab == "pending" and not kind else []
    counts = page_selectors.proposal_counts(workspace=access.workspace)
    return {
        "access": access,
        "tab": tab,
        "kind": kind,
        "kinds": ProposalKind.values,
        "counts": counts,
        "decided_count": sum(counts[s] for s in page_selectors.DECIDED),
        "cards": presenters.proposal_cards(access, page.proposals),
        "vetoed": [(p, presenters.proposal_payload(p).get("vetoes") or [p.decision_reason]) for p in vetoed],
        "next_after": page.next_after,
        "queue_url": _url("proposals", access.workspace.slug),
        **extra,
    }


@login_required
@require_GET
@domain_errors
def proposal_queue(request: HttpRequest, ws: str) -> HttpResponse:
    access = _access(request, ws)
    context = _queue_context(request, access)
    if _target(request) == "proposal-queue":
        return render(request, f"{QUEUE}#queue", context)
    return render(request, QUEUE, context)


@login_required
@require_GET
@domain_errors
def proposal_detail(request: HttpRequest, ws: str, proposal_id: int) -> HttpResponse:
    access = _access(request, ws)
    proposal = _proposal(access, proposal_id)
    card = presenters.one_proposal_card(access, proposal)
    if _target(request) == f"proposal-{proposal.pk}":
        return render(request, f"{QUEUE}#card", {"access": access, "card": card})
    form = modify_form(proposal) if request.GET.get("modify") == "1" and card.can_decide else None
    return render(request, "evolution/proposal.html", {"access": access, "card": card, "form": form})


def _proposal(access: WorkspaceAccess, proposal_id: int) -> Proposal:
    proposal = page_selectors.proposal_one(workspace=access.workspace, proposal_id=proposal_id)
    if proposal is None:
        raise Http404(f"proposal {proposal_id} not found")
    return proposal


def _card_response(
    request: HttpRequest, access: WorkspaceAccess, proposal_id: int, status: int, **extra: Any
) -> HttpResponse:
    """The card of a proposal as it is now, for an htmx swap or a full page without JavaScript."""
    proposal = _proposal(access, proposal_id)
    card = presenters.one_proposal_card(access, proposal, **extra)
    if _target(request) == f"proposal-{proposal_id}":
        return _partial(request, f"{QUEUE}#card", {"access": access, "card": card}, status)
    if status < 400:
        return redirect(safe_next(request, _url("proposals", access.workspace.slug)))
    if card.notice:
        messages.error(request, card.notice)
    return render(request, "evolution/proposal.html", {"access": access, "card": card, "form": None}, status=status)


def _decide(
    request: HttpRequest, access: WorkspaceAccess, proposal_id: int, act: Callable[[], Proposal], *, form: Any = None
) -> HttpResponse:
    """Run one decision and answer: 409 (friendly) when already decided, 400 when the change is refused."""
    ws = access.workspace.slug
    try:
        decided = act()
    except Conflict as exc:
        if exc.code == "already_decided":
            current = _proposal(access, proposal_id)
            notice = (
                f"Proposal #{proposal_id} was already {presenters.decided_words(current)}, perhaps in another tab. "
                "Nothing was applied twice."
            )
        else:
            notice = f"Not applied: {exc.detail}"
        return _card_response(request, access, proposal_id, 409, notice=notice)
    except InvalidInput as exc:
        if form is not None:
            form.add_error(None, exc.detail)
            return _modify_response(request, access, _proposal(access, proposal_id), form, 400)
        return _card_response(request, access, proposal_id, 400, notice=f"Not applied: {exc.detail}")
    back = safe_next(request, _url("proposals", ws))
    text = f"Proposal #{decided.pk} {decided.status}: {decided.title}."
    if decided.applied_record_id is not None:
        undo = _revert_button(request, ws, decided.applied_record_id, back)
        messages.success(request, format_html("{} {}", text, undo))
    else:
        messages.success(request, text)
    return _card_response(request, access, proposal_id, 200)


@login_required
@require_POST
@domain_errors
def proposal_approve(request: HttpRequest, ws: str, proposal_id: int) -> HttpResponse:
    access = _edit(request, ws)
    form = ApproveForm(request.POST)
    reason = form.cleaned_data["reason"] if form.is_valid() else ""
    return _decide(
        request,
        access,
        proposal_id,
        lambda: proposals.proposal_approve(
            workspace=access.workspace, proposal_id=proposal_id, actor=request.user, reason=reason
        ),
    )


@login_required
@require_POST
@domain_errors
def proposal_reject(request: HttpRequest, ws: str, proposal_id: int) -> HttpResponse:
    access = _edit(request, ws)
    form = RejectForm(request.POST)
    if not form.is_valid():
        error = " ".join(str(e) for e in form.errors.get("reason", ["Not valid."]))
        return _card_response(request, access, proposal_id, 400, notice=f"Not rejected: {error}", reject_error=error)
    return _decide(
        request,
        access,
        proposal_id,
        lambda: proposals.proposal_reject(
            workspace=access.workspace, proposal_id=proposal_id, actor=request.user, reason=form.cleaned_data["reason"]
        ),
    )


def _modify_response(
    request: HttpRequest, access: WorkspaceAccess, proposal: Proposal, form: ModifyForm, status: int
) -> HttpResponse:
    card = presenters.one_proposal_card(access, proposal)
    context = {"access": access, "card": card, "form": form}
    if _target(request) == f"proposal-{proposal.pk}":
        return _partial(request, f"{QUEUE}#modify", context, status)
    return render(request, "evolution/proposal.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
@domain_errors
def proposal_modify(request: HttpRequest, ws: str, proposal_id: int) -> HttpResponse:
    """Modify then approve: the form of the proposal's kind; the reviewer's values are what is applied."""
    access = _edit(request, ws)
    proposal = _proposal(access, proposal_id)
    if request.method == "GET":
        if proposal.status != ProposalStatus.PENDING:
            notice = f"Proposal #{proposal_id} was already {presenters.decided_words(proposal)}."
            return _card_response(request, access, proposal_id, 409, notice=notice)
        if _target(request) != f"proposal-{proposal_id}":
            return redirect(_url("proposal", ws, proposal_id=proposal_id) + "?modify=1")
        return _modify_response(request, access, proposal, modify_form(proposal), 200)
    form = modify_form(proposal, request.POST)
    if not form.is_valid():
        return _modify_response(request, access, proposal, form, 400)
    return _decide(
        request,
        access,
        proposal_id,
        lambda: proposals.proposal_approve(
            workspace=access.workspace,
            proposal_id=proposal_id,
            actor=request.user,
            payload=form.payload(),
            reason=form.cleaned_data.get("reason") or "",
        ),
        form=form,
    )


@login_required
@require_POST
@domain_errors
def proposal_bulk(request: HttpRequest, ws: str) -> HttpResponse:
    access = _edit(request, ws)
    form = BulkDecisionForm(request.POST)
    status = 200
    if not form.is_valid():
        messages.error(request, "Nothing decided: " + " ".join(str(e) for errs in form.errors.values() for e in errs))
        status = 400
    else:
        approve = form.cleaned_data["decision"] == "approve"
        outcome = curation.proposals_decide(
            workspace=access.workspace,
            ids=form.cleaned_data["ids"],
            approve=approve,
            actor=request.user,
            reason=form.cleaned_data["reason"],
        )
        if outcome.decided:
            verb = "Approved" if approve else "Rejected"
            messages.success(
                request, f"{verb} {len(outcome.decided)}: " + ", ".join(f"#{p.pk}" for p in outcome.decided) + "."
            )
        for pk, detail in outcome.already:
            messages.warning(request, f"#{pk} was not decided again: {detail}. Nothing was applied twice.")
        for pk, detail in outcome.failed:
            messages.error(request, f"#{pk} not decided: {detail}")
        if not outcome.decided:
            status = 409 if outcome.already and not outcome.failed else 400
    if _target(request) == "proposal-queue":
        return _partial(request, f"{QUEUE}#queue", _queue_context(request, access), status)
    return redirect(safe_next(request, _url("proposals", ws)))


# -- contradictions -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterView:
    key: str
    ids: list[str]
    members: list[presenters.MemoryRef]


@dataclass(frozen=True)
class HistoryEntry:
    record: EvolutionRecord
    revertible: bool


def _history(records: Sequence[EvolutionRecord]) -> list[HistoryEntry]:
    return [HistoryEntry(r, r.reverted_at is None and r.action != Action.REVERT) for r in records]


def _contradictions_context(access: WorkspaceAccess, **extra: Any) -> dict[str, Any]:
    page = contradiction_clusters(workspace=access.workspace, limit=CLUSTER_LIMIT)
    urls = presenters.MemoryUrls(access.workspace.slug)
    clusters = [
        ClusterView(
            key=c.ids[0],
            ids=c.ids,
            members=[
                presenters.MemoryRef(str(m.id), urls(m.id), m) for m in sorted(c.memories, key=lambda m: m.created_at)
            ],
        )
        for c in page.clusters
    ]
    records = page_selectors.curation_records(
        workspace=access.workspace, actions=[Action.SUPERSEDE, Action.RESOLVE, Action.UPDATE]
    )
    return {
        "access": access,
        "clusters": clusters,
        "total": page.total,
        "history": _history(records),
        "here": _url("contradictions", access.workspace.slug),
        **extra,
    }


CONTRADICTIONS: Final = "evolution/contradictions.html"


@login_required
@require_GET
@domain_errors
def contradictions(request: HttpRequest, ws: str) -> HttpResponse:
    access = _access(request, ws)
    context = _contradictions_context(access)
    if _target(request) == "contradictions-body":
        return render(request, f"{CONTRADICTIONS}#body", context)
    return render(request, CONTRADICTIONS, context)


def _contradictions_answer(request: HttpRequest, access: WorkspaceAccess, status: int) -> HttpResponse:
    if _target(request) == "contradictions-body":
        return _partial(request, f"{CONTRADICTIONS}#body", _contradictions_context(access), status)
    if status >= 400:
        return render(request, CONTRADICTIONS, _contradictions_context(access), status=status)
    return redirect(_url("contradictions", access.workspace.slug))


@login_required
@require_POST
@domain_errors
def contradiction_resolve(request: HttpRequest, ws: str) -> HttpResponse:
    access = _edit(request, ws)
    form = ContradictionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not resolved: " + " ".join(str(e) for errs in form.errors.values() for e in errs))
        return _contradictions_answer(request, access, 400)
    data = form.cleaned_data
    try:
        if data["action"] == "keep_one":
            record = curation.contradiction_keep_one(
                workspace=access.workspace, ids=data["ids"], keep_id=data["keep"], actor=request.user, note=data["note"]
            )
            done = f"Kept one memory and superseded {len(data['ids']) - 1}."
        else:
            record = curation.contradiction_keep_both(
                workspace=access.workspace, ids=data["ids"], actor=request.user, note=data["note"]
            )
            done = f"Kept all {len(data['ids'])} memories and marked the contradiction reviewed."
    except Conflict as exc:
        messages.error(request, f"Not resolved: {exc.detail}")
        return _contradictions_answer(request, access, 409)
    except InvalidInput as exc:
        messages.error(request, f"Not resolved: {exc.detail}")
        return _contradictions_answer(request, access, 400)
    back = _url("contradictions", ws)
    messages.success(request, format_html("{} {}", done, _revert_button(request, ws, record.pk, back)))
    return _contradictions_answer(request, access, 200)


@login_required
@require_POST
@domain_errors
def contradiction_edit(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    """Edit one side of a contradiction in place (recorded and revertible like any edit of a person)."""
    access = _edit(request, ws)
    memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    form = MemoryEditForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Not saved: " + " ".join(str(e) for errs in form.errors.values() for e in errs))
        return _contradictions_answer(request, access, 400)
    memory_services.memory_update(
        workspace=access.workspace, memory=memory, actor=request.user, changes={"content": form.cleaned_data["content"]}
    )
    history = presenters.MemoryUrls(ws)(memory.id) + "#memory-history"
    messages.success(
        request,
        format_html('Saved the new content; its <a href="{}">history</a> can revert it.', history),
    )
    return _contradictions_answer(request, access, 200)


# -- drift ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReplaceChange:
    at: datetime
    before: str
    after: str
    origin: str
    record_id: int


@dataclass(frozen=True)
class DriftRow:
    memory: Memory
    url: str
    label: str
    open: list[dict[str, Any]]
    acknowledged: list[dict[str, Any]]
    replace_times: list[str]
    changes: list[ReplaceChange]


def _slot(memory: Memory) -> str:
    return f"{memory.memory_type}[{memory.subject}]" if memory.subject else memory.memory_type


def _drift_rows(access: WorkspaceAccess, memories: Sequence[Memory]) -> list[DriftRow]:
    ids = [m.id for m in memories]
    records = page_selectors.replace_records(workspace=access.workspace, ids=ids)
    changes: dict[str, list[ReplaceChange]] = {}
    for record in records:
        for key, after in record.after.items():
            before = record.before.get(key)
            if isinstance(after, dict) and isinstance(before, dict) and "content" in after:
                changes.setdefault(key, []).append(
                    ReplaceChange(
                        presenters.value_true_since(after, record.timestamp),
                        value_text(before.get("content")),
                        value_text(after.get("content")),
                        str(after.get("origin") or ""),
                        record.pk,
                    )
                )
    for timeline in changes.values():
        timeline.sort(key=lambda c: c.at, reverse=True)
    urls = presenters.MemoryUrls(access.workspace.slug)
    rows = []
    for memory in memories:
        flags = [f for f in memory.drift_flags or () if isinstance(f, dict)]
        rows.append(
            DriftRow(
                memory=memory,
                url=urls(memory.id),
                label=_slot(memory),
                open=[f for f in flags if not f.get("acknowledged_at")],
                acknowledged=[f for f in flags if f.get("acknowledged_at")],
                replace_times=sorted((str(t) for t in memory.replace_log or ()), reverse=True),
                changes=changes.get(str(memory.id), []),
            )
        )
    return rows


DRIFT: Final = "evolution/drift.html"


@login_required
@require_GET
@domain_errors
def drift(request: HttpRequest, ws: str) -> HttpResponse:
    access = _access(request, ws)
    rows = _drift_rows(access, page_selectors.drifting_memories(workspace=access.workspace))
    history = page_selectors.curation_records(workspace=access.workspace, actions=[Action.ANNOTATE])
    context = {
        "access": access,
        "rows": rows,
        "open_count": sum(1 for r in rows if r.open),
        "history": _history(history),
        "here": _url("drift", ws),
    }
    if _target(request) == "drift-summary":
        return render(request, f"{DRIFT}#summary", context)
    return render(request, DRIFT, context)


@login_required
@require_POST
@domain_errors
def drift_acknowledge(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    """Acknowledge a memory's drift (or pin its current value): the row is swapped, or the page reloads."""
    access = _edit(request, ws)
    form = DriftForm(request.POST)
    pin = bool(form.is_valid() and form.cleaned_data["pin"])
    status = 200
    try:
        record = curation.drift_acknowledge(
            workspace=access.workspace, memory_id=memory_id, actor=request.user, pin=pin
        )
    except Conflict as exc:
        messages.info(request, exc.detail)
        status = 409
    else:
        done = "Pinned the current value and acknowledged its drift." if pin else "Drift acknowledged."
        messages.success(request, format_html("{} {}", done, _revert_button(request, ws, record.pk, _url("drift", ws))))
    if _target(request) == f"drift-{memory_id}":
        memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
        (row,) = _drift_rows(access, [memory])
        return _partial(request, f"{DRIFT}#row", {"access": access, "row": row}, status)
    return redirect(_url("drift", ws))


# -- runs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordView:
    """One record of a run: per memory the fields before and after, the memories it creates."""

    record: EvolutionRecord
    rows: list[presenters.RowChange]
    more: int
    creates: list[tuple[str, str]]
    revertible: bool


def _memory_keys(record: EvolutionRecord) -> list[str]:
    keys = dict.fromkeys(k for k in (*record.before, *record.after) if k not in (REASONS,))
    return [k for k in keys if page_selectors.as_uuids([k])]


def _record_view(record: EvolutionRecord, rows: Mapping[uuid.UUID, Memory], urls: presenters.MemoryUrls) -> RecordView:
    keys = _memory_keys(record)
    reasons = record.after.get(REASONS) if isinstance(record.after.get(REASONS), dict) else {}
    changes: list[presenters.RowChange] = []
    for key in keys[:MEMORIES_PER_RECORD]:
        before, after = audit.memory_fields(record, key)
        names = [n for n in dict.fromkeys([*before, *after]) if n not in _QUIET_FIELDS and n != "embedding"]
        (mid,) = page_selectors.as_uuids([key])
        changes.append(
            presenters.RowChange(
                presenters.MemoryRef(key, urls(key), rows.get(mid)),
                [Change(n, value_text(before.get(n)), value_text(after.get(n))) for n in names],
                str((reasons or {}).get(key) or ""),
            )
        )
    planned = record.after.get("planned") or record.after.get("contents") or {}
    creates = (
        [(str(k), presenters.excerpt(str(v), 300)) for k, v in planned.items()] if isinstance(planned, dict) else []
    )
    payload = record.after.get("payload")
    if isinstance(payload, dict) and payload.get("content"):
        creates.append(("proposal", f"proposes: {presenters.excerpt(str(payload['content']), 300)}"))
    return RecordView(
        record=record,
        rows=changes,
        more=max(0, len(keys) - MEMORIES_PER_RECORD),
        creates=creates,
        revertible=revertible(record),
    )


def run_context(access: WorkspaceAccess, run: EvolutionRun, *, after: int = 0) -> dict[str, Any]:
    """Everything the run body shows; also used by the progress socket to push the same partial."""
    records, next_after = page_selectors.run_records_page(run=run, after=after, limit=RECORDS_PAGE)
    ids = [k for r in records for k in _memory_keys(r)[:MEMORIES_PER_RECORD]]
    rows = page_selectors.memories_shown(workspace=access.workspace, ids=ids)
    urls = presenters.MemoryUrls(access.workspace.slug)
    progress = run.progress or {}
    total = int(progress.get("total") or len(run.evolvers) or 1)
    done = int(progress.get("done") or 0)
    finished = run.status not in OPEN_STATUSES
    undo = (run.summary or {}).get(jobs.REVERT_SUMMARY) or {}
    reverting = finished and run.revert_state in OPEN_REVERT_STATES
    return {
        "access": access,
        "run": run,
        "finished": finished,
        # The page follows the run while it works, then its revert while that is queued or under way.
        "live": not finished or reverting,
        "reverting": reverting,
        "undo": undo,
        "undo_percent": round(100 * int(undo.get("reverted") or 0) / int(undo.get("records") or 1)),
        "progress_done": done,
        "progress_total": total,
        "progress_percent": round(100 * done / total) if total else 100,
        "progress_evolver": progress.get("evolver") or "",
        "outcomes": (run.summary or {}).get("evolvers", []),
        "counts": page_selectors.run_action_counts(run=run) if finished else [],
        "records": [_record_view(r, rows, urls) for r in records],
        "after": after,
        "next_after": next_after,
        "revertible_left": page_selectors.revertible_left(run=run)
        if finished and not reverting and not run.dry_run and run.status != RunStatus.REVERTED
        else 0,
        "run_url": _url("run", access.workspace.slug, run_id=run.id),
        "progress_url": _url("run-progress", access.workspace.slug, run_id=run.id),
        "apply_url": _url("run-apply", access.workspace.slug, run_id=run.id),
        "revert_url": _url("run-revert", access.workspace.slug, run_id=run.id),
        "cancel_url": _url("run-cancel", access.workspace.slug, run_id=run.id),
    }


RUNS: Final = "evolution/runs.html"
RUN: Final = "evolution/run.html"


def _runs_page(
    request: HttpRequest,
    access: WorkspaceAccess,
    form: RunStartForm,
    status: int = 200,
    schedule_error: str = "",
    schedule: str = jobs.SCHEDULE_SETTING,
) -> HttpResponse:
    runs = page_selectors.run_history(workspace=access.workspace)
    hours = jobs.schedule_hours(access.workspace)
    last = page_selectors.last_scheduled_run(workspace=access.workspace) if hours else None
    dream_hours = jobs.schedule_hours(access.workspace, jobs.DREAM_SCHEDULE_SETTING)
    job_rows = scheduler.job_rows(workspace=access.workspace)
    dream_last = job_rows.get("dream")
    dream_last_at = dream_last.last_run_at if dream_last is not None else None
    context = {
        "access": access,
        "form": form,
        "runs": runs,
        "schedule_hours": hours,
        "schedule_last": last,
        "schedule_next": (last.started_at + timedelta(hours=hours)) if last is not None else None,
        "schedule_error": schedule_error if schedule != jobs.DREAM_SCHEDULE_SETTING else "",
        "dream_hours": dream_hours,
        "dream_last": dream_last_at,
        "dream_next": dream_last_at + timedelta(hours=dream_hours) if dream_last_at and dream_hours else None,
        "dream_error": schedule_error if schedule == jobs.DREAM_SCHEDULE_SETTING else "",
        "background_jobs": [
            (label, job_rows.get(name)) for name, label in scheduler.JOB_LABELS.items() if name in job_rows
        ],
        "vectors_waiting": embedding_service.pending_vectors(workspace=access.workspace).count(),
        "embedder_name": embedder_for(access.workspace).name,
    }
    return render(request, RUNS, context, status=status)


@login_required
@require_POST
@domain_errors
def run_schedule(request: HttpRequest, ws: str) -> HttpResponse:
    """Set the workspace's scheduled applied cycle, or with ``schedule=dream`` its scheduled dream (hours
    between them; 0 turns it off), audited as a settings change; a worker's scheduler works it when due."""
    access = _edit(request, ws)
    key = jobs.DREAM_SCHEDULE_SETTING if request.POST.get("schedule") == "dream" else jobs.SCHEDULE_SETTING
    raw = request.POST.get("hours", "").strip()
    try:
        hours = float(raw)
    except ValueError:
        return _runs_page(request, access, RunStartForm(), 400, f"hours: {raw!r} is not a number", key)
    try:
        surfacing_services.settings_update(workspace=access.workspace, actor=request.user, evolution={key: hours})
    except InvalidInput as exc:
        return _runs_page(request, access, RunStartForm(), 400, exc.detail, key)
    if key == jobs.DREAM_SCHEDULE_SETTING:
        messages.success(request, f"Dream every {hours:g} h." if hours else "Scheduled dream turned off.")
    else:
        messages.success(request, f"Applied cycle every {hours:g} h." if hours else "Scheduled cycle turned off.")
    return redirect(_url("runs", ws))


@login_required
@require_GET
@domain_errors
def runs(request: HttpRequest, ws: str) -> HttpResponse:
    return _runs_page(request, _access(request, ws), RunStartForm())


@login_required
@require_POST
@domain_errors
def run_start(request: HttpRequest, ws: str) -> HttpResponse:
    """Preview (dry run) or apply the chosen evolvers; the run page then follows its progress."""
    access = _edit(request, ws)
    form = RunStartForm(request.POST)
    if not form.is_valid():
        return _runs_page(request, access, form, 400)
    try:
        run = jobs.run_enqueue(
            workspace=access.workspace, actor=request.user, evolvers=form.cleaned_data["evolvers"], dry_run=form.dry_run
        )
    except InvalidInput as exc:
        form.add_error("evolvers", exc.detail)
        return _runs_page(request, access, form, 400)
    except Conflict as exc:
        form.add_error(None, exc.detail)
        return _runs_page(request, access, form, 409)
    return redirect(_url("run", ws, run_id=run.id))


def _run(access: WorkspaceAccess, run_id: uuid.UUID) -> EvolutionRun:
    run = page_selectors.run_one(workspace=access.workspace, run_id=run_id)
    if run is None:
        raise Http404(f"run {run_id} not found")
    return run


@login_required
@require_GET
@domain_errors
def run_detail(request: HttpRequest, ws: str, run_id: uuid.UUID) -> HttpResponse:
    access = _access(request, ws)
    run = _run(access, run_id)
    context = run_context(access, run, after=_int(request.GET.get("after")))
    if _target(request) == "run-body":
        return render(request, f"{RUN}#run_body", context)
    return render(request, RUN, context)


@login_required
@require_GET
@domain_errors
def run_progress(request: HttpRequest, ws: str, run_id: uuid.UUID) -> HttpResponse:
    """Polling fallback of the progress socket: the same run body partial."""
    access = _access(request, ws)
    run = _run(access, run_id)
    if _target(request) is None:
        return redirect(_url("run", ws, run_id=run.id))
    return render(request, f"{RUN}#run_body", run_context(access, run))


@login_required
@require_POST
@domain_errors
def run_apply(request: HttpRequest, ws: str, run_id: uuid.UUID) -> HttpResponse:
    """Apply the evolvers a dry run previewed (a new run: the workspace may have changed since)."""
    access = _edit(request, ws)
    preview = _run(access, run_id)
    if not preview.dry_run or preview.status in OPEN_STATUSES:
        messages.error(request, "Only a finished preview (dry run) can be applied from here.")
        return redirect(_url("run", ws, run_id=preview.id))
    try:
        run = jobs.run_enqueue(workspace=access.workspace, actor=request.user, evolvers=preview.evolvers, dry_run=False)
    except Conflict as exc:
        messages.error(request, f"Not started: {exc.detail}")
        return redirect(_url("run", ws, run_id=preview.id))
    return redirect(_url("run", ws, run_id=run.id))


@login_required
@require_POST
@domain_errors
def run_cancel(request: HttpRequest, ws: str, run_id: uuid.UUID) -> HttpResponse:
    """Cancel a queued run, or stop a running one before its next write transaction."""
    access = _edit(request, ws)
    run = _run(access, run_id)
    try:
        now = jobs.run_cancel(workspace=access.workspace, run=run, actor=request.user)
    except Conflict as exc:
        messages.error(request, f"Not cancelled: {exc.detail}")
    else:
        stopped = now.status == RunStatus.CANCELLED
        stopping = "Stopping before the run's next write: what it wrote stays and can be reverted."
        messages.success(request, "Cancelled." if stopped else stopping)
    return redirect(_url("run", ws, run_id=run.id))


@login_required
@require_POST
@domain_errors
def run_revert(request: HttpRequest, ws: str, run_id: uuid.UUID) -> HttpResponse:
    """Revert the run: at once when few records are left to undo, else in the background (the run page then
    follows the revert's progress as it follows a run's)."""
    access = _edit(request, ws)
    run = _run(access, run_id)
    try:
        answer = services.run_revert_request(workspace=access.workspace, run=run, actor=request.user)
    except Conflict as exc:
        messages.error(request, f"Not reverted: {exc.detail}")
    else:
        if answer.queued:
            records = int((answer.run.summary.get(jobs.REVERT_SUMMARY) or {}).get("records") or 0)
            messages.success(
                request,
                f"Reverting the run in the background: {records} record{'' if records == 1 else 's'}, newest first. "
                "This page shows how far it has come.",
            )
        else:
            messages.success(request, f"Reverted the run: {len(answer.reverts)} records undone.")
    return redirect(safe_next(request, _url("run", ws, run_id=run.id)))


@login_required
@require_POST
@domain_errors
def record_revert(request: HttpRequest, ws: str, record_id: int) -> HttpResponse:
    access = _edit(request, ws)
    back = safe_next(request, _url("runs", ws))
    try:
        memory_services.record_revert(workspace=access.workspace, record_id=record_id, actor=request.user)
    except Conflict as exc:
        messages.error(request, refusal(ws, exc))
    else:
        messages.success(request, f"Reverted record {record_id}.")
    return redirect(back)


# -- engine ---------------------------------------------------------------------------------------


ENGINE: Final = "evolution/engine.html"


def _engine_page(request: HttpRequest, access: WorkspaceAccess, status: int = 200, **extra: Any) -> HttpResponse:
    outcomes, _ = engine_selectors.outcome_list(workspace=access.workspace, limit=20)
    model = engine_selectors.world_model_for(access.workspace)
    rules = engine_selectors.strategy_rules(workspace=access.workspace, statuses=(Status.ACTIVE, Status.ARCHIVED))
    context = {
        "access": access,
        "model": model,
        "outcomes": outcomes,
        "rules": rules[:50],
        "reports": dream.dream_report_list(workspace=access.workspace, limit=10),
        "pending": page_selectors.proposal_counts(workspace=access.workspace)[ProposalStatus.PENDING],
        "import_form": extra.pop("import_form", None) or ImportForm(),
        **extra,
    }
    return render(request, ENGINE, context, status=status)


@login_required
@require_GET
@domain_errors
def engine_page(request: HttpRequest, ws: str) -> HttpResponse:
    return _engine_page(request, _access(request, ws))


@login_required
@require_POST
@domain_errors
def engine_evolve(request: HttpRequest, ws: str) -> HttpResponse:
    access = _edit(request, ws)
    result = engine.engine_evolve(workspace=access.workspace)
    if result.empty:
        messages.info(request, "No lesson was seen 3 times within 7 days without a proposal: nothing new to propose.")
    else:
        messages.success(
            request,
            format_html(
                '{} new proposal(s), {} vetoed by the covenant, {} question(s). <a href="{}">Review them</a>.',
                len(result.created),
                len(result.vetoed),
                len(result.questions),
                _url("proposals", ws),
            ),
        )
    return redirect(_url("engine", ws))


DREAM: Final = "evolution/dream.html"


def _dream_context(access: WorkspaceAccess, report: DreamReport) -> dict[str, Any]:
    data = report.report or {}
    urls = presenters.MemoryUrls(access.workspace.slug)

    def linked(entries: Any) -> list[dict[str, Any]]:
        return [{**e, "url": urls(e.get("memory_id"))} for e in entries or () if isinstance(e, dict)]

    return {
        "access": access,
        "report": report,
        "data": data,
        "moves": [(name, linked(data.get(name))) for name in ("promoted", "demoted", "archived")],
        "lowest": linked(data.get("lowest")),
        "reflections": data.get("reflections") or [],
        "pending": data.get("pending_proposals") or [],
        "here": _url("dream-report", access.workspace.slug, report_id=report.pk) if report.pk else "",
    }


@login_required
@require_POST
@domain_errors
def engine_dream(request: HttpRequest, ws: str) -> HttpResponse:
    """Run the dream cycle (or preview it: the report of a dry run is shown, nothing is stored)."""
    access = _edit(request, ws)
    form = DreamForm(request.POST)
    dry_run = bool(form.is_valid() and form.cleaned_data["dry_run"])
    report = dream.dream_run(workspace=access.workspace, actor=request.user, dry_run=dry_run)
    if dry_run:
        return render(request, DREAM, _dream_context(access, report))
    counts = report.report.get("counts", {})
    messages.success(
        request,
        f"Dream done: {counts.get('promoted', 0)} promoted, {counts.get('demoted', 0)} demoted, "
        f"{counts.get('archived', 0)} archived; {counts.get('pending_proposals', 0)} proposal(s) wait.",
    )
    return redirect(_url("dream-report", ws, report_id=report.pk))


@login_required
@require_GET
@domain_errors
def dream_report(request: HttpRequest, ws: str, report_id: int) -> HttpResponse:
    access = _access(request, ws)
    report = dream.dream_report_get(workspace=access.workspace, report_id=report_id)
    return render(request, DREAM, _dream_context(access, report))


@login_required
@require_GET
@domain_errors
def engine_export(request: HttpRequest, ws: str) -> HttpResponse:
    access = _access(request, ws)
    files = memdir_export.memdir_export(workspace=access.workspace)
    response = HttpResponse(memdir_export.memdir_zip(files), content_type="application/zip")
    response["Content-Disposition"] = f'attachment; filename="memory-evolution-{access.workspace.slug}.zip"'
    return response


@login_required
@require_POST
@domain_errors
def engine_import(request: HttpRequest, ws: str) -> HttpResponse:
    """Import a zipped memory-evolution directory: all of it, or nothing and every problem listed."""
    access = _edit(request, ws)
    form = ImportForm(request.POST, request.FILES)
    if not form.is_valid():
        return _engine_page(request, access, 400, import_form=form)
    upload = form.cleaned_data["file"]
    try:
        files = memdir_import.memdir_files_from_upload({"file": upload})
        summary = memdir_import.memdir_import(workspace=access.workspace, files=files, actor=request.user)
    except memdir_import.DirectoryInvalid as exc:
        return _engine_page(request, access, 400, import_form=form, import_problems=list(exc.problems))
    except InvalidInput as exc:
        form.add_error("file", exc.detail.removeprefix("file: "))
        return _engine_page(request, access, 400, import_form=form)
    created = ", ".join(f"{n} {k}" for k, n in summary.created.items() if n) or "nothing new"
    skipped = sum(summary.skipped.values())
    messages.success(request, f"Imported {created}" + (f"; {skipped} already here were skipped." if skipped else "."))
    return redirect(_url("engine", ws))
