"""The Content-Security-Policy header: on pages and API answers, report-only when asked, never doubled."""

from __future__ import annotations

from typing import Any

import pytest
from django.http import HttpResponse
from django.test import Client, RequestFactory

from smartmemory_site.csp import ContentSecurityPolicyMiddleware, policy_header

pytestmark = pytest.mark.django_db


def test_the_policy_is_written_directive_by_directive() -> None:
    directives = {"default-src": ["'self'"], "img-src": ["'self'", "data:"], "upgrade-insecure-requests": []}
    assert policy_header(directives) == "default-src 'self'; img-src 'self' data:; upgrade-insecure-requests"


def test_pages_and_api_answers_carry_the_policy(client: Client) -> None:
    for url in ("/accounts/login/", "/api/v1/workspaces/", "/healthz"):
        policy = client.get(url)["Content-Security-Policy"]
        assert "default-src 'self'" in policy and "object-src 'none'" in policy, url
        assert "'unsafe-inline'" not in policy.split("script-src", 1)[1].split(";", 1)[0]


def test_report_only_reports_without_enforcing(client: Client, settings: Any) -> None:
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = True
    response = client.get("/accounts/login/")
    assert "Content-Security-Policy" not in response
    assert "default-src 'self'" in response["Content-Security-Policy-Report-Only"]


def test_a_view_that_sets_its_own_policy_keeps_it() -> None:
    own = HttpResponse()
    own["Content-Security-Policy"] = "default-src 'none'"
    middleware = ContentSecurityPolicyMiddleware(lambda request: own)
    assert middleware(RequestFactory().get("/"))["Content-Security-Policy"] == "default-src 'none'"
