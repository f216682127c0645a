"""REST adapters for evolution runs, records, reverts and memory history: parse, authorize, call, render.

Dry runs are open to every member (they change no memory); applying and reverting need an editor or
owner. A non-member gets 404 for everything, like a workspace that does not exist.
"""

from __future__ import annotations

import uuid
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.openapi import parameters_of
from core.schemas import parse_query
from evolution import inputs, jobs, selectors, services
from evolution.evolvers.base import REASONS
from evolution.inputs import RECORDS_PAGE
from evolution.models import EvolutionRun
from history.models import EvolutionRecord
from history.revert import REVERTED_RECORD
from memories import selectors as memory_selectors
from memories import services as memory_services
from memories.models import Workspace
from memories.serializers import ErrorOut, iso_z

ERRORS = {400: ErrorOut, 403: ErrorOut, 404: ErrorOut, 409: ErrorOut}
# A history entry lists the other memories of its record only when there are few of them.
HISTORY_MAX_IDS = 20


def record_json(record: EvolutionRecord) -> dict[str, Any]:
    return {
        "id": record.pk,
        "run_id": str(record.run_id) if record.run_id else None,
        "evolver": record.evolver,
        "action": record.action,
        "input_ids": record.input_ids,
        "output_ids": record.output_ids,
        "reason": record.reason,
        "timestamp": iso_z(record.timestamp),
        "dry_run": record.dry_run,
        "before": record.before,
        "after": record.after,
        "reverted_at": iso_z(record.reverted_at),
        "reverted_by": record.reverted_by_id,
    }


def history_json(record: EvolutionRecord, memory_id: str) -> dict[str, Any]:
    """A record as seen from one memory: its own before/after and reason; others' ids when few."""
    data = record_json(record)
    reasons = record.after.get(REASONS) or {}
    data["reason"] = reasons.get(memory_id) or record.reason
    data["record_reason"] = record.reason
    data["before"] = {k: v for k, v in record.before.items() if k == memory_id or not _is_memory_key(k)}
    data["after"] = {
        k: v for k, v in record.after.items() if (k == memory_id or not _is_memory_key(k)) and k != REASONS
    }
    touched = {*record.input_ids, *record.output_ids}
    data["memory_count"] = len(touched)
    if len(touched) > HISTORY_MAX_IDS:
        data["input_ids"] = [i for i in record.input_ids if i == memory_id]
        data["output_ids"] = [i for i in record.output_ids if i == memory_id]
        data["ids_truncated"] = True
    return data


def _is_memory_key(key: str) -> bool:
    try:
        uuid.UUID(key)
    except ValueError:
        return False
    return True


def run_json(run: EvolutionRun, *, after: int = 0, limit: int = RECORDS_PAGE) -> dict[str, Any]:
    records, next_cursor = selectors.run_records(run=run, after_id=after, limit=limit)
    return {
        **run_summary_json(run),
        "records": [record_json(r) for r in records],
        "records_count": selectors.run_record_count(run=run),
        "records_next": next_cursor,
    }


def run_summary_json(run: EvolutionRun) -> dict[str, Any]:
    return {
        "run_id": str(run.id),
        "dry_run": run.dry_run,
        "status": run.status,
        "evolvers": run.evolvers,
        "summary": run.summary,
        "progress": run.progress,
        "started_at": iso_z(run.started_at),
        "finished_at": iso_z(run.finished_at),
        "started_by": run.started_by_id,
    }


class RecordOut(serializers.Serializer[Any]):
    id = serializers.IntegerField()
    run_id = serializers.CharField(allow_null=True)
    evolver = serializers.CharField()
    action = serializers.CharField()
    input_ids = serializers.ListField(child=serializers.CharField())
    output_ids = serializers.ListField(child=serializers.CharField())
    reason = serializers.CharField()
    timestamp = serializers.DateTimeField()
    dry_run = serializers.BooleanField()
    before = serializers.DictField()
    after = serializers.DictField()
    reverted_at = serializers.DateTimeField(allow_null=True)
    reverted_by = serializers.IntegerField(allow_null=True)


class RunSummaryOut(serializers.Serializer[Any]):
    """A run as the run list shows it (run_summary_json): no records."""

    run_id = serializers.CharField()
    dry_run = serializers.BooleanField()
    status = serializers.CharField()
    evolvers = serializers.ListField(child=serializers.CharField())
    summary = serializers.DictField()
    progress = serializers.DictField()
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    started_by = serializers.IntegerField(allow_null=True, help_text="the user id who started it")


class RunOut(RunSummaryOut):
    """A run with one page of its records (run_json)."""

    records = RecordOut(many=True)
    records_count = serializers.IntegerField()
    records_next = serializers.IntegerField(allow_null=True)


class RunListOut(serializers.Serializer[Any]):
    results = RunSummaryOut(many=True)


class HistoryOut(serializers.Serializer[Any]):
    results = RecordOut(many=True)
    next = serializers.IntegerField(allow_null=True)


class RecordRevertOut(serializers.Serializer[Any]):
    reverted = RecordOut()
    revert_record = RecordOut()


class RunRevertOut(serializers.Serializer[Any]):
    """A run reverted before the answer (200): the records it undid and the revert records it wrote."""

    run_id = serializers.CharField()
    status = serializers.CharField()
    reverted_records = serializers.ListField(child=serializers.IntegerField())
    revert_records = serializers.ListField(child=serializers.IntegerField())


class RevertProgressOut(serializers.Serializer[Any]):
    """How far a run's revert has come: its summary's ``revert`` entry."""

    state = serializers.ChoiceField(
        choices=["queued", "reverting", "reverted", "stopped"],
        help_text="queued: waiting for a worker; reverting; reverted: every record undone; stopped: see error",
    )
    records = serializers.IntegerField(help_text="records to undo when it began")
    reverted = serializers.IntegerField(help_text="records undone so far")
    transactions = serializers.IntegerField()
    longest_transaction_ms = serializers.FloatField(required=False)
    requested_by = serializers.IntegerField(allow_null=True, help_text="the user id who asked for the revert")
    requested_at = serializers.CharField(help_text="ISO 8601 time")
    heartbeat = serializers.CharField(help_text="ISO 8601 time of its last progress")
    error = serializers.CharField(required=False, help_text="why it stopped")


class RunRevertQueuedOut(serializers.Serializer[Any]):
    """A run whose revert was queued for a background worker (202): follow ``summary.revert`` with GET of the
    run (or the workspace socket) until its state is reverted or stopped."""

    run_id = serializers.CharField()
    status = serializers.CharField(help_text="the run's status; reverted once the worker has undone every record")
    revert = RevertProgressOut()


class EvolutionRunListCreateApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.RunListQuery),
        responses={200: RunListOut, **ERRORS},
        operation_id="evolution_runs",
    )
    def get(self, request: Request, ws: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        limit = parse_query(inputs.RunListQuery, request.query_params).limit
        runs = selectors.run_list(workspace=access.workspace, limit=50 if limit is None else limit)
        return Response({"results": [run_summary_json(r) for r in runs]})

    @extend_schema(request=inputs.RunIn, responses={202: RunOut, **ERRORS}, operation_id="evolution_run_create")
    def post(self, request: Request, ws: str) -> Response:
        """Queue a run (a background job): 202 with the run, ``status`` queued; follow it with GET or
        the workspace socket. Editors and owners only, dry runs included (a run costs the server work)."""
        access = memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")
        body = inputs.run_input(request.data)
        run = jobs.run_enqueue(
            workspace=access.workspace, actor=request.user, evolvers=body.evolvers, dry_run=body.is_dry_run()
        )
        return Response(run_json(run), status=status.HTTP_202_ACCEPTED)


class EvolutionRunDetailApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.RunRecordsQuery),
        responses={200: RunOut, **ERRORS},
        operation_id="evolution_run",
    )
    def get(self, request: Request, ws: str, run_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        query = parse_query(inputs.RunRecordsQuery, request.query_params)
        run = selectors.run_get(workspace=access.workspace, run_id=run_id)
        limit = RECORDS_PAGE if query.limit is None else query.limit
        return Response(run_json(run, after=query.after or 0, limit=limit))


class EvolutionRunCancelApi(APIView):
    @extend_schema(request=None, responses={200: RunOut, **ERRORS}, operation_id="evolution_run_cancel")
    def post(self, request: Request, ws: str, run_id: str) -> Response:
        """Cancel a queued run, or stop a running one before its next write (409 once it finished)."""
        access = memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")
        run = selectors.run_get(workspace=access.workspace, run_id=run_id)
        return Response(run_json(jobs.run_cancel(workspace=access.workspace, run=run, actor=request.user)))


class EvolutionRunRevertApi(APIView):
    @extend_schema(
        request=None,
        responses={200: RunRevertOut, 202: RunRevertQueuedOut, **ERRORS},
        operation_id="evolution_run_revert",
    )
    def post(self, request: Request, ws: str, run_id: str) -> Response:
        """Undo every record of an applied run not reverted yet, newest first, all or nothing. A run with few
        such records (``EVOLUTION_REVERT_INLINE_RECORDS``, 50) is reverted before the answer (200); a larger one
        is checked, then queued for a background worker (202 with its progress). Either way a revert that would
        be refused is 409 with nothing changed or queued."""
        access = memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")
        run = selectors.run_get(workspace=access.workspace, run_id=run_id)
        answer = services.run_revert_request(workspace=access.workspace, run=run, actor=request.user)
        if answer.queued:
            return Response(
                {
                    "run_id": str(run.id),
                    "status": answer.run.status,
                    "revert": answer.run.summary.get(jobs.REVERT_SUMMARY, {}),
                },
                status=status.HTTP_202_ACCEPTED,
            )
        reverts = answer.reverts
        return Response(
            {
                "run_id": str(run.id),
                "status": run.status,
                "reverted_records": [r.after.get(REVERTED_RECORD) for r in reverts],
                "revert_records": [r.pk for r in reverts],
            }
        )


class EvolutionRecordDetailApi(APIView):
    @extend_schema(responses={200: RecordOut, **ERRORS}, operation_id="evolution_record")
    def get(self, request: Request, ws: str, record_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        record = selectors.record_get(workspace=access.workspace, record_id=record_id)
        return Response(record_json(record))


class EvolutionRecordRevertApi(APIView):
    @extend_schema(request=None, responses={200: RecordRevertOut, **ERRORS}, operation_id="evolution_record_revert")
    def post(self, request: Request, ws: str, record_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws, require="edit")
        record = selectors.record_get(workspace=access.workspace, record_id=record_id)
        revert = memory_services.record_revert(workspace=access.workspace, record_id=record.pk, actor=request.user)
        record.refresh_from_db()
        return Response({"reverted": record_json(record), "revert_record": record_json(revert)})


def memory_history_json(workspace: Workspace, memory_id: object, params: Any) -> dict[str, Any]:
    """One page of a memory's history as the contract's JSON (REST's history/ and the MCP tool)."""
    query = parse_query(inputs.HistoryQuery, params)
    mid = memory_selectors.parse_memory_id(memory_id, field="memory_id")
    records, next_cursor = selectors.memory_history(
        workspace=workspace, memory_id=mid, before_id=query.before, limit=50 if query.limit is None else query.limit
    )
    return {"results": [history_json(r, str(mid)) for r in records], "next": next_cursor}


class MemoryHistoryApi(APIView):
    @extend_schema(
        parameters=parameters_of(inputs.HistoryQuery),
        responses={200: HistoryOut, **ERRORS},
        operation_id="memory_history",
    )
    def get(self, request: Request, ws: str, memory_id: str) -> Response:
        access = memory_selectors.workspace_access(user=request.user, slug=ws)
        return Response(memory_history_json(access.workspace, memory_id, request.query_params))
