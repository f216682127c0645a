"""REST for proposals: the review queue, approve (optionally modified), reject. Adapters only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.errors import InvalidInput
from evolution import proposals, typed_selectors
from evolution.models import Proposal
from memories import selectors
from memories.serializers import ErrorOut, iso_z

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


def proposal_json(proposal: Proposal) -> dict[str, Any]:
    return {
        "id": proposal.pk,
        "kind": proposal.kind,
        "status": proposal.status,
        "title": proposal.title,
        "rationale": proposal.rationale,
        "payload": proposal.payload,
        "source_ids": proposal.source_ids,
        "created_by": proposal.created_by,
        "created_at": iso_z(proposal.created_at),
        "decided_by": proposal.decided_by.get_username() if proposal.decided_by is not None else None,
        "decided_at": iso_z(proposal.decided_at),
        "decision_reason": proposal.decision_reason,
        "applied_record": proposal.applied_record_id,
    }


class ProposalOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    status = serializers.CharField()
    title = serializers.CharField()
    rationale = serializers.CharField()
    payload = serializers.JSONField()
    source_ids = serializers.ListField(child=serializers.CharField())
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    decided_by = serializers.CharField(allow_null=True)
    decided_at = serializers.DateTimeField(allow_null=True)
    decision_reason = serializers.CharField()
    applied_record = serializers.IntegerField(allow_null=True, help_text="evolution record of the applied change")


def _int_param(request: Request, name: str, default: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(str(raw))
    except ValueError:
        raise InvalidInput(f"{name}: expected an integer", field=name) from None


class ProposalListApi(APIView):
    class ProposalPageOut(serializers.Serializer[Any]):
        results = ProposalOut(many=True)
        next = serializers.IntegerField(allow_null=True, help_text="pass as ?after= for the next page")

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, description="pending, approved, rejected, modified or vetoed"),
            OpenApiParameter("kind", str),
            OpenApiParameter("after", int, description="cursor: the `next` of the previous page"),
            OpenApiParameter("limit", int, description="1..500, default 100"),
        ],
        responses={200: ProposalPageOut, **ERRORS},
        operation_id="proposals_list",
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        page, cursor = typed_selectors.proposal_list(
            workspace=access.workspace,
            status=request.query_params.get("status") or "",
            kind=request.query_params.get("kind") or "",
            after_id=_int_param(request, "after", 0),
            limit=_int_param(request, "limit", 100),
        )
        return Response({"results": [proposal_json(p) for p in page], "next": cursor})


class ProposalDetailApi(APIView):
    @extend_schema(responses={200: ProposalOut, **ERRORS}, operation_id="proposals_retrieve")
    def get(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        return Response(
            proposal_json(typed_selectors.proposal_get(workspace=access.workspace, proposal_id=proposal_id))
        )


def _body(request: Request) -> dict[str, Any]:
    data = request.data if request.data is not None else {}
    if not isinstance(data, dict):
        raise InvalidInput("body: expected a JSON object", field="body")
    return dict(data)


def _reason(data: dict[str, Any]) -> str:
    reason = data.get("reason", "")
    if reason is None:
        return ""
    if not isinstance(reason, str):
        raise InvalidInput("reason: expected a string", field="reason")
    return reason


class ProposalApproveApi(APIView):
    class ProposalApproveIn(serializers.Serializer[Any]):
        payload = serializers.JSONField(required=False, help_text="modified payload to approve instead")
        reason = serializers.CharField(required=False)

    @extend_schema(request=ProposalApproveIn, responses={200: ProposalOut, **ERRORS})
    def post(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        data = _body(request)
        payload = data.get("payload")
        if payload is not None and not isinstance(payload, dict):
            raise InvalidInput("payload: expected a JSON object", field="payload")
        proposal = proposals.proposal_approve(
            workspace=access.workspace,
            proposal_id=proposal_id,
            actor=request.user,
            payload=payload,
            reason=_reason(data),
        )
        return Response(proposal_json(proposal))


class ProposalRejectApi(APIView):
    class ProposalRejectIn(serializers.Serializer[Any]):
        reason = serializers.CharField(required=False)

    @extend_schema(request=ProposalRejectIn, responses={200: ProposalOut, **ERRORS})
    def post(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        proposal = proposals.proposal_reject(
            workspace=access.workspace, proposal_id=proposal_id, actor=request.user, reason=_reason(_body(request))
        )
        return Response(proposal_json(proposal))
