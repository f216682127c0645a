from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from evolution import selectors
from evolution.evolvers.base import REASONS
from memories.selectors import parse_memory_id


class Command(BaseCommand):
    help = "Print the evolution history of one memory, newest first (applied records only)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("memory_id")
        parser.add_argument("--limit", type=int, default=50, help="records to print (default 50)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            memory_id = parse_memory_id(options["memory_id"], field="memory_id")
            workspace = selectors.workspace_of_memory(memory_id=memory_id)
            records, more = selectors.memory_history(workspace=workspace, memory_id=memory_id, limit=options["limit"])
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        key = str(memory_id)
        if not records:
            self.stdout.write(f"memory {key} ({workspace.slug}): no evolution records")
            return
        self.stdout.write(f"memory {key} ({workspace.slug}): {len(records)} record(s), newest first")
        for record in records:
            reason = (record.after.get(REASONS) or {}).get(key) or record.reason
            reverted = f"  [reverted by #{record.reverted_by_id}]" if record.reverted_at else ""
            self.stdout.write(
                f"{record.timestamp:%Y-%m-%d %H:%M:%S}  #{record.pk}  {record.evolver} {record.action}{reverted}"
            )
            self.stdout.write(f"    {reason}")
            before, after = record.before.get(key), record.after.get(key)
            if before is not None or after is not None:
                self.stdout.write(f"    before {json.dumps(before, sort_keys=True)}")
                self.stdout.write(f"    after  {json.dumps(after, sort_keys=True)}")
        if more is not None:
            self.stdout.write("(older records exist; use --limit to see more)")
