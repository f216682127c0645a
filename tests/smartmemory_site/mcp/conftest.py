"""Fixtures of the MCP tests: an SDK ClientSession connected in process to the server as a given caller.

The session speaks the real protocol (JSON-RPC over the SDK's in-memory streams, the initialize
handshake, tools/list, tools/call); only the transport differs from /mcp/ and mcp_stdio, which
test_http.py and test_mcp_stdio.py drive for real. The server's synchronous work runs in asgiref's
thread, so these tests use transactional databases (as the socket tests do).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest
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
        async with ClientSession(client_streams[0], client_streams[1]) as session:
            await session.initialize()
            yield session
        tasks.cancel_scope.cancel()


@pytest.fixture
def connect() -> Connect:
    """``async with connect(user) as session`` (``workspace=`` binds the connection as mcp_stdio does)."""
    return _connected
