from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import DomainError
from memories.embedding_service import REEMBED_BATCH, ReembedProgress, workspace_reembed
from memories.selectors import workspace_by_slug


class Command(BaseCommand):
    help = (
        "Re-embed a workspace's memories whose vector is not of the target embedder (default: the workspace's "
        "own), one committed batch at a time (an interrupted run resumes where it stopped), then make the "
        "target the workspace's embedder."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workspace", required=True, help="workspace slug")
        parser.add_argument("--embedder", metavar="SPEC", help="an EMBEDDER value, e.g. hashing:384 or model2vec")
        parser.add_argument("--batch", type=int, default=REEMBED_BATCH, help="memories per committed batch")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            workspace = workspace_by_slug(slug=options["workspace"])
            result = workspace_reembed(
                workspace=workspace, spec=options["embedder"], batch=options["batch"], progress=self._progress
            )
        except DomainError as exc:
            raise CommandError(exc.detail) from None
        if not result.changed:
            self.stdout.write(f"nothing to do: every vector of {workspace.slug!r} is already of {result.model}")
            return
        spec = result.spec or "the site's EMBEDDER"
        self.stdout.write(
            f"re-embedded {result.reembedded} memories of {workspace.slug!r} with {result.model}; "
            f"workspace embedder: {spec}"
        )

    def _progress(self, step: ReembedProgress) -> None:
        eta = "?" if step.eta_seconds is None else f"{step.eta_seconds:.0f} s"
        self.stdout.write(f"{step.done}/{step.total} memories, {step.rate:.0f}/s, ETA {eta}")
