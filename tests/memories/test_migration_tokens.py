"""The plain API keys of an older install become hashed tokens that keep working; no plain key stays."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from memories.tokens import token_digest

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("memories", "0008_delete_auditentry")]
AFTER = [("memories", "0009_api_tokens")]
KEY = "0123456789abcdef0123456789abcdef01234567"


def test_plain_tokens_are_hashed_keep_working_and_are_deleted() -> None:
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        user = executor.loader.project_state(BEFORE).apps.get_model("auth", "User").objects.create(username="ann")
        qn = connection.ops.quote_name
        with connection.cursor() as cursor:
            # DRF's token table as an install from before hashing has it.
            cursor.execute(
                f"CREATE TABLE {qn('authtoken_token')} ({qn('key')} varchar(40) PRIMARY KEY, "
                f"{qn('created')} timestamp NOT NULL, {qn('user_id')} integer NOT NULL)"
            )
            cursor.execute(
                f"INSERT INTO {qn('authtoken_token')} VALUES (%s, %s, %s)",
                [KEY, "2025-03-04 05:06:07", user.pk],
            )
        executor = MigrationExecutor(connection)
        executor.migrate(AFTER)
        token = executor.loader.project_state(AFTER).apps.get_model("memories", "ApiToken").objects.get()
        assert (token.user_id, token.digest, token.prefix) == (user.pk, token_digest(KEY), KEY[:8])
        assert (token.created_at.year, token.created_at.tzinfo is not None) == (2025, True)
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {qn('authtoken_token')}")
            assert cursor.fetchone() == (0,)
        executor = MigrationExecutor(connection)
        executor.migrate(executor.loader.graph.leaf_nodes())
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {KEY}")
        assert client.get("/api/v1/workspaces/").status_code == 200
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE IF EXISTS authtoken_token")
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_an_install_without_plain_tokens_migrates_as_it_is() -> None:
    assert "authtoken_token" not in connection.introspection.table_names()
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    assert "memories_apitoken" in connection.introspection.table_names()
