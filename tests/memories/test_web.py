"""safe_next: where an HTML form sends the browser back to."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from memories.web import safe_next

FALLBACK = "/w/acme/"


@pytest.mark.parametrize("candidate", ["/w/acme/memories/?q=jwt", "/w/acme/proposals/#p-3"])
def test_a_path_on_this_site_is_kept(candidate: str) -> None:
    request = RequestFactory().post("/w/acme/x/", {"next": candidate})
    assert safe_next(request, FALLBACK) == candidate


@pytest.mark.parametrize(
    "candidate",
    [
        "x",  # a bare word: redirect() would read it as a URL pattern name (NoReverseMatch)
        "memories",
        "https://evil.example/",
        "//evil.example/",
        "/\\evil.example",
        "javascript:alert(1)",
        "",
    ],
)
def test_anything_but_a_local_path_gives_the_fallback(candidate: str) -> None:
    request = RequestFactory().post("/w/acme/x/", {"next": candidate})
    assert safe_next(request, FALLBACK) == FALLBACK


def test_the_query_string_is_read_when_the_form_has_no_next() -> None:
    assert safe_next(RequestFactory().get("/w/acme/x/", {"next": "/w/acme/runs/"}), FALLBACK) == "/w/acme/runs/"


def test_an_explicit_candidate_wins_over_the_request() -> None:
    request = RequestFactory().post("/w/acme/x/", {"next": "/w/acme/a/"})
    assert safe_next(request, FALLBACK, "/w/acme/b/") == "/w/acme/b/"


@pytest.mark.django_db
def test_a_refused_revert_links_to_the_change_that_blocks_it(user: object, workspace: object) -> None:
    from django.test import Client

    from history.models import EvolutionRecord
    from memories import services
    from memories.inputs import MemoryInput

    (memory,) = services.memories_create(
        workspace=workspace,  # type: ignore[arg-type]
        actor=user,  # type: ignore[arg-type]
        items=[MemoryInput(content="first")],
    )
    for text in ("second", "third"):
        memory = services.memory_update(
            workspace=workspace,  # type: ignore[arg-type]
            memory=memory,
            actor=user,  # type: ignore[arg-type]
            changes={"content": text},
        )
    older, newer = EvolutionRecord.objects.filter(action="update").order_by("pk")
    browser = Client()
    browser.force_login(user)  # type: ignore[arg-type]
    page = f"/w/acme/memories/{memory.id}/"
    response = browser.post(f"/w/acme/records/{older.pk}/revert/", {"next": page}, follow=True)
    html = response.content.decode()
    assert f"changed after record {older.pk} by record {newer.pk}" in html
    assert f'<a href="{page}#record-{newer.pk}">Open record {newer.pk}</a>' in html
