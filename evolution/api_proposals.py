"""REST for proposals: the review queue, approve (optionally modified), reject. Adapters only."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import parameters_of
from core.schemas import parse_query
from evolution import inputs, proposals, typed_selectors
from evolution.models import Proposal
from memories import selectors
from memories.models import Workspace
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


def proposal_page_json(workspace: Workspace, params: Any) -> dict[str, Any]:
    """One page of the review queue as the contract's JSON (REST's proposals/ and the MCP tool)."""
    query = parse_query(inputs.ProposalListQuery, params)
    page, cursor = typed_selectors.proposal_list(
        workspace=workspace,
        status=query.status or "",
        kind=query.kind or "",
        after_id=query.after or 0,
        limit=100 if query.limit is None else query.limit,
    )
    return {"results": [proposal_json(p) for p in page], "next": cursor}


class ProposalListApi(APIView):
    class ProposalPageOut(serializers.Serializer[Any]):
        results = ProposalOut(many=True)
        next = serializers.IntegerField(allow_null=True, help_text="pass as ?after= for the next page")

    @extend_schema(
        parameters=parameters_of(inputs.ProposalListQuery),
        responses={200: ProposalPageOut, **ERRORS},
        operation_id="proposals_list",
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        return Response(proposal_page_json(access.workspace, request.query_params))


class ProposalDetailApi(APIView):
    @extend_schema(responses={200: ProposalOut, **ERRORS}, operation_id="proposals_retrieve")
    def get(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        return Response(
            proposal_json(typed_selectors.proposal_get(workspace=access.workspace, proposal_id=proposal_id))
        )


class ProposalApproveApi(APIView):
    @extend_schema(request=inputs.ProposalApproveIn, responses={200: ProposalOut, **ERRORS})
    def post(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        body = inputs.proposal_approve_input(request.data)
        proposal = proposals.proposal_approve(
            workspace=access.workspace,
            proposal_id=proposal_id,
            actor=request.user,
            # No changes approves the payload as proposed (a status of approved, not modified).
            payload=body.payload or None,
            reason=body.reason,
        )
        return Response(proposal_json(proposal))


class ProposalRejectApi(APIView):
    @extend_schema(request=inputs.ProposalRejectIn, responses={200: ProposalOut, **ERRORS})
    def post(self, request: Request, ws: str, proposal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        body = inputs.proposal_reject_input(request.data)
        proposal = proposals.proposal_reject(
            workspace=access.workspace, proposal_id=proposal_id, actor=request.user, reason=body.reason
        )
        return Response(proposal_json(proposal))
