"""Bulk curation from the list: a confirmation with the count, one revertible record, a Revert in the flash."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from history.models import EvolutionRecord
from memories.models import Memory, Role, Status, Workspace

# Also run on PostgreSQL by `make test`: the pages drive the bulk, revert and rehydrate services.
pytestmark = [pytest.mark.django_db, pytest.mark.api]

BULK = "/w/acme/memories/bulk/"


@pytest.fixture
def browser(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def three(make_memory: Callable[..., Memory]) -> list[Memory]:
    return [make_memory(f"memory number {i}", tags=("old",)) for i in range(3)]


def post(client: Client, ids: list[Memory], action: str, confirm: bool = True, **extra: Any) -> Any:
    data: dict[str, Any] = {"ids": [str(m.id) for m in ids], "action": action, "next": "/w/acme/?q=memory", **extra}
    if confirm:
        data["confirm"] = "true"
    return client.post(BULK, data)


def flash(client: Client) -> str:
    html = client.get("/w/acme/").content.decode()
    start = html.index('id="messages"')
    return html[start : html.index('<div class="page-head">', start)]


def test_first_step_asks_for_confirmation_with_the_count_and_changes_nothing(
    browser: Client, three: list[Memory]
) -> None:
    response = post(browser, three, "archive", confirm=False)
    assert response.status_code == 200
    html = response.content.decode()
    assert "Archive 3 memories?" in html
    assert html.count('name="ids"') == 3
    assert 'name="confirm" value="true"' in html
    assert Memory.objects.filter(status=Status.ARCHIVED).count() == 0
    assert EvolutionRecord.objects.count() == 0


def test_htmx_confirmation_is_the_dialog_partial(browser: Client, three: list[Memory]) -> None:
    response = browser.post(
        BULK,
        {"ids": [str(m.id) for m in three], "action": "pin"},
        HTTP_HX_REQUEST="true",
        HTTP_HX_TARGET="bulk-dialog",
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="bulk-dialog"')
    assert "Pin 3 memories?" in html
    assert "<html" not in html


def test_confirmed_archive_is_one_record_and_the_flash_offers_revert(
    browser: Client, workspace: Workspace, three: list[Memory]
) -> None:
    response = post(browser, three, "archive")
    assert response.status_code == 302
    assert response["Location"] == "/w/acme/?q=memory"
    assert Memory.objects.filter(status=Status.ARCHIVED).count() == 3
    record = EvolutionRecord.objects.get(workspace=workspace)
    assert record.action == "archive"
    assert set(record.before) == {str(m.id) for m in three}
    assert all(v["status"] == "active" for v in record.before.values())
    message = flash(browser)
    assert "Archived 3 memories." in message
    assert f"/w/acme/records/{record.pk}/revert/" in message
    assert "csrfmiddlewaretoken" in message


def test_revert_from_the_flash_restores_every_memory(browser: Client, three: list[Memory]) -> None:
    post(browser, three, "archive")
    record = EvolutionRecord.objects.get()
    response = browser.post(f"/w/acme/records/{record.pk}/revert/", {"next": "/w/acme/"})
    assert response.status_code == 302
    assert Memory.objects.filter(status=Status.ACTIVE).count() == 3
    record.refresh_from_db()
    assert record.reverted_at is not None
    assert record.reverted_by is not None
    assert record.reverted_by.action == "revert"
    assert "Reverted record" in flash(browser)


def test_revert_with_csrf_checks_on_uses_the_token_in_the_flash(user: Any, three: list[Memory]) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/w/acme/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token is not None
    data = {
        "ids": [str(m.id) for m in three],
        "action": "archive",
        "confirm": "true",
        "csrfmiddlewaretoken": token.group(1),
    }
    assert client.post(BULK, data).status_code == 302
    html = client.get("/w/acme/").content.decode()
    form = re.search(r'action="(/w/acme/records/\d+/revert/)".*?name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert form is not None
    assert client.post(form.group(1), {"csrfmiddlewaretoken": form.group(2)}).status_code == 302
    assert Memory.objects.filter(status=Status.ACTIVE).count() == 3


def test_add_tag_change_type_and_pin_each_write_one_record(browser: Client, three: list[Memory]) -> None:
    post(browser, three, "add_tag", tag_value="reviewed")
    assert "Added the tag &quot;reviewed&quot; to 3 memories." in flash(browser)
    post(browser, three[:2], "set_type", type_value="fact")
    assert "Changed the type of 2 memories to fact." in flash(browser)
    post(browser, three, "pin")
    assert "Pinned 3 memories." in flash(browser)
    assert EvolutionRecord.objects.count() == 3
    memories = {m.id: m for m in Memory.objects.all()}
    assert all(memories[m.id].tags == ["old", "reviewed"] for m in three)
    assert [memories[m.id].memory_type for m in three] == ["fact", "fact", "semantic"]
    assert all(memories[m.id].pinned for m in three)


def test_memories_that_already_hold_the_value_are_left_out_of_the_record(browser: Client, three: list[Memory]) -> None:
    Memory.objects.filter(pk=three[0].pk).update(status=Status.ARCHIVED)
    post(browser, three, "archive")
    record = EvolutionRecord.objects.get()
    assert set(record.before) == {str(three[1].id), str(three[2].id)}
    assert "(1 already were so)" in flash(browser)


def test_nothing_to_change_writes_no_record(browser: Client, three: list[Memory]) -> None:
    post(browser, three, "restore")
    assert EvolutionRecord.objects.count() == 0
    assert "Nothing to restore" in flash(browser)


def test_missing_tag_value_is_refused_with_the_reason(browser: Client, three: list[Memory]) -> None:
    response = post(browser, three, "add_tag", confirm=False, tag_value="  ")
    assert response.status_code == 400
    assert "Type the tag to add." in response.content.decode()


def test_no_selection_is_refused(browser: Client, workspace: Workspace) -> None:
    response = browser.post(BULK, {"action": "archive"})
    assert response.status_code == 400
    assert "Select at least one memory first." in response.content.decode()


def test_an_id_of_another_workspace_fails_the_whole_action(
    browser: Client, three: list[Memory], other_workspace: Workspace
) -> None:
    from memories import services
    from memories.inputs import MemoryInput

    foreign = services.memory_create(workspace=other_workspace, actor=None, item=MemoryInput(content="theirs"))
    post(browser, [*three, foreign], "archive")
    assert Memory.objects.filter(status=Status.ARCHIVED).count() == 0
    assert EvolutionRecord.objects.count() == 0


def test_revert_refuses_when_a_later_change_depends_on_it(browser: Client, three: list[Memory]) -> None:
    post(browser, three, "archive")
    record = EvolutionRecord.objects.get()
    browser.post(f"/w/acme/memories/{three[0].id}/restore/")
    browser.post(f"/w/acme/records/{record.pk}/revert/")
    assert "Not reverted" in flash(browser)
    record.refresh_from_db()
    assert record.reverted_at is None
    assert Memory.objects.filter(status=Status.ARCHIVED).count() == 2


def test_revert_of_a_record_of_another_workspace_is_404(
    browser: Client, three: list[Memory], other_workspace: Workspace
) -> None:
    from history import audit

    (foreign,) = audit.records_save(
        [audit.record_build(workspace=other_workspace, evolver="user", action="update", reason="x")]
    )
    assert browser.post(f"/w/acme/records/{foreign.pk}/revert/").status_code == 404


def test_viewers_cannot_bulk_edit_or_revert(
    workspace: Workspace, member: Callable[[str], Any], three: list[Memory], browser: Client
) -> None:
    post(browser, three, "archive")
    record = EvolutionRecord.objects.get()
    client = Client()
    client.force_login(member(Role.VIEWER))
    assert post(client, three, "restore").status_code == 403
    assert client.post(f"/w/acme/records/{record.pk}/revert/").status_code == 403
    assert Memory.objects.filter(status=Status.ARCHIVED).count() == 3


def test_unsafe_next_is_ignored(browser: Client, three: list[Memory]) -> None:
    response = browser.post(
        BULK, {"ids": [str(three[0].id)], "action": "pin", "confirm": "true", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/w/acme/"


@pytest.mark.parametrize("target", ["x", "memories", "//evil.example/"])
def test_a_next_that_is_not_a_local_path_redirects_to_the_list(
    browser: Client, three: list[Memory], target: str
) -> None:
    response = browser.post(BULK, {"ids": [str(three[0].id)], "action": "pin", "confirm": "true", "next": target})
    assert response.status_code == 302
    assert response["Location"] == "/w/acme/"
