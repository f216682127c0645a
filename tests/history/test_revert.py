"""history.revert: the rules every revert follows, whatever app the record is about."""

from __future__ import annotations

from typing import Any

import pytest

from core.errors import Conflict
from history import audit
from history.models import AUDIT_ONLY_ACTIONS, Action
from history.revert import revertible
from memories.models import Workspace
from memories.services import record_revert
from memories.tokens import api_token_create
from surfacing.services import settings_update

pytestmark = [pytest.mark.django_db, pytest.mark.api]


@pytest.mark.parametrize("action", sorted(AUDIT_ONLY_ACTIONS))
def test_an_audit_entry_is_shown_but_never_reverted(workspace: Workspace, user: Any, action: str) -> None:
    record = audit.record_save(
        audit.record_build(workspace=workspace, evolver="someone", action=action, reason="r", actor=user)
    )
    assert not revertible(record)
    with pytest.raises(Conflict) as refused:
        record_revert(workspace=workspace, record_id=record.pk, actor=user)
    assert refused.value.code == "not_revertible"
    record.refresh_from_db()
    assert record.reverted_at is None


def test_a_settings_change_is_one_configure_record_naming_who_and_what(workspace: Workspace, user: Any) -> None:
    settings_update(workspace=workspace, actor=user, surfacing={"lexical_weight": 0.7})
    (record,) = workspace.evolution_records.filter(action=Action.CONFIGURE)
    assert record.actor == user
    assert record.evolver == "settings"
    assert "surfacing.lexical_weight" in record.reason
    assert record.before[audit.SETTINGS]["surfacing"] == {}
    assert record.after[audit.SETTINGS]["surfacing"] == {"lexical_weight": 0.7}
    # Saving the same values again changes nothing and writes nothing.
    settings_update(workspace=workspace, actor=user, surfacing={"lexical_weight": 0.7})
    assert workspace.evolution_records.filter(action=Action.CONFIGURE).count() == 1


def test_each_api_token_asked_for_in_a_workspace_is_recorded_without_its_key(workspace: Workspace, user: Any) -> None:
    first = api_token_create(user=user, workspace=workspace)
    second = api_token_create(user=user, workspace=workspace)
    records = list(workspace.evolution_records.filter(action=Action.GRANT).order_by("pk"))
    assert [(r.evolver, r.actor, r.after) for r in records] == [
        ("tokens", user, {"token_user": user.pk, "token_prefix": issued.key[:8]}) for issued in (first, second)
    ]
    assert not any(issued.key in f"{r.reason} {r.after}" for r in records for issued in (first, second))
    api_token_create(user=user)  # from the command line: no workspace, no record
    assert workspace.evolution_records.filter(action=Action.GRANT).count() == 2
