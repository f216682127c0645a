"""Helpers every app's HTML views share (what two apps share lives below both)."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.http import url_has_allowed_host_and_scheme


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
