from __future__ import annotations

from typing import Any, NoReturn

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from core.errors import DomainError
from evolution import memdir_import
from evolution.algorithms.memdir import MemdirError, read_tree
from memories.models import Workspace
from memories.services import workspace_create


class Command(BaseCommand):
    help = (
        "Import a memory-evolution directory into a workspace. Every problem is printed with its file and "
        "line and nothing is imported when there is one. A missing workspace is created with --create-owner."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", metavar="DIR")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument(
            "--create-owner",
            metavar="USERNAME",
            help="create the workspace when it does not exist, owned by this existing user",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        slug = options["workspace"]
        try:
            files = read_tree(options["directory"])
        except FileNotFoundError as exc:
            raise CommandError(str(exc)) from None
        except MemdirError as exc:
            self._problems([str(p) for p in exc.problems])
        if not files:
            raise CommandError(f"{options['directory']} holds no files; nothing to import")
        try:
            # Creating the workspace and importing commit together: a refused directory leaves no workspace.
            with transaction.atomic():
                workspace = Workspace.objects.filter(slug=slug).first()
                created = False
                if workspace is None:
                    workspace = self._create(slug, options["create_owner"])
                    created = True
                summary = memdir_import.memdir_import(workspace=workspace, files=files, actor=None)
        except memdir_import.DirectoryInvalid as exc:
            self._problems([str(p) for p in exc.problems])
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        made = ", ".join(f"{v} {k}" for k, v in summary.created.items())
        skipped = ", ".join(f"{v} {k}" for k, v in summary.skipped.items() if v)
        self.stdout.write(
            f"Imported into {'new workspace ' if created else ''}{slug!r}: {made}"
            + (f"; already there: {skipped}" if skipped else "")
        )

    def _create(self, slug: str, owner_name: str | None) -> Workspace:
        if not owner_name:
            raise CommandError(
                f"workspace {slug!r} does not exist; pass --create-owner USERNAME to create it, owned by that user"
            )
        owner = get_user_model().objects.filter(username=owner_name).first()
        if owner is None:
            raise CommandError(f"--create-owner: no user {owner_name!r}")
        return workspace_create(owner=owner, slug=slug, name=slug)

    def _problems(self, lines: list[str]) -> NoReturn:
        for line in lines:
            self.stderr.write(line)
        raise CommandError(f"{len(lines)} problem(s) in the directory; nothing was imported")
