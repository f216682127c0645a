"""The API's JSON renderer writes the bytes DRF's renderer writes, through orjson."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import uuid
from typing import Any

import numpy as np
import pytest
from django.utils.translation import gettext_lazy
from hypothesis import given
from hypothesis import strategies as st
from rest_framework import renderers

from memories.api_render import JSONRenderer

DRF = renderers.JSONRenderer()
OURS = JSONRenderer()

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-1e15, max_value=1e15).filter(
        lambda x: x == 0 or abs(x) >= 1e-4
    )
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@given(JSON_VALUES)
def test_plain_json_values_render_byte_for_byte_as_drf(value: Any) -> None:
    assert OURS.render(value) == DRF.render(value)


def test_values_drf_encodes_itself_render_the_same() -> None:
    value = {
        "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
        "at": dt.datetime(2026, 11, 29, 19, 0, 1, 250000, tzinfo=dt.UTC),
        "naive": dt.datetime(2026, 11, 29, 19, 0),
        "day": dt.date(2026, 11, 29),
        "price": decimal.Decimal("1.50"),
        "lazy": gettext_lazy("Invalid token."),
        "tags": ("a", "b"),
        "vector": np.array([0.5, 0.25]),
        "count": np.int64(3),
        "score": np.float64(0.75),
        "separators": "line\u2028paragraph\u2029end",
        "unicode": "café – naïve ✓",
        2: "an integer key",
        "huge": 2**70,
    }
    assert OURS.render(value) == DRF.render(value)
    assert b"\\u2028" in OURS.render(value)


def test_none_pretty_printing_and_small_floats() -> None:
    assert OURS.render(None) == b""
    assert OURS.render({"a": [1]}, "application/json; indent=2") == DRF.render({"a": [1]}, "application/json; indent=2")
    # the same numbers, written positionally where the standard library uses an exponent
    small = {"x": 1e-7, "epsilon": 3e-05}
    assert json.loads(OURS.render(small)) == json.loads(DRF.render(small)) == small


def test_an_out_of_range_float_becomes_null_instead_of_failing() -> None:
    with pytest.raises(ValueError):
        DRF.render({"x": math.nan})
    assert OURS.render({"x": math.nan, "y": math.inf}) == b'{"x":null,"y":null}'


@pytest.mark.django_db
def test_the_api_answers_with_this_renderer(api: Any, workspace: Any) -> None:
    response = api.get(f"/api/v1/workspaces/{workspace.slug}/settings/")
    assert response.status_code == 200
    assert isinstance(response.accepted_renderer, JSONRenderer)
    assert json.loads(response.content) == json.loads(DRF.render(response.json()))
