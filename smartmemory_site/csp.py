"""Content Security Policy on every response that does not set its own (``settings.CONTENT_SECURITY_POLICY``).

The pages load scripts, styles and the WebSocket from this origin only, so a script injected into a page
(inline or from elsewhere) does not run, forms post only here, and no other site may frame a page. Two
allowances the pages need:

- ``script-src 'unsafe-eval'``: htmx compiles the filters of ``hx-trigger`` (``every 2s [!window.smLive]``)
  with ``Function``; inline ``<script>`` stays refused.
- ``style-src 'unsafe-inline'``: bar widths are ``style="width: 42%"`` attributes in the markup, and htmx and
  Cytoscape add a ``<style>`` element of their own. Styles cannot run script.

Django 6 builds this in (``django.middleware.csp``); this is the part of it the site uses, for Django 5.2.
"""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase
from django.utils.deprecation import MiddlewareMixin

ENFORCE = "Content-Security-Policy"
REPORT_ONLY = "Content-Security-Policy-Report-Only"


def policy_header(directives: dict[str, list[str]]) -> str:
    """``{"default-src": ["'self'"], ...}`` -> ``"default-src 'self'; ..."`` (a directive without sources
    is written bare, as ``upgrade-insecure-requests`` is)."""
    return "; ".join(" ".join([name, *sources]) for name, sources in directives.items())


class ContentSecurityPolicyMiddleware(MiddlewareMixin):
    """Adds the policy header (or its report-only form, ``settings.CONTENT_SECURITY_POLICY_REPORT_ONLY``)."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        header = REPORT_ONLY if settings.CONTENT_SECURITY_POLICY_REPORT_ONLY else ENFORCE
        if header not in response:
            response[header] = policy_header(settings.CONTENT_SECURITY_POLICY)
        return response
