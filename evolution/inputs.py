"""The request bodies of the evolution API: runs, evolve, the dream and proposal decisions (the engine's are
``evolution.engine_inputs``, an import's ``evolution.memdir_import``).

Each body is a ``core.schemas.RequestBody``: the one definition that validates a request and documents it in the
OpenAPI schema (and, for the engine's, the MCP tools' arguments). Every refusal is an ``InvalidInput`` naming the
field. What needs the database (does this evolver exist, may this proposal's payload change this key) is the
services' to check.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final

from pydantic import BeforeValidator, Field, ValidationInfo, WithJsonSchema, field_validator

from core.schemas import JsonObject, OneOf, QueryParams, RequestBody, Text, WholeNumber, parse, reject
from evolution.models import ProposalKind, ProposalStatus
from memories.inputs import MAX_METADATA_BYTES, NOT_SENT

MAX_REASON_CHARS: Final = 2000
RECORDS_PAGE: Final = 100
"""A run's records per page when the client names no limit."""
"""The longest reason a person gives for a decision on a proposal."""


def optional_body(raw: Any) -> Any:
    """A body that may be left out: none (or JSON null) is an empty object."""
    return {} if raw is None or raw == "" else raw


# -- runs ---------------------------------------------------------------------------------------------------


def _evolver_names(value: Any) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        reject("expected a list of evolver names")
    return value


class RunIn(RequestBody):
    """POST evolution/runs/: which evolvers, and whether to apply (a dry run unless asked otherwise)."""

    evolvers: Annotated[
        list[str] | None,
        BeforeValidator(_evolver_names),
        WithJsonSchema(
            {
                "type": "array",
                "items": {"type": "string"},
                "nullable": True,
                "description": "the evolvers to run, by name, in cycle order; default: the enhanced cycle",
            }
        ),
    ] = None
    # Not sent is told apart from sent (``model_fields_set``): only both sent can contradict each other.
    dry_run: bool = Field(
        NOT_SENT, description="true (default) previews; false applies", json_schema_extra={"default": True}
    )
    apply: bool = Field(NOT_SENT, description="alias: apply=true is dry_run=false")

    @field_validator("apply")
    @classmethod
    def _not_contradicting(cls, apply: bool, info: ValidationInfo) -> bool:
        if info.data.get("dry_run") == apply:  # None when dry_run was not sent
            reject("contradicts dry_run")
        return apply

    def is_dry_run(self) -> bool:
        if "apply" in self.model_fields_set:
            return not self.apply
        return self.dry_run if "dry_run" in self.model_fields_set else True


def run_input(raw: Any) -> RunIn:
    return parse(RunIn, optional_body(raw))


# -- evolve, the dream ----------------------------------------------------------------------------------------


class EvolveIn(RequestBody):
    """POST engine/evolve/: no parameters (an empty object, or no body)."""

    unknown_field: ClassVar[str] = "unknown field; evolve takes no parameters"


class DreamIn(RequestBody):
    """POST dream/: apply (the default) or preview."""

    dry_run: bool = Field(False, description="true previews and stores nothing (any member may preview)")


def evolve_input(raw: Any) -> EvolveIn:
    return parse(EvolveIn, optional_body(raw))


def dream_input(raw: Any) -> DreamIn:
    return parse(DreamIn, optional_body(raw))


# -- proposal decisions ---------------------------------------------------------------------------------------

Reason = Annotated[str, Text(MAX_REASON_CHARS, null=True, clean=str.strip, description="why, kept with the decision")]


class ProposalApproveIn(RequestBody):
    """POST proposals/{id}/approve/: approve, optionally a reviewer's modified payload."""

    payload: Annotated[
        dict[str, Any],
        JsonObject(
            MAX_METADATA_BYTES,
            description="the keys of the payload a reviewer changed, to approve instead of the proposed values "
            "(which keys may change depends on the proposal's kind); empty or null approves it as proposed",
        ),
    ] = Field(default_factory=dict)
    reason: Reason = ""


class ProposalRejectIn(RequestBody):
    """POST proposals/{id}/reject/."""

    reason: Reason = ""


def proposal_approve_input(raw: Any) -> ProposalApproveIn:
    return parse(ProposalApproveIn, optional_body(raw))


def proposal_reject_input(raw: Any) -> ProposalRejectIn:
    return parse(ProposalRejectIn, optional_body(raw))


# -- query parameters of the lists ----------------------------------------------------------------------------

After = Annotated[int | None, WholeNumber(0, description="rows after this id: the previous page's next")]
Before = Annotated[int | None, WholeNumber(0, description="records older than this id: the previous page's next")]


def _limit(maximum: int, default: int, what: str) -> WholeNumber:
    return WholeNumber(1, maximum, description=f"{what} per page, 1..{maximum}, default {default}")


class RunListQuery(QueryParams):
    limit: Annotated[int | None, _limit(1000, 50, "runs")] = None


class RunRecordsQuery(QueryParams):
    after: After = None
    limit: Annotated[int | None, _limit(1000, RECORDS_PAGE, "records")] = None


class HistoryQuery(QueryParams):
    limit: Annotated[int | None, _limit(1000, 50, "records")] = None
    before: Before = None


class OutcomeListQuery(QueryParams):
    after: After = None
    limit: Annotated[int | None, _limit(500, 100, "outcomes")] = None


class DreamListQuery(QueryParams):
    limit: Annotated[int | None, _limit(200, 20, "reports")] = None


class ProposalListQuery(QueryParams):
    status: Annotated[str | None, OneOf(tuple(ProposalStatus.values), optional=True)] = None
    kind: Annotated[str | None, OneOf(tuple(ProposalKind.values), optional=True)] = None
    after: After = None
    limit: Annotated[int | None, _limit(500, 100, "proposals")] = None


class ContradictionQuery(QueryParams):
    limit: Annotated[int | None, _limit(1000, 100, "clusters, largest first,")] = None


class DriftFlagQuery(QueryParams):
    limit: Annotated[int | None, _limit(1000, 200, "flags")] = None


class ExportQuery(QueryParams):
    format: Annotated[
        str | None, OneOf(("zip", "json"), optional=True, description="zip (default) or json: {files: {path: text}}")
    ] = None
