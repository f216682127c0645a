"""The writes of surfacing besides retrieval: session pins and the workspace's surfacing settings.

Retrieval itself (get_working_context, search) is ``surfacing.retrieval``.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import InvalidInput
from core.schemas import check_value
from history import audit
from history.models import Action
from memories.embeddings import embedder_for
from memories.models import Memory, Workspace
from surfacing import inputs, selectors
from surfacing.inputs import PIN_WEIGHT_MAX
from surfacing.pins import Pin, pin_store
from surfacing.settings import (
    effective_evolution,
    effective_settings,
    validate_evolution_changes,
    validate_surfacing_changes,
)

__all__ = ["PIN_WEIGHT_MAX", "pin_delete", "pin_put", "settings_update"]

User = AbstractBaseUser | AnonymousUser


# -- pins -------------------------------------------------------------------------------------------


def _validate_weight(weight: object) -> float:
    return float(check_value(inputs.PinWeight, weight, "weight"))


def _validate_pin_session(session_id: object) -> str:
    return str(check_value(inputs.PinSession, session_id, "session_id"))


def pin_put(*, workspace: Workspace, session_id: str, memory: Memory, weight: object = None) -> Pin:
    """Pin ``memory`` (of ``workspace``; the caller looked it up there) for the session; refreshes the
    session's 24 h TTL. Session ids are the workspace's own (see ``surfacing.pins``)."""
    if memory.workspace_id != workspace.pk:
        raise InvalidInput("memory_id: the memory belongs to another workspace", field="memory_id")
    return pin_store().pin(
        workspace=workspace,
        session_id=_validate_pin_session(session_id),
        memory_id=memory.id,
        weight=_validate_weight(weight),
        now=timezone.now(),
    )


def pin_delete(*, workspace: Workspace, session_id: str, memory: Memory) -> bool:
    """Unpin; True when a pin was removed. Conflict when the session is bound to another workspace."""
    return pin_store().unpin(
        workspace=workspace, session_id=_validate_pin_session(session_id), memory_id=memory.id, now=timezone.now()
    )


# -- settings ---------------------------------------------------------------------------------------


@transaction.atomic
def settings_update(
    *, workspace: Workspace, actor: User | None, surfacing: Any = None, evolution: Any = None
) -> selectors.WorkspaceSettings:
    """Merge validated changes into the workspace's stored overrides (``null`` resets a key) and audit
    the change. Nothing is written when any value is invalid."""
    surfacing_changes = validate_surfacing_changes(surfacing) if surfacing is not None else {}
    evolution_changes = validate_evolution_changes(evolution) if evolution is not None else {}
    locked = Workspace.objects.select_for_update().get(pk=workspace.pk)
    before = {"surfacing": dict(locked.surfacing_settings), "evolution": dict(locked.evolution_settings)}
    stored_surfacing = dict(locked.surfacing_settings)
    for key, value in surfacing_changes.items():
        if value is None:
            stored_surfacing.pop(key, None)
        else:
            stored_surfacing[key] = value
    stored_evolution = dict(locked.evolution_settings)
    for key, value in evolution_changes.items():
        if value is None:
            stored_evolution.pop(key, None)
        else:
            stored_evolution[key] = value
    # Validate the merged whole too (e.g. a stored value from an older release).
    effective = effective_settings(stored_surfacing, embedder=embedder_for(locked).name)
    locked.surfacing_settings = stored_surfacing
    locked.evolution_settings = stored_evolution
    locked.save(update_fields=["surfacing_settings", "evolution_settings"])
    workspace.surfacing_settings = stored_surfacing
    workspace.evolution_settings = stored_evolution
    after = {"surfacing": stored_surfacing, "evolution": stored_evolution}
    if before != after:
        changed = sorted(
            f"{group}.{key}"
            for group in ("surfacing", "evolution")
            for key in set(before[group]) | set(after[group])
            if before[group].get(key) != after[group].get(key)
        )
        audit.record_save(
            audit.record_build(
                workspace=workspace,
                evolver="settings",
                action=Action.CONFIGURE,
                reason=f"settings changed by {audit.actor_name(actor) or 'a caller'}: {', '.join(changed)}"[:2000],
                before={audit.SETTINGS: before},
                after={audit.SETTINGS: after},
                actor=actor,
            )
        )
    return selectors.WorkspaceSettings(surfacing=effective, evolution=effective_evolution(stored_evolution))
