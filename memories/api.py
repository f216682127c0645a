"""REST adapters for workspaces, memories, edges and conversations: parse, authorize, call, render."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import parameters_of
from core.schemas import parse_query
from memories import idempotency, inputs, selectors, serializers, services
from memories.algorithms.activation import BOOST_DIRECT
from memories.models import RetrievalSource
from memories.signalbus import retrieval_signals

ERRORS = {400: serializers.ErrorOut, 403: serializers.ErrorOut, 404: serializers.ErrorOut}
CONFLICT = {409: serializers.ErrorOut}
REUSED_KEY = {422: serializers.ErrorOut}
IDEMPOTENCY_KEY = OpenApiParameter(
    idempotency.HEADER,
    str,
    OpenApiParameter.HEADER,
    description="A retry with the same key and body answers as the first request did, writing nothing again "
    f"(for {settings.IDEMPOTENCY_KEY_HOURS} h); the same key with another body is a 422.",
)


def _idempotent(request: Request, access: selectors.WorkspaceAccess, endpoint: str, run: Any) -> Response:
    return idempotency.idempotent(
        workspace=access.workspace,
        user=request.user,  # type: ignore[arg-type]
        key=idempotency.key_of(request),
        endpoint=endpoint,
        data=request.data,
        run=run,
    ).response()


class WorkspaceListCreateApi(APIView):
    @extend_schema(responses={200: serializers.WorkspacePageOut})
    def get(self, request: Request) -> Response:
        rows = selectors.workspace_list_for_user(user=request.user)
        return Response({"results": [serializers.workspace_json(a.workspace, a.role) for a in rows]})

    @extend_schema(request=inputs.WorkspaceIn, responses={201: serializers.WorkspaceOut, **ERRORS, **CONFLICT})
    def post(self, request: Request) -> Response:
        body = inputs.workspace_input(request.data)
        workspace = services.workspace_create(
            owner=request.user,  # type: ignore[arg-type]
            slug=body.slug,
            name=body.name,
        )
        return Response(serializers.workspace_json(workspace, "owner"), status=status.HTTP_201_CREATED)


class MemoryListCreateApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.MemoryListQuery),
        responses={200: serializers.MemoryPageOut, **ERRORS},
        operation_id="memories_list",
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        query = parse_query(inputs.MemoryListQuery, request.query_params)
        filters = query.filters()
        page = selectors.memory_list(
            workspace=access.workspace,
            filters=filters,
            ordering=query.ordering or selectors.default_ordering(filters),
            cursor=query.cursor or None,
            limit=50 if query.limit is None else query.limit,
            # As the page: a bounded probe per type or search filter picks the plan that stays fast at 1M
            # memories (a common word in a date order gathered every match: 1.6-2.0 s, with it 15 ms).
            plan_probes=True,
        )
        now = timezone.now()
        return Response(
            {
                "results": [serializers.memory_json(m, now, workspace=access.workspace) for m in page.results],
                "next": page.next_cursor,
            }
        )

    @extend_schema(
        request=inputs.MemoryIn,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: serializers.MemoryOut, **ERRORS, **REUSED_KEY},
    )
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")

        def create() -> tuple[int, Any]:
            item = inputs.memory_input(request.data)
            (memory,) = services.client_memories_create(
                workspace=access.workspace, actor=request.user, items=[item], trusted=access.is_owner, bulk=False
            )
            return status.HTTP_201_CREATED, serializers.memory_json(memory, timezone.now(), workspace=access.workspace)

        return _idempotent(request, access, "memories", create)


class MemoryDetailApi(APIView):
    @extend_schema(responses={200: serializers.MemoryOut, **ERRORS}, operation_id="memory_retrieve")
    def get(self, request: Request, ws: str, memory_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
        # A direct retrieval: the memory is being used, so it warms up (+0.05, applied at flush).
        retrieval_signals(
            workspace_id=access.workspace.pk,
            memory_ids=[memory.id],
            source=RetrievalSource.GET,
            delta=BOOST_DIRECT,
        )
        return Response(serializers.memory_json(memory, timezone.now(), workspace=access.workspace))

    @extend_schema(request=inputs.MemoryPatchIn, responses={200: serializers.MemoryOut, **ERRORS})
    def patch(self, request: Request, ws: str, memory_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
        changes = inputs.memory_patch_input(request.data)
        memory = services.memory_update(workspace=access.workspace, memory=memory, actor=request.user, changes=changes)
        return Response(serializers.memory_json(memory, timezone.now(), workspace=access.workspace))

    @extend_schema(
        parameters=parameters_of(inputs.DeleteQuery),
        responses={200: serializers.MemoryOut, 204: None, **ERRORS},
    )
    def delete(self, request: Request, ws: str, memory_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
        if parse_query(inputs.DeleteQuery, request.query_params).confirm:
            services.memory_delete_hard(workspace=access.workspace, memory=memory, actor=request.user)
            return Response(status=status.HTTP_204_NO_CONTENT)
        memory = services.memory_archive(workspace=access.workspace, memory=memory, actor=request.user)
        return Response(serializers.memory_json(memory, timezone.now(), workspace=access.workspace))


class MemoryBulkCreateApi(APIView):
    @extend_schema(
        request=inputs.BulkIn,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: serializers.IdsOut, **ERRORS, **REUSED_KEY},
    )
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")

        def create() -> tuple[int, Any]:
            items = inputs.bulk_input(request.data)
            memories = services.client_memories_create(
                workspace=access.workspace, actor=request.user, items=items, trusted=access.is_owner, bulk=True
            )
            return status.HTTP_201_CREATED, {"ids": [str(m.id) for m in memories]}

        return _idempotent(request, access, "memories-bulk", create)


class ConversationIngestApi(APIView):
    @extend_schema(
        request=inputs.ConversationIn,
        parameters=[IDEMPOTENCY_KEY],
        responses={201: serializers.IdsOut, **ERRORS, **REUSED_KEY},
    )
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")

        def ingest() -> tuple[int, Any]:
            sessions = inputs.conversation_input(request.data)
            ids = services.conversation_ingest(workspace=access.workspace, actor=request.user, sessions=sessions)
            return status.HTTP_201_CREATED, {"ids": [str(i) for i in ids]}

        return _idempotent(request, access, "conversations", ingest)


class EdgeCreateApi(APIView):
    @extend_schema(request=inputs.EdgeIn, responses={201: serializers.EdgeOut, **ERRORS, **CONFLICT})
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        body = inputs.edge_input(request.data)
        source = selectors.memory_get(workspace=access.workspace, memory_id=body.source, field="source")
        target = selectors.memory_get(workspace=access.workspace, memory_id=body.target, field="target")
        edge = services.edge_link(
            workspace=access.workspace, source=source, target=target, edge_type=body.type, weight=body.weight
        )
        return Response(serializers.edge_json(edge), status=status.HTTP_201_CREATED)


class MemoryEdgesApi(APIView):
    @extend_schema(responses={200: serializers.EdgePageOut, **ERRORS})
    def get(self, request: Request, ws: str, memory_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        memory = selectors.memory_get(workspace=access.workspace, memory_id=memory_id)
        edges = selectors.edges_of_memory(workspace=access.workspace, memory=memory)
        return Response({"results": [serializers.edge_json(e) for e in edges]})
