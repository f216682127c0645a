"""Fixtures shared by the surfacing service, API, page and inspector tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from graph.store import SqlGraphStore, set_graph_store
from memories.demo import demo_load
from memories.models import Workspace
from surfacing.pins import DbPinStore, set_pin_store


@pytest.fixture
def stores() -> Iterator[None]:
    """The embedded stores (SQL graph snapshot, database pins), whatever the environment configures."""
    set_graph_store(SqlGraphStore())
    set_pin_store(DbPinStore())
    yield
    set_graph_store(None)
    set_pin_store(None)


@pytest.fixture
def demo(db: None, stores: None) -> Workspace:
    """The demo workspace of `load_demo` (the JWT decision thread and its neighbours)."""
    return demo_load(slug="demo").workspace
