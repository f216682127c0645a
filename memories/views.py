"""Pages of the memory browser (thin: parse, authorize, call a selector or service, render)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from memories import selectors
from memories.algorithms.activation import decayed_activation
from memories.api import filters_from_query
from memories.selectors import workspace_access, workspace_list_for_user


@login_required
def home(request: HttpRequest) -> HttpResponse:
    workspaces = workspace_list_for_user(user=request.user)
    if len(workspaces) == 1:
        return redirect(workspaces[0].workspace.get_absolute_url())
    return render(request, "memories/home.html", {"workspaces": workspaces})


@login_required
def memory_list(request: HttpRequest, ws: str) -> HttpResponse:
    access = workspace_access(user=request.user, slug=ws)
    filters = filters_from_query(request.GET)
    page = selectors.memory_list(
        workspace=access.workspace,
        filters=filters,
        ordering=request.GET.get("ordering") or selectors.DEFAULT_ORDERING,
        cursor=request.GET.get("cursor") or None,
        limit=50,
    )
    now = timezone.now()
    rows = [
        (
            m,
            decayed_activation(
                m.activation_score, m.activation_last_boost_at, m.activation_half_life_hours, now
            ),
        )
        for m in page.results
    ]
    return render(request, "memories/list.html", {"access": access, "rows": rows, "page": page})


@login_required
def memory_detail(request: HttpRequest, ws: str, memory_id: str) -> HttpResponse:
    access = workspace_access(user=request.user, slug=ws)
    memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
    edges = selectors.edges_of_memory(workspace=access.workspace, memory=memory)
    return render(request, "memories/detail.html", {"access": access, "memory": memory, "edges": edges})
