from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from memories.demo import demo_load
from memories.embedding_service import embed_pending


class Command(BaseCommand):
    help = "Create the demo workspace (the 'why did we pick JWT' story) and an admin user, once."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--slug", default="demo")
        parser.add_argument("--username", default="admin")

    def handle(self, *args: Any, **options: Any) -> None:
        result = demo_load(slug=options["slug"], username=options["username"])
        # The conversation is one bulk write: with a slow model its vectors are left to the embed job, which
        # the server's worker would run within seconds; the demo is complete before the server starts.
        embed_pending(workspace=result.workspace)
        if result.created_workspace:
            self.stdout.write(
                self.style.SUCCESS(
                    f"Demo workspace {result.workspace.slug!r} created with {result.memories} memories "
                    f"and {result.edges} edges."
                )
            )
        else:
            self.stdout.write(f"Demo workspace {result.workspace.slug!r} already exists; left as it is.")
        if result.password:
            self.stdout.write(
                self.style.WARNING(
                    f"Admin user {options['username']!r} created. Password (shown once): {result.password}"
                )
            )
        self.stdout.write(f"API token for {options['username']} (new, shown once): {result.token}")
