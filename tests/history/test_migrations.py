"""The audit entries of an older database become records of the one audit table."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("memories", "0007_workspace_vector_stamp"), ("history", "0001_initial")]


def test_audit_entries_move_into_records_and_their_table_goes() -> None:
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes()
    try:
        executor.migrate(BEFORE)
        old = executor.loader.project_state(BEFORE).apps
        user = old.get_model("auth", "User").objects.create(username="ann")
        workspace = old.get_model("memories", "Workspace").objects.create(slug="acme", name="Acme")
        entry = old.get_model("memories", "AuditEntry").objects
        entry.create(workspace=workspace, actor=user, action="token.create", object_id=str(user.pk), detail={})
        entry.create(
            workspace=workspace,
            actor=user,
            action="settings.update",
            object_id=str(workspace.pk),
            detail={"before": {"surfacing": {}}, "after": {"surfacing": {"k": 5}}},
        )
        entry.create(workspace=workspace, action="memdir.import", detail={"origin": "team-a", "created": {}})
        entry.create(workspace=workspace, actor=user, action="memory.delete", object_id="x", detail={})

        executor = MigrationExecutor(connection)
        executor.migrate(latest)
        new = executor.loader.project_state(latest).apps
        records = {
            r.action: r for r in new.get_model("history", "EvolutionRecord").objects.filter(workspace_id=workspace.pk)
        }
        # A hard delete had its own record already: its entry is not copied twice.
        assert set(records) == {"grant", "configure", "import"}
        assert records["grant"].evolver == "tokens" and records["grant"].actor_id == user.pk
        assert records["configure"].after == {"settings": {"surfacing": {"k": 5}}}
        assert records["import"].after["lineage"]["origin"] == "team-a"
        assert "memories_auditentry" not in connection.introspection.table_names()
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
