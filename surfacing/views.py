"""Pages of the query inspector (thin: parse, authorize, call ``inspector.inspect`` or a service, render).

The inspector is a GET form, so the basic query works without JavaScript and every inspection has a
URL. htmx only makes it faster: an htmx request aimed at ``#inspector-results`` gets that partial (the
same ``{% partialdef %}`` the full page renders), and the what-if knobs re-run it on change.

Running a query here is a dry read. "Count as retrieval" boosts and records, which changes the
workspace, so it never happens on a plain GET that another site could trigger (an image tag, a link):
it needs either htmx's request header, which a cross-site request cannot send without a CORS preflight
this site does not grant, or a POST with the CSRF token (the confirmation the no-JavaScript page shows).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import InvalidInput
from memories import selectors as memory_selectors
from memories.selectors import WorkspaceAccess
from memories.views import domain_errors
from memories.web import safe_next
from surfacing import inspector, selectors, services
from surfacing.forms import SERVICE_FIELDS, InspectorForm, SettingsSaveForm

RESULTS = "inspector-results"
SAVE_BOX = "whatif-save"
PAGE = "surfacing/inspector.html"
# Never carried into the address bar: a reload or a shared link must not count a retrieval again.
_NOT_IN_URL = ("record", "csrfmiddlewaretoken")
_SENTINEL = uuid.UUID(int=0)


def _htmx_target(request: HttpRequest) -> str | None:
    """The swap target of an htmx request (None for a full page load or an htmx history restore)."""
    htmx = getattr(request, "htmx", None)
    if not htmx or htmx.history_restore_request:
        return None
    target: str | None = htmx.target
    return target


def _memory_url(ws: str) -> Callable[[str], str]:
    """Memory page URLs without a reverse() per link (an inspection links a hundred memories)."""
    pattern = reverse("memories:detail", kwargs={"ws": ws, "memory_id": _SENTINEL})
    return lambda memory_id: pattern.replace(str(_SENTINEL), memory_id)


def _page_url(ws: str) -> str:
    return reverse("surfacing:inspector", kwargs={"ws": ws})


def _clean_query(data: QueryDict) -> str:
    kept = data.copy()
    for name in _NOT_IN_URL:
        kept.pop(name, None)
    return kept.urlencode()


@login_required
@require_http_methods(["GET", "POST"])
@domain_errors
def inspector_page(request: HttpRequest, ws: str) -> HttpResponse:
    """The inspector: a dry read of ``q`` with explanations; POST only to count it as a retrieval."""
    access = memory_selectors.workspace_access(user=request.user, slug=ws)
    saved = selectors.workspace_settings(workspace=access.workspace).surfacing
    data = request.POST if request.method == "POST" else request.GET
    form = InspectorForm(data or None, saved=saved)
    values = form.whatif_values()
    override = inspector.whatif_override(values, saved)
    target = _htmx_target(request)
    wants_record = bool(form.is_bound and form.is_valid() and form.cleaned_data.get("record"))
    record = wants_record and (request.method == "POST" or target == RESULTS)
    inspection: inspector.Inspection | None = None
    status = 200 if not form.is_bound or form.is_valid() else 400
    if status == 200 and form.query:
        try:
            inspection = inspector.inspect(
                workspace=access.workspace,
                **form.run_arguments(),
                override=override,
                saved=saved,
                record=record,
                memory_url=_memory_url(ws),
            )
        except InvalidInput as exc:
            form.add_error(SERVICE_FIELDS.get(exc.field or ""), exc.detail)
            status = 400
    query = _clean_query(data)
    page_url = f"{_page_url(ws)}?{query}" if query else _page_url(ws)
    if request.method == "POST" and inspection is not None:
        returned = len(inspection.primary.rows)
        if inspection.primary.recorded:
            messages.success(
                request,
                f"Counted as a retrieval: the {returned} returned memories were boosted and the retrieval recorded.",
            )
        else:
            messages.info(request, "Nothing was returned, so nothing was counted.")
        return redirect(page_url)
    context: dict[str, Any] = {
        "access": access,
        "form": form,
        "controls": inspector.whatif_controls(saved, values),
        "inspection": inspection,
        "record_pending": wants_record and not record and inspection is not None,
        "record_reset": record and target == RESULTS,
        "confirm_fields": [(k, v) for k, vs in data.lists() if k != "csrfmiddlewaretoken" for v in vs],
        "page_url": page_url,
        "save_url": reverse("surfacing:inspector-save", kwargs={"ws": ws}),
        "changes": inspection.changes if inspection is not None else [],
    }
    template = f"{PAGE}#results" if target == RESULTS else PAGE
    response = render(request, template, context, status=status)
    if target is not None:
        response["HX-Replace-Url"] = page_url
    return response


def _save_box(request: HttpRequest, access: WorkspaceAccess, status: int, **context: Any) -> HttpResponse:
    context.setdefault("changes", [])
    context.setdefault("page_url", _page_url(access.workspace.slug))
    context["save_url"] = reverse("surfacing:inspector-save", kwargs={"ws": access.workspace.slug})
    return render(request, f"{PAGE}#save_box", {"access": access, **context}, status=status)


@login_required
@require_POST
@domain_errors
def inspector_save(request: HttpRequest, ws: str) -> HttpResponse:
    """Store the inspector's what-if settings as the workspace's surfacing settings (editors, owners)."""
    access = memory_selectors.workspace_access(user=request.user, slug=ws)
    partial = _htmx_target(request) == SAVE_BOX
    if not access.can_edit:
        detail = f"Your role in this workspace is {access.role}: only editors and owners can save settings."
        if partial:
            return _save_box(request, access, 403, save_error=detail)
        raise PermissionDenied(detail)
    form = SettingsSaveForm(request.POST)
    back = safe_next(request, _page_url(ws))
    error = ""
    message = ""
    saved_controls: list[inspector.Control] = []
    if not form.is_valid():
        error = "Not saved: " + " ".join(str(e) for errors in form.errors.values() for e in errors)
    elif not form.changes():
        message = "Nothing to save: these are already the workspace's settings."
    else:
        changes = form.changes()
        before = selectors.workspace_settings(workspace=access.workspace).surfacing
        described = inspector.setting_changes(
            before, {k: v for k, v in changes.items() if k != "mode"}, changes.get("mode")
        )
        try:
            current = services.settings_update(workspace=access.workspace, actor=request.user, surfacing=changes)
        except InvalidInput as exc:
            error = f"Not saved: {exc.detail}"
        else:
            # The what-if panel is not part of the swap: refresh the knobs that changed (out of band).
            saved_controls = [c for c in inspector.whatif_controls(current.surfacing, {}) if c.knob.key in changes]
            summary = "; ".join(f"{c.label} {c.before} → {c.after}" for c in described)
            message = f"Saved as the workspace's settings ({summary}). Agents and the API use them from now on."
    if partial:
        return _save_box(
            request,
            access,
            400 if error else 200,
            save_error=error,
            save_message=message,
            page_url=back,
            saved_controls=saved_controls,
        )
    if error:
        messages.error(request, error)
    else:
        messages.success(request, message)
    return redirect(back)
