"""Workspaces, memories, edges and retrieval events: the stored shape of an agent's memory."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.db import models, transaction
from django.urls import reverse
from django.utils import timezone


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    EDITOR = "editor", "Editor"
    VIEWER = "viewer", "Viewer"


class MemoryType(models.TextChoices):
    WORKING = "working"
    EPISODIC = "episodic"
    SEMANTIC = "semantic"
    PROCEDURAL = "procedural"
    ZETTEL = "zettel"
    OPINION = "opinion"
    OBSERVATION = "observation"
    DECISION = "decision"
    ANCHOR = "anchor"
    GOAL = "goal"
    EVENT = "event"
    OUTCOME = "outcome"
    FINDING = "finding"
    FACT = "fact"
    PREFERENCE = "preference"
    STATE = "state"
    CORRECTION = "correction"
    REFLECTION = "reflection"
    STRATEGY = "strategy"
    ENTITY = "entity"
    SESSION = "session"


class Status(models.TextChoices):
    ACTIVE = "active"
    ARCHIVED = "archived"
    FORGOTTEN = "forgotten"
    SUPERSEDED = "superseded"
    # Goals only.
    RESOLVED = "resolved"
    ABANDONED = "abandoned"


class Tier(models.TextChoices):
    HOT = "hot"
    WARM = "warm"
    COLD = "cold"


class CompressionTier(models.IntegerChoices):
    FULL = 0
    SUMMARY = 1
    SKELETON = 2
    TOMBSTONE = 3
    FORGOTTEN = 4


class EdgeType(models.TextChoices):
    RELATED = "RELATED"
    RELATES_TO = "RELATES_TO"
    MENTIONS = "MENTIONS"
    MENTIONED_IN = "MENTIONED_IN"
    PART_OF = "PART_OF"
    FOLLOWS = "FOLLOWS"
    ANSWERED_BY = "ANSWERED_BY"
    DERIVED_FROM = "DERIVED_FROM"
    CO_RETRIEVED = "CO_RETRIEVED"
    CONTRADICTS = "CONTRADICTS"
    SUPERSEDES = "SUPERSEDES"
    SUMMARIZES = "SUMMARIZES"
    RESOLVES = "RESOLVES"
    LINKS_TO = "LINKS_TO"


class RetrievalSource(models.TextChoices):
    SEARCH = "search"
    GET = "get"
    CONTEXT = "context"
    INSPECTOR = "inspector"
    HELPFUL = "helpful"


class Workspace(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)
    # Only this workspace's overrides of the defaults in code, so a default changed in code reaches every
    # workspace that did not choose otherwise; validated by surfacing/evolution settings services.
    surfacing_settings = models.JSONField(default=dict, blank=True)
    evolution_settings = models.JSONField(default=dict, blank=True)
    # Bumped on every edge write so cached graph snapshots know they are stale.
    graph_generation = models.PositiveBigIntegerField(default=0)
    # Bumped (with graph_generation) only when edges are deleted, re-weighted or re-typed: a snapshot can
    # then no longer be brought up to date by appending the newer edges, and is rebuilt.
    graph_rewrites = models.PositiveBigIntegerField(default=0)
    # Embedder spec (an EMBEDDER value) of the workspace's vectors; blank = the site's EMBEDDER. Changed by
    # `manage.py reembed`, which re-embeds the memories first (memories.embedding_service).
    embedder = models.CharField(max_length=200, blank=True, default="")
    # Bumped in every transaction that writes embeddings, before it writes them, so cached vector indexes
    # know they are stale (see memories.vectorindex).
    vector_generation = models.PositiveBigIntegerField(default=0)
    # The last Memory.embedded_at handed out for this workspace: stamps are issued from this row, strictly
    # increasing in commit order whatever the clocks of the writing hosts (memories.embedding_service).
    vector_stamped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def get_absolute_url(self) -> str:
        return reverse("memories:list", kwargs={"ws": self.slug})


class Membership(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["workspace", "user"], name="membership_unique_user"),
        ]

    def __str__(self) -> str:
        return f"{self.user_id}@{self.workspace_id}:{self.role}"

    @property
    def can_edit(self) -> bool:
        return self.role in (Role.OWNER, Role.EDITOR)


class MemoryQuerySet(models.QuerySet["Memory"]):
    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> list[Memory]:
        """Refused: Django's bulk insert would leave the memories without their scores rows."""
        raise TypeError(
            "Memory rows are inserted with their scores rows: use memories.bulk.bulk_insert(Memory, memories) "
            "(or save() one at a time)"
        )


class Memory(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # No single-column index: every composite index below leads with workspace.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="memories", db_index=False)
    memory_type = models.CharField(max_length=16, choices=MemoryType.choices, default=MemoryType.SEMANTIC)
    content = models.TextField()
    subject = models.CharField(max_length=200, blank=True, default="")
    tags = models.JSONField(default=list, blank=True)
    # "user:<name>", "api:<token user>", "import:<source>", "evolver:<Name>", "engine:<module>".
    origin = models.CharField(max_length=120, default="api:")
    # 1 = authored by a person (user:, cli:, api:, import:); 2 = derived by an evolver; 3 = engine proposal.
    origin_tier = models.PositiveSmallIntegerField(default=1)
    confidence = models.FloatField(default=1.0)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    tier = models.CharField(max_length=4, choices=Tier.choices, default=Tier.WARM)
    compression_tier = models.PositiveSmallIntegerField(choices=CompressionTier.choices, default=CompressionTier.FULL)
    # Rows compressed before the ladder kept the replaced content in its records hold every replaced content
    # here: [{"tier": int, "content": str, "at": iso}]; now empty (see memories.selectors.compressed_originals).
    snapshots = models.JSONField(default=list, blank=True)
    pinned = models.BooleanField(default=False)

    activation_score = models.FloatField(default=0.5)
    activation_last_boost_at = models.DateTimeField(null=True, blank=True)
    activation_half_life_hours = models.FloatField(default=720.0)
    activation_boost_count = models.PositiveIntegerField(default=0)
    # ln(score) + ln2 * hours_since_epoch(last_boost) / half_life: ordering by it equals ordering by the
    # decayed activation at any instant when half-lives are equal, so "activation now" is indexable.
    activation_sort_key = models.FloatField(default=0.0)

    # retention_score and retrieval_profile live in MemoryScore (properties below).
    stability = models.FloatField(default=30.0)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed = models.DateTimeField(null=True, blank=True)

    conflicts_with = models.JSONField(default=list, blank=True)
    replace_log = models.JSONField(default=list, blank=True)
    replace_count = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField(default=1)
    drift_flags = models.JSONField(default=list, blank=True)
    summarizes = models.JSONField(default=list, blank=True)
    summarized_by = models.UUIDField(null=True, blank=True)
    superseded_by = models.UUIDField(null=True, blank=True)

    # float32 little-endian vector from the configured Embedder; see memories.embeddings.
    embedding = models.BinaryField(null=True, blank=True)
    # Embedder.name of the model that produced `embedding`; "" = unknown (vectors older than this field whose
    # length did not match the embedder of the time): never compared until re-embedded.
    embedding_model = models.CharField(max_length=64, blank=True, default="")
    # When `embedding` was last written (null: before this field existed); vector indexes catch up by it.
    embedded_at = models.DateTimeField(null=True, blank=True)
    # True when the inserting code wrote the full-text row itself (the bulk path); the SQLite insert
    # trigger indexes every other row. FTS5 inserts run ~3x faster outside a trigger.
    search_indexed = models.BooleanField(default=False, editable=False)

    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    valid_from = models.DateTimeField(null=True, blank=True)
    valid_to = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)

    objects = models.Manager.from_queryset(MemoryQuerySet)()

    # The fields of a memory's MemoryScore (`memory.score`). Records name them among the memory's fields
    # (before/after), and the fast-write module (memories.bulk.write_rows) writes them to the scores rows.
    SCORE_FIELDS: ClassVar[frozenset[str]] = frozenset({"retention_score", "retrieval_profile"})

    class Meta:
        verbose_name_plural = "memories"
        indexes: ClassVar = [
            # Memory list default order and keyset pagination: WHERE workspace ORDER BY created_at, id.
            models.Index(fields=["workspace", "created_at", "id"], name="mem_ws_created"),
            # fast:recency candidates and "recently changed" sweeps: ORDER BY updated_at DESC.
            models.Index(fields=["workspace", "updated_at"], name="mem_ws_updated"),
            # Conflict slots (workspace, type, subject) for write-time policies and SummaryEvolver groups.
            models.Index(fields=["workspace", "memory_type", "subject"], name="mem_ws_type_subject"),
            # Memory list sorted by activation now (see activation_sort_key).
            models.Index(fields=["workspace", "activation_sort_key"], name="mem_ws_actkey"),
            # Memory list sorted by last access (by retention: MemoryScore's index).
            models.Index(fields=["workspace", "last_accessed"], name="mem_ws_accessed"),
            # Vector index catch-up: WHERE workspace AND embedded_at >= watermark.
            models.Index(fields=["workspace", "embedded_at"], name="mem_ws_embedded"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_type}: {self.content[:60]}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save the memory; a new one gets its scores row in the same transaction (the row it was given as
        `memory.score`, else the defaults), so every memory has one. A scores row is saved on its own
        (`memory.score.save()`) and updated through MemoryScore's manager."""
        adding = self._state.adding
        with transaction.atomic(using=kwargs.get("using"), savepoint=False):
            super().save(*args, **kwargs)
            if adding:
                self.score_for_insert().save(force_insert=True)

    def get_absolute_url(self) -> str:
        return reverse("memories:detail", kwargs={"ws": self.workspace.slug, "memory_id": self.id})

    @property
    def is_user_authored(self) -> bool:
        return self.origin_tier == 1

    # -- the scores row --------------------------------------------------------------------------

    def score_loaded(self) -> bool:
        """True when this memory holds its MemoryScore (select_related("score"), a read, or one given)."""
        return Memory.score.related.is_cached(self)

    def score_for_insert(self) -> MemoryScore:
        """The scores row to insert with this memory: the one it was given, or the defaults."""
        row = self.score if self.score_loaded() else MemoryScore()
        row.memory = self
        row.workspace_id = self.workspace_id
        return row


class MemoryScore(models.Model):
    """The scores the evolution cycle rewrites in bulk, one row per memory (`Memory.SCORE_FIELDS`).

    A cycle rewrites the retention of tens of thousands of memories two or three times. In the memory row
    (~1.4 KB with its embedding, two or three to a page) every such UPDATE rewrote most pages of the table
    into the WAL: 292 MB per bench cycle, ~1.8 s of commits and a ~1.8 s checkpoint. These rows are ~170
    bytes: the same UPDATEs wrote 51 MB (raw SQLite, 132k updates; see docs/evolution.md, Scale).
    `workspace` repeats the memory's, so the retention index can serve the memory list's sort by retention.
    """

    memory = models.OneToOneField(Memory, on_delete=models.CASCADE, primary_key=True, related_name="score")
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)
    retention_score = models.FloatField(default=1.0)
    retrieval_profile = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes: ClassVar = [
            # Memory list sorted by retention, then by id (= memory), the keyset of its pages.
            models.Index(fields=["workspace", "retention_score", "memory"], name="score_ws_retention"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id}: retention {self.retention_score:.3f}"


class Edge(models.Model):
    # No single-column index: edge_ws_type leads with workspace (and serves the cascade).
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="edges", db_index=False)
    source = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="out_edges", db_index=False)
    target = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="in_edges")
    edge_type = models.CharField(max_length=24, default=EdgeType.RELATED)
    weight = models.FloatField(default=1.0)
    co_retrieval_count = models.PositiveIntegerField(default=0)
    first_co_retrieved_at = models.DateTimeField(null=True, blank=True)
    last_co_retrieved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    metadata = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints: ClassVar = [
            # Also serves "edges out of a memory" lookups (leading column source).
            models.UniqueConstraint(fields=["source", "target", "edge_type"], name="edge_unique_triple"),
        ]
        indexes: ClassVar = [
            # Graph snapshot load and Hebbian selection: WHERE workspace [AND edge_type].
            models.Index(fields=["workspace", "edge_type"], name="edge_ws_type"),
        ]

    def __str__(self) -> str:
        return f"{self.source_id} -{self.edge_type}-> {self.target_id}"


class RetrievalEvent(models.Model):
    """One item of one result set handed to a caller: the input of profiles and CO_RETRIEVED counts."""

    # No single-column indexes: ret_ws_created and ret_mem_created lead with these keys. Events are the
    # most written rows (every item of every result set); each index is one more random page per event.
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="retrieval_events", db_index=False)
    memory = models.ForeignKey(Memory, on_delete=models.CASCADE, related_name="retrieval_events", db_index=False)
    result_set = models.UUIDField()
    rank = models.PositiveSmallIntegerField()
    source = models.CharField(max_length=12, choices=RetrievalSource.choices)
    query = models.CharField(max_length=500, blank=True, default="")
    session_id = models.CharField(max_length=128, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes: ClassVar = [
            # Retrieval profiles and Hebbian pairs read a workspace's recent events.
            models.Index(fields=["workspace", "created_at"], name="ret_ws_created"),
            # Per-memory retrieval history on the detail page.
            models.Index(fields=["memory", "created_at"], name="ret_mem_created"),
        ]

    def __str__(self) -> str:
        return f"{self.source} #{self.rank} {self.memory_id}"


class ApiToken(models.Model):
    """A REST API key of a user. Only the SHA-256 of the key is stored: the key is shown once, when made.

    A key is 40 random hex characters (160 bits), so one unsalted hash is as hard to reverse as the key
    is to guess, and a request finds its token by the hash through the unique index. ``prefix`` (the key's
    first 8 characters) tells a user's tokens apart in lists without being enough to use one."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=8)
    name = models.CharField(max_length=100, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes: ClassVar = [
            # A user's tokens, newest first (the admin, `manage.py api_tokens`).
            models.Index(fields=["user", "created_at"], name="apitoken_user_created"),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.name or 'unnamed'})"

    def is_active(self, now: datetime) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)


class IdempotencyKey(models.Model):
    """The first answer to a write sent with an ``Idempotency-Key`` header, kept to answer its retries.

    One per (workspace, user, key) until ``expires_at``; ``request_digest`` is the SHA-256 of the endpoint and
    the request body, so the key cannot be reused for another request. ``response`` is the JSON text of the
    answer exactly as rendered (a JSON column would lose the key order on PostgreSQL)."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+", db_index=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    endpoint = models.CharField(max_length=64)
    request_digest = models.CharField(max_length=64)
    status_code = models.PositiveSmallIntegerField(default=0)
    response = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()

    class Meta:
        constraints: ClassVar = [
            models.UniqueConstraint(fields=["workspace", "user", "key"], name="idem_ws_user_key"),
        ]
        indexes: ClassVar = [
            # The purge of a workspace's expired keys, on each keyed write.
            models.Index(fields=["workspace", "expires_at"], name="idem_ws_expires"),
        ]

    def __str__(self) -> str:
        return f"{self.endpoint} {self.key}"
