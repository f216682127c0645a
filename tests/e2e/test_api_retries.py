"""Retries against the real server: requests with one Idempotency-Key sent at once write once."""

from __future__ import annotations

import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

E2EServer = Any  # from tests/e2e/conftest.py (conftest modules are not importable under importlib mode)
Credentials = Any


def test_concurrent_retries_with_one_key_write_once_and_all_get_the_first_answer(
    e2e_server: E2EServer, e2e_user: Credentials, e2e_workspace: Any
) -> None:
    ws = e2e_workspace("retries")
    body = json.dumps({"items": [{"content": f"retried note {i}"} for i in range(500)]}).encode()

    def send(_: int) -> tuple[int, bytes, str]:
        request = urllib.request.Request(
            f"{e2e_server.url}/api/v1/workspaces/{ws['slug']}/memories/bulk/",
            data=body,
            method="POST",
            headers={
                "Authorization": f"Token {e2e_user.token}",
                "Content-Type": "application/json",
                "Idempotency-Key": "bulk-retry-1",
            },
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read(), response.headers.get("Idempotent-Replayed", "")

    with ThreadPoolExecutor(max_workers=5) as pool:
        answers = list(pool.map(send, range(5)))
    assert {status for status, _, _ in answers} == {201}
    assert len({content for _, content, _ in answers}) == 1
    assert sorted(replayed for _, _, replayed in answers) == ["", "true", "true", "true", "true"]
    stored = e2e_server.run(
        "from memories.models import Memory\nresult = Memory.objects.filter(workspace__slug=params['slug']).count()",
        slug=ws["slug"],
    )
    assert stored == 500
