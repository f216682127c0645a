"""Parse and render the memory-evolution directory (rules, corrections and engine state as plain text files)
for import and export.

Paths are relative, ``/``-separated, UTF-8. ``render_directory`` always writes the fixed files and one file
per warm/cold topic that has rules; ``parse_directory`` accepts any subset (a missing file is empty).

Markdown files. Blank lines are ignored, leading and trailing spaces of a line too, and the first non-blank
line may be a ``# title`` (ignored; render writes a fixed one). ``###`` and deeper headings, text outside an
entry, unknown and repeated fields are problems. Every value is one line.

* ``hot/memory.md`` (HOT rules), ``warm/projects/<topic>.md``, ``warm/domains/<topic>.md`` and
  ``cold/archive/<topic>.md`` (the file name is the project, domain or archive topic: letters, digits,
  ``_ . -``): one rule per ``- `` bullet, optionally under ``## section`` headings (bullets before the first
  heading have no section). A bullet may end in a metadata comment, rendered only with the fields set::

      - Check asarUnpack for renderer files <!-- id: R-7; added: 2026-01-02; origin: engine; source: P-003 -->

  ``id`` and ``source`` are tokens (letters, digits, ``_ . : / @ # + -``), ``added`` a date, ``origin``
  ``manual`` (the default, never written) or ``engine``, ``kind`` ``rule`` (the default, never written) or
  ``preference`` (a confirmed preference of the user: hot memory holds both). Rule text may not contain
  ``<!--``.
* ``hot/corrections.md``, in the order written::

      ## 2026-01-02 — topic
      **What I did wrong**: ...
      **What I should do**: ...
      **Context**: ...

  (``–`` or ``-`` also separate date and topic on input; ``**Label:**`` is read like ``**Label**:``.)
* ``reflections/log.md``, newest first (entries of one day keep their order)::

      ## 2026-01-02 — topic        (or just ## 2026-01-02)
      CONTEXT: ...
      REFLECTION: ...
      LESSON: ...

* ``proposals/pending.md``, every proposal whatever its status (so a decided key is never proposed again),
  sorted by number; required fields Status (pending, approved, rejected, modified, or vetoed: refused by the
  covenant, the reasons in Reason), Weight, Rule, Created;
  optional Key, Task type, Evidence (refs separated by ``, ``), Decided (not when pending), Reason::

      ## [P-001] title
      **Status**: pending
      **Key**: strategy:0123456789abcdef
      **Task type**: Electron packaging
      **Weight**: 0.5
      **Rule**: Always check asarUnpack for renderer files
      **Evidence**: sensor:S-1, reflection:2026-01-02#1
      **Created**: 2026-01-02

JSON files are written with ``json.dumps(indent=2, sort_keys=True, ensure_ascii=False) + "\\n"``. Datetimes
are ISO 8601 strings with an offset; unknown keys and wrong types are problems, reported with the JSON path
and the line the value starts on.

* ``engine/sensor.json``: ``{"records": [{"id", "task_type", "approach", "result": "success"|"fail",
  "at", "lesson", "issue", "solution"}]}`` in the order recorded.
* ``engine/world_model.json``: derived from the sensor records and recomputed on render; on parse only its
  shape is checked: ``{"approaches": [{"task_type", "approach", "successes", "failures", "rate"}],
  "task_types": [{"task_type", "successes", "failures", "rate", "best_approach"}]}``.
* ``engine/evo_devo.json``: ``{"strategies": [{"key", "title", "rule", "weight", "status":
  "proposed"|"approved"|"rejected"|"vetoed", "created_at", "task_type", "evidence": [...],
  "proposal_id"}]}`` by key.
* ``engine/decay-scores.json``: ``{"items": [{"key", "tier", "kind", "is_correction", "base",
  "access_count", "last_access", "recent_uses": [...], "score", "scored_at"}]}`` by key.
* ``meta.json``: ``{"format": "memory-evolution", "version": 1, "exported_at", "workspace"}``; only
  ``version`` is required on input, ``exported_at`` and ``workspace`` may be null.

``MemoryDirectory`` keeps its entries in this canonical order, so ``parse_directory(render_directory(d)) ==
d`` and rendering is byte-for-byte stable.
"""

from __future__ import annotations

import json
import math
import os
import re
from bisect import bisect_right
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import Path, PurePosixPath
from typing import Final, Literal, cast, get_args

from evolution.algorithms.engine import Lesson, Outcome, best_approach, world_model
from evolution.algorithms.tiers import HOT_WINDOW_DAYS, ItemKind, Tier, TierItem, days_between

Area = Literal["hot", "project", "domain", "archive"]
Origin = Literal["manual", "engine"]
RuleKind = Literal["rule", "preference"]
ProposalStatus = Literal["pending", "approved", "rejected", "modified", "vetoed"]
StrategyStatus = Literal["proposed", "approved", "rejected", "vetoed"]
SensorResult = Literal["success", "fail"]

FORMAT_NAME: Final = "memory-evolution"
FORMAT_VERSION: Final = 1

HOT_MEMORY: Final = "hot/memory.md"
CORRECTIONS: Final = "hot/corrections.md"
PROPOSALS: Final = "proposals/pending.md"
REFLECTIONS: Final = "reflections/log.md"
SENSOR: Final = "engine/sensor.json"
WORLD_MODEL: Final = "engine/world_model.json"
EVO_DEVO: Final = "engine/evo_devo.json"
DECAY_SCORES: Final = "engine/decay-scores.json"
META: Final = "meta.json"

_AREA_DIRS: Final[Mapping[Area, str]] = {
    "project": "warm/projects",
    "domain": "warm/domains",
    "archive": "cold/archive",
}
_AREA_TIERS: Final[Mapping[Area, Tier]] = {
    "hot": Tier.HOT,
    "project": Tier.WARM,
    "domain": Tier.WARM,
    "archive": Tier.COLD,
}
_TITLES: Final[Mapping[str, str]] = {
    HOT_MEMORY: "# Hot memory",
    CORRECTIONS: "# Corrections",
    PROPOSALS: "# Proposals",
    REFLECTIONS: "# Reflections (newest first)",
    "project": "# Project: {}",
    "domain": "# Domain: {}",
    "archive": "# Archive: {}",
}

_TOPIC_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/@#+-]*")
_PROPOSAL_ID_RE: Final = re.compile(r"P-(\d{3,})")
_DATE_RE: Final = re.compile(r"\d{4}-\d{2}-\d{2}")
_TOPIC_FILE_RE: Final = re.compile(r"(warm/projects|warm/domains|cold/archive)/([^/]+)\.md")


# ------------------------------------------------------------------------------------------------ problems


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong, where: ``line`` is 1-based, ``None`` when the problem concerns the whole file."""

    file: str
    line: int | None
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


class MemdirError(ValueError):
    """Every problem found in a directory, in file order."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


# ----------------------------------------------------------------------------------------------- validation


def _one_line(name: str, value: str) -> None:
    if not value:
        raise ValueError(f"{name} must not be empty")
    if "\n" in value or "\r" in value:
        raise ValueError(f"{name} must be a single line")
    if value != value.strip():
        raise ValueError(f"{name} must not start or end with spaces")


def _token(name: str, value: str) -> None:
    if not _TOKEN_RE.fullmatch(value):
        raise ValueError(f"{name} {value!r} must be a token of letters, digits and _ . : / @ # + -")


def _ref(value: str) -> None:
    _one_line("evidence ref", value)
    if "," in value:
        raise ValueError(f"evidence ref {value!r} must not contain a comma")


def _aware(name: str, value: datetime) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{name} must carry a timezone offset")


def _weight(value: float) -> None:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {value!r}")


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")


# ---------------------------------------------------------------------------------------------- entries


@dataclass(frozen=True, slots=True)
class Rule:
    """A rule in ``hot/memory.md`` (area ``hot``, topic ``""``) or in the warm/cold topic files."""

    area: Area
    topic: str
    text: str
    section: str = ""
    id: str | None = None
    added: date | None = None
    origin: Origin = "manual"
    source: str | None = None
    kind: RuleKind = "rule"

    def __post_init__(self) -> None:
        _choice("area", self.area, get_args(Area))
        if self.area == "hot":
            if self.topic:
                raise ValueError("a hot rule has no topic")
        elif not _TOPIC_RE.fullmatch(self.topic):
            raise ValueError(f"topic {self.topic!r} must be letters, digits and _ . - (a file name)")
        _one_line("rule text", self.text)
        if "<!--" in self.text:
            raise ValueError("rule text must not contain '<!--'")
        if self.section:
            _one_line("section", self.section)
        for name, value in (("id", self.id), ("source", self.source)):
            if value is not None:
                _token(name, value)
        _choice("origin", self.origin, get_args(Origin))
        _choice("kind", self.kind, get_args(RuleKind))

    @property
    def path(self) -> str:
        return HOT_MEMORY if self.area == "hot" else f"{_AREA_DIRS[self.area]}/{self.topic}.md"

    @property
    def tier(self) -> Tier:
        return _AREA_TIERS[self.area]


@dataclass(frozen=True, slots=True)
class Correction:
    """A user correction: what went wrong, what to do instead, and when it applies."""

    date: date
    topic: str
    wrong: str
    should: str
    context: str

    def __post_init__(self) -> None:
        _one_line("topic", self.topic)
        _one_line("What I did wrong", self.wrong)
        _one_line("What I should do", self.should)
        _one_line("Context", self.context)


@dataclass(frozen=True, slots=True)
class Reflection:
    """A reflection log entry; ``context`` is the task type, ``lesson`` what to do differently."""

    date: date
    context: str
    reflection: str
    lesson: str
    topic: str | None = None

    def __post_init__(self) -> None:
        if self.topic is not None:
            _one_line("topic", self.topic)
        _one_line("CONTEXT", self.context)
        _one_line("REFLECTION", self.reflection)
        _one_line("LESSON", self.lesson)


@dataclass(frozen=True, slots=True)
class ProposalEntry:
    """A proposal in ``proposals/pending.md``; ``id`` is ``P-`` and at least three digits."""

    id: str
    title: str
    status: ProposalStatus
    rule: str
    weight: float
    created: date
    key: str | None = None
    task_type: str | None = None
    evidence: tuple[str, ...] = ()
    decided: date | None = None
    reason: str | None = None

    def __post_init__(self) -> None:
        if not _PROPOSAL_ID_RE.fullmatch(self.id):
            raise ValueError(f"proposal id {self.id!r} must look like P-001")
        _one_line("title", self.title)
        _choice("status", self.status, get_args(ProposalStatus))
        _one_line("rule", self.rule)
        _weight(self.weight)
        if self.key is not None:
            _token("key", self.key)
        for name, value in (("task type", self.task_type), ("reason", self.reason)):
            if value is not None:
                _one_line(name, value)
        for ref in self.evidence:
            _ref(ref)
        if self.status == "pending" and self.decided is not None:
            raise ValueError("a pending proposal has no decision date")

    @property
    def number(self) -> int:
        return int(self.id[2:])


@dataclass(frozen=True, slots=True)
class SensorRecord:
    """A task outcome as stored in ``engine/sensor.json``."""

    id: str
    task_type: str
    approach: str
    result: SensorResult
    at: datetime
    lesson: str = ""
    issue: str = ""
    solution: str = ""

    def __post_init__(self) -> None:
        _one_line("id", self.id)
        _one_line("task_type", self.task_type)
        _one_line("approach", self.approach)
        _choice("result", self.result, get_args(SensorResult))
        _aware("at", self.at)

    def outcome(self) -> Outcome:
        """The engine's view of this record; its evidence ref is ``sensor:<id>``."""
        return Outcome(
            task_type=self.task_type,
            approach=self.approach,
            result=self.result,
            lesson=self.lesson,
            issue=self.issue,
            solution=self.solution,
            at=self.at,
            ref=f"sensor:{self.id}",
        )


@dataclass(frozen=True, slots=True)
class StrategyRecord:
    """A strategy generated by evo_devo, with its current weight and review status."""

    key: str
    title: str
    rule: str
    weight: float
    status: StrategyStatus
    created_at: datetime
    task_type: str | None = None
    evidence: tuple[str, ...] = ()
    proposal_id: str | None = None

    def __post_init__(self) -> None:
        _token("key", self.key)
        _one_line("title", self.title)
        _one_line("rule", self.rule)
        _weight(self.weight)
        _choice("status", self.status, get_args(StrategyStatus))
        _aware("created_at", self.created_at)
        if self.task_type is not None:
            _one_line("task_type", self.task_type)
        for ref in self.evidence:
            _ref(ref)
        if self.proposal_id is not None and not _PROPOSAL_ID_RE.fullmatch(self.proposal_id):
            raise ValueError(f"proposal_id {self.proposal_id!r} must look like P-001")


@dataclass(frozen=True, slots=True)
class DecayScore:
    """Decay bookkeeping of one item: the inputs of ``tiers.relevance`` and the last score computed.

    ``recent_uses`` are access times kept for the "used 3x in 7 days" rule; ``score`` was computed at
    ``scored_at``.
    """

    key: str
    tier: Tier
    kind: ItemKind
    base: float
    access_count: int
    last_access: datetime
    score: float
    scored_at: datetime
    is_correction: bool = False
    recent_uses: tuple[datetime, ...] = ()

    def __post_init__(self) -> None:
        _one_line("key", self.key)
        object.__setattr__(self, "tier", Tier(self.tier))
        object.__setattr__(self, "kind", ItemKind(self.kind))
        for name, value in (("base", self.base), ("score", self.score)):
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
        if self.access_count < 0:
            raise ValueError("access_count must be >= 0")
        _aware("last_access", self.last_access)
        _aware("scored_at", self.scored_at)
        for used in self.recent_uses:
            _aware("recent_uses", used)
        if self.is_correction and self.kind is ItemKind.ENGINE_STRATEGY:
            raise ValueError("an engine strategy cannot be a user correction")

    def to_tier_item(self, now: datetime) -> TierItem:
        """The item the tier rules evaluate at ``now`` (uses counted in the 7 days up to ``now``)."""
        uses = sum(1 for u in self.recent_uses if 0 <= days_between(u, now) <= HOT_WINDOW_DAYS)
        return TierItem(
            key=self.key,
            tier=self.tier,
            kind=self.kind,
            base=self.base,
            access_count=self.access_count,
            last_access=self.last_access,
            uses_in_last_7d=uses,
            is_correction=self.is_correction,
        )


@dataclass(frozen=True, slots=True)
class Meta:
    """``meta.json``: format version, when the directory was exported and from which workspace."""

    version: int = FORMAT_VERSION
    exported_at: datetime | None = None
    workspace: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.version <= FORMAT_VERSION:
            raise ValueError(f"version {self.version} is not supported (1..{FORMAT_VERSION})")
        if self.exported_at is not None:
            _aware("exported_at", self.exported_at)
        if self.workspace is not None:
            _one_line("workspace", self.workspace)


def _rule_order(rules: Sequence[Rule]) -> list[Rule]:
    """Rules by file path; in a file, unsectioned first, then sections in order of first appearance."""
    first_seen: dict[tuple[str, str], int] = {}
    for r in rules:
        first_seen.setdefault((r.path, r.section), len(first_seen))
    return sorted(rules, key=lambda r: (r.path, r.section != "", first_seen[(r.path, r.section)]))


def _duplicates(values: Iterable[str | None]) -> list[str]:
    seen: set[str] = set()
    dup: list[str] = []
    for v in values:
        if v is not None:
            if v in seen and v not in dup:
                dup.append(v)
            seen.add(v)
    return dup


@dataclass(frozen=True, slots=True)
class MemoryDirectory:
    """The whole directory as typed entries, kept in canonical order (see the module docstring):
    rules by file and section, corrections and sensor records as given, reflections newest first,
    proposals by number, strategies and decay scores by key. Ids and keys must be unique."""

    rules: tuple[Rule, ...] = ()
    corrections: tuple[Correction, ...] = ()
    reflections: tuple[Reflection, ...] = ()
    proposals: tuple[ProposalEntry, ...] = ()
    sensor: tuple[SensorRecord, ...] = ()
    strategies: tuple[StrategyRecord, ...] = ()
    decay_scores: tuple[DecayScore, ...] = ()
    meta: Meta = field(default_factory=Meta)

    def __post_init__(self) -> None:
        for name, values in (
            ("rule id", (r.id for r in self.rules)),
            ("proposal id", (p.id for p in self.proposals)),
            ("sensor record id", (s.id for s in self.sensor)),
            ("strategy key", (s.key for s in self.strategies)),
            ("decay score key", (d.key for d in self.decay_scores)),
        ):
            dup = _duplicates(values)
            if dup:
                raise ValueError(f"duplicate {name}: {', '.join(dup)}")
        setattr_ = object.__setattr__
        setattr_(self, "rules", tuple(_rule_order(self.rules)))
        setattr_(self, "corrections", tuple(self.corrections))
        setattr_(self, "reflections", tuple(sorted(self.reflections, key=lambda r: r.date, reverse=True)))
        setattr_(self, "proposals", tuple(sorted(self.proposals, key=lambda p: p.number)))
        setattr_(self, "sensor", tuple(self.sensor))
        setattr_(self, "strategies", tuple(sorted(self.strategies, key=lambda s: s.key)))
        setattr_(self, "decay_scores", tuple(sorted(self.decay_scores, key=lambda d: d.key)))


# ------------------------------------------------------------------------------------------ engine bridges


def lessons_from_reflections(reflections: Iterable[Reflection]) -> list[Lesson]:
    """Reflection lessons for ``engine.propose_strategies``: seen at midnight UTC of their date, task type
    = CONTEXT, ref ``reflection:<date>#<n>`` with n counting that day's entries from 1 in log order."""
    per_day: dict[date, int] = {}
    lessons: list[Lesson] = []
    for r in reflections:
        per_day[r.date] = per_day.get(r.date, 0) + 1
        lessons.append(
            Lesson(
                text=r.lesson,
                at=datetime.combine(r.date, time(), tzinfo=UTC),
                ref=f"reflection:{r.date.isoformat()}#{per_day[r.date]}",
                task_type=r.context,
            )
        )
    return lessons


def next_proposal_id(existing: Iterable[str]) -> str:
    """The id after the highest ``P-NNN`` in ``existing`` (``P-001`` when there is none)."""
    numbers = [int(m.group(1)) for m in map(_PROPOSAL_ID_RE.fullmatch, existing) if m]
    return f"P-{max(numbers, default=0) + 1:03d}"


# ------------------------------------------------------------------------------------------------- render


def _dumps(value: object) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _render_rule(rule: Rule) -> str:
    meta = [
        f"{name}: {value}"
        for name, value in (
            ("id", rule.id),
            ("added", rule.added.isoformat() if rule.added else None),
            ("origin", "engine" if rule.origin == "engine" else None),
            ("source", rule.source),
            ("kind", "preference" if rule.kind == "preference" else None),
        )
        if value is not None
    ]
    return f"- {rule.text}" + (f" <!-- {'; '.join(meta)} -->" if meta else "")


def _render_rules(title: str, rules: Sequence[Rule]) -> str:
    blocks = [title]
    section: str | None = None
    bullets: list[str] = []
    for rule in rules:
        if rule.section != section:
            if bullets:
                blocks.append("\n".join(bullets))
            if rule.section:
                blocks.append(f"## {rule.section}")
            section, bullets = rule.section, []
        bullets.append(_render_rule(rule))
    if bullets:
        blocks.append("\n".join(bullets))
    return "\n\n".join(blocks) + "\n"


def _render_entries(title: str, entries: Iterable[Sequence[str]]) -> str:
    return "\n\n".join([title, *("\n".join(lines) for lines in entries)]) + "\n"


def _correction_lines(c: Correction) -> list[str]:
    return [
        f"## {c.date.isoformat()} — {c.topic}",
        f"**What I did wrong**: {c.wrong}",
        f"**What I should do**: {c.should}",
        f"**Context**: {c.context}",
    ]


def _reflection_lines(r: Reflection) -> list[str]:
    heading = f"## {r.date.isoformat()}" + (f" — {r.topic}" if r.topic is not None else "")
    return [heading, f"CONTEXT: {r.context}", f"REFLECTION: {r.reflection}", f"LESSON: {r.lesson}"]


def _proposal_lines(p: ProposalEntry) -> list[str]:
    fields: list[tuple[str, str | None]] = [
        ("Status", p.status),
        ("Key", p.key),
        ("Task type", p.task_type),
        ("Weight", repr(p.weight)),
        ("Rule", p.rule),
        ("Evidence", ", ".join(p.evidence) if p.evidence else None),
        ("Created", p.created.isoformat()),
        ("Decided", p.decided.isoformat() if p.decided else None),
        ("Reason", p.reason),
    ]
    return [
        f"## [{p.id}] {p.title}",
        *(f"**{name}**: {value}" for name, value in fields if value is not None),
    ]


def _world_model_json(records: Sequence[SensorRecord]) -> dict[str, object]:
    model = world_model(r.outcome() for r in records)
    return {
        "approaches": [
            {"task_type": t, "approach": a, "successes": s.successes, "failures": s.failures, "rate": s.rate}
            for (t, a), s in model.by_approach.items()
        ],
        "task_types": [
            {
                "task_type": t,
                "successes": s.successes,
                "failures": s.failures,
                "rate": s.rate,
                "best_approach": best_approach(model, t),
            }
            for t, s in model.by_task_type.items()
        ],
    }


def render_directory(d: MemoryDirectory) -> dict[str, str]:
    """Render ``d`` as ``{relative path: text}``, sorted by path; the same input gives the same bytes."""
    files: dict[str, str] = {}
    by_path: dict[str, list[Rule]] = {HOT_MEMORY: []}
    for rule in d.rules:
        by_path.setdefault(rule.path, []).append(rule)
    for path, rules in by_path.items():
        title = _TITLES[HOT_MEMORY] if path == HOT_MEMORY else _TITLES[rules[0].area].format(rules[0].topic)
        files[path] = _render_rules(title, rules)
    files[CORRECTIONS] = _render_entries(_TITLES[CORRECTIONS], map(_correction_lines, d.corrections))
    files[REFLECTIONS] = _render_entries(_TITLES[REFLECTIONS], map(_reflection_lines, d.reflections))
    files[PROPOSALS] = _render_entries(_TITLES[PROPOSALS], map(_proposal_lines, d.proposals))
    files[SENSOR] = _dumps(
        {
            "records": [
                {
                    "id": r.id,
                    "task_type": r.task_type,
                    "approach": r.approach,
                    "result": r.result,
                    "at": _iso(r.at),
                    "lesson": r.lesson,
                    "issue": r.issue,
                    "solution": r.solution,
                }
                for r in d.sensor
            ]
        }
    )
    files[WORLD_MODEL] = _dumps(_world_model_json(d.sensor))
    files[EVO_DEVO] = _dumps(
        {
            "strategies": [
                {
                    "key": s.key,
                    "title": s.title,
                    "rule": s.rule,
                    "weight": s.weight,
                    "status": s.status,
                    "created_at": _iso(s.created_at),
                    "task_type": s.task_type,
                    "evidence": list(s.evidence),
                    "proposal_id": s.proposal_id,
                }
                for s in d.strategies
            ]
        }
    )
    files[DECAY_SCORES] = _dumps(
        {
            "items": [
                {
                    "key": s.key,
                    "tier": s.tier.value,
                    "kind": s.kind.value,
                    "is_correction": s.is_correction,
                    "base": s.base,
                    "access_count": s.access_count,
                    "last_access": _iso(s.last_access),
                    "recent_uses": [_iso(u) for u in s.recent_uses],
                    "score": s.score,
                    "scored_at": _iso(s.scored_at),
                }
                for s in d.decay_scores
            ]
        }
    )
    files[META] = _dumps(
        {
            "format": FORMAT_NAME,
            "version": d.meta.version,
            "exported_at": _iso(d.meta.exported_at),
            "workspace": d.meta.workspace,
        }
    )
    return dict(sorted(files.items()))


# ------------------------------------------------------------------------------------------ markdown parse


def _lines(text: str) -> list[tuple[int, str]]:
    """Non-blank lines, stripped, with their 1-based numbers; only ``\\n`` ends a line (``\\r`` is stripped)."""
    text = text.removeprefix("\ufeff")
    return [(n, s) for n, raw in enumerate(text.split("\n"), start=1) if (s := raw.strip())]


def _body(file: str, text: str, problems: list[Problem]) -> list[tuple[int, str]]:
    """The lines after an optional ``# title``; stray titles and ``###`` headings become problems."""
    lines = _lines(text)
    if lines and lines[0][1].startswith("# "):
        lines = lines[1:]
    body: list[tuple[int, str]] = []
    for n, line in lines:
        if line.startswith("#") and not line.startswith("## "):
            kind = "a second title" if line.startswith("# ") else "a bad heading"
            problems.append(Problem(file, n, f"{kind} {line!r}: entries start with '## '"))
        else:
            body.append((n, line))
    return body


def _parse_date(text: str) -> date:
    if not _DATE_RE.fullmatch(text):
        raise ValueError(f"bad date {text!r}: expected YYYY-MM-DD")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"bad date {text!r}: no such day") from None


def _parse_rule_meta(meta: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in meta.split(";"))):
        name, sep, value = part.partition(":")
        name, value = name.strip(), value.strip()
        if not sep or name not in ("id", "added", "origin", "source", "kind"):
            raise ValueError(f"bad rule metadata {part!r}: expected id, added, origin, source or kind")
        if name in fields:
            raise ValueError(f"rule metadata {name!r} given twice")
        fields[name] = value
    return fields


def _parse_rule_file(file: str, text: str, area: Area, topic: str, problems: list[Problem]) -> list[tuple[int, Rule]]:
    rules: list[tuple[int, Rule]] = []
    section = ""
    for n, line in _body(file, text, problems):
        if line.startswith("## "):
            section = line[3:].strip()
            continue
        if not (line.startswith("- ") or line == "-"):
            problems.append(Problem(file, n, f"unexpected text {line!r}: a rule is a '- ' bullet"))
            continue
        body = line[1:].strip()
        meta: dict[str, str] = {}
        try:
            start = body.rfind("<!--")
            if start >= 0 and body.endswith("-->"):
                meta = _parse_rule_meta(body[start + 4 : -3])
                body = body[:start].strip()
            origin = meta.get("origin", "manual")
            _choice("origin", origin, get_args(Origin))
            kind = meta.get("kind", "rule")
            _choice("kind", kind, get_args(RuleKind))
            rules.append(
                (
                    n,
                    Rule(
                        area=area,
                        topic=topic,
                        text=body,
                        section=section,
                        id=meta.get("id"),
                        added=_parse_date(meta["added"]) if "added" in meta else None,
                        origin=cast(Origin, origin),
                        source=meta.get("source"),
                        kind=cast(RuleKind, kind),
                    ),
                )
            )
        except ValueError as exc:
            problems.append(Problem(file, n, str(exc)))
    return rules


@dataclass(slots=True)
class _Entry:
    heading: str
    line: int
    fields: dict[str, tuple[int, str]]


_BOLD_FIELD: Final = re.compile(r"\*\*(?P<label>[^*]+?)(?::\*\*|\*\*:)(?P<value>.*)")
_CAPS_FIELD: Final = re.compile(r"(?P<label>[A-Z][A-Z _]*):(?P<value>.*)")


def _entries(
    file: str, text: str, field_re: re.Pattern[str], labels: Collection[str], problems: list[Problem]
) -> list[_Entry]:
    entries: list[_Entry] = []
    for n, line in _body(file, text, problems):
        if line.startswith("## "):
            entries.append(_Entry(heading=line[3:].strip(), line=n, fields={}))
            continue
        m = field_re.fullmatch(line)
        if m is None:
            problems.append(Problem(file, n, f"unexpected text {line!r}"))
        elif m["label"] not in labels:
            problems.append(Problem(file, n, f"unknown field {m['label']!r}: expected {', '.join(labels)}"))
        elif not entries:
            problems.append(Problem(file, n, f"field {m['label']!r} before the first '## ' entry"))
        elif m["label"] in entries[-1].fields:
            problems.append(Problem(file, n, f"field {m['label']!r} given twice"))
        else:
            entries[-1].fields[m["label"]] = (n, m["value"].strip())
    return entries


def _required(file: str, entry: _Entry, labels: Sequence[str], problems: list[Problem]) -> bool:
    missing = [label for label in labels if label not in entry.fields]
    if missing:
        problems.append(Problem(file, entry.line, f"entry is missing {', '.join(missing)}"))
    empty = [(n, label) for label, (n, value) in entry.fields.items() if not value]
    for n, label in empty:
        problems.append(Problem(file, n, f"{label} is empty"))
    return not missing and not empty


_DATED_HEADING: Final = re.compile(r"(?P<date>\S+)(?:\s+[—–-]\s+(?P<topic>.+))?")
_CORRECTION_LABELS: Final = ("What I did wrong", "What I should do", "Context")
_REFLECTION_LABELS: Final = ("CONTEXT", "REFLECTION", "LESSON")
_PROPOSAL_LABELS: Final = (
    "Status",
    "Key",
    "Task type",
    "Weight",
    "Rule",
    "Evidence",
    "Created",
    "Decided",
    "Reason",
)
_PROPOSAL_REQUIRED: Final = ("Status", "Weight", "Rule", "Created")


def _dated_heading(entry: _Entry, *, topic_required: bool) -> tuple[date, str | None]:
    m = _DATED_HEADING.fullmatch(entry.heading)
    if m is None or (topic_required and m["topic"] is None):
        shape = "'## YYYY-MM-DD — topic'" + ("" if topic_required else " or '## YYYY-MM-DD'")
        raise ValueError(f"bad heading {entry.heading!r}: expected {shape}")
    return _parse_date(m["date"]), m["topic"]


def _parse_corrections(file: str, text: str, problems: list[Problem]) -> list[Correction]:
    out: list[Correction] = []
    for e in _entries(file, text, _BOLD_FIELD, _CORRECTION_LABELS, problems):
        try:
            day, topic = _dated_heading(e, topic_required=True)
        except ValueError as exc:
            problems.append(Problem(file, e.line, str(exc)))
            _required(file, e, _CORRECTION_LABELS, problems)
            continue
        if _required(file, e, _CORRECTION_LABELS, problems):
            f = {label: value for label, (_, value) in e.fields.items()}
            try:
                out.append(
                    Correction(
                        date=day,
                        topic=topic or "",
                        wrong=f["What I did wrong"],
                        should=f["What I should do"],
                        context=f["Context"],
                    )
                )
            except ValueError as exc:
                problems.append(Problem(file, e.line, str(exc)))
    return out


def _parse_reflections(file: str, text: str, problems: list[Problem]) -> list[Reflection]:
    out: list[Reflection] = []
    for e in _entries(file, text, _CAPS_FIELD, _REFLECTION_LABELS, problems):
        try:
            day, topic = _dated_heading(e, topic_required=False)
        except ValueError as exc:
            problems.append(Problem(file, e.line, str(exc)))
            _required(file, e, _REFLECTION_LABELS, problems)
            continue
        if _required(file, e, _REFLECTION_LABELS, problems):
            f = {label: value for label, (_, value) in e.fields.items()}
            try:
                out.append(
                    Reflection(
                        date=day,
                        topic=topic,
                        context=f["CONTEXT"],
                        reflection=f["REFLECTION"],
                        lesson=f["LESSON"],
                    )
                )
            except ValueError as exc:
                problems.append(Problem(file, e.line, str(exc)))
    return out


_PROPOSAL_HEADING: Final = re.compile(r"\[(?P<id>[^\]]*)\]\s+(?P<title>.+)")


def _parse_weight(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"bad weight {text!r}: expected a number in [0, 1]") from None
    _weight(value)
    return value


def _parse_status(text: str) -> str:
    _choice("status", text, get_args(ProposalStatus))
    return text


def _parse_proposals(file: str, text: str, problems: list[Problem]) -> list[tuple[int, ProposalEntry]]:
    out: list[tuple[int, ProposalEntry]] = []
    first_line: dict[str, int] = {}
    for e in _entries(file, text, _BOLD_FIELD, _PROPOSAL_LABELS, problems):
        complete = _required(file, e, _PROPOSAL_REQUIRED, problems)
        m = _PROPOSAL_HEADING.fullmatch(e.heading)
        if m is None:
            problems.append(Problem(file, e.line, f"bad heading {e.heading!r}: expected '## [P-001] title'"))
            continue
        # Checked on the headings so a repeated id is reported even when the entry has other problems.
        if m["id"] in first_line:
            where = f"{file}:{first_line[m['id']]}"
            problems.append(Problem(file, e.line, f"duplicate proposal id {m['id']!r} (first at {where})"))
            complete = False
        first_line.setdefault(m["id"], e.line)
        values: dict[str, object] = {"id": m["id"], "title": m["title"]}
        converters: dict[str, tuple[str, Callable[[str], object]]] = {
            "Status": ("status", _parse_status),
            "Key": ("key", str),
            "Task type": ("task_type", str),
            "Weight": ("weight", _parse_weight),
            "Rule": ("rule", str),
            "Evidence": ("evidence", lambda v: tuple(r.strip() for r in v.split(","))),
            "Created": ("created", _parse_date),
            "Decided": ("decided", _parse_date),
            "Reason": ("reason", str),
        }
        for label, (n, raw) in e.fields.items():
            name, convert = converters[label]
            try:
                values[name] = convert(raw)
            except ValueError as exc:
                problems.append(Problem(file, n, str(exc)))
                complete = False
        if complete:
            try:
                out.append((e.line, ProposalEntry(**values)))  # type: ignore[arg-type]
            except ValueError as exc:
                problems.append(Problem(file, e.line, str(exc)))
    return out


# ---------------------------------------------------------------------------------------------- JSON parse

_JsonPath = tuple[str | int, ...]
_WS: Final = re.compile(r"[ \t\n\r]*")


def _json_lines(text: str, file: str, problems: list[Problem]) -> dict[_JsonPath, int]:
    """Line on which each value of (already valid) JSON ``text`` starts, by path; flags duplicate keys."""
    decoder = json.JSONDecoder()
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    lines: dict[_JsonPath, int] = {}

    def skip(i: int) -> int:
        m = _WS.match(text, i)
        return m.end() if m else i

    def value(i: int, path: _JsonPath) -> int:
        i = skip(i)
        lines[path] = bisect_right(starts, i)
        opener = text[i]
        if opener not in "{[":
            return decoder.raw_decode(text, i)[1]
        closer, i, index = ("}" if opener == "{" else "]"), skip(i + 1), 0
        seen: set[str] = set()
        while text[i] != closer:
            if opener == "{":
                key, i = decoder.raw_decode(text, i)
                if key in seen:
                    problems.append(Problem(file, bisect_right(starts, i), f"{_fmt((*path, key))}: duplicate key"))
                seen.add(key)
                i = value(skip(i) + 1, (*path, key))
            else:
                i = value(i, (*path, index))
                index += 1
            i = skip(i)
            if text[i] == ",":
                i = skip(i + 1)
        return i + 1

    value(0, ())
    return lines


def _fmt(path: _JsonPath) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "top level"


class _Json:
    """Shape checks for one JSON file; every failure is recorded and a placeholder returned, so the
    caller can keep checking the other fields (it compares the problem count to know if a record is good)."""

    def __init__(self, file: str, text: str, problems: list[Problem]) -> None:
        self.file = file
        self.problems = problems
        self.data: object = None
        self.valid = False
        self.lines: dict[_JsonPath, int] = {}
        text = text.removeprefix("\ufeff")
        try:
            self.data = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(Problem(file, exc.lineno, f"invalid JSON: {exc.msg} (column {exc.colno})"))
            return
        self.valid = True
        try:
            self.lines = _json_lines(text, file, problems)
        except RecursionError:
            # Absurdly deep nesting: the shape checks still run, their problems just carry no line.
            self.lines = {}

    def problem(self, path: _JsonPath, message: str) -> None:
        probe = path
        while probe and probe not in self.lines:
            probe = probe[:-1]
        self.problems.append(Problem(self.file, self.lines.get(probe), f"{_fmt(path)}: {message}"))

    def obj(
        self, value: object, path: _JsonPath, required: Collection[str], optional: Collection[str] = ()
    ) -> dict[str, object] | None:
        """``value`` as an object with all keys ``required`` and maybe some ``optional`` ones (missing and
        unknown keys are reported)."""
        if not isinstance(value, dict):
            self.problem(path, f"expected an object, got {_json_type(value)}")
            return None
        missing = [k for k in required if k not in value]
        if missing:
            self.problem(path, f"missing {', '.join(missing)}")
        for k in value:
            if k not in required and k not in optional:
                self.problem((*path, k), "unknown key")
        return None if missing else cast(dict[str, object], value)

    def array(self, value: object, path: _JsonPath) -> list[object]:
        if not isinstance(value, list):
            self.problem(path, f"expected an array, got {_json_type(value)}")
            return []
        return cast(list[object], value)

    def text(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> str:
        value = obj[key]
        if not isinstance(value, str):
            self.problem((*path, key), f"expected a string, got {_json_type(value)}")
            return ""
        return value

    def optional_text(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> str | None:
        return None if obj[key] is None else self.text(obj, key, path)

    def number(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> float:
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            self.problem((*path, key), f"expected a finite number, got {_json_type(value)}")
            return 0.0
        return float(value)

    def integer(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> int:
        value = obj[key]
        if isinstance(value, bool) or not isinstance(value, int):
            self.problem((*path, key), f"expected an integer, got {_json_type(value)}")
            return 0
        return value

    def boolean(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> bool:
        value = obj[key]
        if not isinstance(value, bool):
            self.problem((*path, key), f"expected true or false, got {_json_type(value)}")
            return False
        return value

    def moment(self, value: object, path: _JsonPath) -> datetime:
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                pass
            else:
                if parsed.tzinfo is not None and parsed.utcoffset() is not None:
                    return parsed
                self.problem(path, f"datetime {value!r} must carry a timezone offset")
                return _EPOCH
        self.problem(path, f"expected an ISO 8601 datetime string, got {value!r}")
        return _EPOCH

    def strings(self, obj: Mapping[str, object], key: str, path: _JsonPath) -> tuple[str, ...]:
        out: list[str] = []
        for i, item in enumerate(self.array(obj[key], (*path, key))):
            if isinstance(item, str):
                out.append(item)
            else:
                self.problem((*path, key, i), f"expected a string, got {_json_type(item)}")
        return tuple(out)

    def build(self, path: _JsonPath, before: int, make: Callable[..., object], **values: object) -> object | None:
        """``make(**values)`` when no problem was added since ``before``; a ValueError becomes a problem."""
        if len(self.problems) != before:
            return None
        try:
            return make(**values)
        except ValueError as exc:
            self.problem(path, str(exc))
            return None


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _records(j: _Json, top_key: str, keys: Collection[str]) -> list[tuple[_JsonPath, dict[str, object]]]:
    """The objects under ``{top_key: [...]}`` that have exactly ``keys``."""
    if not j.valid:
        return []
    top = j.obj(j.data, (), (top_key,))
    if top is None:
        return []
    out: list[tuple[_JsonPath, dict[str, object]]] = []
    for i, item in enumerate(j.array(top[top_key], (top_key,))):
        path: _JsonPath = (top_key, i)
        obj = j.obj(item, path, keys)
        if obj is not None:
            out.append((path, obj))
    return out


_SENSOR_KEYS: Final = ("id", "task_type", "approach", "result", "at", "lesson", "issue", "solution")


def _parse_sensor(j: _Json) -> list[tuple[_JsonPath, SensorRecord]]:
    out: list[tuple[_JsonPath, SensorRecord]] = []
    for path, o in _records(j, "records", _SENSOR_KEYS):
        before = len(j.problems)
        values = {k: j.text(o, k, path) for k in _SENSOR_KEYS if k != "at"}
        record = j.build(path, before, SensorRecord, at=j.moment(o["at"], (*path, "at")), **values)
        if isinstance(record, SensorRecord):
            out.append((path, record))
    return out


def _parse_world_model(j: _Json) -> None:
    if not j.valid:
        return
    top = j.obj(j.data, (), ("approaches", "task_types"))
    if top is None:
        return
    shapes = {
        "approaches": ("task_type", "approach", "successes", "failures", "rate"),
        "task_types": ("task_type", "successes", "failures", "rate", "best_approach"),
    }
    for top_key, keys in shapes.items():
        for i, item in enumerate(j.array(top[top_key], (top_key,))):
            path: _JsonPath = (top_key, i)
            o = j.obj(item, path, keys)
            if o is None:
                continue
            j.text(o, "task_type", path)
            if "approach" in o:
                j.text(o, "approach", path)
            else:
                j.optional_text(o, "best_approach", path)
            j.integer(o, "successes", path)
            j.integer(o, "failures", path)
            j.number(o, "rate", path)


_STRATEGY_KEYS: Final = (
    "key",
    "title",
    "rule",
    "weight",
    "status",
    "created_at",
    "task_type",
    "evidence",
    "proposal_id",
)


def _parse_strategies(j: _Json) -> list[tuple[_JsonPath, StrategyRecord]]:
    out: list[tuple[_JsonPath, StrategyRecord]] = []
    for path, o in _records(j, "strategies", _STRATEGY_KEYS):
        before = len(j.problems)
        record = j.build(
            path,
            before,
            StrategyRecord,
            key=j.text(o, "key", path),
            title=j.text(o, "title", path),
            rule=j.text(o, "rule", path),
            weight=j.number(o, "weight", path),
            status=j.text(o, "status", path),
            created_at=j.moment(o["created_at"], (*path, "created_at")),
            task_type=j.optional_text(o, "task_type", path),
            evidence=j.strings(o, "evidence", path),
            proposal_id=j.optional_text(o, "proposal_id", path),
        )
        if isinstance(record, StrategyRecord):
            out.append((path, record))
    return out


_DECAY_KEYS: Final = (
    "key",
    "tier",
    "kind",
    "is_correction",
    "base",
    "access_count",
    "last_access",
    "recent_uses",
    "score",
    "scored_at",
)


def _enum_value(j: _Json, o: Mapping[str, object], key: str, path: _JsonPath, allowed: Sequence[str]) -> str:
    value = j.text(o, key, path)
    if isinstance(o[key], str) and value not in allowed:
        j.problem((*path, key), f"expected one of {', '.join(allowed)}, got {value!r}")
    return value


def _parse_decay(j: _Json) -> list[tuple[_JsonPath, DecayScore]]:
    out: list[tuple[_JsonPath, DecayScore]] = []
    for path, o in _records(j, "items", _DECAY_KEYS):
        before = len(j.problems)
        uses = j.array(o["recent_uses"], (*path, "recent_uses"))
        record = j.build(
            path,
            before,
            DecayScore,
            key=j.text(o, "key", path),
            tier=_enum_value(j, o, "tier", path, [t.value for t in Tier]),
            kind=_enum_value(j, o, "kind", path, [k.value for k in ItemKind]),
            is_correction=j.boolean(o, "is_correction", path),
            base=j.number(o, "base", path),
            access_count=j.integer(o, "access_count", path),
            last_access=j.moment(o["last_access"], (*path, "last_access")),
            recent_uses=tuple(j.moment(u, (*path, "recent_uses", i)) for i, u in enumerate(uses)),
            score=j.number(o, "score", path),
            scored_at=j.moment(o["scored_at"], (*path, "scored_at")),
        )
        if isinstance(record, DecayScore):
            out.append((path, record))
    return out


def _parse_meta(j: _Json) -> Meta | None:
    if not j.valid:
        return None
    # Only the version is required so a hand-written meta.json can be as small as {"version": 1}.
    o = j.obj(j.data, (), ("version",), ("format", "exported_at", "workspace"))
    if o is None:
        return None
    o = {"format": FORMAT_NAME, "exported_at": None, "workspace": None, **o}
    before = len(j.problems)
    exported = o["exported_at"]
    meta = j.build(
        (),
        before,
        Meta,
        version=j.integer(o, "version", ()),
        exported_at=None if exported is None else j.moment(exported, ("exported_at",)),
        workspace=j.optional_text(o, "workspace", ()),
    )
    # Checked after the build so an unsupported version is reported as well.
    if o["format"] != FORMAT_NAME:
        j.problem(("format",), f"expected {FORMAT_NAME!r}, got {o['format']!r}")
        return None
    return meta if isinstance(meta, Meta) else None


# ------------------------------------------------------------------------------------------------ parse


def _duplicate_problems(
    file_of: Sequence[tuple[str, int | None, str | None]], what: str, problems: list[Problem]
) -> None:
    first: dict[str, tuple[str, int | None]] = {}
    for file, line, value in file_of:
        if value is None:
            continue
        if value in first:
            where = f"{first[value][0]}:{first[value][1]}" if first[value][1] else first[value][0]
            problems.append(Problem(file, line, f"duplicate {what} {value!r} (first at {where})"))
        else:
            first[value] = (file, line)


def parse_directory(files: Mapping[str, str]) -> MemoryDirectory:
    """Parse ``{relative path: text}`` into a ``MemoryDirectory``.

    Raises ``MemdirError`` listing every problem (unknown file, bad heading, missing or unknown field, bad
    date, invalid JSON with its line, wrong JSON shape with its path and line, duplicate ids), not only the
    first one.
    """
    problems: list[Problem] = []
    rules: list[tuple[str, int, Rule]] = []
    corrections: list[Correction] = []
    reflections: list[Reflection] = []
    proposals: list[tuple[int, ProposalEntry]] = []
    sensor: list[tuple[_JsonPath, SensorRecord]] = []
    strategies: list[tuple[_JsonPath, StrategyRecord]] = []
    decay: list[tuple[_JsonPath, DecayScore]] = []
    meta: Meta | None = Meta()
    json_files: dict[str, _Json] = {}

    for file in sorted(files):
        text = files[file]
        topic_match = _TOPIC_FILE_RE.fullmatch(file)
        if file == HOT_MEMORY:
            rules += [(file, n, r) for n, r in _parse_rule_file(file, text, "hot", "", problems)]
        elif topic_match:
            area = next(a for a, d in _AREA_DIRS.items() if d == topic_match[1])
            topic = topic_match[2]
            if _TOPIC_RE.fullmatch(topic):
                rules += [(file, n, r) for n, r in _parse_rule_file(file, text, area, topic, problems)]
            else:
                problems.append(Problem(file, None, f"bad topic {topic!r}: use letters, digits and _ . -"))
        elif file == CORRECTIONS:
            corrections = _parse_corrections(file, text, problems)
        elif file == REFLECTIONS:
            reflections = _parse_reflections(file, text, problems)
        elif file == PROPOSALS:
            proposals = _parse_proposals(file, text, problems)
        elif file in (SENSOR, WORLD_MODEL, EVO_DEVO, DECAY_SCORES, META):
            j = json_files[file] = _Json(file, text, problems)
            if file == SENSOR:
                sensor = _parse_sensor(j)
            elif file == WORLD_MODEL:
                _parse_world_model(j)
            elif file == EVO_DEVO:
                strategies = _parse_strategies(j)
            elif file == DECAY_SCORES:
                decay = _parse_decay(j)
            else:
                meta = _parse_meta(j)
        else:
            problems.append(Problem(file, None, "unknown file: not part of the memory-evolution layout"))

    _duplicate_problems([(f, n, r.id) for f, n, r in rules], "rule id", problems)
    for file, entries, attr, what in (
        (SENSOR, sensor, "id", "sensor record id"),
        (EVO_DEVO, strategies, "key", "strategy key"),
        (DECAY_SCORES, decay, "key", "decay score key"),
    ):
        lines = json_files[file].lines if file in json_files else {}
        _duplicate_problems(
            [(file, lines.get((*path, attr)), getattr(entry, attr)) for path, entry in entries],
            what,
            problems,
        )
    if problems:
        order = {f: i for i, f in enumerate(sorted(files))}
        problems.sort(key=lambda p: (order.get(p.file, len(order)), p.line or 0))
        raise MemdirError(problems)
    return MemoryDirectory(
        rules=tuple(r for _, _, r in rules),
        corrections=tuple(corrections),
        reflections=tuple(reflections),
        proposals=tuple(p for _, p in proposals),
        sensor=tuple(s for _, s in sensor),
        strategies=tuple(s for _, s in strategies),
        decay_scores=tuple(d for _, d in decay),
        meta=meta or Meta(),
    )


# ------------------------------------------------------------------------------------------- filesystem


def read_tree(path: str | os.PathLike[str]) -> dict[str, str]:
    """Every file under ``path`` as ``{posix relative path: text}``, decoded as UTF-8 without newline
    translation. Hidden files and directories (a name starting with ``.``) are skipped; files that are
    not UTF-8 raise ``MemdirError`` naming the file and line of the first bad byte."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"not a directory: {root}")
    files: dict[str, str] = {}
    problems: list[Problem] = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if any(part.startswith(".") for part in rel.parts) or not p.is_file():
            continue
        raw = p.read_bytes()
        try:
            files[rel.as_posix()] = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(Problem(rel.as_posix(), raw.count(b"\n", 0, exc.start) + 1, "not UTF-8 text"))
    if problems:
        raise MemdirError(problems)
    return files


def write_tree(path: str | os.PathLike[str], files: Mapping[str, str]) -> None:
    """Write ``files`` under ``path`` as UTF-8, creating directories. Nothing else is touched or deleted.

    Raises ValueError, before writing anything, for a path that is absolute, empty or leaves ``path``.
    """
    root = Path(path)
    for rel in files:
        parts = PurePosixPath(rel).parts
        if (
            not rel
            or rel.startswith("/")
            or "\\" in rel
            or any(part in ("", ".", "..") for part in parts)
            or rel.endswith("/")
        ):
            raise ValueError(f"refusing to write {rel!r}: paths must be relative and stay inside the tree")
    for rel, text in files.items():
        target = root.joinpath(*PurePosixPath(rel).parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text.encode("utf-8"))
