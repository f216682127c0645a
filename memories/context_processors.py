"""Navigation shared by every page: the user's workspaces and the current one."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from memories.selectors import workspace_list_for_user


def navigation(request: HttpRequest) -> dict[str, Any]:
    if not request.user.is_authenticated or request.path.startswith(("/api/", "/admin/")):
        return {}
    resolver = getattr(request, "resolver_match", None)
    current = resolver.kwargs.get("ws") if resolver is not None else None
    workspaces = workspace_list_for_user(user=request.user)
    return {
        "nav_workspaces": workspaces,
        "nav_current": next((a for a in workspaces if a.workspace.slug == current), None),
    }
