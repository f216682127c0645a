"""Fixtures of the MCP tests.

- `connect(user, workspace=None)`: an SDK ClientSession connected in process to the server as `user`.
  It speaks the real protocol (JSON-RPC over the SDK's in-memory streams, the initialize handshake,
  tools/list, tools/call); only the transport differs from /mcp/ and mcp_stdio. The server's synchronous
  work runs in asgiref's thread, so these tests use transactional databases (as the socket tests do).
- `live_site` (session): daphne serving `smartmemory_site.asgi` on 127.0.0.1:<free port> against a
  SQLite file of its own, with owner olga and viewer vic of "acme" and sam, owner of "other";
  `live_site.tokens[name]` are their API tokens (from `create_api_token`), `live_site.rest(name)` a
  REST client, `live_site.env` the environment to start `manage.py mcp_stdio` with on the same database.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from mcp import ClientSession
from mcp.shared.memory import create_client_server_memory_streams

from graph.store import SqlGraphStore, set_graph_store
from smartmemory_site.mcp.server import build_server
from smartmemory_site.mcp.tools import Caller
from surfacing.pins import DbPinStore, set_pin_store

Connect = Callable[..., AbstractAsyncContextManager[ClientSession]]


@pytest.fixture(autouse=True)
def stores() -> Iterator[None]:
    """The embedded stores (SQL graph snapshot, database pins), whatever the environment configures."""
    set_graph_store(SqlGraphStore())
    set_pin_store(DbPinStore())
    yield
    set_graph_store(None)
    set_pin_store(None)


@asynccontextmanager
async def _connected(user: Any, workspace: str | None = None) -> AsyncIterator[ClientSession]:
    caller = Caller(user=user, workspace=workspace)
    server = build_server(lambda ctx: caller, bound=workspace is not None)
    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as tasks,
    ):

        async def serve() -> None:
            await server.run(server_streams[0], server_streams[1], server.create_initialization_options())

        tasks.start_soon(serve)
        try:
            async with ClientSession(client_streams[0], client_streams[1]) as session:
                await session.initialize()
                yield session
        finally:
            tasks.cancel_scope.cancel()
            # The server's thread keeps its own connections; closed, the test database can be dropped.
            await sync_to_async(connections.close_all)()


@pytest.fixture
def connect() -> Connect:
    """``async with connect(user) as session`` (``workspace=`` binds the connection as mcp_stdio does)."""
    return _connected


# -- a live site: daphne serving smartmemory_site.asgi on loopback, for /mcp/ and mcp_stdio -----------

ROOT = Path(__file__).resolve().parents[3]
# The live site runs the embedded configuration on its own SQLite file, whatever `make test` exported.
_SCALE_VARIABLES = ("DATABASE_URL", "REDIS_URL", "NEO4J_URI", "NEO4J_USER", "NEO4J_PASSWORD", "LLM_BASE_URL")

# One process (Django starts once): migrate; owner olga and viewer vic of "acme", sam owns "other", where olga
# and vic are strangers; their API tokens, printed as the last line.
_SETUP = """
import io, json
from django.core.management import call_command
call_command("migrate", "--no-input", verbosity=0)
from django.contrib.auth import get_user_model
from memories import services
from memories.inputs import MemoryInput
User = get_user_model()
olga, vic, sam = (User.objects.create_user(name, password="pw-" + name) for name in ("olga", "vic", "sam"))
acme = services.workspace_create(owner=olga, slug="acme", name="Acme")
services.membership_set(workspace=acme, user=vic, role="viewer")
other = services.workspace_create(owner=sam, slug="other", name="Other")
services.memory_create(workspace=acme, actor=olga, item=MemoryInput(content="We picked JWT for authentication"))
services.memory_create(workspace=other, actor=sam, item=MemoryInput(content="Sam's private plan"))
tokens = {}
for name in ("olga", "vic", "sam"):
    out = io.StringIO()
    call_command("create_api_token", name, stdout=out)
    tokens[name] = out.getvalue().split()[-1]
print(json.dumps(tokens))
"""


@dataclass
class LiveSite:
    url: str
    env: dict[str, str]
    tokens: dict[str, str]
    log_path: Path

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=300
        )
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-4000:]}")
        return done.stdout

    def rest(self, username: str) -> httpx2.AsyncClient:
        """An HTTP client of the REST API as ``username`` (Token auth)."""
        return httpx2.AsyncClient(
            base_url=self.url + "/api/v1/", headers={"Authorization": f"Token {self.tokens[username]}"}, timeout=30
        )

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def live_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveSite]:
    work = tmp_path_factory.mktemp("mcp-site")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if k not in _SCALE_VARIABLES}
    env.update(
        DATABASE_URL=f"sqlite:///{work / 'site.sqlite3'}",
        DJANGO_SETTINGS_MODULE="smartmemory_site.settings",
        DJANGO_DEBUG="false",
        DJANGO_ALLOWED_HOSTS="127.0.0.1,localhost",
        VECTOR_INDEX_DIR=str(work / "vectors"),
        SIGNAL_FLUSH_SECONDS="1",
        SIGNAL_BACKGROUND_FLUSH="true",
        PYTHONUNBUFFERED="1",
    )
    site = LiveSite(url=url, env=env, tokens={}, log_path=work / "daphne.log")
    site.tokens = json.loads(site.manage("shell", "-v", "0", "-c", _SETUP).strip().splitlines()[-1])
    log = site.log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "smartmemory_site.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"daphne exited with {process.returncode}:\n{site.log_tail()}")
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not answer /healthz within 60 s:\n{site.log_tail()}")
            time.sleep(0.2)
        yield site
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
        log.close()
