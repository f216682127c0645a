"""Import a memory-evolution directory (docs/engine.md) into a workspace, from a zip or JSON upload.

Import parses every file first and checks what the workspace mapping needs on top (decay keys that name
nothing, values longer than the database allows); any problem raises ``DirectoryInvalid`` listing every
problem with its file and line, and nothing is written. A valid directory is imported in one transaction
and merged: entries the workspace already holds (same proposal key, same sensor record, same rule id,
same correction or reflection) are skipped, so importing twice adds nothing. Corrections are written
before rules and go through the write-time policy, so they win their topic as when they were recorded.

Where each file's entries go is the mapping ``evolution.memdir_export`` writes, read the other way.
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
from typing import Annotated, Any, Final

from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.utils import timezone
from pydantic import BeforeValidator, WithJsonSchema

from core.errors import DomainError, InvalidInput
from core.schemas import RequestBody, parse, reject
from evolution.algorithms import memdir
from evolution.algorithms.engine import strategy_key
from evolution.engine import ENGINE_ORIGIN
from evolution.engine_inputs import (
    MAX_APPROACH,
    MAX_TASK_TYPE,
    MAX_TOPIC,
    CorrectionInput,
    ReflectionInput,
    correction_memory_input,
    one_line,
    reflection_memory_input,
)
from evolution.engine_selectors import reflection_fields
from evolution.memdir_common import (
    LINEAGE_EVOLVER,
    RULE_TYPES,
    correction_keys,
    derived_rule_ids,
    meta_section,
    text_field,
    utc_day,
)
from evolution.models import Outcome, Proposal, ProposalKind, ProposalStatus
from history import audit
from history.models import Action
from memories.inputs import MAX_CONTENT_CHARS, MemoryInput
from memories.models import Memory, MemoryType, Status, Tier, Workspace
from memories.services import memories_create

User = AbstractBaseUser | AnonymousUser

IMPORT_ORIGIN: Final = "import:memory-evolution"
MAX_ZIP_BYTES: Final = 20 * 1024 * 1024
MAX_FILES: Final = 2000
MAX_FILE_BYTES: Final = 5 * 1024 * 1024
MAX_TOTAL_BYTES: Final = 50 * 1024 * 1024
MAX_TITLE: Final = 300
MAX_KEY: Final = 200
# Top-level names of the layout: an archive whose files all sit in one folder of another name (a zipped
# ~/memory-evolution) is read from inside that folder.
_LAYOUT_TOPS: Final = frozenset({"hot", "warm", "cold", "engine", "proposals", "reflections", "meta.json"})

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


def _file_text(value: Any) -> str:
    if not isinstance(value, str):
        reject("expected the file's text (a string)")
    return value


def _file_map(value: Any) -> Any:
    if not isinstance(value, dict) or not value:
        reject("expected a non-empty object of path -> text")
    if len(value) > MAX_FILES:
        reject(f"more than {MAX_FILES} files")
    return value


class ImportIn(RequestBody):
    """POST import/ as JSON: the directory's files."""

    files: Annotated[
        dict[str, Annotated[str, BeforeValidator(_file_text)]],
        BeforeValidator(_file_map),
        WithJsonSchema(
            {
                "type": "object",
                "additionalProperties": {"type": "string"},
                "minProperties": 1,
                "maxProperties": MAX_FILES,
                "description": "path in the directory (hot/memory.md, engine/sensor.json...) -> the file's text",
            }
        ),
    ]


def _zip_upload(value: Any) -> UploadedFile:
    if not isinstance(value, UploadedFile):
        reject("attach the directory as a zip in the field 'file'")
    if value.size is not None and value.size > MAX_ZIP_BYTES:
        reject(f"larger than {MAX_ZIP_BYTES // (1024 * 1024)} MB")
    return value


class ImportUploadIn(RequestBody):
    """POST import/ as multipart/form-data: the directory as a zip."""

    file: Annotated[
        Any,
        BeforeValidator(_zip_upload),
        WithJsonSchema(
            {
                "type": "string",
                "format": "binary",
                "description": f"a zip of the directory, at most {MAX_ZIP_BYTES // (1024 * 1024)} MB",
            }
        ),
    ]


def memdir_files_from_json(raw: Any) -> dict[str, str]:
    """The files of ``{"files": {path: text}}`` (the JSON form of an upload); unsafe paths are DirectoryInvalid."""
    out: dict[str, str] = {}
    problems: list[memdir.Problem] = []
    for path, text in parse(ImportIn, raw).files.items():
        if _unsafe(path):
            problems.append(memdir.Problem(path, None, "unsafe path: paths must be relative and stay inside"))
        elif not _skipped(path.split("/")):
            out[path] = text
    if problems:
        raise DirectoryInvalid(problems)
    return _strip_common_folder(out)


def memdir_files_from_upload(files: Mapping[str, Any]) -> dict[str, str]:
    """The files of a multipart upload's zip (``files``: the request's uploaded files, by form field)."""
    upload: UploadedFile = parse(ImportUploadIn, dict(files.items())).file
    return memdir_files_from_zip(upload.read())


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
    # PostgreSQL text cannot hold U+0000; a file that has one is refused like any other bad line.
    unstorable = [
        memdir.Problem(path, text.count("\n", 0, text.index("\x00")) + 1, "contains the NUL character (U+0000)")
        for path, text in files.items()
        if "\x00" in text
    ]
    if unstorable:
        raise DirectoryInvalid(unstorable)
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
        (utc_day(m.created_at), *(text_field(meta_section(m, "correction"), k) for k in _CORRECTION_KEYS))
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
        (utc_day(m.created_at), *(text_field(reflection_fields(m) or {}, k) for k in _REFLECTION_KEYS))
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
    for m in Memory.objects.filter(workspace=workspace, memory_type__in=RULE_TYPES).exclude(status=Status.FORGOTTEN):
        place = meta_section(m, "memdir")
        if isinstance(place.get("id"), str):
            rule_ids.add(place["id"])
        # A rule made here carries no directory id; its export named it after the memory.
        rule_ids.update(derived_rule_ids(m))
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
        if rule.kind == "preference":
            subject = rule.section[:MAX_TOPIC]
        else:
            subject = (task_type or "")[:MAX_TOPIC] if rule.origin == "engine" else ""
        rules.append(
            MemoryInput(
                content=rule.text,
                memory_type=MemoryType.PREFERENCE if rule.kind == "preference" else MemoryType.STRATEGY,
                subject=subject,
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
