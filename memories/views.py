"""Pages of the memory browser (thin: parse, authorize, call a selector or service, render).

Every page renders in full without JavaScript; an htmx request that names a swap target gets just
that partial (the same `{% partialdef %}` the full page renders), so htmx only makes pages faster.
Charts are inline SVG computed here from plain numbers, so they need no JavaScript either.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import wraps
from typing import Any, ParamSpec

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import Conflict, Forbidden, InvalidInput, NotFound
from history import audit
from history.audit import CREATED_MEMORIES
from history.models import EvolutionRecord
from history.revert import revertible
from memories import fragments, selectors, services, tokens
from memories.charts import DECAY_DAYS, activation_now, decay_chart, history_chart
from memories.forms import (
    BULK_LABELS,
    BulkActionForm,
    MemoryCreateForm,
    MemoryDeleteForm,
    MemoryEditForm,
    MemoryListForm,
    delete_phrase,
)
from memories.fragments import Row
from memories.models import CompressionTier, Edge, Memory, Status
from memories.selectors import WorkspaceAccess
from memories.values import value_text
from memories.web import refusal, safe_next

P = ParamSpec("P")
PAGE_SIZE = 50
HISTORY_LIMIT = 50
EDGE_LIMIT = 200
FRESH_TOKEN_KEY = "memories.fresh_api_token"
"""Session key of a token key issued a moment ago, until the page that shows it once pops it."""


def domain_errors(view: Callable[P, HttpResponse]) -> Callable[P, HttpResponse]:
    """Map domain errors to HTTP: a non-member sees 404 (never a hint), a viewer's write 403."""

    @wraps(view)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> HttpResponse:
        try:
            return view(*args, **kwargs)
        except NotFound as exc:
            raise Http404(exc.detail) from exc
        except Forbidden as exc:
            raise PermissionDenied(exc.detail) from exc

    return wrapper


def _is_partial(request: HttpRequest, target: str) -> bool:
    """True for an htmx request aimed at one swap target (a history restore needs the full page)."""
    htmx = getattr(request, "htmx", None)
    if not htmx:
        return False
    return not htmx.history_restore_request and htmx.target == target


def _list_url(ws: str) -> str:
    return reverse("memories:list", kwargs={"ws": ws})


def _detail_url(ws: str, memory_id: uuid.UUID) -> str:
    return reverse("memories:detail", kwargs={"ws": ws, "memory_id": memory_id})


def _revert_form(request: HttpRequest, ws: str, record: EvolutionRecord, back: str) -> str:
    """A POST button for a flash message; this session's CSRF token is still valid on the next page."""
    return format_html(
        '<form method="post" action="{}" class="inline">'
        '<input type="hidden" name="csrfmiddlewaretoken" value="{}">'
        '<input type="hidden" name="next" value="{}">'
        '<button type="submit" class="link">Revert</button></form>',
        reverse("memories:revert", kwargs={"ws": ws, "record_id": record.pk}),
        get_token(request),
        back,
    )


def _edit_access(request: HttpRequest, ws: str) -> WorkspaceAccess:
    return selectors.workspace_access(user=request.user, slug=ws, require="edit")


# -- home and list --------------------------------------------------------------------------------


@login_required
@require_GET
def home(request: HttpRequest) -> HttpResponse:
    workspaces = selectors.workspace_list_for_user(user=request.user)
    chosen = request.GET.get("ws")
    for access in workspaces:
        if access.workspace.slug == chosen or (not chosen and len(workspaces) == 1):
            return redirect(access.workspace.get_absolute_url())
    return render(request, "memories/home.html", {"workspaces": workspaces})


class RowBuilder:
    """Builds Rows for one workspace: URLs come from one reverse() each and a string substitution."""

    _PLACEHOLDER = uuid.UUID(int=0)

    def __init__(self, ws: str, now: datetime) -> None:
        self.now = now
        self.urls = {
            name: reverse(f"memories:{name}", kwargs={"ws": ws, "memory_id": self._PLACEHOLDER})
            for name in ("detail", "archive", "restore")
        }

    def _url(self, name: str, memory_id: uuid.UUID) -> str:
        return self.urls[name].replace(str(self._PLACEHOLDER), str(memory_id))

    def __call__(self, memory: Memory) -> Row:
        accessed = memory.last_accessed
        return Row(
            memory=memory,
            bar=fragments.bar(memory, activation_now(memory, self.now)),
            retention=f"{memory.score.retention_score:.2f}",
            url=self._url("detail", memory.id),
            action_url=self._url("restore" if memory.status == "archived" else "archive", memory.id),
            excerpt=_truncate(memory.content, 180),
            label=_truncate(memory.content, 50),
            created=fragments.moment(memory.created_at, with_time=False),
            accessed=fragments.moment(accessed, with_time=False) if accessed else None,
        )


def _truncate(text: str, length: int) -> str:
    return text if len(text) <= length else text[: length - 1].rstrip() + "…"


@login_required
@require_GET
@domain_errors
def memory_list(request: HttpRequest, ws: str) -> HttpResponse:
    access = selectors.workspace_access(user=request.user, slug=ws)
    form = MemoryListForm(request.GET)
    rows: list[Row] = []
    next_cursor: str | None = None
    previous_cursor: str | None = None
    error = ""
    status = 200
    empty_workspace = False
    # Best match first (a search with the default or the "Best match" order); False: more matched than ranked.
    ranked: bool | None = None
    if form.is_valid():
        try:
            filters = form.filters()
            ordering = form.ordering_value()
            page = selectors.memory_list(
                workspace=access.workspace,
                filters=filters,
                ordering=ordering,
                cursor=request.GET.get("before") or request.GET.get("cursor") or None,
                limit=PAGE_SIZE,
                plan_probes=True,
                backward=bool(request.GET.get("before")),
            )
        except InvalidInput as exc:
            error, status = exc.detail, 400
        else:
            now = timezone.now()
            build = RowBuilder(ws, now)
            rows = [build(m) for m in page.results]
            next_cursor = page.next_cursor
            previous_cursor = page.previous_cursor
            if ordering == selectors.default_ordering(filters) == selectors.RELEVANCE and rows:
                ranked = page.ranked_all
            if not rows and not request.GET.get("cursor") and not request.GET.get("before") and not form.is_filtered():
                empty_workspace = not selectors.workspace_has_memories(workspace=access.workspace)
    else:
        error, status = "Some filters are not valid; see the marked fields.", 400
    # A token just made for this page (api_token): its key is shown on this one render, then forgotten.
    token = request.session.pop(FRESH_TOKEN_KEY, None) if empty_workspace and access.can_edit else None
    context = {
        "access": access,
        "form": form,
        "rows": rows,
        "ranked": ranked,
        "rank_depth": selectors.RANK_DEPTH,
        "error": error,
        "empty_workspace": empty_workspace,
        "token": token,
        "api_url": request.build_absolute_uri(reverse("api:memories", kwargs={"ws": ws})),
        "bulk_form": BulkActionForm(),
        # The polling fallback's ids, joined here rather than by a 50-step template loop.
        "poll_query": urlencode([("id", str(row.memory.id)) for row in rows]),
        "count_url": reverse("memories:count", kwargs={"ws": ws}),
        **_pagination(request, next_cursor, previous_cursor, len(rows)),
    }
    partial = _is_partial(request, "memory-results")
    template = "memories/list.html#results" if partial else "memories/list.html"
    return render(request, template, context, status=status)


def _pagination(
    request: HttpRequest, next_cursor: str | None, previous_cursor: str | None, shown: int
) -> dict[str, Any]:
    """Query strings of the next, previous and first pages, keeping every filter of the current page, and the
    positions of this page's rows (row 51-100 on page 2)."""
    base = request.GET.copy()
    for name in ("cursor", "before", "page"):
        base.pop(name, None)
    try:
        number = max(1, int(request.GET.get("page", "1")))
    except ValueError:
        number = 1
    next_query = previous_query = ""
    if next_cursor:
        following = base.copy()
        following["cursor"] = next_cursor
        following["page"] = str(number + 1)
        next_query = following.urlencode()
    if number == 2 or (number > 2 and not previous_cursor):
        previous_query = base.urlencode() or "page=1"
    elif previous_cursor:
        preceding = base.copy()
        preceding["before"] = previous_cursor
        preceding["page"] = str(number - 1)
        previous_query = preceding.urlencode()
    first = (number - 1) * PAGE_SIZE + 1
    return {
        "page_number": number,
        "next_query": next_query,
        "previous_query": previous_query if number > 1 else "",
        "first_query": base.urlencode(),
        "filter_query": base.urlencode(),
        "first_row": first,
        "last_row": first + shown - 1,
    }


@login_required
@require_GET
@domain_errors
def memory_count(request: HttpRequest, ws: str) -> HttpResponse:
    """The number of memories the list's filters match (up to 10,000), loaded by the pager after the page."""
    access = selectors.workspace_access(user=request.user, slug=ws)
    form = MemoryListForm(request.GET)
    if not form.is_valid():
        return render(request, "memories/list.html#total", {"total": None})
    total, more = selectors.memory_count(workspace=access.workspace, filters=form.filters())
    return render(request, "memories/list.html#total", {"total": total, "more": more})


@login_required
@require_GET
@domain_errors
def activation_bars(request: HttpRequest, ws: str) -> HttpResponse:
    """Polling fallback of the live activation column: the same bar partial the socket pushes."""
    access = selectors.workspace_access(user=request.user, slug=ws)
    ids: list[uuid.UUID] = []
    for raw in request.GET.getlist("id")[: PAGE_SIZE * 4]:
        try:
            ids.append(uuid.UUID(raw))
        except ValueError:
            continue
    now = timezone.now()
    html = "".join(
        fragments.activation_push(m, activation_now(m, now))
        for m in selectors.memories_activation(workspace=access.workspace, ids=ids)
    )
    return HttpResponse(html)


@login_required
@require_POST
@domain_errors
def api_token(request: HttpRequest, ws: str) -> HttpResponse:
    """Issue the user a new API token; the empty state's curl line shows its key, this once."""
    access = _edit_access(request, ws)
    issued = tokens.api_token_create(
        user=request.user,  # type: ignore[arg-type]
        name=f"browser ({access.workspace.slug})",
        workspace=access.workspace,
    )
    request.session[FRESH_TOKEN_KEY] = issued.key
    messages.success(request, "Your API token is ready: the curl line below includes it. It is shown only now.")
    return redirect(_list_url(ws))


# -- bulk actions ---------------------------------------------------------------------------------


@login_required
@require_POST
@domain_errors
def memory_bulk(request: HttpRequest, ws: str) -> HttpResponse:
    """Two steps: without `confirm` show what will happen and to how many; with it, do it."""
    access = _edit_access(request, ws)
    form = BulkActionForm(request.POST)
    back = safe_next(request, _list_url(ws))
    partial = _is_partial(request, "bulk-dialog")
    if not form.is_valid():
        context = {"access": access, "form": form, "back": back, "count": 0}
        template = "memories/bulk_confirm.html#dialog" if partial else "memories/bulk_confirm.html"
        return render(request, template, context, status=400)
    ids = form.cleaned_data["ids"]
    if not form.cleaned_data["confirm"]:
        context = {"access": access, "form": form, "back": back, "count": len(ids), "summary": form.summary()}
        template = "memories/bulk_confirm.html#dialog" if partial else "memories/bulk_confirm.html"
        return render(request, template, context)
    try:
        result = services.memories_bulk_action(
            workspace=access.workspace,
            actor=request.user,
            ids=ids,
            action=form.cleaned_data["action"],
            value=form.value(),
        )
    except (InvalidInput, NotFound) as exc:
        messages.error(request, exc.detail)
        return redirect(back)
    if result.record is None:
        label = BULK_LABELS[result.action].lower()
        messages.info(request, f"Nothing to {label}: the {result.selected} selected memories already were so.")
    else:
        unchanged = result.selected - result.changed
        note = f" ({unchanged} already were so)" if unchanged else ""
        messages.success(
            request,
            format_html("{}{}. {}", form.done(result.changed), note, _revert_form(request, ws, result.record, back)),
        )
    return redirect(back)


@login_required
@require_POST
@domain_errors
def record_revert(request: HttpRequest, ws: str, record_id: int) -> HttpResponse:
    access = _edit_access(request, ws)
    back = safe_next(request, _list_url(ws))
    try:
        services.record_revert(workspace=access.workspace, record_id=record_id, actor=request.user)
    except NotFound as exc:
        raise Http404(exc.detail) from exc
    except Conflict as exc:
        messages.error(request, refusal(ws, exc))
        return redirect(back)
    messages.success(request, f"Reverted record {record_id}.")
    return redirect(back)


# -- create ---------------------------------------------------------------------------------------


@login_required
@require_http_methods(["GET", "POST"])
@domain_errors
def memory_create(request: HttpRequest, ws: str) -> HttpResponse:
    access = _edit_access(request, ws)
    form = MemoryCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        memory = services.memory_create(
            workspace=access.workspace, actor=request.user, item=form.to_input(), channel="user"
        )
        messages.success(request, "Memory saved.")
        return redirect(_detail_url(ws, memory.id))
    status = 400 if request.method == "POST" else 200
    return render(request, "memories/create.html", {"access": access, "form": form}, status=status)


# -- detail ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    field: str
    before: str
    after: str


@dataclass(frozen=True)
class TimelineEntry:
    record: EvolutionRecord
    changes: list[Change]
    others: int
    revertible: bool


def timeline(memory: Memory, records: Sequence[EvolutionRecord]) -> list[TimelineEntry]:
    key = str(memory.id)
    entries = []
    for record in records:
        before, after = audit.memory_fields(record, key)
        names = [n for n in dict.fromkeys([*before, *after]) if n != "updated_at"]
        changes = [Change(n, value_text(before.get(n), 120), value_text(after.get(n), 120)) for n in names]
        if key in record.after.get(CREATED_MEMORIES, []):
            changes.append(Change("created", "", "this memory"))
        touched = {str(i) for i in record.input_ids} | {str(i) for i in record.output_ids}
        entries.append(
            TimelineEntry(
                record=record,
                changes=changes,
                others=len(touched - {key}),
                revertible=revertible(record),
            )
        )
    return entries


@dataclass(frozen=True)
class Neighbour:
    edge: Edge
    outgoing: bool
    memory: Memory


def edge_groups(memory: Memory, edges: Sequence[Edge]) -> list[tuple[str, list[Neighbour]]]:
    """Edges by type (the selector orders them by type, then weight) with the memory at the other end."""
    groups: dict[str, list[Neighbour]] = {}
    for edge in edges:
        outgoing = edge.source_id == memory.id
        groups.setdefault(edge.edge_type, []).append(
            Neighbour(edge, outgoing, edge.target if outgoing else edge.source)
        )
    return list(groups.items())


def _snapshots(memory: Memory, original: selectors.Original | None) -> list[dict[str, Any]]:
    """The kept versions: a legacy row's snapshots as they are, else the FULL text its compression record keeps."""
    shown = []
    for snap in memory.snapshots:
        if isinstance(snap, dict):
            tier = snap.get("tier")
            label = CompressionTier(tier).label if tier in CompressionTier.values else str(tier)
            shown.append({"tier": label, "content": str(snap.get("content", "")), "at": snap.get("at", "")})
    if not shown and original is not None:
        shown.append({"tier": CompressionTier.FULL.label, "content": original.content, "at": original.at})
    return shown


def _detail_context(request: HttpRequest, access: WorkspaceAccess, memory: Memory, **extra: Any) -> dict[str, Any]:
    now = timezone.now()
    original = selectors.compressed_originals(workspace=access.workspace, memories=[memory]).get(memory.id)
    history = selectors.memory_history(workspace=access.workspace, memory_id=memory.id, limit=HISTORY_LIMIT)
    retrievals = selectors.memory_retrievals(memory=memory)
    edges = selectors.memory_edges_page(workspace=access.workspace, memory=memory, limit=EDGE_LIMIT)
    phrase = delete_phrase(memory.content)
    return {
        "access": access,
        "memory": memory,
        "live": fragments.live(memory, activation_now(memory, now)),
        "decay": decay_chart(memory, now),
        "decay_days": DECAY_DAYS,
        "history_chart": history_chart(memory, history.records, retrievals, now),
        "timeline": timeline(memory, history.records),
        "history_more": history.more,
        "retrieval_count": len(retrievals),
        "edge_groups": edge_groups(memory, edges.edges),
        "edge_count": len(edges.edges),
        "edges_more": edges.more,
        "snapshots": _snapshots(memory, original),
        # A forgotten memory comes back by reverting the approved step that forgot it, not by rehydrating.
        "can_rehydrate": original is not None and memory.status != Status.FORGOTTEN,
        "forgotten": memory.status == Status.FORGOTTEN,
        "compression_label": CompressionTier(memory.compression_tier).label,
        "delete_phrase": phrase,
        "delete_form": MemoryDeleteForm(phrase=phrase),
        "edit_form": MemoryEditForm(initial={"content": memory.content}),
        "editing": False,
        "here": _detail_url(access.workspace.slug, memory.id),
        **extra,
    }


@login_required
@require_GET
@domain_errors
def memory_detail(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    access = selectors.workspace_access(user=request.user, slug=ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    editing = request.GET.get("edit") == "1" and access.can_edit
    return render(request, "memories/detail.html", _detail_context(request, access, memory, editing=editing))


@login_required
@require_GET
@domain_errors
def memory_content(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    """The content panel alone (htmx "Cancel" of an edit)."""
    access = selectors.workspace_access(user=request.user, slug=ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    if not _is_partial(request, "memory-content"):
        return redirect(_detail_url(ws, memory.id))
    return render(request, "memories/detail.html#content", {"access": access, "memory": memory})


@login_required
@require_http_methods(["GET", "POST"])
@domain_errors
def memory_edit(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    """Edit content in place; the edit makes the memory the person's own (origin tier 1)."""
    access = _edit_access(request, ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    partial = _is_partial(request, "memory-content")
    if request.method == "GET":
        if not partial:
            return redirect(_detail_url(ws, memory.id) + "?edit=1#memory-content")
        form = MemoryEditForm(initial={"content": memory.content})
        return render(
            request, "memories/detail.html#content_form", {"access": access, "memory": memory, "edit_form": form}
        )
    form = MemoryEditForm(request.POST)
    if not form.is_valid():
        if partial:
            context = {"access": access, "memory": memory, "edit_form": form}
            return render(request, "memories/detail.html#content_form", context, status=400)
        context = _detail_context(request, access, memory, edit_form=form, editing=True)
        return render(request, "memories/detail.html", context, status=400)
    memory = services.memory_update(
        workspace=access.workspace,
        memory=memory,
        actor=request.user,
        changes={"content": form.cleaned_data["content"]},
    )
    if not partial:
        messages.success(request, "Content saved.")
        return redirect(_detail_url(ws, memory.id))
    history = selectors.memory_history(workspace=access.workspace, memory_id=memory.id, limit=HISTORY_LIMIT)
    context = {
        "access": access,
        "memory": memory,
        "timeline": timeline(memory, history.records),
        "history_more": history.more,
        "here": _detail_url(ws, memory.id),
        "oob": True,
    }
    html = render_to_string("memories/detail.html#content", context, request=request) + render_to_string(
        "memories/detail.html#history", context, request=request
    )
    return HttpResponse(html)


def _memory_post(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> tuple[WorkspaceAccess, Memory, str]:
    access = _edit_access(request, ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    return access, memory, safe_next(request, _detail_url(ws, memory.id))


def _row_or_redirect(
    request: HttpRequest, access: WorkspaceAccess, memory: Memory, back: str, done: str
) -> HttpResponse:
    """After a one-memory action: the list row partial for htmx, otherwise a flash and back."""
    if _is_partial(request, f"row-{memory.id}"):
        row = RowBuilder(access.workspace.slug, timezone.now())(memory)
        return render(request, "memories/partials/memory.html#row", {"access": access, "row": row})
    messages.success(request, done)
    return redirect(back)


@login_required
@require_POST
@domain_errors
def memory_archive(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    access, memory, back = _memory_post(request, ws, memory_id)
    memory = services.memory_archive(workspace=access.workspace, memory=memory, actor=request.user)
    return _row_or_redirect(request, access, memory, back, "Memory archived.")


@login_required
@require_POST
@domain_errors
def memory_restore(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    access, memory, back = _memory_post(request, ws, memory_id)
    if memory.status == Status.ARCHIVED:
        memory = services.memory_update(
            workspace=access.workspace, memory=memory, actor=request.user, changes={"status": Status.ACTIVE}
        )
    return _row_or_redirect(request, access, memory, back, "Memory restored.")


@login_required
@require_POST
@domain_errors
def memory_pin(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    access, memory, back = _memory_post(request, ws, memory_id)
    pinned = request.POST.get("pinned") == "true"
    memory = services.memory_update(
        workspace=access.workspace, memory=memory, actor=request.user, changes={"pinned": pinned}
    )
    return _row_or_redirect(request, access, memory, back, "Memory pinned." if pinned else "Memory unpinned.")


@login_required
@require_POST
@domain_errors
def memory_rehydrate(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    access, memory, back = _memory_post(request, ws, memory_id)
    try:
        services.memory_rehydrate(workspace=access.workspace, memory=memory, actor=request.user)
    except Conflict as exc:
        messages.error(request, f"Not rehydrated: {exc.detail}")
    else:
        messages.success(request, "Full content restored from the snapshot.")
    return redirect(back)


@login_required
@require_POST
@domain_errors
def memory_delete(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> HttpResponse:
    """Hard delete, only after the person typed the memory's first words (kept in the audit log)."""
    access, memory, _ = _memory_post(request, ws, memory_id)
    phrase = delete_phrase(memory.content)
    form = MemoryDeleteForm(request.POST, phrase=phrase)
    if not form.is_valid():
        context = _detail_context(request, access, memory, delete_form=form)
        return render(request, "memories/detail.html", context, status=400)
    services.memory_delete_hard(workspace=access.workspace, memory=memory, actor=request.user)
    messages.success(request, f"Deleted “{phrase}…” permanently; the audit log keeps its content.")
    return redirect(_list_url(ws))


@login_required
@require_GET
@domain_errors
def memory_graph(request: HttpRequest, ws: str, memory_id: uuid.UUID) -> JsonResponse:
    """The two-hop neighbourhood as Cytoscape elements ({nodes, edges} of {data: ...})."""
    access = selectors.workspace_access(user=request.user, slug=ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    hood = selectors.memory_neighbourhood(workspace=access.workspace, memory=memory)
    nodes = [
        {
            "data": {
                "id": str(n.id),
                "label": n.content if len(n.content) <= 48 else n.content[:47] + "…",
                "type": n.memory_type,
                "status": n.status,
                "hops": n.hops,
                "url": _detail_url(ws, n.id),
            }
        }
        for n in hood.nodes
    ]
    edges = [
        {
            "data": {
                "id": f"e{e.id}",
                "source": str(e.source),
                "target": str(e.target),
                "type": e.edge_type,
                "weight": e.weight,
            }
        }
        for e in hood.edges
    ]
    return JsonResponse({"nodes": nodes, "edges": edges, "truncated": hood.truncated})
