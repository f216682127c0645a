"""Background evolution runs in a real Chromium against daphne and its embedded worker thread: a run
started from the Runs page moves over the WebSocket to its end, a queued run is cancelled at once, and a
running one stops before its next write.

What holds a run still, without a sleep: the server's LLM endpoint (LLM_BASE_URL) is a small HTTP server of
this test whose answers wait behind a gate. CompressionLadder asks it for every rung before its first write
(evolution.evolvers.compression), so while the gate is closed the worker sits in that evolver's plan with
no database lock held, the page says "Running CompressionLadder: 1 of 2 evolvers done", and every other run
waits queued behind it (one worker thread). The test waits for a request to be held at the gate, then for
what the page shows.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import Page, WebSocket, expect

pytestmark = pytest.mark.e2e

# Fixture types from tests/e2e/conftest.py (conftest modules are not importable under importlib mode).
E2EServer = Any
PageFor = Callable[[Any, dict[str, Any]], Page]

EVOLVERS = ("ExponentialDecay", "CompressionLadder")
HELD = "Running CompressionLadder: 1 of 2 evolvers done"
# Long enough that a digest of 40% of it is not empty; agent-written (origin tier 2), so compressible.
CONTENT = (
    "Agent note {i}: the nightly export to the billing warehouse failed twice on table invoices_{i} "
    "because the replica lagged by 40 minutes; retried after the lag dropped and it finished in 12 minutes."
)


class Gate:
    """Answers of the fake LLM wait here while the gate is closed (at most `limit` seconds each)."""

    def __init__(self, limit: float = 60.0) -> None:
        self.limit = limit
        self._cond = threading.Condition()
        self._open = True
        self.held = 0
        self.calls = 0

    def close(self) -> None:
        with self._cond:
            self._open = False

    def release(self) -> None:
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def pass_through(self) -> None:
        with self._cond:
            self.calls += 1
            self.held += 1
            self._cond.notify_all()
            self._cond.wait_for(lambda: self._open, timeout=self.limit)
            self.held -= 1

    def wait_until_held(self, timeout: float = 20.0) -> None:
        """Block until a request of the server waits at the gate (the run is inside the evolver's plan)."""
        with self._cond:
            assert self._cond.wait_for(lambda: self.held > 0, timeout=timeout), "no LLM request reached the gate"


def _llm_handler(gate: Gate) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            gate.pass_through()
            # One answer serves both rungs: a short digest, and key phrases split on ';'.
            body = json.dumps({"choices": [{"message": {"content": "billing export; replica lag; retry"}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture(scope="module")
def gate() -> Gate:
    return Gate()


@pytest.fixture(scope="module")
def held_server(gate: Gate, e2e_serve: Callable[..., AbstractContextManager[E2EServer]]) -> Iterator[E2EServer]:
    """A daphne of this module whose LLM endpoint is the gated fake."""
    llm = ThreadingHTTPServer(("127.0.0.1", 0), _llm_handler(gate))
    llm.daemon_threads = True
    thread = threading.Thread(target=llm.serve_forever, name="fake-llm", daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{llm.server_address[1]}/v1"
        with e2e_serve("held-llm", LLM_BASE_URL=base, LLM_TIMEOUT_SECONDS="90") as server:
            yield server
            gate.release()
    finally:
        gate.release()
        llm.shutdown()
        llm.server_close()


@pytest.fixture(scope="module")
def held(held_server: E2EServer, browser: Any, e2e_login: Any) -> tuple[E2EServer, dict[str, Any]]:
    """The server and a logged-in state of its only account."""
    server = held_server
    server.run(
        """
        from django.contrib.auth import get_user_model
        get_user_model().objects.create_user(params["u"], password=params["p"])
        """,
        u="robin",
        p="e2e-password-robin",
    )
    return server, e2e_login(browser, server, "robin", "e2e-password-robin")


def make_workspace(server: E2EServer, slug: str) -> list[str]:
    """A workspace with compression on and three cooling agent notes 200 days old; returns their ids."""
    ids: list[str] = server.run(
        """
        from datetime import datetime
        from django.utils import timezone
        from django.contrib.auth import get_user_model
        from memories import services
        from memories.inputs import MemoryInput
        from memories.models import Memory
        user = get_user_model().objects.get(username="robin")
        ws = services.workspace_create(owner=user, slug=params["slug"], name=params["slug"])
        ws.evolution_settings = {"compression_enabled": True}
        ws.save(update_fields=["evolution_settings"])
        made = services.memories_create(workspace=ws, actor=user, items=[
            MemoryInput(content=params["content"].format(i=i), memory_type="episodic", origin="agent:e2e",
                        created_at=datetime.fromisoformat(params["at"]))
            for i in range(3)])
        # Boosted just now to 0.2: a SUMMARY rung (0.15-0.40), which the LLM writes (a colder one is a
        # tombstone, written without it).
        Memory.objects.filter(workspace=ws).update(activation_score=0.2, activation_last_boost_at=timezone.now())
        result = [str(m.id) for m in made]
        """,
        slug=slug,
        content=CONTENT,
        at=(datetime.now(UTC) - timedelta(days=200)).isoformat(),
    )
    return ids


def start_preview(page: Page, slug: str) -> None:
    page.goto(f"/w/{slug}/evolution/runs/")
    for box in page.locator("#run-form input[name=evolvers]").all():
        box.uncheck()
    for name in EVOLVERS:
        page.get_by_label(name, exact=True).check()
    page.get_by_role("button", name="Preview (dry run)").click()


def socket_frames(page: Page) -> list[str]:
    """Every text frame the page's sockets receive, in order."""
    frames: list[str] = []

    def watch(socket: WebSocket) -> None:
        socket.on("framereceived", lambda payload: frames.append(payload if isinstance(payload, str) else ""))

    page.on("websocket", watch)
    return frames


def refuse_polling(page: Page) -> list[str]:
    polled: list[str] = []

    def refuse(route: Any) -> None:
        polled.append(route.request.url)
        route.abort()

    page.route("**/progress/", refuse)
    return polled


def test_a_run_started_from_the_page_moves_to_completed_over_the_socket_and_a_queued_one_is_cancelled(
    held: tuple[E2EServer, dict[str, Any]], gate: Gate, page_for: PageFor
) -> None:
    server, state = held
    slug = "live-runs"
    make_workspace(server, slug)
    page = page_for(server, state)
    frames = socket_frames(page)
    polled = refuse_polling(page)
    gate.close()
    start_preview(page, slug)
    run_url = page.url
    expect(page.locator("#live-state")).to_have_text("live")
    gate.wait_until_held()
    expect(page.locator("#run-body")).to_contain_text(HELD)
    expect(page.locator("#run-status")).to_have_text("running")
    assert any(HELD in frame for frame in frames), "the held progress did not come over the socket"

    # The only worker thread is inside the held run: a second run waits queued, and Cancel ends it at once.
    other = page_for(server, state)
    start_preview(other, slug)
    expect(other.locator("#run-body")).to_contain_text("Queued: waiting for a worker (2 evolvers)")
    other.get_by_role("button", name="Cancel").click()
    expect(other.locator("#messages")).to_contain_text("Cancelled.")
    expect(other.locator("#run-status")).to_have_text("cancelled")
    assert other.url != run_url

    held_frames = len(frames)
    gate.release()
    expect(page.locator("#run-status")).to_have_text("completed")
    expect(page.locator("#run-body")).to_contain_text("What applying would change")
    expect(page.locator("#run-counts")).to_contain_text("CompressionLadder")
    assert page.url == run_url and not polled, "the run page must follow the socket, not reload or poll"
    assert any("completed" in frame for frame in frames[held_frames:])
    statuses = server.run(
        """
        from evolution.models import EvolutionRun
        result = list(EvolutionRun.objects.filter(workspace__slug=params["slug"]).order_by("started_at")
                      .values_list("status", flat=True))
        """,
        slug=slug,
    )
    assert statuses == ["completed", "cancelled"]


def test_stopping_a_running_applied_run_ends_it_before_its_next_write(
    held: tuple[E2EServer, dict[str, Any]], gate: Gate, page_for: PageFor
) -> None:
    server, state = held
    slug = "stop-runs"
    ids = make_workspace(server, slug)
    page = page_for(server, state)
    start_preview(page, slug)
    expect(page.locator("#run-status")).to_have_text("completed")

    gate.close()
    page.get_by_role("button", name="Apply these evolvers").click()
    expect(page.locator("#live-state")).to_have_text("live")
    gate.wait_until_held()
    expect(page.locator("#run-body")).to_contain_text(HELD)
    page.get_by_role("button", name="Stop the run").click()
    expect(page.locator("#messages")).to_contain_text("Stopping before the run's next write")
    expect(page.locator("#run-stopping")).to_be_visible()
    expect(page.locator("#run-status")).to_have_text("running")

    gate.release()
    expect(page.locator("#run-status")).to_have_text("cancelled")
    outcomes = page.locator("table.outcome-table")
    expect(outcomes.locator("tr", has_text="ExponentialDecay")).to_contain_text("ok")
    expect(outcomes.locator("tr", has_text="CompressionLadder")).to_contain_text("stopped on request")
    found = server.run(
        """
        from evolution.models import EvolutionRun
        from history.models import EvolutionRecord
        from memories.models import Memory
        run = EvolutionRun.objects.filter(workspace__slug=params["slug"], dry_run=False).get()
        tiers = Memory.objects.filter(id__in=params["ids"]).values_list("compression_tier", flat=True)
        result = {"status": run.status,
                  "compressed": EvolutionRecord.objects.filter(run=run, evolver="CompressionLadder").count(),
                  "tiers": sorted(tiers)}
        """,
        slug=slug,
        ids=ids,
    )
    assert found == {"status": "cancelled", "compressed": 0, "tiers": [0, 0, 0]}
