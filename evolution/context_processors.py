"""Counts the navigation shows beside the evolution sections (nav.html reads `nav_counts.<section>`)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from evolution.page_selectors import pending_count


class NavCounts:
    """`nav_counts` for the navigation, counted only when a template reads it.

    Context processors run for every template rendered with the request, htmx partials included; being
    lazy keeps partials (which show no navigation) free of the query. One indexed COUNT when read.
    """

    def __init__(self, *, slug: str, user_id: int) -> None:
        self.slug = slug
        self.user_id = user_id
        self._proposals: int | None = None

    def __getitem__(self, key: str) -> int:
        if key != "proposals":
            raise KeyError(key)
        if self._proposals is None:
            self._proposals = pending_count(slug=self.slug, user_id=self.user_id)
        return self._proposals


def pending_counts(request: HttpRequest) -> dict[str, Any]:
    """Pending proposals of the workspace in the URL, for members (a non-member's page shows no navigation)."""
    if not request.user.is_authenticated or request.path.startswith(("/api/", "/admin/")):
        return {}
    resolver = getattr(request, "resolver_match", None)
    slug = resolver.kwargs.get("ws") if resolver is not None else None
    if not isinstance(slug, str):
        return {}
    return {"nav_counts": NavCounts(slug=slug, user_id=int(request.user.pk))}
