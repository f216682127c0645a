"""Forms of the query inspector: they parse what a person typed or slid into plain values.

Ranges are not checked here beyond what a control can express: the query, k, strategy, mode and every
setting go to ``get_working_context``, which validates them with the same words as the REST API, and
the view shows its InvalidInput next to the field it names.
"""

from __future__ import annotations

from typing import Any

from django import forms

from surfacing.algorithms.router import Strategy
from surfacing.inputs import MAX_K, MAX_QUERY_CHARS, MAX_SESSION_CHARS
from surfacing.inspector import KNOBS
from surfacing.settings import SurfacingSettings

MODE_CHOICES = [("legacy", "Legacy"), ("router", "Router")]
DEFAULT_K = 20
# InvalidInput fields of the service -> the form field that shows them.
SERVICE_FIELDS = {
    "query": "q",
    "session_id": "session_id",
    "k": "k",
    "strategy": "strategy",
    "mode": "mode",
    "max_tokens": "max_tokens",
    **{f"surfacing.{knob.key}": knob.key for knob in KNOBS},
}
_BOOL_CHOICES = [("", "unchanged"), ("true", "on"), ("false", "off")]


class _Form(forms.Form):
    """Labels without Django's trailing colon (screen readers and tests read "Query", not "Query:")."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


def _knob_field(kind: str, label: str) -> forms.Field:
    if kind == "bool":
        return forms.BooleanField(label=label, required=False)
    if kind == "int":
        return forms.IntegerField(label=label, required=False)
    return forms.FloatField(label=label, required=False)


class InspectorForm(_Form):
    """The inspector's GET form: the query, how to run it, and the what-if knobs.

    ``whatif`` (hidden, always sent by the page) says the knobs are present: an unticked checkbox then
    means "off" rather than "not sent", and a bare link ``?q=...`` runs with the saved settings.
    """

    q = forms.CharField(label="Query", required=False, max_length=MAX_QUERY_CHARS)
    session_id = forms.CharField(label="Session id", required=False, max_length=MAX_SESSION_CHARS)
    k = forms.IntegerField(label="k", required=False, min_value=1, max_value=MAX_K)
    strategy = forms.ChoiceField(
        label="Strategy",
        required=False,
        choices=[("", "Auto (the router decides)"), *((s.value, s.value) for s in Strategy)],
    )
    mode = forms.ChoiceField(label="Mode", required=False, choices=[("", "Workspace default"), *MODE_CHOICES])
    max_tokens = forms.IntegerField(label="Token budget", required=False, min_value=1)
    compare = forms.BooleanField(label="Side by side: legacy and router", required=False)
    record = forms.BooleanField(label="Count as retrieval", required=False)
    whatif = forms.BooleanField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, saved: SurfacingSettings, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.saved = saved
        for knob in KNOBS:
            self.fields[knob.key] = _knob_field(knob.kind, knob.label)
        self.fields["mode"].choices = [("", f"Workspace default ({saved.mode})"), *MODE_CHOICES]  # type: ignore[attr-defined]

    @property
    def query(self) -> str:
        return str(self.cleaned_data.get("q") or "").strip() if self.is_bound and self.is_valid() else ""

    def whatif_values(self) -> dict[str, Any]:
        """The knobs' values when the page sent them (else nothing: the saved settings apply)."""
        if not (self.is_bound and self.is_valid() and self.cleaned_data.get("whatif")):
            return {}
        values: dict[str, Any] = {}
        for knob in KNOBS:
            value = self.cleaned_data.get(knob.key)
            if knob.kind == "bool":
                values[knob.key] = bool(value)
            elif value is not None:
                values[knob.key] = value
        return values

    def run_arguments(self) -> dict[str, Any]:
        """Keyword arguments of ``inspector.inspect`` besides workspace, settings and record."""
        data = self.cleaned_data
        return {
            "query": self.query,
            "session_id": data.get("session_id") or "",
            "k": data.get("k") or DEFAULT_K,
            "strategy": data.get("strategy") or None,
            "mode": data.get("mode") or None,
            "max_tokens": data.get("max_tokens"),
            "compare": bool(data.get("compare")),
        }


class SettingsSaveForm(_Form):
    """What the Save button posts: only the settings that change (hidden fields), and where to go back.

    Booleans come as "true"/"false" so that "off" and "not sent" differ.
    """

    mode = forms.ChoiceField(required=False, choices=[("", "unchanged"), *MODE_CHOICES])
    next = forms.CharField(required=False, max_length=4_000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for knob in KNOBS:
            if knob.kind == "bool":
                self.fields[knob.key] = forms.ChoiceField(label=knob.label, required=False, choices=_BOOL_CHOICES)
            else:
                self.fields[knob.key] = _knob_field(knob.kind, knob.label)

    def changes(self) -> dict[str, Any]:
        """The posted settings as a partial surfacing settings object (validated by the service)."""
        data = self.cleaned_data
        changes: dict[str, Any] = {}
        if data.get("mode"):
            changes["mode"] = data["mode"]
        for knob in KNOBS:
            value = data.get(knob.key)
            if value is None or value == "":
                continue
            changes[knob.key] = value == "true" if knob.kind == "bool" else value
        return changes
