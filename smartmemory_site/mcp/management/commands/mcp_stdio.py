"""``manage.py mcp_stdio --workspace SLUG``: the MCP server over stdin/stdout, for a local agent.

The agent runtime starts this command and speaks MCP on its standard streams; stdout carries only the
protocol (the SDK points file descriptor 1 at stderr while serving, so stray output cannot corrupt it).
The connection serves one workspace, as one user: the owner of an API token (``--token`` or the
``SMARTMEMORY_TOKEN`` variable, which keeps the key out of the process list) or, for an operator on the
machine, ``--user USERNAME``. That user's role decides what the tools may do, and audit rows name them,
exactly as for the REST API. Boosts are flushed in the background as in the web server, and once more on exit.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from mcp.server.stdio import stdio_server
from rest_framework import exceptions

from core.errors import DomainError
from memories import selectors
from memories.api_auth import TokenAuthentication
from memories.signalbus import LocalSignalBus, signal_bus
from smartmemory_site.mcp.server import build_server
from smartmemory_site.mcp.tools import Caller

TOKEN_VARIABLE = "SMARTMEMORY_TOKEN"


def identity(*, token: str | None, username: str | None) -> AbstractBaseUser:
    """The active user of ``token`` or named ``username`` (exactly one of them); CommandError otherwise."""
    if bool(token) == bool(username):
        raise CommandError(f"name the caller with one of --token (or {TOKEN_VARIABLE}) and --user")
    if token:
        try:
            user, _ = TokenAuthentication().authenticate_credentials(token)
        except exceptions.AuthenticationFailed as exc:
            raise CommandError(f"--token: {exc.detail}") from None
        return user  # type: ignore[no-any-return]
    found = get_user_model().objects.filter(username=username, is_active=True).first()
    if found is None:
        raise CommandError(f"--user: no active user {username!r}")
    return found


class Command(BaseCommand):
    help = "Serve the MCP tools and resources of one workspace over stdio (for a local agent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="slug of the workspace this connection serves")
        parser.add_argument("--token", help=f"the caller's API token (default: ${TOKEN_VARIABLE})")
        parser.add_argument("--user", help="act as this user instead of a token's (an operator on the machine)")

    def handle(self, *args: Any, **options: Any) -> None:
        user = identity(token=options["token"] or os.environ.get(TOKEN_VARIABLE), username=options["user"])
        slug = options["workspace"]
        try:
            selectors.workspace_access(user=user, slug=slug)
        except DomainError as exc:
            raise CommandError(f"--workspace: {exc.detail}") from None
        caller = Caller(user=user, workspace=slug)
        server = build_server(lambda ctx: caller, bound=True)

        async def serve() -> None:
            async with stdio_server() as (read_stream, write_stream):
                await server.run(read_stream, write_stream, server.create_initialization_options())

        bus = signal_bus()
        flusher = bus if isinstance(bus, LocalSignalBus) else None
        if flusher is not None and settings.SIGNAL_BACKGROUND_FLUSH:
            flusher.start()
        try:
            anyio.run(serve)
        finally:
            if flusher is not None:
                flusher.stop()
