"""Helpers every app's HTML views share (what two apps share lives below both)."""

from __future__ import annotations

from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils.safestring import SafeString

from core.errors import Conflict


def safe_next(request: HttpRequest, fallback: str, candidate: str | None = None) -> str:
    """Where a form posted from a page sends the browser back to: ``candidate`` (default: the request's
    ``next`` field or parameter) when it is a path on this site, else ``fallback``.

    Only a path starting with one "/" is taken: an absolute URL to another host would be an open redirect,
    and a bare word ("x") is neither a path nor safe to hand to ``redirect()``, which would read it as a URL
    pattern name and fail with NoReverseMatch.
    """
    if candidate is None:
        candidate = request.POST.get("next") or request.GET.get("next") or ""
    if (
        candidate.startswith("/")
        and not candidate.startswith("//")
        and url_has_allowed_host_and_scheme(
            candidate, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        )
    ):
        return candidate
    return fallback


def refusal(ws: str, exc: Conflict, prefix: str = "Not reverted") -> SafeString:
    """A refusal for a flash message; when a later change blocks it, a link to that change in the history of
    the memory it touched ("revert the later change first" is only useful with a way to find it)."""
    if exc.blocking_record_id is None or exc.blocking_memory_id is None:
        return format_html("{}: {}", prefix, exc.detail)
    url = reverse("memories:detail", kwargs={"ws": ws, "memory_id": exc.blocking_memory_id})
    return format_html(
        '{}: {} <a href="{}#record-{}">Open record {}</a>.',
        prefix,
        exc.detail,
        url,
        exc.blocking_record_id,
        exc.blocking_record_id,
    )
