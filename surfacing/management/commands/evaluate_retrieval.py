"""Evidence recall of surfacing on conversations in the LoCoMo JSON layout.

    python manage.py evaluate_retrieval FILE.json [--k 10] [--recency-hours 8760] [--keep]

Each sample (``{"sample_id", "conversation": {"session_N": [{speaker, dia_id, text}], "session_N_date_time",
...}, "qa": [{question, evidence: [dia_id], category}]}``) is ingested through
``memories.services.conversation_ingest`` (turn ``ref`` = ``dia_id``) into a fresh workspace, then every
question with evidence is asked as a dry read (``record=False``, so questions do not boost each other) at
the time the conversation ended (one hour after its last session). A question's recall@k is the share of
its evidence turns among the first k memories returned; the table prints the mean over questions for:

- ``bm25``: rank-bm25's Okapi BM25 over the turn texts alone (lower-cased words), the plain baseline;
- ``legacy`` and ``router`` with the seed defaults (24 h recency time constant);
- ``legacy`` and ``router`` with ``--recency-hours`` as the time constant: the seed's 24 h buries turns
  older than a few days, which is most of a multi-week conversation;
- ``router`` tuned the same way without the freshness additive: freshness lifts every candidate of the
  last day by up to 0.2 whatever its relevance (the last session, and entity memories, which are
  created at ingestion time), which this row isolates.

The workspaces are deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memories import services as memory_services
from memories.errors import DomainError
from memories.inputs import SessionInput, TurnInput
from memories.models import Workspace
from surfacing.services import get_working_context

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_WORD = re.compile(r"\w+")
_DATE_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M")
EVALUATOR = "evaluate_retrieval"


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
    texts: list[str]


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


def load_conversations(path: Path) -> list[Conversation]:
    """Parse a LoCoMo-layout file; errors name the sample and field."""
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
        texts: list[str] = []
        for number in numbers:
            turns_raw = conv[f"session_{number}"]
            if not isinstance(turns_raw, list):
                raise CommandError(f"{sample_id}.session_{number}: expected a list of turns")
            started = _parse_when(conv.get(f"session_{number}_date_time"), f"{sample_id}.session_{number}_date_time")
            turns = []
            for turn in turns_raw:
                text = str(turn.get("text") or "").strip()
                if turn.get("blip_caption"):
                    text = f"{text} [shares a photo: {turn['blip_caption']}]".strip()
                if not text:
                    continue
                ref = str(turn.get("dia_id") or "")
                turns.append(TurnInput(speaker=str(turn.get("speaker") or "unknown"), text=text, ref=ref))
                refs.append(ref)
                texts.append(text)
            if turns:
                sessions.append(SessionInput(started_at=started, turns=tuple(turns), session_id=f"session_{number}"))
        known = set(refs)
        questions = [
            Question(str(qa.get("question") or ""), ev, qa.get("category"))
            for qa in sample.get("qa") or []
            if (ev := _evidence(qa.get("evidence")) & known) and str(qa.get("question") or "").strip()
        ]
        conversations.append(Conversation(sample_id, sessions, questions, refs, texts))
    return conversations


def recall_at(ranked_refs: Sequence[str | None], evidence: frozenset[str], k: int) -> float:
    """Share of the evidence found among the first ``k`` results."""
    return len(evidence & {r for r in ranked_refs[:k] if r}) / len(evidence)


def _tokens(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


class Command(BaseCommand):
    help = "Evidence recall@1/5/10 of legacy mode, router mode and plain BM25 on a LoCoMo-layout file."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", type=Path)
        parser.add_argument("--k", type=int, default=10, help="context size asked for (>= 10)")
        parser.add_argument(
            "--recency-hours",
            type=float,
            default=24.0 * 365,
            help="recency time constant of the tuned rows (default one year)",
        )
        parser.add_argument("--keep", action="store_true", help="keep the evaluation workspaces")

    def handle(self, *args: Any, **options: Any) -> None:
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError("the database is not migrated: run `python manage.py migrate` (or `make run`) first")
        path: Path = options["file"]
        k = max(10, int(options["k"]))
        tuned = {"recency_time_constant_hours": float(options["recency_hours"])}
        conversations = load_conversations(path)
        if not conversations:
            raise CommandError(f"{path}: no conversations")
        user = get_user_model().objects.filter(username=EVALUATOR).first() or get_user_model().objects.create_user(
            EVALUATOR
        )
        bm25_name = "bm25 (rank-bm25, turns only)"
        methods = {
            "legacy, seed defaults": self._surfacing("legacy", None, k),
            "router, seed defaults": self._surfacing("router", None, k),
            f"legacy, recency {tuned['recency_time_constant_hours']:g} h": self._surfacing("legacy", tuned, k),
            f"router, recency {tuned['recency_time_constant_hours']:g} h": self._surfacing("router", tuned, k),
            f"router, recency {tuned['recency_time_constant_hours']:g} h, no freshness": self._surfacing(
                "router", {**tuned, "freshness_max": 0.0}, k
            ),
        }
        totals: dict[str, list[list[float]]] = {name: [] for name in [bm25_name, *methods]}
        n_turns = n_sessions = 0
        workspaces: list[Workspace] = []
        try:
            for conv in conversations:
                if not conv.questions:
                    continue
                workspace = memory_services.workspace_create(
                    owner=user, slug=f"eval-{uuid.uuid4().hex[:12]}", name=f"evaluate_retrieval {conv.sample_id}"
                )
                workspaces.append(workspace)
                turn_ids = memory_services.conversation_ingest(
                    workspace=workspace, actor=user, sessions=conv.sessions, channel="import"
                )
                refs = dict(zip(turn_ids, conv.refs, strict=True))
                n_turns += len(turn_ids)
                n_sessions += len(conv.sessions)
                now = max(s.started_at for s in conv.sessions) + timedelta(hours=1)
                bm25 = _bm25_ranker(conv)
                for question in conv.questions:
                    rankings = {bm25_name: bm25(question.text)}
                    for name, method in methods.items():
                        rankings[name] = method(workspace, conv, refs, question, now)
                    for name, ranked in rankings.items():
                        totals[name].append([recall_at(ranked, question.evidence, n) for n in (1, 5, 10)])
        finally:
            if not options["keep"]:
                for workspace in workspaces:
                    workspace.delete()
        n_questions = len(next(iter(totals.values())))
        self.stdout.write(
            f"{path.name}: {len(conversations)} conversations, {n_sessions} sessions, {n_turns} turns, "
            f"{n_questions} questions with evidence"
        )
        self.stdout.write(f"{'method':<46} {'R@1':>6} {'R@5':>6} {'R@10':>6}")
        for name, rows in totals.items():
            means = [sum(r[i] for r in rows) / len(rows) if rows else 0.0 for i in range(3)]
            self.stdout.write(f"{name:<46} {means[0]:6.3f} {means[1]:6.3f} {means[2]:6.3f}")

    @staticmethod
    def _surfacing(
        mode: str, override: dict[str, Any] | None, k: int
    ) -> Callable[[Workspace, Conversation, dict[uuid.UUID, str], Question, datetime], list[str | None]]:
        def run(
            workspace: Workspace, conv: Conversation, refs: dict[uuid.UUID, str], question: Question, now: datetime
        ) -> list[str | None]:
            try:
                context = get_working_context(
                    workspace,
                    f"eval-{conv.sample_id}",
                    question.text,
                    k=k,
                    mode=mode,
                    settings_override=override,
                    record=False,
                    now=now,
                )
            except DomainError as exc:
                raise CommandError(f"{conv.sample_id}: {question.text!r}: {exc.detail}") from None
            return [refs.get(item.id) for item in context.items]

        return run


def _bm25_ranker(conv: Conversation) -> Callable[[str], list[str | None]]:
    from rank_bm25 import BM25Okapi

    corpus = [_tokens(text) for text in conv.texts]
    index = BM25Okapi(corpus)

    def rank(question: str) -> list[str | None]:
        scores = index.get_scores(_tokens(question))
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [conv.refs[i] for i in order[:10]]

    return rank
