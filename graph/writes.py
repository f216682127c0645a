"""What every edge write calls: ``graph_touch`` before it (cached snapshots learn that edges changed) and
``graph_mirror`` after it (a Bolt store mirrors the rows once the transaction commits)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.db import transaction
from django.db.models import F

from graph.store import EdgeRef, SqlGraphStore, graph_store

if TYPE_CHECKING:
    from memories.models import Workspace

__all__ = ["EdgeRow", "graph_mirror", "graph_touch"]


def _as_uuid(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def graph_touch(*, workspace: Workspace, rewrites: bool = False) -> None:
    """Tell cached graph snapshots of the workspace that its edges changed (inside the writing transaction).

    ``graph_generation`` += 1 for every edge write: a snapshot then reads the edges whose id is above
    the largest it holds. ``rewrites=True`` (edges deleted, re-weighted or re-typed, or memories with
    edges deleted) also bumps ``graph_rewrites``, which makes the next read rebuild the snapshot.

    Call it *before* inserting edges: on PostgreSQL its UPDATE holds the workspace row until commit, so
    the next writer of this workspace takes its edge ids only after this one committed; edge ids of a
    workspace then appear in commit order and "above the largest id read" misses nothing.
    """
    changes: dict[str, Any] = {"graph_generation": F("graph_generation") + 1}
    if rewrites:
        changes["graph_rewrites"] = F("graph_rewrites") + 1
    apps.get_model("memories", "Workspace").objects.filter(pk=workspace.pk).update(**changes)


EdgeRow = tuple[uuid.UUID | str, uuid.UUID | str, str, float]  # source id, target id, edge type, weight


def graph_mirror(*, workspace: Workspace, added: Iterable[EdgeRow] = (), removed: Iterable[EdgeRow] = ()) -> None:
    """Hand edge writes to the graph store once the transaction commits.

    The sql store needs nothing (graph_touch already told its snapshots), so the rows are not even
    built for it (callers may pass lazy generators, over querysets too); a Bolt store mirrors them into
    its graph. Ids may be UUIDs or their text. ``robust``: a graph that is down must not
    fail a write the database has kept.
    """
    store = graph_store()
    if isinstance(store, SqlGraphStore):
        return
    added_refs = [EdgeRef(_as_uuid(s), _as_uuid(t), ty, float(w)) for s, t, ty, w in added]
    removed_refs = [EdgeRef(_as_uuid(s), _as_uuid(t), ty, float(w)) for s, t, ty, w in removed]
    if not added_refs and not removed_refs:
        return

    def mirror() -> None:
        if removed_refs:
            store.edges_removed(workspace, removed_refs)
        if added_refs:
            store.edges_added(workspace, added_refs)

    transaction.on_commit(mirror, robust=True)
