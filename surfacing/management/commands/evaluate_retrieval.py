"""Evidence recall of surfacing on conversations in the LoCoMo JSON layout, replayed as an agent uses it.

    python manage.py evaluate_retrieval FILE.json [--k 10] [--modes router,legacy] [--layouts dataset,today]
                                        [--surfacing JSON] [--no-usage] [--keep]

Each sample (``{"sample_id", "conversation": {"session_N": [{speaker, dia_id, text}], "session_N_date_time",
...}, "qa": [{question, evidence: [dia_id], category}]}``) is ingested through
``memories.services.conversation_ingest`` (turn ``ref`` = ``dia_id``) into a fresh workspace, once per date
layout; memories a bulk write left without a vector (a slow embedder: ``EMBED_INLINE_MAX``) are embedded
before the first question, as the scheduler's embed job does in a running site:

- ``dataset``: the sessions keep their own dates (LoCoMo's are from 2023, years before "now");
- ``today``: every session is shifted so that the last one began an hour ago, an agent in use today with
  months of history behind it.

Then every question with evidence is asked in order, in each mode, with ``get_working_context`` at the
workspace's settings (the defaults, or ``--surfacing`` stored on the workspace first) and with usage on:
each call boosts what it returns and queues its retrieval events exactly as an agent's call would, and the
queued signals are applied before the next question. ``--no-usage`` asks dry reads instead.

A question's recall@k is the share of its evidence turns among the first k memories returned. The table
gives R@1/5/10 for each mode beside ``lexical``, the full-text BM25 ranking of the same workspace on the
same questions (the product's own index, no priors), and R@10 per question category. The workspaces are
deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from core.errors import DomainError
from memories import embedding_service
from memories import services as memory_services
from memories.embeddings import default_embedder
from memories.inputs import SessionInput, TurnInput
from memories.models import Workspace
from memories.selectors import lexical_search
from memories.signalbus import signal_bus
from surfacing.retrieval import get_working_context
from surfacing.services import settings_update

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M")
EVALUATOR = "evaluate_retrieval"
LEXICAL = "lexical"
LAYOUTS = ("dataset", "today")
MODES = ("router", "legacy")
KS = (1, 5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}


@dataclass(frozen=True)
class Question:
    text: str
    evidence: frozenset[str]
    category: object


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    sessions: list[SessionInput]
    questions: list[Question]
    refs: list[str]


def _parse_when(raw: object, where: str) -> datetime:
    text = str(raw or "").strip()
    for fmt in _DATE_FORMATS:
        try:
            return datetime.strptime(text, fmt).replace(tzinfo=UTC)
        except ValueError:
            continue
    raise CommandError(f"{where}: cannot read the date {text!r} (expected e.g. '1:56 pm on 8 May, 2023')")


def _evidence(raw: object) -> frozenset[str]:
    # LoCoMo sometimes packs several ids in one string ("D8:6; D9:17").
    items = raw if isinstance(raw, list) else [raw]
    return frozenset(part for item in items for part in re.split(r"[;,\s]+", str(item or "")) if part)


def load_conversations(path: Path, *, categories: frozenset[int] = frozenset({1, 2, 3, 4})) -> list[Conversation]:
    """Parse a LoCoMo-layout file; errors name the sample and field.

    Questions keep their file order; only those of ``categories`` with evidence among the turns count
    (LoCoMo's category 5 is adversarial: its questions have no answer in the conversation).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CommandError(f"{path}: {exc}") from None
    samples = data if isinstance(data, list) else [data]
    conversations = []
    for n, sample in enumerate(samples):
        if not isinstance(sample, dict) or not isinstance(sample.get("conversation"), dict):
            raise CommandError(f"sample {n}: expected an object with a 'conversation' object")
        sample_id = str(sample.get("sample_id") or f"sample-{n}")
        conv = sample["conversation"]
        numbers = sorted(int(m.group(1)) for key in conv if (m := _SESSION_KEY.match(key)))
        sessions: list[SessionInput] = []
        refs: list[str] = []
        for number in numbers:
            turns_raw = conv[f"session_{number}"]
            if not isinstance(turns_raw, list):
                raise CommandError(f"{sample_id}.session_{number}: expected a list of turns")
            started = _parse_when(conv.get(f"session_{number}_date_time"), f"{sample_id}.session_{number}_date_time")
            turns = []
            for turn in turns_raw:
                text = str(turn.get("text") or "").strip()
                if turn.get("blip_caption"):
                    text = f"{text} [image: {turn['blip_caption']}]".strip()
                if not text:
                    continue
                ref = str(turn.get("dia_id") or "")
                turns.append(TurnInput(speaker=str(turn.get("speaker") or "unknown"), text=text, ref=ref))
                refs.append(ref)
            if turns:
                sessions.append(SessionInput(started_at=started, turns=tuple(turns), session_id=f"session_{number}"))
        known = set(refs)
        questions = [
            Question(str(qa.get("question") or ""), ev, qa.get("category"))
            for qa in sample.get("qa") or []
            if qa.get("category") in categories
            and (ev := _evidence(qa.get("evidence")) & known)
            and str(qa.get("question") or "").strip()
        ]
        conversations.append(Conversation(sample_id, sessions, questions, refs))
    return conversations


def shifted_to_now(sessions: Sequence[SessionInput], now: datetime) -> list[SessionInput]:
    """The sessions moved in time so that the last one began an hour before ``now``."""
    if not sessions:
        return []
    shift = now - timedelta(hours=1) - max(s.started_at for s in sessions)
    return [replace(s, started_at=s.started_at + shift) for s in sessions]


def recall_at(ranked_refs: Sequence[str | None], evidence: frozenset[str], k: int) -> float:
    """Share of the evidence found among the first ``k`` results."""
    return len(evidence & {r for r in ranked_refs[:k] if r}) / len(evidence)


@dataclass
class Tally:
    """Recall per question of one method: R@k for each k, and R@10 by category."""

    recall: dict[int, list[float]]
    by_category: dict[str, list[float]]

    @classmethod
    def empty(cls) -> Tally:
        return cls({k: [] for k in KS}, {})

    def add(self, ranked: Sequence[str | None], question: Question) -> None:
        for k in KS:
            self.recall[k].append(recall_at(ranked, question.evidence, k))
        name = CATEGORIES.get(question.category, str(question.category))  # type: ignore[call-overload]
        self.by_category.setdefault(name, []).append(recall_at(ranked, question.evidence, KS[-1]))

    @staticmethod
    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0


class Command(BaseCommand):
    help = "Recall@1/5/10 of get_working_context on a LoCoMo-layout file, usage on, beside the lexical ranking."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--modes", default=",".join(MODES), help="comma-separated: router, legacy")
        parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated: dataset, today")
        parser.add_argument("--surfacing", default="", help="surfacing settings (JSON object) stored on each workspace")
        parser.add_argument("--no-usage", action="store_true", help="dry reads: questions do not boost anything")
        parser.add_argument("--conversations", type=int, default=0, help="only the first N conversations")
        parser.add_argument("--keep", action="store_true", help="keep the evaluation workspaces")

    def handle(self, *args: Any, **options: Any) -> None:
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database is not migrated: run `python manage.py migrate` (or `make run`) first")
        path: Path = options["file"]
        modes = _choices(options["modes"], MODES, "--modes")
        layouts = _choices(options["layouts"], LAYOUTS, "--layouts")
        try:
            stored = json.loads(options["surfacing"]) if options["surfacing"] else None
        except ValueError as exc:
            raise CommandError(f"--surfacing: not JSON: {exc}") from None
        usage = not options["no_usage"]
        conversations = load_conversations(path)
        if options["conversations"] > 0:
            conversations = conversations[: options["conversations"]]
        if not conversations:
            raise CommandError(f"{path}: no conversations")
        user = get_user_model().objects.filter(username=EVALUATOR).first() or get_user_model().objects.create_user(
            EVALUATOR
        )
        n_questions = sum(len(c.questions) for c in conversations)
        self.stdout.write(
            f"{path.name}: {len(conversations)} conversations, {sum(len(c.sessions) for c in conversations)} "
            f"sessions, {sum(len(c.refs) for c in conversations)} turns, {n_questions} questions with evidence; "
            f"usage {'on' if usage else 'off'}; settings {json.dumps(stored) if stored else 'defaults'}; "
            f"embedder {default_embedder().name}"
        )
        workspaces: list[Workspace] = []
        try:
            for layout in layouts:
                started = time.perf_counter()
                tallies = {name: Tally.empty() for name in [LEXICAL, *modes]}
                for conv in conversations:
                    workspace = self._ingest(conv, layout, user, stored)
                    workspaces.append(workspace)
                    self._ask(workspace, conv, modes, usage, tallies)
                self._report(layout, tallies, time.perf_counter() - started)
        finally:
            if not options["keep"]:
                for workspace in workspaces:
                    workspace.delete()

    def _ingest(self, conv: Conversation, layout: str, user: Any, stored: Any) -> Workspace:
        workspace = memory_services.workspace_create(
            owner=user, slug=f"eval-{uuid.uuid4().hex[:12]}", name=f"evaluate_retrieval {conv.sample_id} {layout}"
        )
        try:
            if stored is not None:
                settings_update(workspace=workspace, actor=user, surfacing=stored)
            sessions = shifted_to_now(conv.sessions, timezone.now()) if layout == "today" else conv.sessions
            memory_services.conversation_ingest(workspace=workspace, actor=user, sessions=sessions, channel="import")
            embedded = embedding_service.embed_pending(workspace=workspace)
            if embedded.embedded:
                self.stderr.write(
                    f"{conv.sample_id} {layout}: {embedded.embedded} memories embedded with {embedded.model} "
                    f"in {embedded.seconds:.1f} s"
                )
        except DomainError as exc:
            workspace.delete()
            raise CommandError(f"{conv.sample_id}: {exc.detail}") from None
        return workspace

    def _ask(
        self, workspace: Workspace, conv: Conversation, modes: Sequence[str], usage: bool, tallies: dict[str, Tally]
    ) -> None:
        refs = _refs_of(workspace)
        bus = signal_bus()
        for question in conv.questions:
            hits = lexical_search(workspace=workspace, query=question.text, limit=KS[-1] * 3)
            tallies[LEXICAL].add([r for mid, _ in hits if (r := refs.get(mid))], question)
            for mode in modes:
                try:
                    context = get_working_context(
                        workspace, f"eval-{conv.sample_id}", question.text, k=KS[-1], mode=mode, record=usage
                    )
                except DomainError as exc:
                    raise CommandError(f"{conv.sample_id}: {question.text!r}: {exc.detail}") from None
                tallies[mode].add([refs.get(item.id) for item in context.items], question)
                if usage:
                    bus.flush()

    def _report(self, layout: str, tallies: dict[str, Tally], seconds: float) -> None:
        categories = sorted({c for t in tallies.values() for c in t.by_category})
        self.stdout.write(f"\n{layout} dates ({seconds:.0f} s)")
        header = f"{'method':<10}" + "".join(f"{f'R@{k}':>7}" for k in KS) + "".join(f"{c:>13}" for c in categories)
        self.stdout.write(header)
        for name, tally in tallies.items():
            row = f"{name:<10}" + "".join(f"{Tally.mean(tally.recall[k]):7.3f}" for k in KS)
            row += "".join(f"{Tally.mean(tally.by_category.get(c, [])):13.3f}" for c in categories)
            self.stdout.write(row)


def _choices(raw: str, allowed: Sequence[str], option: str) -> list[str]:
    picked = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [p for p in picked if p not in allowed]
    if unknown or not picked:
        raise CommandError(f"{option}: expected a comma-separated subset of {', '.join(allowed)}, got {raw!r}")
    return picked


def _refs_of(workspace: Workspace) -> dict[uuid.UUID, str]:
    """Memory id -> the turn's ``ref`` (its dia_id) for every turn of the workspace."""
    return {
        mid: ref
        for mid, ref in workspace.memories.filter(metadata__has_key="ref").values_list("id", "metadata__ref")
        if isinstance(ref, str)
    }
