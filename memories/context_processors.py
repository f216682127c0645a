"""Navigation shared by every page: the user's workspaces and the current one.

Lazy, as evolution.context_processors.NavCounts: context processors run for every template rendered
with the request, htmx partials included, and those show no navigation; the one query runs when a
template first reads either value.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from memories.selectors import workspace_list_for_user


def navigation(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated or request.path.startswith(("/api/", "/admin/")):
        return {}
    resolver = getattr(request, "resolver_match", None)
    current = resolver.kwargs.get("ws") if resolver is not None else None
    user = request.user
    workspaces = SimpleLazyObject(lambda: workspace_list_for_user(user=user))
    return {
        "nav_workspaces": workspaces,
        "nav_current": SimpleLazyObject(lambda: next((a for a in workspaces if a.workspace.slug == current), None)),
    }
