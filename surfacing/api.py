"""REST adapters for surfacing: working context, search, session pins, workspace settings.

Thin: parse the JSON body, check the caller's role, call one service or selector, render. Reads
(context, search, settings GET) need membership; changing settings needs editor or owner; pins are
part of using a working context, so any member may pin for their session.
"""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers as drf
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.schemas import parse
from memories import selectors as memory_selectors
from memories.models import Workspace
from memories.serializers import ErrorOut, MemoryOut, iso_z, memory_json
from surfacing import inputs, retrieval, selectors, services

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut}


def _item_json(item: retrieval.ContextItem | retrieval.DeclinedItem) -> dict[str, Any]:
    return {
        "id": str(item.id),
        "content": item.content,
        "memory_type": item.memory_type,
        "score": item.score,
        "score_breakdown": dict(item.score_breakdown),
        "provenance": item.provenance,
    }


def context_json(context: retrieval.WorkingContext) -> dict[str, Any]:
    """The contract's working-context object (``declined`` only when it was asked for)."""
    body: dict[str, Any] = {
        "decision_id": str(context.decision_id),
        "strategy_used": context.strategy_used,
        "confidence": context.confidence,
        "reasons": context.reasons,
        "settings": context.settings.as_dict(),
        "items": [_item_json(item) for item in context.items],
        "tokens_used": context.tokens_used,
        "drift_warnings": context.drift_warnings,
    }
    if context.declined is not None:
        body["declined"] = [
            {**_item_json(d), "rank": d.rank, "factor": d.factor, "detail": d.detail} for d in context.declined
        ]
    return body


def settings_json(current: selectors.WorkspaceSettings) -> dict[str, Any]:
    return {"surfacing": current.surfacing.as_dict(), "evolution": current.evolution}


# -- schema documentation ---------------------------------------------------------------------------


class ScoreFactorsOut(drf.Serializer[Any]):
    """The terms the scoring profile really used: score = base + anchor + pin (+ freshness in the seed
    profile), base = relevance x subject x time x activation x recency x centrality factors."""

    profile = drf.ChoiceField(choices=["calibrated", "seed"])
    relevance = drf.FloatField()
    subject = drf.FloatField()
    time = drf.FloatField()
    activation = drf.FloatField()
    recency = drf.FloatField()
    centrality = drf.FloatField()
    base = drf.FloatField()
    log_base = drf.FloatField(allow_null=True, help_text="ln(base) when base is too small to read, else null")
    anchor = drf.FloatField()
    pin = drf.FloatField()
    freshness = drf.FloatField()


class ScoreBreakdownOut(drf.Serializer[Any]):
    activation = drf.FloatField()
    relevance = drf.FloatField()
    recency = drf.FloatField()
    centrality = drf.FloatField()
    anchor_forced = drf.BooleanField()
    session_pin_boost = drf.FloatField()
    freshness_boost = drf.FloatField()
    subject_match = drf.FloatField(help_text="share of the memory's subject the query names")
    time_cue = drf.FloatField(help_text="1 when the query asks when and the memory says when")
    factors = ScoreFactorsOut()


class ProvenanceOut(drf.Serializer[Any]):
    # "recent" is no longer produced (semantic candidates come from the vector index); kept for old clients.
    kind = drf.ChoiceField(choices=["lexical", "semantic", "context", "spread", "pinned", "anchor", "entity", "recent"])
    seed = drf.UUIDField(allow_null=True)
    edge_type = drf.CharField(allow_null=True)
    hops = drf.IntegerField()
    path = drf.ListField(child=drf.UUIDField())


class ContextItemOut(drf.Serializer[Any]):
    id = drf.UUIDField()
    content = drf.CharField()
    memory_type = drf.CharField()
    score = drf.FloatField()
    score_breakdown = ScoreBreakdownOut()
    provenance = ProvenanceOut()


class DeclinedItemOut(ContextItemOut):
    rank = drf.IntegerField(help_text="where it ranked among all candidates")
    factor = drf.ChoiceField(choices=["budget", "low_activation", "interference", "low_relevance", "recency"])
    detail = drf.CharField()


class ContextOut(drf.Serializer[Any]):
    decision_id = drf.UUIDField()
    strategy_used = drf.CharField()
    confidence = drf.FloatField()
    reasons = drf.ListField(child=drf.CharField())
    settings = drf.DictField()
    items = ContextItemOut(many=True)
    tokens_used = drf.IntegerField()
    drift_warnings = drf.ListField(child=drf.DictField())
    declined = DeclinedItemOut(many=True, required=False, help_text="only with explain: true")


class SearchHitOut(MemoryOut):
    score = drf.FloatField()


class SearchOut(drf.Serializer[Any]):
    result_set = drf.UUIDField(help_text="the id of the recorded retrieval events")
    results = SearchHitOut(many=True)


class SettingsOut(drf.Serializer[Any]):
    surfacing = drf.DictField(required=False)
    evolution = drf.DictField(required=False)


class PinOut(drf.Serializer[Any]):
    session_id = drf.CharField()
    memory_id = drf.UUIDField()
    weight = drf.FloatField()
    expires_at = drf.DateTimeField()


# -- views ------------------------------------------------------------------------------------------


def working_context_for(workspace: Workspace, data: Any) -> retrieval.WorkingContext:
    """``get_working_context`` for a request body (REST's /context/ and the MCP tool)."""
    body = parse(inputs.ContextIn, data)
    return retrieval.get_working_context(
        workspace,
        body.session_id,
        body.query,
        k=body.k,
        max_tokens=body.max_tokens,
        strategy=body.strategy,
        mode=body.mode,
        explain=body.explain,
    )


def search_for(workspace: Workspace, data: Any) -> dict[str, Any]:
    """Direct retrieval for a request body (REST's /search/ and the MCP tool), as the contract's JSON."""
    body = parse(inputs.SearchIn, data)
    result = retrieval.search(workspace, body.query, k=body.k, session_id=body.session_id)
    now = timezone.now()
    return {
        "result_set": str(result.result_set),
        "results": [{**memory_json(hit.memory, now, workspace=workspace), "score": hit.score} for hit in result.hits],
    }


class WorkingContextApi(APIView):
    # A read that arrives as a POST: outside the per-user write limit (core.throttles).
    throttle_classes = ()

    @extend_schema(request=inputs.ContextIn, responses={200: ContextOut, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        return Response(context_json(working_context_for(access.workspace, request.data)))


class SearchApi(APIView):
    # A read that arrives as a POST: outside the per-user write limit (core.throttles).
    throttle_classes = ()

    @extend_schema(request=inputs.SearchIn, responses={200: SearchOut, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        return Response(search_for(access.workspace, request.data))


class SettingsApi(APIView):
    @extend_schema(responses={200: SettingsOut, **ERRORS})
    def get(self, request: Request, ws: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        return Response(settings_json(selectors.workspace_settings(workspace=access.workspace)))

    @extend_schema(request=inputs.SettingsIn, responses={200: SettingsOut, **ERRORS})
    def patch(self, request: Request, ws: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")
        body = parse(inputs.SettingsIn, request.data)
        current = services.settings_update(
            workspace=access.workspace, actor=request.user, surfacing=body.surfacing, evolution=body.evolution
        )
        return Response(settings_json(current))


class SessionPinApi(APIView):
    @extend_schema(request=inputs.PinIn, responses={200: PinOut, **ERRORS, 409: ErrorOut})
    def put(self, request: Request, ws: str, sid: str, memory_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        # A PUT without a body pins with the default weight.
        body = parse(inputs.PinIn, request.data or {})
        memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=memory_id, field="memory_id")
        pin = services.pin_put(workspace=access.workspace, session_id=sid, memory=memory, weight=body.weight)
        return Response(
            {
                "session_id": sid,
                "memory_id": str(pin.memory_id),
                "weight": pin.weight,
                "expires_at": iso_z(pin.expires_at),
            }
        )

    @extend_schema(responses={204: None, **ERRORS, 409: ErrorOut})
    def delete(self, request: Request, ws: str, sid: str, memory_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        memory = memory_selectors.memory_get(workspace=access.workspace, memory_id=memory_id, field="memory_id")
        services.pin_delete(workspace=access.workspace, session_id=sid, memory=memory)
        return Response(status=status.HTTP_204_NO_CONTENT)
