"""typedmem-style typed-memory rules: conflict policies per slot, contradiction clusters, preference
drift, goal resolution and stale-memory summary groups.

A conflict slot is (workspace, memory_type, subject); the caller compares memories of one workspace.
A memory without a subject never collides. Times are timezone-aware datetimes; `now` is passed in.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import sparse
from scipy.sparse.csgraph import connected_components

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]

REPLACE_LOG_KEEP = 20
CORRECTION_TYPE = "correction"


class ConflictPolicy(StrEnum):
    """What happens when an incoming memory lands in an occupied slot."""

    REPLACE = "replace"
    FLAG = "flag"
    KEEP_BOTH = "keep_both"
    SUPERSEDE = "supersede"
    REINFORCE = "reinforce"


DEFAULT_POLICIES: Mapping[str, ConflictPolicy] = MappingProxyType(
    {
        "preference": ConflictPolicy.REPLACE,
        "goal": ConflictPolicy.REPLACE,
        "fact": ConflictPolicy.KEEP_BOTH,
        "event": ConflictPolicy.KEEP_BOTH,
        "observation": ConflictPolicy.KEEP_BOTH,
        "state": ConflictPolicy.FLAG,
    }
)


def policy_for(memory_type: str, overrides: Mapping[str, ConflictPolicy] | None = None) -> ConflictPolicy:
    """The policy of a memory type: workspace overrides, then DEFAULT_POLICIES, else KEEP_BOTH."""
    if overrides is not None and memory_type in overrides:
        return overrides[memory_type]
    return DEFAULT_POLICIES.get(memory_type, ConflictPolicy.KEEP_BOTH)


HIGHEST_ORIGIN_TIER = 1
_TIER1_PREFIXES = ("user:", "cli:", "api:", "import:")


def origin_tier(origin: str) -> int:
    """Source authority of an origin string; 1 is the highest (the rule of memories.inputs.origin_tier).

    1: user:, cli:, api:, import: (a person or their tools); 3: engine: (a proposal of the strategy
    engine); 2: everything else (evolvers, agents, ingestion pipelines).
    """
    if origin.startswith(_TIER1_PREFIXES):
        return HIGHEST_ORIGIN_TIER
    if origin.startswith("engine:"):
        return 3
    return 2


def _normalise(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True, slots=True)
class SlotMemory:
    """The fields of one memory that conflict resolution reads.

    origin_tier: the stored authority tier (1 highest); None derives it from `origin`.
    is_correction marks a memory written as a user correction of this slot (POST /corrections/); a
    memory whose memory_type is "correction" also counts and collides with any type on its subject.
    """

    id: str
    memory_type: str
    subject: str | None
    content: str
    confidence: float
    origin: str
    created_at: dt.datetime
    replace_log: tuple[str, ...] = ()
    replace_count: int = 0
    version: int = 1
    is_correction: bool = False
    origin_tier: int | None = None

    @property
    def corrects(self) -> bool:
        return self.is_correction or self.memory_type == CORRECTION_TYPE

    @property
    def authority(self) -> int:
        return self.origin_tier if self.origin_tier is not None else origin_tier(self.origin)

    @property
    def subject_key(self) -> str | None:
        if self.subject is None or not self.subject.strip():
            return None
        return _normalise(self.subject)


class ConflictAction(StrEnum):
    """What the caller must do. INSERT: no collision, store the incoming memory normally."""

    INSERT = "insert"
    REPLACE = "replace"
    SKIP = "skip"
    FLAG = "flag"
    KEEP_BOTH = "keep_both"
    SUPERSEDE = "supersede"
    REINFORCE = "reinforce"


@dataclass(frozen=True, slots=True)
class ConflictDecision:
    """Outcome of one incoming memory against the memory occupying its slot.

    REPLACE: overwrite the existing memory (id kept) with `content` / `confidence` and the new
    replace_log / replace_count / version; the incoming memory is not stored separately.
    SKIP: store nothing, change nothing. FLAG: store the incoming memory and cross-link the pairs in
    conflicts_with. KEEP_BOTH / INSERT: store the incoming memory. SUPERSEDE: store the incoming memory
    and mark the existing one superseded by it. REINFORCE: do not store the incoming memory; raise the
    existing memory's confidence to `confidence` and bump its version.
    The replace_log / replace_count / version / confidence / content fields always describe the existing
    memory after the decision (unchanged unless the action changes it).
    """

    action: ConflictAction
    policy: ConflictPolicy
    reason: str
    existing_id: str
    incoming_id: str
    content: str
    confidence: float
    replace_log: tuple[str, ...]
    replace_count: int
    version: int
    conflicts_with: tuple[tuple[str, str], ...] = ()


def same_slot(existing: SlotMemory, incoming: SlotMemory) -> bool:
    """Whether the two memories occupy one slot: same subject (case/space-insensitive) and same type,
    or the incoming memory is of type "correction". No subject never collides."""
    key = existing.subject_key
    if key is None or key != incoming.subject_key:
        return False
    return incoming.memory_type == existing.memory_type or incoming.memory_type == CORRECTION_TYPE


def _aware(moment: dt.datetime, name: str) -> dt.datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return moment


def decide_conflict(
    existing: SlotMemory,
    incoming: SlotMemory,
    policy: ConflictPolicy,
    now: dt.datetime,
) -> ConflictDecision:
    """Apply `policy` (normally policy_for(existing.memory_type)) to an incoming memory.

    Corrections always win: under REPLACE they replace without the guards below, under every other
    policy they SUPERSEDE the existing memory (history kept, nothing overwritten).
    REPLACE and SUPERSEDE guards, in order, each giving SKIP: identical content (nothing changes, and a
    no-op must not count as preference drift); lower source authority (larger origin tier); older
    created_at; lower confidence.
    REPLACE appends when the incoming value became true (its created_at, at most now; ISO 8601) to replace_log
    keeping the last 20, replace_count + 1, version + 1.
    FLAG with identical content is no contradiction: KEEP_BOTH without links.
    REINFORCE with identical content combines confidences as independent evidence, 1 - (1-a)(1-b), and
    bumps the version; with different content it falls back to KEEP_BOTH.
    """
    _aware(now, "now")

    def decision(
        action: ConflictAction,
        reason: str,
        *,
        content: str = existing.content,
        confidence: float = existing.confidence,
        replace_log: tuple[str, ...] = existing.replace_log,
        replace_count: int = existing.replace_count,
        version: int = existing.version,
        links: tuple[tuple[str, str], ...] = (),
    ) -> ConflictDecision:
        return ConflictDecision(
            action=action,
            policy=policy,
            reason=reason,
            existing_id=existing.id,
            incoming_id=incoming.id,
            content=content,
            confidence=confidence,
            replace_log=replace_log,
            replace_count=replace_count,
            version=version,
            conflicts_with=links,
        )

    def replaced(reason: str) -> ConflictDecision:
        # The time the new value became true (an imported preference of 25 days ago was true then), not the
        # time it was written: the drift detector and its timeline count changes of the value.
        changed_at = min(incoming.created_at, now)
        log = (*existing.replace_log, changed_at.isoformat())[-REPLACE_LOG_KEEP:]
        return decision(
            ConflictAction.REPLACE,
            reason,
            content=incoming.content,
            confidence=incoming.confidence,
            replace_log=log,
            replace_count=existing.replace_count + 1,
            version=existing.version + 1,
        )

    if not same_slot(existing, incoming):
        return decision(ConflictAction.INSERT, "no slot collision")
    slot = f"{existing.memory_type}[{existing.subject}]"
    identical = _normalise(existing.content) == _normalise(incoming.content)

    if incoming.corrects and not identical:
        if policy is ConflictPolicy.REPLACE:
            return replaced(f"correction replaces {slot}")
        return decision(ConflictAction.SUPERSEDE, f"correction supersedes {slot}")

    if policy in (ConflictPolicy.REPLACE, ConflictPolicy.SUPERSEDE):
        _aware(existing.created_at, "existing.created_at")
        _aware(incoming.created_at, "incoming.created_at")
        if identical:
            return decision(ConflictAction.SKIP, f"{slot} already holds this content")
        if incoming.authority > existing.authority:
            return decision(
                ConflictAction.SKIP,
                f"lower source authority (tier {incoming.authority} < tier {existing.authority}) for {slot}",
            )
        if incoming.created_at < existing.created_at:
            return decision(ConflictAction.SKIP, f"incoming is older than the current {slot}")
        if incoming.confidence < existing.confidence:
            return decision(
                ConflictAction.SKIP,
                f"incoming is less confident ({incoming.confidence:g} < {existing.confidence:g}) for {slot}",
            )
        if policy is ConflictPolicy.REPLACE:
            return replaced(f"newer value replaces {slot}")
        return decision(ConflictAction.SUPERSEDE, f"newer value supersedes {slot}")

    if policy is ConflictPolicy.FLAG:
        if identical:
            return decision(ConflictAction.KEEP_BOTH, f"{slot} repeated, no contradiction")
        return decision(
            ConflictAction.FLAG,
            f"conflicting values for {slot}",
            links=((existing.id, incoming.id), (incoming.id, existing.id)),
        )

    if policy is ConflictPolicy.REINFORCE and identical:
        combined = 1.0 - (1.0 - existing.confidence) * (1.0 - incoming.confidence)
        return decision(
            ConflictAction.REINFORCE,
            f"{slot} confirmed again",
            confidence=min(1.0, max(0.0, combined)),
            version=existing.version + 1,
        )
    return decision(ConflictAction.KEEP_BOTH, f"{slot} keeps both values")


def contradiction_clusters(conflict_edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Connected components (size >= 2) of the undirected conflicts_with graph.

    Self-links are ignored. Ids inside a cluster are sorted; clusters are sorted by size (largest first)
    then by their first id, so the output is stable across runs.
    """
    index: dict[str, int] = {}
    src: list[int] = []
    dst: list[int] = []
    for a, b in conflict_edges:
        if a == b:
            continue
        src.append(index.setdefault(a, len(index)))
        dst.append(index.setdefault(b, len(index)))
    n = len(index)
    if n == 0:
        return []
    graph = sparse.coo_matrix(
        (
            np.ones(len(src), dtype=np.int8),
            (np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)),
        ),
        shape=(n, n),
    ).tocsr()
    _, labels = connected_components(graph, directed=False)
    ids = np.array(list(index), dtype=object)
    sizes = np.bincount(labels)
    clusters = [sorted(str(x) for x in ids[labels == lab]) for lab in np.flatnonzero(sizes >= 2)]
    return sorted(clusters, key=lambda c: (-len(c), c[0]))


@dataclass(frozen=True, slots=True)
class DriftFlag:
    """A drift annotation on one memory: its REPLACE log shows >= min_replaces changes in one window."""

    memory_id: str
    reason: str
    replaces_in_window: int
    first_replace_at: dt.datetime
    last_replace_at: dt.datetime
    flagged_at: dt.datetime
    window_days: float

    def to_dict(self) -> dict[str, Any]:
        """JSON form for metadata["drift_flags"] (timestamps ISO 8601)."""
        return {
            "memory_id": self.memory_id,
            "reason": self.reason,
            "replaces_in_window": self.replaces_in_window,
            "first_replace_at": self.first_replace_at.isoformat(),
            "last_replace_at": self.last_replace_at.isoformat(),
            "flagged_at": self.flagged_at.isoformat(),
            "window_days": self.window_days,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DriftFlag:
        return cls(
            memory_id=str(data["memory_id"]),
            reason=str(data["reason"]),
            replaces_in_window=int(data["replaces_in_window"]),
            first_replace_at=parse_timestamp(str(data["first_replace_at"])),
            last_replace_at=parse_timestamp(str(data["last_replace_at"])),
            flagged_at=parse_timestamp(str(data["flagged_at"])),
            window_days=float(data["window_days"]),
        )


def parse_timestamp(value: str) -> dt.datetime:
    """ISO 8601 -> aware datetime; a timestamp without offset is taken as UTC."""
    moment = dt.datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=dt.UTC)


def drift_flags(
    replace_logs: Mapping[str, Sequence[str]],
    now: dt.datetime,
    *,
    min_replaces: int = 3,
    window_days: float = 30.0,
    existing_flags: Mapping[str, Sequence[DriftFlag]] | None = None,
    labels: Mapping[str, str] | None = None,
) -> list[DriftFlag]:
    """New drift flags: memories with >= min_replaces replace_log entries in (now - window_days, now].

    Idempotent per window: no new flag when an existing flag of the memory already covers a replace of
    the current window (its last_replace_at >= the window's first replace). Re-running gives nothing
    new; a later burst of changes, all after the last flagged one, gives a new flag.
    labels map ids to slot names such as "preference[editor]" (default: the id); reason reads
    "preference[editor] changed 3x in last 30d". Flags are returned sorted by memory id.
    """
    _aware(now, "now")
    if min_replaces < 1 or window_days <= 0:
        raise ValueError("min_replaces must be >= 1 and window_days > 0")
    start = now - dt.timedelta(days=window_days)
    flags: list[DriftFlag] = []
    for memory_id in sorted(replace_logs):
        stamps = sorted(t for t in map(parse_timestamp, replace_logs[memory_id]) if start < t <= now)
        if len(stamps) < min_replaces:
            continue
        previous = (existing_flags or {}).get(memory_id, ())
        if any(flag.last_replace_at >= stamps[0] for flag in previous):
            continue
        label = (labels or {}).get(memory_id, memory_id)
        flags.append(
            DriftFlag(
                memory_id=memory_id,
                reason=f"{label} changed {len(stamps)}x in last {window_days:g}d",
                replaces_in_window=len(stamps),
                first_replace_at=stamps[0],
                last_replace_at=stamps[-1],
                flagged_at=now,
                window_days=float(window_days),
            )
        )
    return flags


def _unit_rows(vectors: npt.ArrayLike) -> FloatArray:
    v = np.asarray(vectors, dtype=np.float64)
    if v.ndim != 2:
        raise ValueError("vectors must be 2-dimensional (n, d)")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    out = np.zeros_like(v)
    np.divide(v, norms, out=out, where=norms > 0)
    return out


@dataclass(frozen=True, slots=True, eq=False)
class GoalMatches:
    """Best evidence per goal: best_index (-1 when there is no evidence), best_score cosine, resolved."""

    best_index: IntArray
    best_score: FloatArray
    resolved: BoolArray
    threshold: float

    def reason(self, k: int, evidence_ids: Sequence[str] | None = None) -> str:
        """Audit sentence for goal `k`; `evidence_ids` maps evidence positions to memory ids."""
        j = int(self.best_index[k])
        if j < 0:
            return "no evidence to match"
        name = evidence_ids[j] if evidence_ids is not None else str(j)
        op = ">=" if self.resolved[k] else "<"
        return f"best evidence {name} cosine {self.best_score[k]:.4f} {op} {self.threshold:g}"


def goal_matches(
    goal_vecs: npt.ArrayLike,
    evidence_vecs: npt.ArrayLike,
    threshold: float = 0.85,
    *,
    chunk: int = 1024,
) -> GoalMatches:
    """For each goal the evidence (event/outcome/finding) with the highest cosine; resolved when >= threshold.

    Vectors are L2-normalised here (zero vectors score 0). Goals are processed `chunk` at a time to bound
    memory. Ties go to the lower evidence position.
    """
    goals = _unit_rows(goal_vecs)
    evidence = _unit_rows(evidence_vecs)
    g = goals.shape[0]
    if evidence.shape[0] == 0 or g == 0:
        return GoalMatches(
            best_index=np.full(g, -1, dtype=np.intp),
            best_score=np.zeros(g, dtype=np.float64),
            resolved=np.zeros(g, dtype=bool),
            threshold=float(threshold),
        )
    if goals.shape[1] != evidence.shape[1]:
        raise ValueError("goal and evidence vectors must have the same dimension")
    best_index = np.empty(g, dtype=np.intp)
    best_score = np.empty(g, dtype=np.float64)
    for s in range(0, g, max(chunk, 1)):
        sims = goals[s : s + chunk] @ evidence.T
        best = np.argmax(sims, axis=1)
        best_index[s : s + chunk] = best
        best_score[s : s + chunk] = np.clip(sims[np.arange(best.size), best], -1.0, 1.0)
    return GoalMatches(
        best_index=best_index,
        best_score=best_score,
        resolved=best_score >= threshold,
        threshold=float(threshold),
    )


HALF_LIFE_DAYS: Mapping[str, float] = MappingProxyType({"event": 14.0, "observation": 7.0})
DEFAULT_HALF_LIFE_DAYS = 30.0


def half_lives(memory_types: Sequence[str], overrides: Mapping[str, float] | None = None) -> FloatArray:
    """Confidence half-life in days per memory type: overrides, then HALF_LIFE_DAYS, else 30 d."""
    table = {**HALF_LIFE_DAYS, **(overrides or {})}
    return np.fromiter(
        (table.get(t, DEFAULT_HALF_LIFE_DAYS) for t in memory_types),
        dtype=np.float64,
        count=len(memory_types),
    )


def decayed_confidence(confidence: npt.ArrayLike, age_days: npt.ArrayLike, half_life_days: npt.ArrayLike) -> FloatArray:
    """confidence * 0.5 ** (age_days / half_life_days), element-wise.

    Negative ages count as 0; a non-positive half-life gives 0. (ran) event (14 d) at confidence 1.0,
    60 days old -> 0.051271.
    """
    conf = np.asarray(confidence, dtype=np.float64)
    age = np.maximum(np.asarray(age_days, dtype=np.float64), 0.0)
    hl = np.asarray(half_life_days, dtype=np.float64)
    conf, age, hl = np.broadcast_arrays(conf, age, hl)
    out = np.zeros(conf.shape, dtype=np.float64)
    positive = hl > 0
    out[positive] = conf[positive] * np.exp2(-age[positive] / hl[positive])
    return out


@dataclass(frozen=True, slots=True)
class SummaryGroup:
    """Stale memories of one (type, subject) slot to condense into one summary fact."""

    memory_type: str
    subject: str
    indices: tuple[int, ...]
    decayed_confidence: tuple[float, ...]


def summary_groups(
    memory_types: Sequence[str],
    subjects: Sequence[str | None],
    confidence: npt.ArrayLike,
    age_days: npt.ArrayLike,
    excluded: npt.ArrayLike,
    *,
    confidence_floor: float = 0.3,
    min_size: int = 3,
    cluster_types: Sequence[str] = ("event", "observation"),
    half_life_overrides: Mapping[str, float] | None = None,
) -> list[SummaryGroup]:
    """(type, subject) groups of >= 3 memories whose decayed confidence is < 0.3.

    excluded: True for memories that are summaries (summarizes non-empty) or already summarized
    (summarized_by set); they never join a group. Memories without a subject or outside cluster_types
    are skipped. Subjects match case/space-insensitively (first spelling shown). Groups are sorted by
    (type, subject); indices (positions in the inputs) ascend.
    """
    n = len(memory_types)
    if len(subjects) != n:
        raise ValueError("memory_types and subjects must have the same length")
    conf = np.asarray(confidence, dtype=np.float64).ravel()
    age = np.asarray(age_days, dtype=np.float64).ravel()
    skip = np.asarray(excluded, dtype=bool).ravel()
    if not conf.shape == age.shape == skip.shape == (n,):
        raise ValueError("confidence, age_days and excluded must have one entry per memory")
    decayed = decayed_confidence(conf, age, half_lives(memory_types, half_life_overrides))
    typed = np.fromiter((t in cluster_types for t in memory_types), dtype=bool, count=n)
    has_subject = np.fromiter((s is not None and bool(s.strip()) for s in subjects), dtype=bool, count=n)
    eligible = np.flatnonzero(typed & has_subject & ~skip & (decayed < confidence_floor))
    if eligible.size == 0:
        return []
    keys = np.array([f"{memory_types[k]}\x1f{_normalise(subjects[k] or '')}" for k in eligible.tolist()])
    _, inverse, counts = np.unique(keys, return_inverse=True, return_counts=True)
    order = np.argsort(inverse, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    groups: list[SummaryGroup] = []
    for g in np.flatnonzero(counts >= min_size):
        members = eligible[order[bounds[g] : bounds[g + 1]]]
        first = int(members[0])
        groups.append(
            SummaryGroup(
                memory_type=memory_types[first],
                subject=(subjects[first] or "").strip(),
                indices=tuple(int(k) for k in members),
                decayed_confidence=tuple(float(decayed[k]) for k in members),
            )
        )
    return groups
