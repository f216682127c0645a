from __future__ import annotations

from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from evolution import memdir_export, selectors
from evolution.algorithms.memdir import write_tree


class Command(BaseCommand):
    help = (
        "Write a workspace as a memory-evolution directory (hot/, warm/, cold/, engine/*.json, "
        "proposals/pending.md, reflections/log.md, meta.json) into DIR, which must be empty or new."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("directory", metavar="DIR")
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument(
            "--force",
            action="store_true",
            help="write into a non-empty DIR (the layout's files are overwritten; other files stay, so a stale "
            "topic file of an earlier export would be imported again)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        target = Path(options["directory"])
        if target.exists() and not target.is_dir():
            raise CommandError(f"{target} exists and is not a directory")
        if target.is_dir() and any(target.iterdir()) and not options["force"]:
            raise CommandError(f"{target} is not empty; choose a new directory or pass --force")
        try:
            workspace = selectors.workspace_by_slug(slug=options["workspace"])
            files = memdir_export.memdir_export(workspace=workspace)
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        write_tree(target, files)
        self.stdout.write(f"Exported {workspace.slug!r} to {target}: {len(files)} files")
        for path in files:
            self.stdout.write(f"  {path}")
