"""The enhanced evolvers (the SmartMemory project's evolvers of how use and disuse change memory) as services
over whole workspaces.

Each evolver loads its inputs in one or two `values_list` queries, hands plain arrays to the pure
algorithms in `evolution.algorithms`, writes only the rows whose values change (prepared UPDATEs in
batches, see `memories.bulk.write_rows`) and returns records holding the exact before/after values. There is no
per-cycle cap: the arithmetic is vectorised over the whole workspace.

Cycle order (registration order below): EnhancedWorkingToEpisodic, ExponentialDecay,
InterferenceBasedConsolidation, RetrievalBasedStrengthening, HebbianCoRetrieval.

Evolver writes leave `updated_at` alone: it means "last edited", and a decay sweep that touched every
row would make every memory look freshly edited (and would defeat recency-ordered reads).
"""

from __future__ import annotations

# Importing a module registers its evolver, so the imports stay in cycle order, not alphabetical.
# isort: off
from evolution.evolvers.enhanced.enhanced_working_to_episodic import (
    LISTED_SOURCES,
    PROMOTED_TO_EPISODIC,
    WORKING_EXPIRED,
    EnhancedWorkingToEpisodic,
    _bounded as _bounded,
    cluster_buffer,
)
from evolution.evolvers.enhanced.exponential_decay import ExponentialDecay
from evolution.evolvers.enhanced.interference_based_consolidation import (
    INTERFERENCE_MARKER,
    InterferenceBasedConsolidation,
)
from evolution.evolvers.enhanced.retrieval_based_strengthening import RetrievalBasedStrengthening
from evolution.evolvers.enhanced.hebbian_co_retrieval import HebbianCoRetrieval

# isort: on

__all__ = [
    "INTERFERENCE_MARKER",
    "LISTED_SOURCES",
    "PROMOTED_TO_EPISODIC",
    "WORKING_EXPIRED",
    "EnhancedWorkingToEpisodic",
    "ExponentialDecay",
    "HebbianCoRetrieval",
    "InterferenceBasedConsolidation",
    "RetrievalBasedStrengthening",
    "cluster_buffer",
]
