"""Forms of the evolution pages: they validate what a person chose or typed and hand plain values to the
services (proposal decisions, curation, runs, the engine). Labels carry no trailing colon, so screen readers
and tests read "Reason", not "Reason:".
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from django import forms

from evolution.dream_proposals import REFLECTION_EDITABLE
from evolution.engine_inputs import MAX_TASK_TYPE, MAX_TEXT, STRATEGY_EDITABLE
from evolution.evolvers import EVOLVERS, default_cycle
from evolution.inputs import MAX_REASON_CHARS
from evolution.models import Proposal, ProposalKind
from evolution.proposals import SUMMARY_EDITABLE
from memories.inputs import MAX_CONTENT_CHARS
from memories.models import MemoryType

BULK_MAX = 200


class _Form(forms.Form):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("label_suffix", "")
        super().__init__(*args, **kwargs)


def _reason_field(*, required: bool, label: str = "Reason") -> forms.CharField:
    return forms.CharField(
        label=label,
        required=required,
        max_length=MAX_REASON_CHARS,
        error_messages={"required": "Say why, so the decision can be understood later."},
    )


class RejectForm(_Form):
    reason = _reason_field(required=True)


class ApproveForm(_Form):
    reason = _reason_field(required=False, label="Note (optional)")


class BulkDecisionForm(_Form):
    """Approve or reject the selected pending proposals; a rejection needs a reason."""

    ids = forms.TypedMultipleChoiceField(coerce=int, error_messages={"required": "Select at least one proposal."})
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    reason = _reason_field(required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Any id is a valid choice here: the services tell apart missing, decided and pending ones.
        raw = self.data.getlist("ids") if hasattr(self.data, "getlist") else []
        self.fields["ids"].choices = [(v, v) for v in raw[:BULK_MAX] if str(v).isdigit()]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("decision") == "reject" and not str(data.get("reason") or "").strip():
            self.add_error("reason", "Say why these proposals are rejected.")
        return data


# -- modify then approve --------------------------------------------------------------------------


class SummaryModifyForm(_Form):
    """The editable fields of a summary proposal (its sources are what was reviewed and stay fixed)."""

    content = forms.CharField(label="Summary", max_length=MAX_CONTENT_CHARS, widget=forms.Textarea(attrs={"rows": 6}))
    subject = forms.CharField(label="Subject", required=False, max_length=200)
    memory_type = forms.ChoiceField(label="Type", choices=MemoryType.choices)
    confidence = forms.FloatField(label="Confidence", min_value=0.0, max_value=1.0)
    reason = _reason_field(required=False, label="Note (optional)")

    def payload(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in sorted(SUMMARY_EDITABLE)}


class StrategyModifyForm(_Form):
    """A strategy rewritten by the reviewer becomes their rule (origin user:<name>); the covenant checks it."""

    rule = forms.CharField(label="Rule", max_length=MAX_CONTENT_CHARS, widget=forms.Textarea(attrs={"rows": 3}))
    task_type = forms.CharField(label="Task type", required=False, max_length=MAX_TASK_TYPE)
    title = forms.CharField(label="Title", required=False, max_length=300)
    reason = _reason_field(required=False, label="Note (optional)")

    def payload(self) -> dict[str, Any]:
        data = {name: self.cleaned_data[name] for name in sorted(STRATEGY_EDITABLE)}
        data["task_type"] = data["task_type"].strip() or None
        if not data["title"].strip():
            data.pop("title")
        return data


class ReflectionModifyForm(_Form):
    """The three lines of a reflection the dream proposes (CONTEXT / REFLECTION / LESSON, as every reflection)."""

    context = forms.CharField(label="Context", max_length=MAX_TEXT)
    reflection = forms.CharField(label="Reflection", max_length=MAX_TEXT, widget=forms.Textarea(attrs={"rows": 2}))
    lesson = forms.CharField(label="Lesson", max_length=MAX_TEXT, widget=forms.Textarea(attrs={"rows": 2}))
    reason = _reason_field(required=False, label="Note (optional)")

    def payload(self) -> dict[str, Any]:
        return {name: self.cleaned_data[name] for name in sorted(REFLECTION_EDITABLE)}


class PromotionModifyForm(_Form):
    """A promoted rule rewritten by the reviewer becomes their rule (origin user:<name>)."""

    rule = forms.CharField(label="Rule", max_length=MAX_CONTENT_CHARS, widget=forms.Textarea(attrs={"rows": 3}))
    task_type = forms.CharField(label="Task type", required=False, max_length=MAX_TASK_TYPE)
    reason = _reason_field(required=False, label="Note (optional)")

    def payload(self) -> dict[str, Any]:
        return {"rule": self.cleaned_data["rule"], "task_type": self.cleaned_data["task_type"].strip() or None}


MERGE_NONE = "Choose at least one other memory to merge into the kept one."


class MergeModifyForm(_Form):
    """Which memory of the group to keep, and which of the others to merge into it (the group is fixed)."""

    keep = forms.ChoiceField(label="Keep", widget=forms.RadioSelect)
    merge = forms.MultipleChoiceField(
        label="Merge into it", widget=forms.CheckboxSelectMultiple, error_messages={"required": MERGE_NONE}
    )
    reason = _reason_field(required=False, label="Note (optional)")

    def __init__(self, *args: Any, choices: list[tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["keep"].choices = choices  # type: ignore[attr-defined]
        self.fields["merge"].choices = choices  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        keep = data.get("keep")
        # Ticking the kept memory as merged too is read as "keep this one": it is dropped from the merge.
        merge = [m for m in data.get("merge") or [] if m != keep]
        if keep and "merge" in data and not merge:
            self.add_error("merge", MERGE_NONE)
        data["merge"] = merge
        return data

    def payload(self) -> dict[str, Any]:
        return {"keep": self.cleaned_data["keep"], "merge": self.cleaned_data["merge"]}


def _merge_form(proposal: Proposal, payload: dict[str, Any], data: Any) -> MergeModifyForm:
    group = [str(i) for i in payload.get("group") or [] if isinstance(i, str)]
    raw = payload.get("contents")
    contents: dict[str, Any] = raw if isinstance(raw, dict) else {}
    choices = [(i, f"{contents.get(i, '')} ({i})" if contents.get(i) else i) for i in group]
    keep = payload.get("keep") if isinstance(payload.get("keep"), str) else ""
    merge = [i for i in payload.get("merge") or [] if isinstance(i, str)]
    return MergeModifyForm(data, initial={"keep": keep, "merge": merge}, prefix=f"p{proposal.pk}", choices=choices)


class PayloadModifyForm(_Form):
    """Any other kind: the payload as JSON (approval applies whatever its applier makes of it)."""

    payload_json = forms.CharField(label="Payload (JSON)", widget=forms.Textarea(attrs={"rows": 8}))
    reason = _reason_field(required=False, label="Note (optional)")

    def clean_payload_json(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["payload_json"])
        except ValueError as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("Expected a JSON object.")
        return value

    def payload(self) -> dict[str, Any]:
        value: dict[str, Any] = self.cleaned_data["payload_json"]
        return value


ModifyForm = (
    SummaryModifyForm
    | StrategyModifyForm
    | MergeModifyForm
    | ReflectionModifyForm
    | PromotionModifyForm
    | PayloadModifyForm
)


def modify_form(proposal: Proposal, data: Any = None) -> ModifyForm:
    """The modify form of `proposal`'s kind, bound to `data` or filled with the proposed values."""
    payload = proposal.payload if isinstance(proposal.payload, dict) else {}
    if proposal.kind == ProposalKind.SUMMARY:
        initial = {name: payload.get(name) for name in SUMMARY_EDITABLE}
        initial.setdefault("memory_type", MemoryType.FACT)
        if initial.get("confidence") is None:
            initial["confidence"] = 0.7
        return SummaryModifyForm(data, initial=initial, prefix=f"p{proposal.pk}")
    if proposal.kind == ProposalKind.STRATEGY:
        initial = {"rule": payload.get("rule"), "task_type": payload.get("task_type") or "", "title": proposal.title}
        return StrategyModifyForm(data, initial=initial, prefix=f"p{proposal.pk}")
    if proposal.kind == ProposalKind.MERGE:
        return _merge_form(proposal, payload, data)
    if proposal.kind == ProposalKind.REFLECTION:
        initial = {name: payload.get(name) or "" for name in REFLECTION_EDITABLE}
        return ReflectionModifyForm(data, initial=initial, prefix=f"p{proposal.pk}")
    if proposal.kind == ProposalKind.PROMOTION:
        initial = {"rule": payload.get("rule") or "", "task_type": payload.get("task_type") or ""}
        return PromotionModifyForm(data, initial=initial, prefix=f"p{proposal.pk}")
    shown = {k: v for k, v in payload.items() if k != "proposed"}
    return PayloadModifyForm(
        data, initial={"payload_json": json.dumps(shown, indent=2, ensure_ascii=False)}, prefix=f"p{proposal.pk}"
    )


# -- contradictions and drift ---------------------------------------------------------------------


class ContradictionForm(_Form):
    """Resolve one cluster: keep one (the others are superseded) or keep both (mark reviewed)."""

    ids = forms.TypedMultipleChoiceField(coerce=uuid.UUID)
    action = forms.ChoiceField(choices=[("keep_one", "Keep one"), ("keep_both", "Keep both")])
    keep = forms.UUIDField(required=False)
    note = forms.CharField(label="Note (optional)", required=False, max_length=2000)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        raw = self.data.getlist("ids") if hasattr(self.data, "getlist") else []
        self.fields["ids"].choices = [(v, v) for v in raw[:BULK_MAX]]  # type: ignore[attr-defined]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        ids = data.get("ids") or []
        if len(ids) < 2:
            self.add_error("ids", "A contradiction has at least two memories.")
        if data.get("action") == "keep_one":
            keep = data.get("keep")
            if keep is None:
                self.add_error("keep", "Choose the memory to keep.")
            elif keep not in ids:
                self.add_error("keep", "Choose one of the memories of this contradiction.")
        return data


class DriftForm(_Form):
    pin = forms.BooleanField(required=False)


# -- runs, dream, import --------------------------------------------------------------------------


def evolver_choices() -> list[tuple[str, str]]:
    default = set(default_cycle())
    return [(name, name if name in default else f"{name} (runs only when chosen)") for name in EVOLVERS]


class RunStartForm(_Form):
    evolvers = forms.MultipleChoiceField(
        label="Evolvers",
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one evolver."},
    )
    mode = forms.ChoiceField(choices=[("preview", "Preview (dry run)"), ("apply", "Apply")], initial="preview")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("initial", {"evolvers": default_cycle(), "mode": "preview"})
        super().__init__(*args, **kwargs)
        self.fields["evolvers"].choices = evolver_choices()  # type: ignore[attr-defined]

    @property
    def dry_run(self) -> bool:
        return bool(self.cleaned_data.get("mode") != "apply")


class DreamForm(_Form):
    dry_run = forms.BooleanField(required=False)


class ImportForm(_Form):
    file = forms.FileField(
        label="Memory-evolution directory (zip)",
        error_messages={"required": "Choose the zip of a memory-evolution directory.", "empty": "The file is empty."},
    )
