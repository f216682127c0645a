"""Copy a workspace's edges between the database and the Bolt graph (GRAPH_BACKEND=neo4j).

``--to neo4j`` makes the graph equal the database (batched UNWIND MERGE, then a sweep of what the
database no longer has); without ``--workspace`` it also drops the graph nodes of deleted workspaces.
``--to sql`` compares the database with the graph and fails when they differ; ``--apply`` rebuilds the
database edges from the graph (inserts and weights), ``--prune`` also deletes database-only edges.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from graph.bolt import Neo4jGraphStore
from graph.store import graph_store
from memories.models import Workspace
from surfacing.graph_sync import diff_with_sql, reconcile_sql, sync_workspace


class Command(BaseCommand):
    help = "Sync edges into the Bolt graph (--to neo4j) or verify/rebuild the database from it (--to sql)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--to", choices=["neo4j", "sql"], required=True)
        parser.add_argument("--workspace", metavar="SLUG", help="one workspace (default: all)")
        parser.add_argument("--batch", type=int, default=5_000, help="database rows read per batch (--to neo4j)")
        parser.add_argument("--apply", action="store_true", help="--to sql: write the graph's edges to the database")
        parser.add_argument("--prune", action="store_true", help="--to sql --apply: delete database-only edges")

    def handle(self, *args: Any, **options: Any) -> None:
        store = self._store()
        workspaces = list(Workspace.objects.order_by("slug"))
        if options["workspace"]:
            workspaces = [w for w in workspaces if w.slug == options["workspace"]]
            if not workspaces:
                raise CommandError(f"no workspace with slug {options['workspace']!r}")
        if options["prune"] and not options["apply"]:
            raise CommandError("--prune needs --apply")
        if options["to"] == "neo4j":
            for workspace in workspaces:
                self._to_graph(store, workspace, options["batch"])
            if not options["workspace"]:
                self._drop_deleted(store, {w.pk for w in workspaces})
        else:
            differing = [w.slug for w in workspaces if not self._to_sql(store, w, options["apply"], options["prune"])]
            if differing:
                raise CommandError(
                    f"graph and database differ for {', '.join(differing)}; rerun with --apply to rebuild the database"
                )

    def _store(self) -> Neo4jGraphStore:
        store = graph_store()
        if isinstance(store, Neo4jGraphStore):
            return store
        if not settings.NEO4J_URI:
            raise CommandError("NEO4J_URI is not set: there is no Bolt graph to sync with")
        return Neo4jGraphStore(uri=settings.NEO4J_URI, user=settings.NEO4J_USER, password=settings.NEO4J_PASSWORD)

    def _to_graph(self, store: Neo4jGraphStore, workspace: Workspace, batch: int) -> None:
        started = time.monotonic()

        def progress(sent: int, total: int) -> None:
            rate = sent / max(time.monotonic() - started, 1e-9)
            self.stdout.write(f"{workspace.slug}: {sent}/{total} edges ({rate:,.0f} edges/s)")

        sent, swept_edges, swept_nodes = sync_workspace(store, workspace, batch=batch, progress=progress)
        nodes, edges = store.counts(workspace)
        self.stdout.write(
            f"{workspace.slug}: synced {sent} edges in {time.monotonic() - started:.1f} s; swept {swept_edges} stale"
            f" edges and {swept_nodes} nodes; graph holds {nodes} nodes, {edges} edges"
        )

    def _drop_deleted(self, store: Neo4jGraphStore, existing: set[int]) -> None:
        for key in store.workspace_keys():
            if int(key[len(store.namespace) :]) not in existing:
                dropped = store.drop_workspace(key)
                self.stdout.write(f"dropped {dropped} nodes of deleted workspace {key}")

    def _to_sql(self, store: Neo4jGraphStore, workspace: Workspace, apply: bool, prune: bool) -> bool:
        diff = diff_with_sql(store, workspace)
        self.stdout.write(
            f"{workspace.slug}: {len(diff.only_in_graph)} edges only in the graph, {len(diff.only_in_sql)} only in"
            f" the database, {len(diff.weight_differs)} with another weight"
        )
        if diff.equal:
            return True
        if not apply:
            return False
        done = reconcile_sql(store, workspace, diff, prune=prune)
        self.stdout.write(
            f"{workspace.slug}: inserted {done.inserted}, reweighted {done.reweighted}, deleted {done.deleted};"
            f" {done.unrestorable} graph edges join memories the database no longer has"
        )
        return True
