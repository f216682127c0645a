"""The memory-evolution engine: sensor -> world model -> evo_devo -> covenant.

* **sensor**: task outcomes (``Outcome``), each a success or a failure of one approach to one task type.
* **world model**: success counts and rates per (task_type, approach) and per task_type (``world_model``).
* **evo_devo**: when the same lesson (compared by ``lesson_key``) is seen 3 or more times within 7 days, a
  strategy is proposed with weight 0.5 (``propose_strategies``); never twice for the same lesson.
* **covenant**: vetoes proposals that touch secrets, loop back on the engine, or carry a weight below 0.3
  (``covenant_check``).

Decisions feed back as sensor entries (``record_decision``); a rejection also lowers the weight of similar
strategies (``adjust_weights_after_rejection``). ``precedence`` settles conflicts between rules.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import IntEnum
from typing import Final, Literal

import numpy as np

Result = Literal["success", "fail"]
Decision = Literal["approve", "reject"]
RuleOrigin = Literal["correction", "manual", "engine"]
RuleScope = Literal["project", "domain", "global"]

INITIAL_STRATEGY_WEIGHT: Final = 0.5
COVENANT_MIN_WEIGHT: Final = 0.3
LESSON_REPEATS: Final = 3
LESSON_WINDOW_DAYS: Final = 7
SIMILARITY_THRESHOLD: Final = 0.5
REJECTION_FACTOR: Final = 0.7
# Decisions on proposals are sensor entries under this task type; they carry no lesson, so the engine's own
# verdicts can never become the repeated lesson that proposes the next strategy.
REVIEW_TASK_TYPE: Final = "engine_strategy_review"
# Evidence coming only from the engine's own output is a loop, not an observation.
ENGINE_REF_PREFIXES: Final = ("engine:", "strategy:", "proposal:")


def _aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")


@dataclass(frozen=True, slots=True)
class Outcome:
    """One sensor reading: ``approach`` to ``task_type`` ended in ``result`` at ``at`` (timezone-aware).

    ``lesson`` is what to do differently next time ("" when none), ``issue`` what went wrong and ``solution``
    what fixed it. ``ref`` names the stored record (e.g. ``sensor:S-0001``) for evidence lists.
    """

    task_type: str
    approach: str
    result: Result
    lesson: str
    issue: str
    solution: str
    at: datetime
    ref: str = ""

    def __post_init__(self) -> None:
        if not self.task_type.strip() or not self.approach.strip():
            raise ValueError("task_type and approach must not be empty")
        if self.result not in ("success", "fail"):
            raise ValueError(f"result must be 'success' or 'fail', got {self.result!r}")
        _aware("at", self.at)


@dataclass(frozen=True, slots=True)
class Lesson:
    """A lesson seen at ``at``: from an outcome or a reflection's LESSON line. ``ref`` identifies the source;
    ``task_type`` is the context it was learnt in (a reflection's CONTEXT), ``None`` when unknown."""

    text: str
    at: datetime
    ref: str
    task_type: str | None = None

    def __post_init__(self) -> None:
        _aware("at", self.at)
        if not self.ref:
            raise ValueError("ref must not be empty")


@dataclass(frozen=True, slots=True)
class Stats:
    """Success and failure counts; ``rate`` = successes / (successes + failures), in [0, 1]."""

    successes: int
    failures: int
    rate: float

    @property
    def total(self) -> int:
        return self.successes + self.failures


@dataclass(frozen=True, slots=True)
class WorldModel:
    by_approach: Mapping[tuple[str, str], Stats]
    by_task_type: Mapping[str, Stats]


@dataclass(frozen=True, slots=True)
class StrategyProposal:
    """A strategy the engine suggests. ``task_type`` is its trigger (the context it applies in, ``None`` for
    everywhere); ``rule_text`` is what to do; ``evidence`` lists the refs of the lessons that led to it."""

    key: str
    title: str
    rule_text: str
    weight: float = INITIAL_STRATEGY_WEIGHT
    evidence: tuple[str, ...] = ()
    task_type: str | None = None

    def __post_init__(self) -> None:
        if not self.key:
            raise ValueError("key must not be empty")
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"weight must be in [0, 1], got {self.weight!r}")


@dataclass(frozen=True, slots=True)
class Verdict:
    """Covenant result: ``allowed`` is True exactly when ``reasons`` (one sentence per veto) is empty."""

    allowed: bool
    reasons: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RuleClaim:
    """A rule taking part in a conflict: who set it (``origin``), how specific it is (``scope``) and when."""

    key: str
    origin: RuleOrigin
    scope: RuleScope
    at: datetime

    def __post_init__(self) -> None:
        if self.origin not in ("correction", "manual", "engine"):
            raise ValueError(f"origin must be correction, manual or engine, got {self.origin!r}")
        if self.scope not in ("project", "domain", "global"):
            raise ValueError(f"scope must be project, domain or global, got {self.scope!r}")
        _aware("at", self.at)


# --------------------------------------------------------------------------------------------- world model


def _stats(successes: int, failures: int) -> Stats:
    return Stats(successes=successes, failures=failures, rate=successes / (successes + failures))


def world_model(outcomes: Iterable[Outcome]) -> WorldModel:
    """Count successes and failures per (task_type, approach) and per task_type; keys come out sorted."""
    wins: Counter[tuple[str, str]] = Counter()
    losses: Counter[tuple[str, str]] = Counter()
    for o in outcomes:
        (wins if o.result == "success" else losses)[(o.task_type, o.approach)] += 1
    pairs = sorted(wins.keys() | losses.keys())
    by_approach = {p: _stats(wins[p], losses[p]) for p in pairs}
    task_wins: Counter[str] = Counter()
    task_losses: Counter[str] = Counter()
    for (task, _), s in by_approach.items():
        task_wins[task] += s.successes
        task_losses[task] += s.failures
    by_task = {t: _stats(task_wins[t], task_losses[t]) for t in sorted(task_wins.keys() | task_losses.keys())}
    return WorldModel(by_approach=by_approach, by_task_type=by_task)


def best_approach(model: WorldModel, task_type: str) -> str | None:
    """The approach with the highest success rate for ``task_type`` (ties: more trials, then name order)."""
    candidates = [(a, s) for (t, a), s in model.by_approach.items() if t == task_type]
    if not candidates:
        return None
    return min(candidates, key=lambda c: (-c[1].rate, -c[1].total, c[0]))[0]


# ---------------------------------------------------------------------------------------------- evo_devo

_NON_WORD = re.compile(r"[\W_]+")


def lesson_key(text: str) -> str:
    """Normalise a lesson for comparison: NFKC, case-folded, punctuation and underscores to spaces, spaces
    collapsed. "Always check asarUnpack!" and "always  check ASARUNPACK" give the same key."""
    return _NON_WORD.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()


def strategy_key(lesson_text: str) -> str:
    """Stable key of the strategy a lesson proposes: ``strategy:`` + 16 hex digits of SHA-256 of its key."""
    return "strategy:" + hashlib.sha256(lesson_key(lesson_text).encode("utf-8")).hexdigest()[:16]


def lessons_from_outcomes(outcomes: Iterable[Outcome]) -> list[Lesson]:
    """The non-empty lessons of ``outcomes``; without a ``ref`` one is ``outcome:<task>/<approach>@<at>``."""
    return [
        Lesson(
            text=o.lesson,
            at=o.at,
            ref=o.ref or f"outcome:{o.task_type}/{o.approach}@{o.at.isoformat()}",
            task_type=o.task_type,
        )
        for o in outcomes
        if lesson_key(o.lesson)
    ]


def _one_line(text: str) -> str:
    return " ".join(text.split())


def propose_strategies(
    outcomes: Iterable[Outcome],
    reflections_lessons: Iterable[Lesson],
    now: datetime,
    *,
    existing_keys: Collection[str],
    repeats: int = LESSON_REPEATS,
    window_days: float = LESSON_WINDOW_DAYS,
) -> list[StrategyProposal]:
    """Propose one strategy per lesson seen at least ``repeats`` times within ``window_days`` days.

    Lessons from outcomes and reflections are grouped by ``lesson_key``; sightings after ``now`` are ignored
    and a source ref counted once. The window slides over the whole history up to ``now`` (inclusive at both
    ends: sightings exactly 7 days apart qualify) so a missed heartbeat does not lose a pattern; the newest
    qualifying window supplies the evidence. A lesson whose ``strategy_key`` is in ``existing_keys`` (any
    proposal or strategy already made from it, whatever its status) is skipped, which makes the call
    idempotent. The rule text is the newest wording; the task type the most frequent one in the evidence
    (ties: the newest). Output is sorted by key.
    """
    _aware("now", now)
    if repeats < 1 or window_days < 0:
        raise ValueError("repeats must be >= 1 and window_days >= 0")
    groups: dict[str, dict[str, Lesson]] = {}
    for lesson in [*lessons_from_outcomes(outcomes), *reflections_lessons]:
        k = lesson_key(lesson.text)
        if k and lesson.at <= now:
            groups.setdefault(k, {}).setdefault(lesson.ref, lesson)
    proposals: list[StrategyProposal] = []
    window = timedelta(days=window_days).total_seconds()
    for sightings in groups.values():
        if len(sightings) < repeats:
            continue
        ordered = sorted(sightings.values(), key=lambda s: (s.at, s.ref))
        key = strategy_key(ordered[-1].text)
        if key in existing_keys:
            continue
        t = np.asarray([(s.at - ordered[0].at).total_seconds() for s in ordered], dtype=np.float64)
        first = np.searchsorted(t, t - window, side="left")
        qualifying = np.flatnonzero(np.arange(len(t)) - first + 1 >= repeats)
        if qualifying.size == 0:
            continue
        end = int(qualifying[-1])
        evidence = ordered[int(first[end]) : end + 1]
        proposals.append(_proposal(key, evidence, window_days))
    return sorted(proposals, key=lambda p: p.key)


def _proposal(key: str, evidence: Sequence[Lesson], window_days: float) -> StrategyProposal:
    newest = evidence[-1]
    rule = _one_line(newest.text)
    words = rule.split()
    short = " ".join(words[:8]) + (" ..." if len(words) > 8 else "")
    task_counts = Counter(s.task_type for s in evidence if s.task_type)
    task_type: str | None = None
    if task_counts:
        top = max(task_counts.values())
        task_type = next(s.task_type for s in reversed(evidence) if s.task_type and task_counts[s.task_type] == top)
    return StrategyProposal(
        key=key,
        title=f"Seen {len(evidence)}x in {window_days:g} days: {short}",
        rule_text=rule,
        weight=INITIAL_STRATEGY_WEIGHT,
        evidence=tuple(s.ref for s in evidence),
        task_type=_one_line(task_type) if task_type else None,
    )


# ---------------------------------------------------------------------------------------------- covenant

SECRET_TERMS: Final = ("password", "token", "secret", "api_key", "api key", "credential", "private_key")
_SECRET_RE = re.compile(
    r"\b(?:passwords?|tokens?|secrets?|credentials?|api[ _-]?keys?|private[ _-]?keys?)\b", re.IGNORECASE
)
_MODIFY_VERBS = (
    r"modif\w*|chang\w*|edit\w*|rewrit\w*|updat\w*|disabl\w*|delet\w*|remov\w*|bypass\w*|overrid\w*|"
    r"skip\w*|ignor\w*|turn\w*\s+off|rais\w*|lower\w*|increas\w*|decreas\w*|reset\w*|tweak\w*|tun\w*"
)
_ENGINE_TARGETS = (
    r"(?:evolution|memory|learning|self[- ]learning)[- ]engine|engine\s+(?:rules?|weights?|thresholds?)|"
    r"engine/\S*|covenant|evo[_ -]?devo|world[_ -]model|sensor\.json|decay[_ -]scores?|skill\.md|"
    r"(?:its|your|my|their)\s+own\s+(?:rules?|strateg(?:y|ies)|weights?)|(?:its|these|this)\s+(?:rules?|strateg(?:y|ies))|"
    r"(?:rule|strategy)\s+weights?"
)
_SELF_MODIFY_RE = re.compile(rf"\b(?:{_MODIFY_VERBS})\b(?:\W+\w+){{0,5}}?\W+(?:{_ENGINE_TARGETS})", re.IGNORECASE)
_SELF_APPROVE_RE = re.compile(
    r"\b(?:auto[- ]?approv\w*|approv\w*|accept\w*)\b(?:\W+\w+){0,3}?\W+(?:proposals?|strateg(?:y|ies))\b",
    re.IGNORECASE,
)


def covenant_check(proposal: StrategyProposal, *, known_rule_keys: Collection[str]) -> Verdict:
    """Veto a proposal that is unsafe to turn into a rule; every reason that applies is listed.

    * **secrets**: the title, rule or trigger names password, token, secret, api_key / "api key",
      credential or private_key (whole words, any case, plurals too; "tokenizer" is fine).
    * **self-loops**: the rule changes the engine, the covenant or its own rules, or approves proposals;
      the rule only restates its trigger (``lesson_key(rule_text) == lesson_key(task_type)``); the rule or
      title mentions its own key or another known rule's key; the key already is a known rule (re-learning
      the engine's own output); every piece of evidence is engine output (``ENGINE_REF_PREFIXES``).
    * **weight** below 0.3, and an empty rule.
    """
    vetoes: list[str] = []
    text = " ".join(part for part in (proposal.title, proposal.rule_text, proposal.task_type or "") if part)
    found = sorted({m.group(0).casefold() for m in _SECRET_RE.finditer(text)})
    if found:
        vetoes.append(f"Touches secrets ({', '.join(found)}): the engine never learns rules about credentials.")
    if _SELF_MODIFY_RE.search(text):
        vetoes.append("Self-loop: the rule would change the engine, the covenant or its own rules.")
    if _SELF_APPROVE_RE.search(text):
        vetoes.append("Self-loop: the rule would approve engine proposals without a human decision.")
    rule = lesson_key(proposal.rule_text)
    if not rule:
        vetoes.append("Empty rule: there is nothing to apply.")
    elif proposal.task_type and rule == lesson_key(proposal.task_type):
        vetoes.append("Self-loop: the rule text only restates its trigger, so applying it would trigger it again.")
    lowered = f"{proposal.title}\n{proposal.rule_text}".casefold()
    if proposal.key.casefold() in lowered:
        vetoes.append(f"Self-loop: the rule refers to itself ({proposal.key}).")
    mentioned = sorted(k for k in known_rule_keys if k and k != proposal.key and k.casefold() in lowered)
    if mentioned:
        vetoes.append(f"Self-loop: the rule refers to other rules ({', '.join(mentioned)}); rules about rules loop.")
    if proposal.key in known_rule_keys:
        vetoes.append(f"Self-loop: {proposal.key} already is a rule; proposing it again feeds the engine its output.")
    if proposal.evidence and all(ref.startswith(ENGINE_REF_PREFIXES) for ref in proposal.evidence):
        vetoes.append("Self-loop: all evidence is the engine's own output, not an observation.")
    if not proposal.weight >= COVENANT_MIN_WEIGHT:
        vetoes.append(f"Weight {proposal.weight:.2f} is below the covenant minimum {COVENANT_MIN_WEIGHT:.2f}.")
    return Verdict(allowed=not vetoes, reasons=tuple(vetoes))


# --------------------------------------------------------------------------------------- decisions, weights


def word_set(text: str) -> frozenset[str]:
    """The words of ``lesson_key(text)``."""
    return frozenset(lesson_key(text).split())


def jaccard(a: str, b: str) -> float:
    """|A & B| / |A | B| over the word sets of two texts; 0.0 when both are empty."""
    wa, wb = word_set(a), word_set(b)
    union = len(wa | wb)
    return len(wa & wb) / union if union else 0.0


def adjust_weights_after_rejection(
    strategies: Sequence[tuple[str, str, float]], rejected_text: str, factor: float = REJECTION_FACTOR
) -> dict[str, float]:
    """New weight of every strategy after a human rejected ``rejected_text``.

    Each ``(key, text, weight)`` whose text has word-set Jaccard similarity >= 0.5 with the rejected text
    gets ``weight * factor`` (default 0.7); the rest keep their weight. With the initial weight 0.5, two
    rejections of similar wording (0.5 -> 0.35 -> 0.245) bring a strategy under the covenant minimum 0.3,
    so it is culled; a single rejection only warns. The rejected strategy itself matches (similarity 1).
    """
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"factor must be in (0, 1], got {factor!r}")
    keys = [k for k, _, _ in strategies]
    if len(set(keys)) != len(keys):
        raise ValueError("strategy keys must be unique")
    return {
        key: weight * factor if jaccard(text, rejected_text) >= SIMILARITY_THRESHOLD else weight
        for key, text, weight in strategies
    }


def record_decision(
    proposal: StrategyProposal, decision: Decision, now: datetime, *, reason: str = "", ref: str = ""
) -> Outcome:
    """The sensor entry for a human decision on ``proposal``: approve -> success, reject -> fail.

    Task type ``engine_strategy_review``, approach = the proposal key, solution = the rule text, issue = the
    reason given. The lesson stays empty on purpose (see ``REVIEW_TASK_TYPE``).
    """
    if decision not in ("approve", "reject"):
        raise ValueError(f"decision must be 'approve' or 'reject', got {decision!r}")
    return Outcome(
        task_type=REVIEW_TASK_TYPE,
        approach=proposal.key,
        result="success" if decision == "approve" else "fail",
        lesson="",
        issue=reason,
        solution=proposal.rule_text,
        at=now,
        ref=ref,
    )


# -------------------------------------------------------------------------------------------- precedence


class _OriginRank(IntEnum):
    ENGINE = 0
    MANUAL = 1
    CORRECTION = 2


class _ScopeRank(IntEnum):
    GLOBAL = 0
    DOMAIN = 1
    PROJECT = 2


def precedence(a: RuleClaim, b: RuleClaim) -> RuleClaim | None:
    """Which of two conflicting rules applies, or ``None`` when that is ambiguous (ask the user).

    Order: user correction > manual rule > engine proposal; then project > domain > global; then the newer
    one. Two claims equal on all three (same origin, scope and instant) are ambiguous. A claim compared with
    itself (same key) wins.
    """
    if a.key == b.key:
        return a
    rank_a = (_OriginRank[a.origin.upper()], _ScopeRank[a.scope.upper()], a.at)
    rank_b = (_OriginRank[b.origin.upper()], _ScopeRank[b.scope.upper()], b.at)
    if rank_a == rank_b:
        return None
    return a if rank_a > rank_b else b
