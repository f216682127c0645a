"""REST for typed memory: contradiction clusters, drift flags, goal resolution revert. Adapters only."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import parameters_of
from core.schemas import parse_query
from evolution import inputs, typed_selectors
from evolution.evolvers.typed import goal_resolution_revert
from memories import selectors
from memories.serializers import ErrorOut, MemoryOut, memory_json

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


class ContradictionClusterOut(serializers.Serializer[Any]):
    ids = serializers.ListField(child=serializers.UUIDField())
    memories = MemoryOut(many=True)


class ContradictionsOut(serializers.Serializer[Any]):
    clusters = ContradictionClusterOut(many=True, help_text="connected components of conflicts_with, largest first")
    total = serializers.IntegerField(help_text="number of clusters in the workspace")


class ContradictionListApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.ContradictionQuery),
        responses={200: ContradictionsOut, **ERRORS},
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        now = timezone.now()
        page = typed_selectors.contradiction_clusters(
            workspace=access.workspace, limit=parse_query(inputs.ContradictionQuery, request.query_params).limit or 100
        )
        return Response(
            {
                "clusters": [
                    {
                        "ids": c.ids,
                        "memories": [memory_json(m, now, workspace=access.workspace) for m in c.memories],
                    }
                    for c in page.clusters
                ],
                "total": page.total,
            }
        )


class DriftFlagOut(serializers.Serializer[Any]):
    memory_id = serializers.UUIDField()
    memory_type = serializers.CharField()
    subject = serializers.CharField()
    content = serializers.CharField()
    reason = serializers.CharField()
    replaces_in_window = serializers.IntegerField()
    first_replace_at = serializers.DateTimeField()
    last_replace_at = serializers.DateTimeField()
    flagged_at = serializers.DateTimeField()
    window_days = serializers.FloatField()


class DriftFlagsOut(serializers.Serializer[Any]):
    results = DriftFlagOut(many=True, help_text="drift flags, newest first")


class DriftFlagListApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.DriftFlagQuery),
        responses={200: DriftFlagsOut, **ERRORS},
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        rows = typed_selectors.drift_flag_rows(
            workspace=access.workspace, limit=parse_query(inputs.DriftFlagQuery, request.query_params).limit or 200
        )
        return Response(
            {
                "results": [
                    {
                        **r.flag,
                        "memory_id": str(r.memory_id),
                        "memory_type": r.memory_type,
                        "subject": r.subject,
                        "content": r.content,
                    }
                    for r in rows
                ]
            }
        )


class GoalResolutionRevertApi(APIView):
    class GoalRevertOut(serializers.Serializer[Any]):
        goal_id = serializers.UUIDField()
        revert_record_id = serializers.IntegerField()

    @extend_schema(request=None, responses={200: GoalRevertOut, **ERRORS})
    def post(self, request: Request, ws: str, goal_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        record = goal_resolution_revert(workspace=access.workspace, goal_id=goal_id, actor=request.user)
        return Response({"goal_id": goal_id, "revert_record_id": record.pk})
