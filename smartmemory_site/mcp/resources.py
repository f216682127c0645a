"""The MCP resources: a memory by URI, and a workspace's HOT rules.

``smartmemory://workspaces/{workspace}/memories/{memory_id}`` reads a memory as ``GET .../memories/{id}/``
does, and counts the same: a direct retrieval that warms the memory up (+0.05, a retrieval event).
``smartmemory://workspaces/{workspace}/rules/hot`` lists the workspace's active HOT rules (strategy
memories in the hot tier, newest first): the rules an agent should hold in mind for every task.
Both need membership; a workspace the caller is no member of is not found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.utils import timezone

from core.errors import NotFound
from evolution.engine_selectors import strategy_rules
from memories import selectors as memory_selectors
from memories.algorithms.activation import BOOST_DIRECT
from memories.models import RetrievalSource, Tier
from memories.serializers import memory_json
from memories.signalbus import retrieval_signals
from smartmemory_site.mcp.tools import Caller, Json, workspace_slug

SCHEME = "smartmemory"
MEMORY_TEMPLATE = SCHEME + "://workspaces/{workspace}/memories/{memory_id}"
HOT_RULES_TEMPLATE = SCHEME + "://workspaces/{workspace}/rules/hot"
MIME_TYPE = "application/json"

_MEMORY_URI = re.compile(rf"^{SCHEME}://workspaces/(?P<workspace>[-\w]+)/memories/(?P<memory_id>[^/?#]+)$")
_HOT_RULES_URI = re.compile(rf"^{SCHEME}://workspaces/(?P<workspace>[-\w]+)/rules/hot$")


@dataclass(frozen=True)
class Listed:
    uri: str
    name: str
    title: str
    description: str


def memory_uri(workspace: str, memory_id: str) -> str:
    return MEMORY_TEMPLATE.format(workspace=workspace, memory_id=memory_id)


def hot_rules_uri(workspace: str) -> str:
    return HOT_RULES_TEMPLATE.format(workspace=workspace)


def read(caller: Caller, uri: str) -> Json:
    """The JSON behind ``uri``; NotFound for a URI of neither shape, as for a memory or workspace that is not."""
    if found := _MEMORY_URI.match(uri):
        return _memory(caller, found["workspace"], found["memory_id"])
    if found := _HOT_RULES_URI.match(uri):
        return _hot_rules(caller, found["workspace"])
    raise NotFound(f"uri: no resource {uri!r}; expected {MEMORY_TEMPLATE} or {HOT_RULES_TEMPLATE}", field="uri")


def _memory(caller: Caller, slug: str, memory_id: str) -> Json:
    access = memory_selectors.workspace_access(user=caller.user, slug=workspace_slug(caller, {"workspace": slug}))
    memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=memory_id, field="memory_id")
    retrieval_signals(
        workspace_id=access.workspace.pk, memory_ids=[memory.id], source=RetrievalSource.GET, delta=BOOST_DIRECT
    )
    return memory_json(memory, timezone.now(), workspace=access.workspace)


def _hot_rules(caller: Caller, slug: str) -> Json:
    access = memory_selectors.workspace_access(user=caller.user, slug=workspace_slug(caller, {"workspace": slug}))
    now = timezone.now()
    rules = [m for m in strategy_rules(workspace=access.workspace) if m.tier == Tier.HOT]
    return {
        "workspace": access.workspace.slug,
        "rules": [memory_json(m, now, workspace=access.workspace) for m in rules],
    }


def listed(caller: Caller) -> list[Listed]:
    """The HOT rules of every workspace the caller may read (only the bound one on a bound connection)."""
    rows = memory_selectors.workspace_list_for_user(user=caller.user)
    return [
        Listed(
            uri=hot_rules_uri(row.workspace.slug),
            name=f"hot-rules-{row.workspace.slug}",
            title=f"HOT rules of {row.workspace.name}",
            description="The workspace's active HOT rules: hold them in mind for every task.",
        )
        for row in rows
        if caller.workspace is None or row.workspace.slug == caller.workspace
    ]
