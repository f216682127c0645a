"""REST adapters of the self-learning engine and the dream: parse, authorize, call one service, render.

Members read (world model, dream reports, export, a dry-run dream); editors and owners write (outcomes,
corrections, reflections, evolve, dream, import): a viewer gets 403, a non-member 404.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.parsers import MultiPartParser
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import parameters_of
from core.schemas import parse_query
from evolution import dream, engine, engine_inputs, engine_selectors, inputs, memdir_export, memdir_import
from evolution.api_proposals import proposal_json
from evolution.models import DreamReport, Outcome
from memories import selectors
from memories.api_errors import error_response
from memories.api_parsers import JSONParser
from memories.serializers import ErrorOut, MemoryOut, iso_z, memory_json

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}


def outcome_json(outcome: Outcome) -> dict[str, Any]:
    return {
        "id": outcome.pk,
        "task_type": outcome.task_type,
        "approach": outcome.approach,
        "result": outcome.result,
        "context": {"lesson": outcome.lesson, "issue": outcome.issue, "solution": outcome.solution},
        "source": outcome.source,
        "created_at": iso_z(outcome.created_at),
    }


def evolve_json(result: engine.EvolveResult | None) -> dict[str, Any]:
    if result is None:
        return {"created": [], "vetoed": [], "questions": []}
    return {
        "created": [proposal_json(p) for p in result.created],
        "vetoed": [proposal_json(p) for p in result.vetoed],
        "questions": [proposal_json(p) for p in result.questions],
    }


def dream_json(report: DreamReport) -> dict[str, Any]:
    return {
        "id": report.pk,
        "created_at": iso_z(report.created_at),
        "run_id": str(report.run_id) if report.run_id else None,
        "dry_run": bool(report.report.get("dry_run")),
        "report": report.report,
    }


class ProposalsOut(serializers.Serializer[Any]):
    created = serializers.ListField(child=serializers.DictField(), help_text="new pending strategy proposals")
    vetoed = serializers.ListField(child=serializers.DictField(), help_text="refused by the covenant, with reasons")
    questions = serializers.ListField(child=serializers.DictField(), help_text="conflict proposals asking the user")


def _outcome_fields() -> dict[str, serializers.Field[Any, Any, Any, Any]]:
    return {
        "id": serializers.IntegerField(),
        "task_type": serializers.CharField(),
        "approach": serializers.CharField(),
        "result": serializers.ChoiceField(choices=["success", "fail"]),
        "context": serializers.DictField(help_text="{lesson, issue, solution}"),
        "source": serializers.CharField(help_text="api, engine (decisions on strategies) or import"),
        "created_at": serializers.DateTimeField(),
    }


OutcomeOut = inline_serializer("OutcomeOut", fields=_outcome_fields())


class OutcomeListCreateApi(APIView):
    OutputSerializer = inline_serializer(
        "OutcomeCreated",
        fields={
            **_outcome_fields(),
            "proposals": ProposalsOut(help_text="what the engine proposed because of this outcome's lesson"),
        },
    )
    PageSerializer = inline_serializer(
        "OutcomePage",
        fields={
            "results": inline_serializer("OutcomeItem", fields=_outcome_fields(), many=True),
            "next": serializers.IntegerField(allow_null=True, help_text="pass as ?after= for the next page"),
        },
    )

    @extend_schema(
        parameters=parameters_of(inputs.OutcomeListQuery),
        responses={200: PageSerializer, **ERRORS},
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        query = parse_query(inputs.OutcomeListQuery, request.query_params)
        page, cursor = engine_selectors.outcome_list(
            workspace=access.workspace, after_id=query.after or 0, limit=100 if query.limit is None else query.limit
        )
        return Response({"results": [outcome_json(o) for o in page], "next": cursor})

    @extend_schema(request=engine_inputs.OutcomeIn, responses={201: OutputSerializer, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        item = engine_inputs.outcome_input(request.data)
        recorded = engine.outcome_record(workspace=access.workspace, item=item)
        body = {**outcome_json(recorded.outcome), "proposals": evolve_json(recorded.evolved)}
        return Response(body, status=status.HTTP_201_CREATED)


class CorrectionCreateApi(APIView):
    @extend_schema(request=engine_inputs.CorrectionIn, responses={201: MemoryOut, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        item = engine_inputs.correction_input(request.data)
        memory = engine.correction_record(workspace=access.workspace, actor=request.user, item=item)
        return Response(memory_json(memory, timezone.now(), workspace=access.workspace), status=status.HTTP_201_CREATED)


class ReflectionKnownOut(MemoryOut):
    deduplicated = serializers.ChoiceField(
        choices=["same_reflection", "hot_rule"],
        help_text="why nothing was written: the same reflection is stored, or a HOT rule holds its lesson",
    )


class ReflectionCreateApi(APIView):
    @extend_schema(
        request=engine_inputs.ReflectionIn,
        responses={201: MemoryOut, 200: ReflectionKnownOut, **ERRORS},
        description="201 with the new reflection; 200 with the memory that already holds it (the same "
        "reflection, or a HOT rule of its lesson) and `deduplicated` saying which, when nothing was written.",
    )
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        item = engine_inputs.reflection_input(request.data)
        recorded = engine.reflection_record(workspace=access.workspace, actor=request.user, item=item)
        body = memory_json(recorded.memory, timezone.now(), workspace=access.workspace)
        if recorded.deduplicated:
            # Nothing written: the answer is the memory that already holds it, and why.
            return Response({**body, "deduplicated": recorded.deduplicated}, status=status.HTTP_200_OK)
        return Response(body, status=status.HTTP_201_CREATED)


class WorldModelOut(serializers.Serializer[Any]):
    approaches = serializers.ListField(child=serializers.DictField(), help_text="per (task_type, approach)")
    task_types = serializers.ListField(child=serializers.DictField(), help_text="per task_type, with best_approach")
    outcomes = serializers.IntegerField()


class WorldModelApi(APIView):
    @extend_schema(responses={200: WorldModelOut, **ERRORS})
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        return Response(engine_selectors.world_model_for(access.workspace).as_json())


class EvolveApi(APIView):
    @extend_schema(request=inputs.EvolveIn, responses={200: ProposalsOut, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        inputs.evolve_input(request.data)
        return Response(evolve_json(engine.engine_evolve(workspace=access.workspace)))


class DreamOut(serializers.Serializer[Any]):
    id = serializers.IntegerField(allow_null=True, help_text="null for a dry run (nothing stored)")
    created_at = serializers.DateTimeField()
    run_id = serializers.CharField(allow_null=True, help_text="the evolution run holding the tier moves")
    dry_run = serializers.BooleanField()
    report = serializers.DictField(help_text="see docs/engine.md")


class DreamListOut(serializers.Serializer[Any]):
    results = DreamOut(many=True)


class DreamApi(APIView):
    @extend_schema(
        operation_id="dream_reports_list",
        parameters=parameters_of(inputs.DreamListQuery),
        responses={200: DreamListOut, **ERRORS},
    )
    def get(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        limit = parse_query(inputs.DreamListQuery, request.query_params).limit
        reports = dream.dream_report_list(workspace=access.workspace, limit=20 if limit is None else limit)
        return Response({"results": [dream_json(r) for r in reports]})

    @extend_schema(request=inputs.DreamIn, responses={200: DreamOut, 201: DreamOut, **ERRORS})
    def post(self, request: Request, ws: str) -> Response:
        dry_run = inputs.dream_input(request.data).dry_run
        # A dry run changes nothing, so every member may preview; applying needs an editor.
        access = selectors.workspace_access(user=request.user, slug=ws, require="view" if dry_run else "edit")
        report = dream.dream_run(workspace=access.workspace, actor=request.user, dry_run=dry_run)
        return Response(dream_json(report), status=status.HTTP_200_OK if dry_run else status.HTTP_201_CREATED)


class DreamDetailApi(APIView):
    @extend_schema(responses={200: DreamOut, **ERRORS})
    def get(self, request: Request, ws: str, report_id: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        return Response(dream_json(dream.dream_report_get(workspace=access.workspace, report_id=report_id)))


class _ExportNegotiation(DefaultContentNegotiation):
    """``?format=`` chooses the export's format (zip or json) here, not a DRF renderer: always render JSON."""

    def select_renderer(
        self, request: Request, renderers: Iterable[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        renderer = next(iter(renderers))
        return renderer, renderer.media_type


class ExportApi(APIView):
    content_negotiation_class = _ExportNegotiation

    @extend_schema(
        parameters=parameters_of(inputs.ExportQuery),
        responses={(200, "application/zip"): bytes, **ERRORS},
    )
    def get(self, request: Request, ws: str) -> HttpResponse | Response:
        access = selectors.workspace_access(user=request.user, slug=ws)
        fmt = parse_query(inputs.ExportQuery, request.query_params).format or "zip"
        files = memdir_export.memdir_export(workspace=access.workspace)
        if fmt == "json":
            return Response({"files": files})
        response = HttpResponse(memdir_export.memdir_zip(files), content_type="application/zip")
        response["Content-Disposition"] = f'attachment; filename="memory-evolution-{access.workspace.slug}.zip"'
        return response


class ImportOut(serializers.Serializer[Any]):
    created = serializers.DictField(child=serializers.IntegerField(), help_text="per kind")
    skipped = serializers.DictField(child=serializers.IntegerField(), help_text="already in the workspace")
    origin = serializers.CharField(allow_null=True, help_text="meta.json workspace of the directory")


class ImportApi(APIView):
    parser_classes = [JSONParser, MultiPartParser]

    @extend_schema(
        request={"application/json": memdir_import.ImportIn, "multipart/form-data": memdir_import.ImportUploadIn},
        responses={201: ImportOut, **ERRORS},
    )
    def post(self, request: Request, ws: str) -> Response:
        access = selectors.workspace_access(user=request.user, slug=ws, require="edit")
        try:
            if request.content_type.startswith("multipart/"):
                files = memdir_import.memdir_files_from_upload(request.FILES)
            else:
                files = memdir_import.memdir_files_from_json(request.data)
            summary = memdir_import.memdir_import(workspace=access.workspace, files=files, actor=request.user)
        except memdir_import.DirectoryInvalid as exc:
            return error_response(exc.code, exc.problems_json(), status.HTTP_400_BAD_REQUEST, "files")
        return Response(summary.as_json(), status=status.HTTP_201_CREATED)
