"""Shared Playwright fixtures: a real ASGI server (daphne: HTTP + WebSockets) and Chromium.

What the fixtures offer (reuse them for the inspector, proposals and evolution pages):

- `e2e_server` (session): daphne serving `smartmemory_site.asgi` on 127.0.0.1:<free port> against its
  own SQLite file (migrated once), with the in-process signal bus flushing every second and the
  in-memory channel layer, so activation pushes reach pages for real. `e2e_server.url` is the base
  URL; `e2e_server.run(code, **params)` runs Python inside Django against the same database in a
  subprocess (`params` is a dict in scope; assign `result` to return JSON); `e2e_server.manage(...)`
  runs a management command. The server log is `$TEST_OUTPUT_DIR/e2e/daphne.log`.
- `e2e_user` (session): an account (`username`, `password`, `token`) that tests make members of their
  workspaces, e.g. `e2e_workspace("slug")`.
- `e2e_workspace` (function factory): `e2e_workspace(slug, memories=[{...MemoryInput fields}], role=...)`
  creates a workspace owned by `e2e_user` and returns {"slug", "ids"}.
- `browser` (session): Chromium from /usr/bin/chromium (never `playwright install`).
- `page` (function): a fresh browser context already logged in as `e2e_user` (session cookie from one
  real login through the login form), 1280x900, 10 s default timeout. A failing test leaves a
  screenshot `failed-<test name>.png`.
- `screenshot(page, name, full_page=True)`: save a PNG to `$TEST_OUTPUT_DIR/screenshots/<name>.png`.
- A module that needs a server configured otherwise (an LLM endpoint it controls, say) starts its own:
  `with e2e_serve(name, **env) as server` (same embedded configuration plus `env`, own database),
  `e2e_login(browser, server, username, password)` for a storage state, and `page_for(server, state)`
  for pages with the same checks as `page`.

Mark browser tests `@pytest.mark.e2e`. They need no in-process database: everything goes through the
server, exactly as a person would.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Playwright, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Variables that would point the server at the shared at-scale services started by `make test`; the
# browser tests run the embedded configuration so a push travels bus -> flush -> channel layer -> page.
_SCALE_VARIABLES = ("DATABASE_URL", "REDIS_URL", "NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "LLM_BASE_URL")


def output_dir() -> Path:
    path = Path(os.environ.get("TEST_OUTPUT_DIR") or ROOT / "var" / "test-output")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# A long-lived Django process for `E2EServer.run`: Django starts once per session instead of once per
# call, and each request is one JSON line in, one JSON line out.
_WORKER = r"""
import contextlib, json, sys, traceback
import django
django.setup()
from django.db import close_old_connections
reply_to = sys.stdout
for line in sys.stdin:
    request = json.loads(line)
    scope = {"params": request["params"], "result": None}
    try:
        with contextlib.redirect_stdout(sys.stderr):
            exec(compile(request["code"], "<e2e_server.run>", "exec"), scope)
        reply = {"ok": True, "result": json.loads(json.dumps(scope["result"], default=str))}
    except Exception:
        reply = {"ok": False, "error": traceback.format_exc()}
    finally:
        close_old_connections()
    reply_to.write(json.dumps(reply) + "\n")
    reply_to.flush()
"""


@dataclass
class E2EServer:
    url: str
    db_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes]
    log_path: Path
    worker: subprocess.Popen[str] | None = None

    def run(self, code: str, **params: Any) -> Any:
        """Run `code` inside Django (same database as the server); return the JSON of its `result`.

        `params` is in scope as a dict; assign `result`. Runs in one long-lived worker process.
        """
        if self.worker is None or self.worker.poll() is not None:
            self.worker = subprocess.Popen(
                [sys.executable, "-c", _WORKER],
                cwd=ROOT,
                env=self.env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log_path.with_name("worker.log").open("a"),
                text=True,
            )
        assert self.worker.stdin is not None and self.worker.stdout is not None
        request = {"code": textwrap.dedent(code), "params": json.loads(json.dumps(params, default=str))}
        self.worker.stdin.write(json.dumps(request) + "\n")
        self.worker.stdin.flush()
        line = self.worker.stdout.readline()
        if not line:
            raise RuntimeError("the e2e Django worker exited; see worker.log next to daphne.log")
        reply = json.loads(line)
        if not reply["ok"]:
            raise RuntimeError(f"e2e_server.run failed:\n{reply['error']}")
        return reply["result"]

    def stop_worker(self) -> None:
        if self.worker is not None and self.worker.poll() is None:
            assert self.worker.stdin is not None
            self.worker.stdin.close()
            try:
                self.worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait(timeout=5)

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


@contextmanager
def serve(name: str, db_path: Path, extra_env: dict[str, str] | None = None) -> Iterator[E2EServer]:
    """daphne on a free port against its own migrated SQLite file `db_path`, log in
    `$TEST_OUTPUT_DIR/<name>/daphne.log`; `extra_env` is added to the embedded configuration (an LLM
    endpoint a test controls, say). Stopped when the block ends."""
    work = output_dir() / name
    work.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in _SCALE_VARIABLES}
    env.update(
        DATABASE_URL=f"sqlite:///{db_path}",
        DJANGO_SETTINGS_MODULE="smartmemory_site.settings",
        DJANGO_DEBUG="false",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        DJANGO_CSRF_TRUSTED_ORIGINS=url,
        SIGNAL_FLUSH_SECONDS="1",
        SIGNAL_BACKGROUND_FLUSH="true",
        # The scheduled jobs (decay sweep, retrieval statistics) run on the real clock; pages whose order a
        # test reads must not move under it. tests/evolution tests the jobs with an injected clock.
        SCHEDULER_ENABLED="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra_env or {})
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=ROOT, env=env, check=True, timeout=300
    )
    log_path = work / "daphne.log"
    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "smartmemory_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = E2EServer(url=url, db_path=db_path, env=env, process=process, log_path=log_path)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited with {process.returncode}:\n{server.log_tail()}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not answer /healthz within 60 s:\n{server.log_tail()}")
            time.sleep(0.2)
        yield server
    finally:
        server.stop_worker()
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()


@pytest.fixture(scope="session")
def e2e_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[E2EServer]:
    # Failure screenshots of an earlier run would be mistaken for this run's.
    for stale in (output_dir() / "screenshots").glob("failed-*.png"):
        stale.unlink()
    with serve("e2e", tmp_path_factory.mktemp("e2e-db") / "e2e.sqlite3") as server:
        yield server


@pytest.fixture(scope="session")
def e2e_serve(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., AbstractContextManager[E2EServer]]:
    """`with e2e_serve(name, **env) as server:` another server like `e2e_server`, with `env` added (a
    module's own configuration), on a database of its own."""

    def start(name: str, **extra_env: str) -> AbstractContextManager[E2EServer]:
        return serve(f"e2e-{name}", tmp_path_factory.mktemp(f"e2e-{name}-db") / "e2e.sqlite3", extra_env)

    return start


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    token: str


@pytest.fixture(scope="session")
def e2e_user(e2e_server: E2EServer) -> Credentials:
    data = e2e_server.run(
        """
        from django.contrib.auth import get_user_model
        from memories.tokens import api_token_create
        user = get_user_model().objects.create_user(params["username"], password=params["password"])
        result = {"token": api_token_create(user=user, name="e2e").key}
        """,
        username="casey",
        password="e2e-password-casey",
    )
    return Credentials("casey", "e2e-password-casey", data["token"])


@pytest.fixture
def e2e_workspace(e2e_server: E2EServer, e2e_user: Credentials) -> Callable[..., dict[str, Any]]:
    """Create a workspace owned by `e2e_user` (or with `role`), optionally with memories; return slug and ids."""

    def make(
        slug: str, name: str = "", memories: list[dict[str, Any]] | None = None, role: str = "owner"
    ) -> dict[str, Any]:
        return dict(
            e2e_server.run(
                """
                from datetime import datetime
                from django.contrib.auth import get_user_model
                from memories import services
                from memories.inputs import MemoryInput
                user = get_user_model().objects.get(username=params["username"])
                workspace = services.workspace_create(owner=user, slug=params["slug"], name=params["name"])
                if params["role"] != "owner":
                    services.membership_set(workspace=workspace, user=user, role=params["role"])
                items = []
                for raw in params["memories"]:
                    raw = dict(raw)
                    if raw.get("created_at"):
                        raw["created_at"] = datetime.fromisoformat(raw["created_at"])
                    raw["tags"] = tuple(raw.get("tags", ()))
                    items.append(MemoryInput(**raw))
                made = services.memories_create(workspace=workspace, actor=user, items=items)
                result = {"slug": workspace.slug, "ids": [str(m.id) for m in made]}
                """,
                username=e2e_user.username,
                slug=slug,
                name=name or slug.replace("-", " ").title(),
                memories=memories or [],
                role=role,
            )
        )

    return make


@pytest.fixture(scope="session")
def playwright_instance() -> Iterator[Playwright]:
    with sync_playwright() as playwright:
        yield playwright


@pytest.fixture(scope="session")
def browser(playwright_instance: Playwright) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: run scripts/install_system.sh (installs chromium)")
    browser = playwright_instance.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


def login_state(browser: Browser, server: E2EServer, username: str, password: str) -> dict[str, Any]:
    """Log in once through the real login form of `server`; returns the storage state (session cookie)."""
    context = browser.new_context(base_url=server.url)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_load_state("load")
    if "/accounts/login/" in page.url:
        raise RuntimeError("logging in through the login form failed")
    state: dict[str, Any] = dict(context.storage_state())
    context.close()
    return state


@pytest.fixture(scope="session")
def e2e_login() -> Callable[[Browser, E2EServer, str, str], dict[str, Any]]:
    """`login_state` for a module's own server (`e2e_serve`)."""
    return login_state


@pytest.fixture(scope="session")
def logged_in_state(browser: Browser, e2e_server: E2EServer, e2e_user: Credentials) -> dict[str, Any]:
    """Log in once through the real login form and keep the session cookie for every test."""
    return login_state(browser, e2e_server, e2e_user.username, e2e_user.password)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture
def page_for(browser: Browser, request: pytest.FixtureRequest) -> Iterator[Callable[[E2EServer, dict[str, Any]], Page]]:
    """`page_for(server, storage_state)`: a fresh logged-in context on `server` as `page` is (1280x900,
    10 s default timeout, a screenshot when the test fails, no JavaScript error nor CSP block allowed)."""
    opened: list[tuple[BrowserContext, Page, list[str], list[str]]] = []

    def make(server: E2EServer, state: dict[str, Any]) -> Page:
        context: BrowserContext = browser.new_context(
            base_url=server.url,
            storage_state=state,  # type: ignore[arg-type]
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(10_000)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # Chromium reports what the Content-Security-Policy blocked (a script, a style, a socket) as a console error.
        blocked: list[str] = []
        page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
        opened.append((context, page, errors, blocked))
        return page

    yield make
    for context, page, errors, blocked in opened:
        if request.node.stash.get(_FAILED, False):
            save_screenshot(page, f"failed-{request.node.name}")
        context.close()
        assert not errors, f"JavaScript errors on the page: {errors}"
        assert not blocked, f"blocked by the Content-Security-Policy: {blocked}"


@pytest.fixture
def page(
    page_for: Callable[[E2EServer, dict[str, Any]], Page], e2e_server: E2EServer, logged_in_state: dict[str, Any]
) -> Page:
    return page_for(e2e_server, logged_in_state)


def save_screenshot(page: Page, name: str, full_page: bool = True) -> Path:
    """Save a PNG to $TEST_OUTPUT_DIR/screenshots/<name>.png (the whole page unless full_page=False)."""
    directory = output_dir() / "screenshots"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture
def screenshot() -> Callable[..., Path]:
    return save_screenshot
