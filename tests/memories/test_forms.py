"""The list form's selects: rendered in Python, the same markup Django's templates give."""

from __future__ import annotations

import pytest
from django import forms
from django.http import QueryDict

from memories.forms import MemoryListForm, QuickSelect


@pytest.mark.parametrize("query", ["", "type=decision&pinned=false&ordering=retention", "type=nonsense&tier=cold"])
def test_quick_select_renders_what_djangos_select_template_renders(query: str) -> None:
    form = MemoryListForm(QueryDict(query))
    form.is_valid()
    selects = [name for name, field in form.fields.items() if isinstance(field.widget, QuickSelect)]
    assert len(selects) == 7
    for name in selects:
        widget = form.fields[name].widget
        quick = str(form[name])
        widget.render = forms.Select.render.__get__(widget)  # type: ignore[method-assign]
        assert quick.replace("\n", "") == str(form[name]).replace("\n", "")
