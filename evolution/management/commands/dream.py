from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from evolution import dream, selectors


class Command(BaseCommand):
    help = (
        "Run the dream cycle on a workspace: rescore rules and corrections, promote, demote and "
        "archive them (each move recorded with its reason, nothing deleted), list pending proposals, log the "
        "week's patterns as reflections, and store the report. --dry-run previews and stores nothing."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--dry-run", action="store_true", help="preview only: change and store nothing")
        parser.add_argument("--json", action="store_true", help="print the whole report as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            workspace = selectors.workspace_by_slug(slug=options["workspace"])
            result = dream.dream_run(workspace=workspace, dry_run=bool(options["dry_run"]))
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        report = result.report
        if options["json"]:
            self.stdout.write(json.dumps({"id": result.pk, **report}, indent=2, sort_keys=True))
            return
        counts = report["counts"]
        head = "Dry run of the dream" if report["dry_run"] else f"Dream report #{result.pk}"
        self.stdout.write(
            f"{head} on {workspace.slug!r}: {report['scored']} scored, {counts['promoted']} promoted, "
            f"{counts['demoted']} demoted, {counts['archived']} archived"
            + (" (nothing changed)" if report["dry_run"] else "")
        )
        for bucket in ("promoted", "demoted", "archived"):
            for entry in report[bucket]:
                self.stdout.write(
                    f"  {bucket} {entry['memory_id']} ({entry['from']} -> {entry['to']}): {entry['reason']}"
                )
        if report["pending_proposals"]:
            self.stdout.write(f"{len(report['pending_proposals'])} proposal(s) wait for a decision:")
            for p in report["pending_proposals"]:
                self.stdout.write(f"  #{p['id']} [{p['kind']}] {p['title']}")
        for r in report["reflections"]:
            self.stdout.write(f"reflection: {r['context']}: {r['reflection']} -> {r['lesson']}")
