from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from evolution import runner, selectors, services
from evolution.evolvers import EVOLVERS, default_cycle


class Command(BaseCommand):
    help = (
        "Run evolvers on a workspace (default: the enhanced cycle). Dry run unless --apply; prints each "
        "evolver's outcome as it finishes. Exits with an error when an evolver failed."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument(
            "--evolver",
            action="append",
            default=[],
            metavar="NAME",
            help=f"evolver to run (repeatable); known: {', '.join(EVOLVERS)}",
        )
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--dry-run", action="store_true", help="preview only (the default)")
        mode.add_argument("--apply", action="store_true", help="apply the changes")

    def handle(self, *args: Any, **options: Any) -> None:
        apply = bool(options["apply"])
        try:
            workspace = selectors.workspace_by_slug(slug=options["workspace"])
            names = options["evolver"] or default_cycle()
            self.stdout.write(f"{'Applying' if apply else 'Dry run of'} {len(names)} evolver(s) on {workspace.slug!r}")
            run = services.evolution_run(
                workspace=workspace, actor=None, evolvers=names, dry_run=not apply, on_progress=self._progress
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        finally:
            # The cycle's last SQLite checkpoint runs on a thread of its own; let it finish before exiting.
            runner.wait_for_checkpoints()
        counts = run.summary.get("counts", {})
        self.stdout.write(
            f"run {run.id} {run.status}: {counts.get('records', 0)} records, {counts.get('ok', 0)} ok, "
            f"{counts.get('failed', 0)} failed{' (dry run: nothing changed)' if run.dry_run else ''}"
        )
        if counts.get("failed"):
            raise CommandError(f"{counts['failed']} evolver(s) failed; see the lines above")

    def _progress(self, event: dict[str, Any]) -> None:
        position = f"[{event['index'] + 1}/{event['total']}]"
        result = event.get("result")
        if result is None:
            self.stdout.write(f"{position} {event['evolver']} ...")
            return
        stats = ", ".join(f"{k} {v}" for k, v in result["stats"].items())
        line = (
            f"{position} {result['name']}: {result['status']}, {result['records']} records, {result['seconds']:.2f} s"
        )
        if result["status"] == "ok":
            self.stdout.write(self.style.SUCCESS(line) + (f" ({stats})" if stats else ""))
        else:
            self.stdout.write(self.style.ERROR(f"{line}: {result['error']}"))
