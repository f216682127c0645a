"""What several enhanced evolvers share: the reader of their workspace settings and epoch arrays."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from core.errors import InvalidInput
from memories.models import Workspace

FloatArray = npt.NDArray[np.float64]


def _setting(workspace: Workspace, evolver: str, key: str, default: float) -> float:
    """A number from workspace.evolution_settings[evolver][key], else ``default`` (the evolver's own)."""
    section = (workspace.evolution_settings or {}).get(evolver) or {}
    value = section.get(key, default) if isinstance(section, dict) else default
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidInput(f"evolution settings {evolver}.{key}: {value!r} is not a number", field=key)
    return float(value)


def _epochs(values: Sequence[float | None]) -> FloatArray:
    """Epoch seconds (as the selectors return them) as float64; NaN for None."""
    return np.fromiter((math.nan if v is None else v for v in values), dtype=np.float64, count=len(values))
