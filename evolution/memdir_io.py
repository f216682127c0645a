"""Export a workspace to the memory-evolution directory (docs/engine.md), and import such a directory.

The layout and its file formats are ``evolution.algorithms.memdir`` (parse and render); this module maps
them to the workspace:

* rules (``hot/memory.md``, ``warm/projects/*.md``, ``warm/domains/*.md``, ``cold/archive/*.md``) are the
  memories of type ``strategy`` that are active (by tier) or archived (always ``cold/archive``): origin
  ``engine:`` is ``origin: engine``, anything else a manual rule. A warm rule without a place of its own goes
  to ``warm/domains/<its task type or subject>.md`` (``general`` when it has neither); an approved strategy's
  section is its task type; ``source`` names the proposal it came from;
* ``hot/corrections.md``: the corrections in force (active memories of type ``correction``; one superseded
  by a later correction of its topic stays in the site's history only), in the order written;
  ``reflections/log.md``: active reflections, newest first;
* ``proposals/pending.md`` and ``engine/evo_devo.json``: every proposal of kind ``strategy`` whatever its
  status (a vetoed one with its reasons); other kinds belong to the site's review queue only;
* ``engine/sensor.json``: every outcome in recorded order (ids S-0001...; decisions on strategies included);
  ``engine/world_model.json`` is derived from it;
* ``engine/decay-scores.json``: base, access count, last access and the uses of the last 7 days of every
  exported rule (keyed by rule id) and active correction (keyed ``correction:<date>#<n>``, n counting that
  day's corrections in file order), with the relevance at the export time;
* ``meta.json``: the export time, and the workspace the directory's history started in (a workspace made by
  an import keeps naming the workspace it came from, so export -> import -> export is byte for byte the same).

Import parses every file first and checks what the workspace mapping needs on top (decay keys that name
nothing, values longer than the database allows); any problem raises ``DirectoryInvalid`` listing every
problem with its file and line, and nothing is written. A valid directory is imported in one transaction
and merged: entries the workspace already holds (same proposal key, same sensor record, same rule id,
same correction or reflection) are skipped, so importing twice adds nothing. Corrections are written
before rules and go through the write-time policy, so they win their topic as when they were recorded.
"""

from __future__ import annotations

import io
import json
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from pathlib import PurePosixPath
from typing import Any, Final, cast

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.db import transaction
from django.utils import timezone

from core.errors import DomainError, InvalidInput
from evolution import dream
from evolution.algorithms import memdir, tiers
from evolution.algorithms.engine import strategy_key
from evolution.engine import ENGINE_ORIGIN
from evolution.engine_inputs import (
    DEFAULT_APPROACH,
    DEFAULT_TOPIC,
    MAX_APPROACH,
    MAX_TASK_TYPE,
    MAX_TOPIC,
    CorrectionInput,
    ReflectionInput,
    correction_memory_input,
    one_line,
    reflection_memory_input,
)
from evolution.engine_selectors import outcomes_in_order, reflection_fields, sensor_id
from evolution.models import Outcome, OutcomeResult, Proposal, ProposalKind, ProposalStatus
from history import audit
from history.models import Action, EvolutionRecord
from memories.inputs import MAX_CONTENT_CHARS, MemoryInput
from memories.models import Memory, MemoryType, Status, Tier, Workspace
from memories.services import memories_create

User = AbstractBaseUser | AnonymousUser

IMPORT_ORIGIN: Final = "import:memory-evolution"
LINEAGE_EVOLVER: Final = "memdir"
"""Evolver name of the import record that keeps a workspace's lineage (the first import names its origin)."""
ZIP_ROOT: Final = "memory-evolution/"
MAX_ZIP_BYTES: Final = 20 * 1024 * 1024
MAX_FILES: Final = 2000
MAX_FILE_BYTES: Final = 5 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 50 * 1024 * 1024
MAX_TITLE: Final = 300
MAX_KEY: Final = 200
# Top-level names of the layout: an archive whose files all sit in one folder of another name (a zipped
# ~/memory-evolution) is read from inside that folder.
_LAYOUT_TOPS: Final = frozenset({"hot", "warm", "cold", "engine", "proposals", "reflections", "meta.json"})
_ZIP_TIME: Final = (1980, 1, 1, 0, 0, 0)

_STRATEGY_STATUS: Final[Mapping[str, memdir.StrategyStatus]] = {
    ProposalStatus.PENDING: "proposed",
    ProposalStatus.APPROVED: "approved",
    ProposalStatus.MODIFIED: "approved",
    ProposalStatus.REJECTED: "rejected",
    ProposalStatus.VETOED: "vetoed",
}
_FROM_STRATEGY_STATUS: Final[Mapping[str, str]] = {
    "proposed": ProposalStatus.PENDING,
    "approved": ProposalStatus.APPROVED,
    "rejected": ProposalStatus.REJECTED,
    "vetoed": ProposalStatus.VETOED,
}


class DirectoryInvalid(DomainError):
    """A directory that cannot be imported; ``problems`` lists every problem with its file and line."""

    status_code = 400
    code = "invalid_directory"

    def __init__(self, problems: Iterable[memdir.Problem]) -> None:
        self.problems: tuple[memdir.Problem, ...] = tuple(problems)
        shown = "; ".join(str(p) for p in self.problems[:10])
        more = f" (and {len(self.problems) - 10} more)" if len(self.problems) > 10 else ""
        super().__init__(f"{len(self.problems)} problem(s): {shown}{more}", field="files")

    def problems_json(self) -> list[dict[str, Any]]:
        return [{"file": p.file, "line": p.line, "message": p.message} for p in self.problems]


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time(), tzinfo=UTC)


def _day(moment: datetime) -> date:
    return moment.astimezone(UTC).date()


def _meta(memory: Memory, key: str) -> dict[str, Any]:
    value = memory.metadata.get(key) if isinstance(memory.metadata, dict) else None
    return value if isinstance(value, dict) else {}


def _seq(memory: Memory) -> int:
    seq = _meta(memory, "memdir").get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def _token(value: object) -> str | None:
    return value if isinstance(value, str) and memdir._TOKEN_RE.fullmatch(value) else None


def _topic_of(text: str) -> str:
    """A file-name topic from free text: letters, digits and ``_ . -``; ``general`` when nothing is left."""
    slug = "".join(c if c.isascii() and (c.isalnum() or c in "_.-") else "-" for c in one_line(text).lower())
    slug = "-".join(part for part in slug.split("-") if part).lstrip("._-")
    return slug[:80] if slug and memdir._TOPIC_RE.fullmatch(slug[:80]) else DEFAULT_TOPIC


def _rule_text(text: str) -> str:
    # The bullet's metadata comment starts with "<!--"; a rule may not contain it.
    return one_line(text).replace("<!--", "< !--") or "(empty)"


# ------------------------------------------------------------------------------------------------- export


def _proposal_ids(rows: Sequence[Proposal]) -> dict[int, str]:
    """``P-NNN`` of every strategy proposal: the id an import gave it when still unique, else the next free
    numbers in creation order."""
    ids: dict[int, str] = {}
    taken: set[str] = set()
    for p in rows:
        stored = p.payload.get("memdir_id") if isinstance(p.payload, dict) else None
        if isinstance(stored, str) and memdir._PROPOSAL_ID_RE.fullmatch(stored) and stored not in taken:
            ids[p.pk] = stored
            taken.add(stored)
    number = max((int(i[2:]) for i in taken), default=0)
    for p in rows:
        if p.pk not in ids:
            number += 1
            ids[p.pk] = f"P-{number:03d}"
    return ids


def _text_field(payload: Mapping[str, Any], key: str) -> str:
    value = payload.get(key)
    return one_line(value) if isinstance(value, str) else ""


def _evidence(payload: Mapping[str, Any]) -> tuple[str, ...]:
    raw = payload.get("evidence")
    if not isinstance(raw, list):
        return ()
    refs = (one_line(r).replace(",", ";") for r in raw if isinstance(r, str))
    return tuple(r for r in refs if r)


def _weight(payload: Mapping[str, Any]) -> float:
    w = payload.get("weight", 0.5)
    if isinstance(w, bool) or not isinstance(w, int | float):
        return 0.5
    return min(1.0, max(0.0, float(w)))


def _proposal_entries(
    rows: Sequence[Proposal], ids: Mapping[int, str]
) -> tuple[list[memdir.ProposalEntry], list[memdir.StrategyRecord]]:
    entries: list[memdir.ProposalEntry] = []
    strategies: list[memdir.StrategyRecord] = []
    keys: set[str] = set()
    for p in rows:
        payload = p.payload if isinstance(p.payload, dict) else {}
        title = one_line(p.title) or _text_field(payload, "rule") or "strategy"
        rule = _text_field(payload, "rule") or title
        task_type = _text_field(payload, "task_type") or None
        key = _token(p.dedupe_key)
        status = p.status if p.status in _STRATEGY_STATUS else ProposalStatus.PENDING
        decided = _day(p.decided_at) if status != ProposalStatus.PENDING and p.decided_at else None
        entries.append(
            memdir.ProposalEntry(
                id=ids[p.pk],
                title=title,
                status=cast(memdir.ProposalStatus, status),
                rule=rule,
                weight=_weight(payload),
                created=_day(p.created_at),
                key=key,
                task_type=task_type,
                evidence=_evidence(payload),
                decided=decided,
                reason=one_line(p.decision_reason) or None,
            )
        )
        if key is not None and key not in keys:
            keys.add(key)
            strategies.append(
                memdir.StrategyRecord(
                    key=key,
                    title=title,
                    rule=rule,
                    weight=_weight(payload),
                    status=_STRATEGY_STATUS[status],
                    created_at=p.created_at,
                    task_type=task_type,
                    evidence=_evidence(payload),
                    proposal_id=ids[p.pk],
                )
            )
    return entries, strategies


def _in_order(rows: Iterable[Memory]) -> list[Memory]:
    """Memories in the order written: creation time, then an import's file position, then id."""
    return sorted(rows, key=lambda m: (m.created_at, _seq(m), str(m.id)))


def _rule_of(memory: Memory, ids: Mapping[int, str], used_ids: set[str]) -> memdir.Rule:
    place = _meta(memory, "memdir")
    strat = _meta(memory, "strategy")
    task_type = strat.get("task_type") if isinstance(strat.get("task_type"), str) else ""
    stored_area = place.get("area")
    stored_topic = place.get("topic")
    area: memdir.Area
    topic = ""
    if memory.status == Status.ARCHIVED or memory.tier == Tier.COLD:
        area = "archive"
    elif memory.tier == Tier.HOT:
        area = "hot"
    elif stored_area in ("project", "domain"):
        area = "project" if stored_area == "project" else "domain"
    else:
        area = "domain"
    if area != "hot":
        keeps = stored_area == area and isinstance(stored_topic, str) and memdir._TOPIC_RE.fullmatch(stored_topic)
        topic = str(stored_topic) if keeps else _topic_of(str(task_type) or memory.subject)
    section = one_line(place["section"]) if isinstance(place.get("section"), str) else one_line(str(task_type))
    rule_id = _token(place.get("id"))
    if rule_id is None or rule_id in used_ids:
        rule_id = f"R-{memory.id.hex[:12]}"
        if rule_id in used_ids:
            rule_id = f"R-{memory.id.hex}"
    used_ids.add(rule_id)
    added: date | None = _day(memory.created_at)
    if "added" in place:
        raw = place["added"]
        added = date.fromisoformat(raw) if isinstance(raw, str) and memdir._DATE_RE.fullmatch(raw) else None
    proposal_pk = strat.get("proposal_id")
    source = ids.get(proposal_pk) if isinstance(proposal_pk, int) else None
    return memdir.Rule(
        area=area,
        topic=topic,
        text=_rule_text(memory.content),
        section=section,
        id=rule_id,
        added=added,
        origin="engine" if memory.origin_tier == 3 else "manual",
        source=source or _token(place.get("source")),
    )


def _correction_of(memory: Memory) -> memdir.Correction:
    meta = _meta(memory, "correction")
    return memdir.Correction(
        date=_day(memory.created_at),
        topic=_text_field(meta, "topic") or one_line(memory.subject) or DEFAULT_TOPIC,
        wrong=_text_field(meta, "what_i_did_wrong") or "(not recorded)",
        should=_text_field(meta, "what_i_should_do") or one_line(memory.content) or "(not recorded)",
        context=_text_field(meta, "context") or "(not recorded)",
    )


def _reflection_of(memory: Memory) -> memdir.Reflection:
    meta = reflection_fields(memory) or {}
    content = one_line(memory.content) or "(empty)"
    topic = meta.get("topic")
    return memdir.Reflection(
        date=_day(memory.created_at),
        context=_text_field(meta, "context") or one_line(memory.subject) or DEFAULT_TOPIC,
        reflection=_text_field(meta, "reflection") or content,
        lesson=_text_field(meta, "lesson") or content,
        topic=one_line(topic) if isinstance(topic, str) and one_line(topic) else None,
    )


def correction_keys(corrections: Sequence[memdir.Correction]) -> list[str]:
    """``correction:<date>#<n>`` of each correction, n counting that day's corrections in order from 1."""
    seen: dict[date, int] = {}
    keys: list[str] = []
    for c in corrections:
        seen[c.date] = seen.get(c.date, 0) + 1
        keys.append(f"correction:{c.date.isoformat()}#{seen[c.date]}")
    return keys


def _lineage(workspace: Workspace) -> str:
    first = (
        EvolutionRecord.objects.filter(workspace=workspace, evolver=LINEAGE_EVOLVER, action=Action.IMPORT)
        .order_by("timestamp", "pk")
        .first()
    )
    lineage = first.after.get(audit.LINEAGE) if first is not None else None
    origin = lineage.get("origin") if isinstance(lineage, dict) else None
    return origin if isinstance(origin, str) and one_line(origin) == origin and origin else workspace.slug


def memdir_snapshot(*, workspace: Workspace, now: datetime | None = None) -> memdir.MemoryDirectory:
    """The workspace as a ``MemoryDirectory`` at ``now`` (the export time and the decay scores' time)."""
    now = now or timezone.now()
    strategy_rows = list(
        Proposal.objects.filter(workspace=workspace, kind=ProposalKind.STRATEGY).order_by("created_at", "pk")
    )
    ids = _proposal_ids(strategy_rows)
    entries, strategies = _proposal_entries(strategy_rows, ids)

    rule_rows = _in_order(
        Memory.objects.filter(
            workspace=workspace, memory_type=MemoryType.STRATEGY, status__in=[Status.ACTIVE, Status.ARCHIVED]
        )
    )
    used: set[str] = set()
    rules = [_rule_of(m, ids, used) for m in rule_rows]

    correction_rows = _in_order(
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.CORRECTION, status=Status.ACTIVE)
    )
    corrections = [_correction_of(m) for m in correction_rows]

    reflection_rows = sorted(
        Memory.objects.filter(workspace=workspace, memory_type=MemoryType.REFLECTION, status=Status.ACTIVE),
        key=lambda m: (_seq(m), str(m.id)),
    )
    # Newest first; an import's same-day entries (all at midnight) keep their file order (stable sort).
    reflection_rows.sort(key=lambda m: m.created_at, reverse=True)
    reflections = [_reflection_of(m) for m in reflection_rows]

    sensor = [
        memdir.SensorRecord(
            id=sensor_id(i),
            task_type=one_line(o.task_type) or "unknown",
            approach=one_line(o.approach) or DEFAULT_APPROACH,
            result="success" if o.result == OutcomeResult.SUCCESS else "fail",
            at=o.created_at,
            lesson=o.lesson,
            issue=o.issue,
            solution=o.solution,
        )
        for i, o in enumerate(outcomes_in_order(workspace=workspace))
    ]

    tracked: list[tuple[str, Memory, tiers.Tier]] = [
        (rule.id or "", m, rule.tier) for rule, m in zip(rules, rule_rows, strict=True)
    ]
    tracked += [
        (key, m, tiers.Tier(m.tier)) for key, m in zip(correction_keys(corrections), correction_rows, strict=True)
    ]
    decay_scores = _decay_scores(workspace, tracked, now)
    return memdir.MemoryDirectory(
        rules=tuple(rules),
        corrections=tuple(corrections),
        reflections=tuple(reflections),
        proposals=tuple(entries),
        sensor=tuple(sensor),
        strategies=tuple(strategies),
        decay_scores=tuple(decay_scores),
        meta=memdir.Meta(exported_at=now, workspace=_lineage(workspace)),
    )


def _decay_scores(
    workspace: Workspace, tracked: Sequence[tuple[str, Memory, tiers.Tier]], now: datetime
) -> list[memdir.DecayScore]:
    if not tracked:
        return []
    uses = dream.recent_uses(workspace=workspace, memories=[m for _, m, _ in tracked], now=now)
    items = [dream.tier_item(m, uses[m.id], key=key, tier=tier.value) for key, m, tier in tracked]
    scores = tiers.scores(items, now).tolist()
    return [
        memdir.DecayScore(
            key=item.key,
            tier=item.tier,
            kind=item.kind,
            base=item.base,
            access_count=item.access_count,
            last_access=item.last_access,
            score=float(score),
            scored_at=now,
            is_correction=item.is_correction,
            recent_uses=tuple(uses[m.id]),
        )
        for item, score, (_, m, _) in zip(items, scores, tracked, strict=True)
    ]


def memdir_export(*, workspace: Workspace, now: datetime | None = None) -> dict[str, str]:
    """The workspace rendered as ``{relative path: text}`` (``memdir.render_directory``)."""
    return memdir.render_directory(memdir_snapshot(workspace=workspace, now=now))


def memdir_zip(files: Mapping[str, str], *, root: str = ZIP_ROOT) -> bytes:
    """A zip of ``files`` under ``root``; the same files give the same bytes (fixed times, sorted names)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(root + path, date_time=_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[path].encode("utf-8"))
    return buffer.getvalue()


# --------------------------------------------------------------------------------------- reading uploads


def _skipped(parts: Sequence[str]) -> bool:
    return any(part.startswith(".") for part in parts) or (bool(parts) and parts[0] == "__MACOSX")


def _strip_common_folder(files: dict[str, str]) -> dict[str, str]:
    tops = {PurePosixPath(p).parts[0] for p in files}
    if len(tops) == 1 and all(len(PurePosixPath(p).parts) > 1 for p in files) and not tops & _LAYOUT_TOPS:
        (top,) = tops
        return {p[len(top) + 1 :]: text for p, text in files.items()}
    return files


def _unsafe(path: str) -> bool:
    parts = path.split("/")
    return not path or path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in parts)


def memdir_files_from_zip(data: bytes) -> dict[str, str]:
    """``{relative path: text}`` of a zip upload (one enclosing folder is looked into). A bad archive or one
    too large is an InvalidInput naming ``file``; unsafe paths and non-UTF-8 files are DirectoryInvalid."""
    if len(data) > MAX_ZIP_BYTES:
        raise InvalidInput(f"file: larger than {MAX_ZIP_BYTES // (1024 * 1024)} MB", field="file")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise InvalidInput("file: not a zip archive", field="file") from None
    with archive:
        infos = [
            i
            for i in archive.infolist()
            if not i.is_dir() and (_unsafe(i.filename) or not _skipped(i.filename.split("/")))
        ]
        if len(infos) > MAX_FILES:
            raise InvalidInput(f"file: more than {MAX_FILES} files", field="file")
        if sum(i.file_size for i in infos) > MAX_TOTAL_BYTES:
            raise InvalidInput(f"file: more than {MAX_TOTAL_BYTES // (1024 * 1024)} MB uncompressed", field="file")
        problems: list[memdir.Problem] = []
        files: dict[str, str] = {}
        for info in infos:
            name = info.filename
            if _unsafe(name):
                problems.append(memdir.Problem(name, None, "unsafe path: paths must be relative and stay inside"))
                continue
            with archive.open(info) as handle:
                raw = handle.read(MAX_FILE_BYTES + 1)
            if len(raw) > MAX_FILE_BYTES:
                problems.append(memdir.Problem(name, None, f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MB"))
                continue
            try:
                files[name] = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                problems.append(memdir.Problem(name, raw.count(b"\n", 0, exc.start) + 1, "not UTF-8 text"))
    if problems:
        raise DirectoryInvalid(problems)
    return _strip_common_folder(files)


def memdir_files_from_json(raw: Any) -> dict[str, str]:
    """Validate ``{"files": {path: text}}`` (the JSON form of an upload)."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("body: expected a JSON object with files", field="body")
    unknown = sorted(str(k) for k in raw if k != "files")
    if unknown:
        raise InvalidInput(f"{unknown[0]}: unknown field; expected files", field=unknown[0])
    files = raw.get("files")
    if not isinstance(files, Mapping) or not files:
        raise InvalidInput("files: expected a non-empty object of path -> text", field="files")
    if len(files) > MAX_FILES:
        raise InvalidInput(f"files: more than {MAX_FILES} files", field="files")
    out: dict[str, str] = {}
    problems: list[memdir.Problem] = []
    for path, text in files.items():
        if not isinstance(text, str):
            raise InvalidInput(f"files.{path}: expected the file's text (a string)", field=f"files.{path}")
        if _unsafe(str(path)):
            problems.append(memdir.Problem(str(path), None, "unsafe path: paths must be relative and stay inside"))
        elif not _skipped(str(path).split("/")):
            out[str(path)] = text
    if problems:
        raise DirectoryInvalid(problems)
    return _strip_common_folder(out)


# ------------------------------------------------------------------------------------------------- import


@dataclass(frozen=True)
class ImportSummary:
    """What an import created and what it skipped because the workspace already held it, per kind."""

    created: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    origin: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"created": self.created, "skipped": self.skipped, "origin": self.origin}


def _line_of(text: str, needle: str) -> int | None:
    index = text.find(needle)
    return None if index < 0 else text.count("\n", 0, index) + 1


def _check(d: memdir.MemoryDirectory, files: Mapping[str, str]) -> list[memdir.Problem]:
    """What the workspace mapping needs beyond a valid directory; every problem, with file and line."""
    problems: list[memdir.Problem] = []

    def where(path: str, needle: str) -> int | None:
        return _line_of(files.get(path, ""), needle)

    for rule in d.rules:
        if len(rule.text) > MAX_CONTENT_CHARS:
            problems.append(
                memdir.Problem(rule.path, where(rule.path, rule.text[:80]), f"rule longer than {MAX_CONTENT_CHARS}")
            )
    for c in d.corrections:
        if len(c.topic) > MAX_TOPIC:
            problems.append(
                memdir.Problem(memdir.CORRECTIONS, where(memdir.CORRECTIONS, c.topic[:80]), "topic longer than 200")
            )
        if len(c.should) > MAX_CONTENT_CHARS:
            problems.append(memdir.Problem(memdir.CORRECTIONS, where(memdir.CORRECTIONS, c.should[:80]), "too long"))
    for r in d.reflections:
        if len(r.context) + len(r.reflection) + len(r.lesson) + 40 > MAX_CONTENT_CHARS:
            problems.append(memdir.Problem(memdir.REFLECTIONS, where(memdir.REFLECTIONS, r.lesson[:80]), "too long"))
    keys: dict[str, str] = {}
    for p in d.proposals:
        line = where(memdir.PROPOSALS, f"## [{p.id}]")
        if len(p.title) > MAX_TITLE:
            problems.append(memdir.Problem(memdir.PROPOSALS, line, f"{p.id}: title longer than {MAX_TITLE}"))
        key = p.key or strategy_key(p.rule)
        if len(key) > MAX_KEY:
            problems.append(memdir.Problem(memdir.PROPOSALS, line, f"{p.id}: key longer than {MAX_KEY}"))
        if key in keys:
            problems.append(memdir.Problem(memdir.PROPOSALS, line, f"{p.id}: same key as {keys[key]} ({key})"))
        keys.setdefault(key, p.id)
    for reading in d.sensor:
        line = where(memdir.SENSOR, f'"id": {json.dumps(reading.id, ensure_ascii=False)}')
        if len(reading.task_type) > MAX_TASK_TYPE:
            problems.append(memdir.Problem(memdir.SENSOR, line, f"{reading.id}: task_type longer than {MAX_TASK_TYPE}"))
        if len(reading.approach) > MAX_APPROACH:
            problems.append(memdir.Problem(memdir.SENSOR, line, f"{reading.id}: approach longer than {MAX_APPROACH}"))
    for strat in d.strategies:
        if len(strat.key) > MAX_KEY:
            needle = f'"key": {json.dumps(strat.key, ensure_ascii=False)}'
            problems.append(memdir.Problem(memdir.EVO_DEVO, where(memdir.EVO_DEVO, needle), "key too long"))
    known = {r.id for r in d.rules if r.id} | set(correction_keys(d.corrections))
    for item in d.decay_scores:
        if item.key not in known:
            needle = f'"key": {json.dumps(item.key, ensure_ascii=False)}'
            problems.append(
                memdir.Problem(
                    memdir.DECAY_SCORES,
                    where(memdir.DECAY_SCORES, needle),
                    f"key {item.key!r} names no rule (by its id) and no correction (correction:<date>#<n>)",
                )
            )
    return problems


def _decay_values(item: memdir.DecayScore | None) -> dict[str, Any]:
    if item is None:
        return {}
    return {"base": item.base, "recent_uses": [u.isoformat() for u in item.recent_uses]}


def _sensor_signature(
    task_type: str, approach: str, result: str, at: datetime, lesson: str, issue: str, solution: str
) -> tuple[str, ...]:
    return (task_type, approach, result, at.isoformat(), lesson, issue, solution)


def memdir_import(
    *, workspace: Workspace, files: Mapping[str, str], actor: User | None, now: datetime | None = None
) -> ImportSummary:
    """Import a directory into ``workspace``: everything or, on any problem, nothing (``DirectoryInvalid``)."""
    now = now or timezone.now()
    try:
        directory = memdir.parse_directory(files)
    except memdir.MemdirError as exc:
        raise DirectoryInvalid(exc.problems) from None
    problems = _check(directory, files)
    if problems:
        raise DirectoryInvalid(problems)
    with transaction.atomic():
        Workspace.objects.select_for_update().filter(pk=workspace.pk).values_list("pk").first()
        return _import(workspace, directory, actor, now)


def _import(workspace: Workspace, d: memdir.MemoryDirectory, actor: User | None, now: datetime) -> ImportSummary:
    created: dict[str, int] = {}
    skipped: dict[str, int] = {}
    decay = {item.key: item for item in d.decay_scores}

    # Proposals first: rules link to them by their P-id.
    existing = {
        p.dedupe_key: p for p in Proposal.objects.filter(workspace=workspace).exclude(dedupe_key="").order_by("pk")
    }
    by_memdir_id: dict[str, Proposal] = {}
    strategies = {s.key: s for s in d.strategies}
    used_keys: set[str] = set()
    n_new = 0
    for entry in d.proposals:
        key = entry.key or strategy_key(entry.rule)
        used_keys.add(key)
        record = strategies.get(key)
        if key in existing:
            by_memdir_id[entry.id] = existing[key]
            continue
        payload: dict[str, Any] = {
            "key": key,
            "rule": entry.rule,
            "weight": entry.weight,
            "task_type": entry.task_type,
            "evidence": list(entry.evidence or (record.evidence if record else ())),
            "memdir_id": entry.id,
        }
        if entry.status == "vetoed" and entry.reason:
            payload["vetoes"] = [entry.reason]
        proposal = Proposal.objects.create(
            workspace=workspace,
            kind=ProposalKind.STRATEGY,
            status=entry.status,
            title=entry.title,
            rationale=f"Imported from the memory-evolution directory ({entry.id}).",
            payload=payload,
            dedupe_key=key,
            created_by="import",
            created_at=record.created_at if record is not None else _midnight(entry.created),
            decided_at=_midnight(entry.decided) if entry.decided else None,
            decision_reason=entry.reason or "",
        )
        existing[key] = proposal
        by_memdir_id[entry.id] = proposal
        n_new += 1
    for s in d.strategies:
        if s.key in used_keys:
            continue
        used_keys.add(s.key)
        if s.key in existing:
            continue
        payload = {
            "key": s.key,
            "rule": s.rule,
            "weight": s.weight,
            "task_type": s.task_type,
            "evidence": list(s.evidence),
        }
        if s.proposal_id is not None and s.proposal_id not in by_memdir_id:
            payload["memdir_id"] = s.proposal_id
        proposal = Proposal.objects.create(
            workspace=workspace,
            kind=ProposalKind.STRATEGY,
            status=_FROM_STRATEGY_STATUS[s.status],
            title=s.title,
            rationale="Imported from engine/evo_devo.json.",
            payload=payload,
            dedupe_key=s.key,
            created_by="import",
            created_at=s.created_at,
            decided_at=None if s.status == "proposed" else s.created_at,
        )
        existing[s.key] = proposal
        if s.proposal_id is not None:
            by_memdir_id.setdefault(s.proposal_id, proposal)
        n_new += 1
    created["proposals"] = n_new
    skipped["proposals"] = max(0, len(used_keys) - n_new)

    # Entries the workspace already holds are skipped, counted as a multiset: a directory may hold two equal
    # readings (or reflections) and both are imported once, however often the directory is imported.
    seen = Counter(
        _sensor_signature(o.task_type, o.approach, o.result, o.created_at, o.lesson, o.issue, o.solution)
        for o in Outcome.objects.filter(workspace=workspace)
    )
    outcomes: list[Outcome] = []
    for reading in d.sensor:
        reading_key = _sensor_signature(
            reading.task_type,
            reading.approach,
            reading.result,
            reading.at,
            reading.lesson,
            reading.issue,
            reading.solution,
        )
        if seen[reading_key] > 0:
            seen[reading_key] -= 1
            continue
        outcomes.append(
            Outcome(
                workspace=workspace,
                task_type=reading.task_type,
                approach=reading.approach,
                result=reading.result,
                lesson=reading.lesson,
                issue=reading.issue,
                solution=reading.solution,
                source="import",
                created_at=reading.at,
            )
        )
    Outcome.objects.bulk_create(outcomes, batch_size=1000)
    created["outcomes"] = len(outcomes)
    skipped["outcomes"] = len(d.sensor) - len(outcomes)

    access: dict[int, memdir.DecayScore] = {}
    items: list[MemoryInput] = []

    # Corrections before rules: they win their topic now as they did when recorded, and a rule that
    # outlived a correction in the source was made after it.
    have = Counter(
        (_day(m.created_at), *(_text_field(_meta(m, "correction"), k) for k in _CORRECTION_KEYS))
        for m in Memory.objects.filter(workspace=workspace, memory_type=MemoryType.CORRECTION)
    )
    for index, (key, c) in enumerate(zip(correction_keys(d.corrections), d.corrections, strict=True)):
        correction_sig = (c.date, c.wrong, c.should, c.context, c.topic)
        if have[correction_sig] > 0:
            have[correction_sig] -= 1
            continue
        item = decay.get(key)
        if item is not None:
            access[len(items)] = item
        items.append(
            correction_memory_input(
                CorrectionInput(
                    what_i_did_wrong=c.wrong,
                    what_i_should_do=c.should,
                    context=c.context,
                    topic=c.topic,
                    created_at=_midnight(c.date),
                ),
                origin=IMPORT_ORIGIN,
                tier=item.tier.value if item is not None else Tier.HOT,
                metadata={"memdir": {"seq": index}, **({"decay": _decay_values(item)} if item else {})},
            )
        )
    n_corrections = len(items)
    created["corrections"] = n_corrections
    skipped["corrections"] = len(d.corrections) - n_corrections

    have_reflections = Counter(
        (_day(m.created_at), *(_text_field(reflection_fields(m) or {}, k) for k in _REFLECTION_KEYS))
        for m in Memory.objects.filter(workspace=workspace, memory_type=MemoryType.REFLECTION)
    )
    n_reflections = 0
    for index, r in enumerate(d.reflections):
        reflection_sig = (r.date, r.context, r.reflection, r.lesson, r.topic or "")
        if have_reflections[reflection_sig] > 0:
            have_reflections[reflection_sig] -= 1
            continue
        items.append(
            reflection_memory_input(
                ReflectionInput(
                    context=r.context,
                    reflection=r.reflection,
                    lesson=r.lesson,
                    topic=r.topic,
                    created_at=_midnight(r.date),
                ),
                origin=IMPORT_ORIGIN,
                metadata={"memdir": {"seq": index}},
            )
        )
        n_reflections += 1
    created["reflections"] = n_reflections
    skipped["reflections"] = len(d.reflections) - n_reflections
    if items:
        made = memories_create(workspace=workspace, actor=actor, items=items, channel="import")
        _set_access(made, access)

    rule_ids: set[str] = set()
    rule_texts: Counter[tuple[str, str]] = Counter()
    for m in Memory.objects.filter(workspace=workspace, memory_type=MemoryType.STRATEGY).exclude(
        status=Status.FORGOTTEN
    ):
        place = _meta(m, "memdir")
        if isinstance(place.get("id"), str):
            rule_ids.add(place["id"])
        rule_texts[(one_line(m.content), m.tier)] += 1
    rules: list[MemoryInput] = []
    access = {}
    for index, rule in enumerate(d.rules):
        tier = rule.tier.value
        if rule.id is not None and rule.id in rule_ids:
            continue
        if rule.id is None and rule_texts[(rule.text, tier)] > 0:
            rule_texts[(rule.text, tier)] -= 1
            continue
        rule_id = rule.id or f"R-{uuid.uuid4().hex[:12]}"
        rule_ids.add(rule_id)
        item = decay.get(rule_id)
        if item is not None:
            access[len(rules)] = item
        linked = by_memdir_id.get(rule.source) if rule.source else None
        payload = linked.payload if linked is not None and isinstance(linked.payload, dict) else {}
        task_type = payload.get("task_type") if isinstance(payload.get("task_type"), str) else None
        meta: dict[str, Any] = {
            "memdir": {
                "area": rule.area,
                "topic": rule.topic,
                "section": rule.section,
                "id": rule_id,
                "added": rule.added.isoformat() if rule.added else None,
                "source": rule.source,
                "seq": index,
            }
        }
        if linked is not None:
            meta["strategy"] = {"key": linked.dedupe_key, "proposal_id": linked.pk, "task_type": task_type}
        if item is not None:
            meta["decay"] = _decay_values(item)
        rules.append(
            MemoryInput(
                content=rule.text,
                memory_type=MemoryType.STRATEGY,
                subject=(task_type or "")[:MAX_TOPIC] if rule.origin == "engine" else "",
                origin=ENGINE_ORIGIN if rule.origin == "engine" else IMPORT_ORIGIN,
                tier=tier,
                status=Status.ARCHIVED if rule.area == "archive" else Status.ACTIVE,
                created_at=_midnight(rule.added) if rule.added else now,
                metadata=meta,
            )
        )
    if rules:
        made = memories_create(workspace=workspace, actor=actor, items=rules, channel="import")
        _set_access(made, access)
    created["rules"] = len(rules)
    skipped["rules"] = len(d.rules) - len(rules)

    origin = d.meta.workspace
    audit.record_save(
        audit.record_build(
            workspace=workspace,
            evolver=LINEAGE_EVOLVER,
            action=Action.IMPORT,
            reason=f"memory directory of {origin!r} imported"[:2000],
            after={
                audit.LINEAGE: {
                    "origin": origin,
                    "exported_at": d.meta.exported_at.isoformat() if d.meta.exported_at else None,
                    "created": created,
                    "skipped": skipped,
                }
            },
            actor=actor,
            now=now,
        )
    )
    return ImportSummary(created=created, skipped=skipped, origin=origin)


_CORRECTION_KEYS: Final = ("what_i_did_wrong", "what_i_should_do", "context", "topic")
_REFLECTION_KEYS: Final = ("context", "reflection", "lesson", "topic")


def _set_access(memories: Sequence[Memory], access: Mapping[int, memdir.DecayScore]) -> None:
    """Give the imported memories the access count and last access their decay entries carry."""
    changed: list[Memory] = []
    for index, item in access.items():
        memory = memories[index]
        memory.access_count = item.access_count
        memory.last_accessed = item.last_access
        changed.append(memory)
    if changed:
        Memory.objects.bulk_update(changed, ["access_count", "last_accessed"], batch_size=500)
