"""Keep htmx fragments out of the browser's page cache.

Every HTML view of the site answers one URL two ways: the full page, and (for an htmx request naming a swap
target) only that partial. htmx pushes the URL of a swapped fragment into the history, so after Memories ->
filter -> open a row -> Back, the browser loads that URL from its HTTP cache; with nothing saying the two
answers differ, it showed the cached fragment, bare, as the page.

One middleware says so for every view, rather than each view remembering:

- every response varies on ``HX-Request``, so a cache never hands the full page to an htmx request or a
  fragment to a page load;
- a fragment (an htmx request that is not a history restore) is ``no-store``: it is never the right answer
  to a navigation, so the browser keeps no copy it could restore in its place;
- an inline write (an htmx POST that succeeded, or found its work already done: 409) triggers the
  ``counts-changed`` event (``HX-Trigger``), on which every counter of the page reloads itself (the nav's
  proposals badge, the queue's tabs, the drift summary): no view has to know which counters a page shows.

The REST API (``/api/``) does not answer htmx and is left as it is.
"""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponseBase
from django.utils.cache import add_never_cache_headers, patch_vary_headers
from django.utils.deprecation import MiddlewareMixin

HX_REQUEST = "HX-Request"
COUNTS_CHANGED = "counts-changed"
"""The htmx event after an inline write; counters listen with ``hx-trigger="counts-changed from:body"``."""


def is_fragment_request(request: HttpRequest) -> bool:
    """True for an htmx request that swaps part of a page (a history restore wants the whole page)."""
    if request.headers.get(HX_REQUEST) != "true":
        return False
    return request.headers.get("HX-History-Restore-Request") != "true"


class HtmxCacheMiddleware(MiddlewareMixin):
    """``Vary: HX-Request`` on every page response, ``no-store`` on fragments, ``counts-changed`` after inline
    writes (sync and async)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if request.path.startswith("/api/"):
            return response
        patch_vary_headers(response, (HX_REQUEST,))
        if is_fragment_request(request):
            add_never_cache_headers(response)
            if request.method == "POST" and (200 <= response.status_code < 300 or response.status_code == 409):
                add_trigger(response, COUNTS_CHANGED)
        return response


def add_trigger(response: HttpResponseBase, event: str) -> None:
    """Add ``event`` to the response's ``HX-Trigger`` (a view may have named events of its own)."""
    current = response.get("HX-Trigger", "")
    if not current:
        response["HX-Trigger"] = event
    elif current.lstrip().startswith("{"):
        events = json.loads(current)
        events.setdefault(event, None)
        response["HX-Trigger"] = json.dumps(events)
    elif event not in (name.strip() for name in current.split(",")):
        response["HX-Trigger"] = f"{current}, {event}"
