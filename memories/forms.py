"""Forms of the memory browser: they validate what a person typed and hand plain values to services.

The list filters are parsed by the same function as the REST list (`memories.inputs.filters_from_query`),
so the browser and the API can never disagree on what a filter means; the form only adds labels,
choices and the date pickers people expect.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, time, timedelta
from html import escape
from typing import Any

from django import forms
from django.http import QueryDict
from django.utils.safestring import SafeString, mark_safe

from memories import selectors
from memories.inputs import MemoryInput, filters_from_query
from memories.models import CompressionTier, MemoryType, Status, Tier
from memories.services import BULK_ACTIONS, BULK_MAX, TAG_MAX_LENGTH

ORDERING_CHOICES = [
    # No choice: best match while the search has words, newest first otherwise (selectors.default_ordering).
    ("", "Best match or newest"),
    (selectors.RELEVANCE, "Best match"),
    ("-created", "Newest first"),
    ("created", "Oldest first"),
    ("-activation", "Most active now"),
    ("activation", "Least active now"),
    ("-retention", "Highest retention"),
    ("retention", "Lowest retention"),
    ("-accessed", "Recently accessed"),
    ("accessed", "Longest since access"),
]
# The list opens on what an agent can still surface; "any" shows archived and superseded ones too.
DEFAULT_STATUS = Status.ACTIVE
ANY_STATUS = "any"
_TRI_STATE = [("", "Any"), ("true", "Yes"), ("false", "No")]
CONTENT_MAX_LENGTH = 20_000


class _Form(forms.Form):
    """Labels without Django's trailing colon: screen readers and tests read "Type", not "Type:"."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


def _attrs(attrs: dict[str, Any]) -> str:
    """Django's widgets/attrs.html: True is a bare attribute, False is left out."""
    return "".join(
        f" {name}" if value is True else f' {name}="{escape(str(value))}"'
        for name, value in attrs.items()
        if value is not False
    )


class QuickSelect(forms.Select):
    """Django's select.html and select_option.html as one f-string over the same widget context.

    The list page renders seven selects of ~40 options in all; two template includes an option made them
    ~4 ms of every page. Choices with groups keep Django's templates.
    """

    def render(self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None) -> SafeString:
        widget = self.get_context(name, value, attrs)["widget"]
        if any(group for group, _, _ in widget["optgroups"]):
            return super().render(name, value, attrs, renderer)
        options = "".join(
            f'\n  <option value="{escape(str(o["value"]))}"{_attrs(o["attrs"])}>{escape(str(o["label"]))}</option>'
            for _, group_choices, _ in widget["optgroups"]
            for o in group_choices
        )
        return mark_safe(f'<select name="{escape(widget["name"])}"{_attrs(widget["attrs"])}>{options}\n</select>')


def _choices(values: list[tuple[Any, str]], empty: str) -> list[tuple[str, str]]:
    return [("", empty), *((str(v), label) for v, label in values)]


class MemoryListForm(_Form):
    """Search, filters and sort of the memory list (a GET form; every field optional)."""

    q = forms.CharField(label="Search", required=False, max_length=200)
    type = forms.ChoiceField(
        widget=QuickSelect, label="Type", required=False, choices=_choices(MemoryType.choices, "Any type")
    )
    status = forms.ChoiceField(
        widget=QuickSelect,
        label="Status",
        required=False,
        choices=[(DEFAULT_STATUS, "Active"), (ANY_STATUS, "Any status")]
        + [(v, label) for v, label in Status.choices if v != DEFAULT_STATUS],
    )
    tier = forms.ChoiceField(
        widget=QuickSelect, label="Tier", required=False, choices=_choices(Tier.choices, "Any tier")
    )
    compression_tier = forms.ChoiceField(
        widget=QuickSelect,
        label="Compression",
        required=False,
        choices=_choices(CompressionTier.choices, "Any compression"),
    )
    origin = forms.CharField(label="Origin starts with", required=False, max_length=120)
    tag = forms.CharField(label="Tag", required=False, max_length=TAG_MAX_LENGTH)
    pinned = forms.ChoiceField(widget=QuickSelect, label="Pinned", required=False, choices=_TRI_STATE)
    has_conflicts = forms.ChoiceField(widget=QuickSelect, label="Has conflicts", required=False, choices=_TRI_STATE)
    created_after = forms.DateField(
        label="Created from", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    created_before = forms.DateField(label="Created to", required=False, widget=forms.DateInput(attrs={"type": "date"}))
    ordering = forms.ChoiceField(widget=QuickSelect, label="Sort", required=False, choices=ORDERING_CHOICES)

    MAIN = ("type", "status", "ordering")
    ADVANCED = (
        "tier",
        "compression_tier",
        "origin",
        "tag",
        "pinned",
        "has_conflicts",
        "created_after",
        "created_before",
    )

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.MAIN]

    def advanced_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.ADVANCED]

    def advanced_active(self) -> int:
        """How many of the folded-away filters are set (they unfold when any is, or has an error)."""
        return sum(1 for name in self.ADVANCED if self.data.get(name) or self[name].errors)

    def api_params(self) -> QueryDict:
        """The filters as REST list parameters (dates become UTC day bounds, "to" is inclusive)."""
        data = self.cleaned_data
        params = QueryDict(mutable=True)
        for name in ("q", "type", "tier", "compression_tier", "origin", "pinned", "has_conflicts"):
            if data.get(name):
                params[name] = str(data[name])
        status = data.get("status") or DEFAULT_STATUS
        if status != ANY_STATUS:
            params["status"] = status
        if data.get("tag"):
            params.setlist("tag", [data["tag"]])
        if data.get("created_after"):
            params["created_after"] = datetime.combine(data["created_after"], time.min, UTC).isoformat()
        if data.get("created_before"):
            end = datetime.combine(data["created_before"], time.min, UTC) + timedelta(days=1)
            params["created_before"] = end.isoformat()
        return params

    def filters(self) -> selectors.MemoryFilters:
        return filters_from_query(self.api_params())

    def ordering_value(self) -> str:
        return str(self.cleaned_data.get("ordering") or selectors.default_ordering(self.filters()))

    def is_filtered(self) -> bool:
        """True when anything narrows the list beyond the default (active memories)."""
        data = self.cleaned_data
        narrowing = [name for name in self.fields if name not in ("ordering", "status")]
        return any(data.get(name) for name in narrowing) or (data.get("status") or DEFAULT_STATUS) != DEFAULT_STATUS


class MultipleUUIDField(forms.Field):
    """A list of memory ids posted as repeated `ids` values (the list's row checkboxes)."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value: Any) -> list[uuid.UUID]:
        if not value:
            return []
        if isinstance(value, str):
            value = [value]
        ids = []
        for raw in value:
            try:
                ids.append(uuid.UUID(str(raw)))
            except ValueError:
                raise forms.ValidationError("%(value)s is not a memory id", params={"value": raw}) from None
        return list(dict.fromkeys(ids))

    def validate(self, value: Any) -> None:
        super().validate(value)
        if len(value) > BULK_MAX:
            raise forms.ValidationError(f"Select at most {BULK_MAX} memories at once.")


BULK_LABELS = {
    "archive": "Archive",
    "restore": "Restore",
    "pin": "Pin",
    "unpin": "Unpin",
    "set_type": "Change type",
    "add_tag": "Add tag",
}


class BulkActionForm(_Form):
    """One curation action for the selected memories; `confirm` is set by the confirmation step."""

    ids = MultipleUUIDField(error_messages={"required": "Select at least one memory first."})
    action = forms.ChoiceField(label="Action", choices=[(a, BULK_LABELS[a]) for a in BULK_ACTIONS])
    type_value = forms.ChoiceField(label="New type", required=False, choices=MemoryType.choices)
    tag_value = forms.CharField(label="Tag to add", required=False, max_length=TAG_MAX_LENGTH)
    confirm = forms.BooleanField(required=False, widget=forms.HiddenInput)
    next = forms.CharField(required=False, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        action = data.get("action")
        if action == "add_tag" and not (data.get("tag_value") or "").strip():
            self.add_error("tag_value", "Type the tag to add.")
        if action == "set_type" and not data.get("type_value"):
            self.add_error("type_value", "Choose the new type.")
        return data

    def value(self) -> str:
        action = self.cleaned_data["action"]
        if action == "set_type":
            return str(self.cleaned_data["type_value"])
        if action == "add_tag":
            return str(self.cleaned_data["tag_value"]).strip()
        return ""

    def summary(self) -> str:
        """The action in words for the confirmation: 'Archive', 'Add tag "x" to', ..."""
        action = self.cleaned_data["action"]
        if action == "set_type":
            return f"Change the type to {self.value()} of"
        if action == "add_tag":
            return f'Add the tag "{self.value()}" to'
        return BULK_LABELS[action]

    def done(self, changed: int) -> str:
        """What the action did, in words for the flash: 'Archived 3 memories', 'Added the tag "x" to 1 memory'."""
        action = self.cleaned_data["action"]
        memories = f"{changed} memor{'y' if changed == 1 else 'ies'}"
        if action == "set_type":
            return f"Changed the type of {memories} to {self.value()}"
        if action == "add_tag":
            return f'Added the tag "{self.value()}" to {memories}'
        return f"{BULK_DONE[action]} {memories}"


BULK_DONE = {"archive": "Archived", "restore": "Restored", "pin": "Pinned", "unpin": "Unpinned"}


class MemoryCreateForm(_Form):
    content = forms.CharField(
        label="Content",
        max_length=CONTENT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 6}),
        error_messages={"required": "Write the memory's content."},
    )
    memory_type = forms.ChoiceField(label="Type", choices=MemoryType.choices, initial=MemoryType.SEMANTIC)
    subject = forms.CharField(label="Subject", required=False, max_length=200)
    tags = forms.CharField(
        label="Tags",
        required=False,
        max_length=500,
        help_text="Separate tags with commas.",
    )
    pinned = forms.BooleanField(label="Pin this memory", required=False)

    def clean_tags(self) -> tuple[str, ...]:
        tags = [t.strip() for t in str(self.cleaned_data.get("tags") or "").split(",") if t.strip()]
        too_long = [t for t in tags if len(t) > TAG_MAX_LENGTH]
        if too_long:
            raise forms.ValidationError(f"A tag is at most {TAG_MAX_LENGTH} characters: {too_long[0][:20]}…")
        return tuple(dict.fromkeys(tags))

    def to_input(self) -> MemoryInput:
        data = self.cleaned_data
        return MemoryInput(
            content=data["content"],
            memory_type=data["memory_type"],
            subject=data["subject"].strip(),
            tags=data["tags"],
            pinned=data["pinned"],
        )


class MemoryEditForm(_Form):
    # CharField strips whitespace, so blank content arrives as "required" and gets this message.
    content = forms.CharField(
        label="Content",
        max_length=CONTENT_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 8}),
        error_messages={"required": "A memory cannot be empty; archive it instead."},
    )


DELETE_CONFIRM_WORDS = 3


def delete_phrase(content: str) -> str:
    """The words a person must type to hard-delete a memory: its first three words."""
    return " ".join(content.split()[:DELETE_CONFIRM_WORDS])


class MemoryDeleteForm(_Form):
    """Hard delete guard: the memory's first words, typed (case and spacing are not checked)."""

    confirm_text = forms.CharField(label="Type the first words of the memory to confirm", max_length=500)

    def __init__(self, *args: Any, phrase: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.phrase = phrase

    def clean_confirm_text(self) -> str:
        typed = " ".join(str(self.cleaned_data["confirm_text"]).split())
        if typed.casefold() != self.phrase.casefold():
            raise forms.ValidationError(f"Type “{self.phrase}” exactly to delete this memory for good.")
        return typed
