"""Evolvers and their registry. Importing this package registers every evolver in cycle order.

Add an evolver: write a class with `name` and `evolve(workspace, *, dry_run, run, now)` in a module of
this package, decorate it with `@register` (or `register(cls, default=False)` for one that runs only
when named), and import the module below after the ones it must run after.
"""

from __future__ import annotations

from evolution.evolvers.base import (
    EVOLVERS,
    EvolutionResult,
    Evolver,
    MemoryUpdates,
    apply_updates,
    default_cycle,
    evolver_instance,
    register,
    resolve_names,
)

# Registration order is cycle order: the enhanced cycle (how use and disuse change memory) first.
from evolution.evolvers import enhanced  # noqa: F401  isort: skip

# Then the typed-memory evolvers (drift, goals, summary proposals; the contradiction surfacer
# runs only when named).
from evolution.evolvers import typed  # noqa: F401  isort: skip

# The compression ladder last (a no-op unless the workspace opts in), then the lifecycle evolvers, which
# run only when named.
from evolution.evolvers import compression  # noqa: F401  isort: skip
from evolution.evolvers import lifecycle  # noqa: F401  isort: skip

# The duplicate merger proposes merges and runs only when named.
from evolution.evolvers import merge  # noqa: F401  isort: skip

__all__ = [
    "EVOLVERS",
    "EvolutionResult",
    "Evolver",
    "MemoryUpdates",
    "apply_updates",
    "default_cycle",
    "evolver_instance",
    "register",
    "resolve_names",
]
