"""Vector writes: every path that stores a vector names its model and stamps it; reembed moves a workspace."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime
from io import StringIO
from typing import Any

import numpy as np
import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from rest_framework.test import APIClient

from core.errors import InvalidInput
from memories import services
from memories.algorithms.embedding import from_bytes
from memories.embedding_service import ReembedProgress, vectors_touch, workspace_reembed
from memories.embeddings import default_embedder, embedder_for
from memories.inputs import MemoryInput, SessionInput, TurnInput
from memories.models import CompressionTier, Memory, Workspace

pytestmark = [pytest.mark.django_db, pytest.mark.api]

SITE = default_embedder().name  # hashing:256 in the tests


def fresh(memory: Memory) -> Memory:
    return Memory.objects.get(id=memory.id)


def generation(workspace: Workspace) -> int:
    return int(Workspace.objects.values_list("vector_generation", flat=True).get(pk=workspace.pk))


def assert_vector_of(memory: Memory, model: str, after: datetime) -> None:
    row = fresh(memory)
    assert row.embedding_model == model
    assert row.embedded_at is not None and row.embedded_at >= after
    assert row.embedding is not None and len(bytes(row.embedding)) == 4 * embedder_for(row.workspace).dim


# -- the model name on every write path ------------------------------------------------------------


def test_a_created_memory_names_the_model_of_its_vector(workspace: Workspace, user: Any) -> None:
    before, start = generation(workspace), timezone.now()
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="a fact"))
    assert_vector_of(memory, SITE, start)
    assert generation(workspace) == before + 1


def test_bulk_created_memories_name_their_model(api: APIClient, workspace: Workspace) -> None:
    start = timezone.now()
    response = api.post(
        "/api/v1/workspaces/acme/memories/bulk/", {"items": [{"content": f"m{i}"} for i in range(5)]}, format="json"
    )
    assert response.status_code == 201
    rows = Memory.objects.filter(id__in=response.json()["ids"])
    assert {(m.embedding_model, m.embedded_at is not None and m.embedded_at >= start) for m in rows} == {(SITE, True)}


def test_every_memory_of_an_ingested_conversation_names_its_model(workspace: Workspace, user: Any) -> None:
    start = timezone.now()
    services.conversation_ingest(
        workspace=workspace,
        actor=user,
        sessions=[
            SessionInput(
                started_at=start,
                turns=[
                    TurnInput(speaker="Ann", text="I met Maria Schmidt in Berlin"),
                    TurnInput(speaker="Bo", text="Agreed"),
                ],
            )
        ],
    )
    rows = Memory.objects.filter(workspace=workspace)
    assert rows.filter(memory_type="entity").count() == 2  # besides the session and the two turns
    assert set(rows.values_list("embedding_model", flat=True)) == {SITE}
    assert not rows.filter(embedded_at__lt=start).exists() and not rows.filter(embedded_at=None).exists()


def test_an_edit_of_the_content_writes_a_new_stamped_vector(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="old words"))
    first = fresh(memory).embedded_at
    before = generation(workspace)
    services.memory_update(workspace=workspace, memory=fresh(memory), actor=user, changes={"content": "new words"})
    row = fresh(memory)
    assert row.embedded_at is not None and first is not None and row.embedded_at > first
    assert np.allclose(from_bytes(bytes(row.embedding or b""), 256), default_embedder().embed(["new words"])[0])
    assert generation(workspace) == before + 1


def test_an_edit_that_keeps_the_content_writes_no_vector(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="same"))
    before, stamp = generation(workspace), fresh(memory).embedded_at
    services.memory_update(workspace=workspace, memory=fresh(memory), actor=user, changes={"tags": ["x"]})
    assert (generation(workspace), fresh(memory).embedded_at) == (before, stamp)


def test_a_rehydrated_memory_gets_the_vector_of_its_full_content(workspace: Workspace, user: Any) -> None:
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="the full text"))
    Memory.objects.filter(id=memory.id).update(
        content="[compressed]",
        compression_tier=CompressionTier.TOMBSTONE,
        snapshots=[{"tier": CompressionTier.FULL, "content": "the full text", "at": "2026-01-01T00:00:00+00:00"}],
        embedding_model="",
    )
    start = timezone.now()
    services.memory_rehydrate(workspace=workspace, memory=fresh(memory), actor=user)
    assert_vector_of(memory, SITE, start)


def test_a_workspace_with_its_own_embedder_writes_vectors_of_that_model(workspace: Workspace, user: Any) -> None:
    Workspace.objects.filter(pk=workspace.pk).update(embedder="hashing:64")
    workspace.refresh_from_db()
    memory = services.memory_create(workspace=workspace, actor=user, item=MemoryInput(content="small vectors"))
    row = fresh(memory)
    assert row.embedding_model == "hashing:64"
    assert len(bytes(row.embedding or b"")) == 4 * 64


def test_a_writer_holding_a_stale_workspace_embeds_with_the_spec_stored_now(workspace: Workspace, user: Any) -> None:
    stale = Workspace.objects.get(pk=workspace.pk)
    Workspace.objects.filter(pk=workspace.pk).update(embedder="hashing:64")
    memory = services.memory_create(workspace=stale, actor=user, item=MemoryInput(content="raced a reembed"))
    assert fresh(memory).embedding_model == "hashing:64"


def test_vectors_are_touched_only_inside_a_transaction(workspace: Workspace) -> None:
    assert connection.in_atomic_block  # the test's own transaction
    stamp, spec = vectors_touch(workspace=workspace)
    assert (spec, workspace.vector_generation) == ("", generation(workspace))
    assert stamp <= timezone.now()


# -- reembed ---------------------------------------------------------------------------------------


def reembed(*args: str) -> str:
    out = StringIO()
    call_command("reembed", *args, stdout=out)
    return out.getvalue()


def models_of(workspace: Workspace) -> set[str]:
    return set(Memory.objects.filter(workspace=workspace).values_list("embedding_model", flat=True))


def test_reembed_moves_a_workspace_to_another_model_and_the_second_run_does_nothing(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory]
) -> None:
    for k in range(7):
        make_memory(f"memory number {k}")
    output = reembed("--workspace", "acme", "--embedder", "hashing:64", "--batch", "3")
    assert re.findall(r"^(\d+)/7 memories", output, re.M) == ["3", "6", "7"]
    assert "ETA" in output and "re-embedded 7 memories" in output
    workspace.refresh_from_db()
    assert workspace.embedder == "hashing:64"
    assert models_of(workspace) == {"hashing:64"}
    assert all(len(bytes(b)) == 4 * 64 for b in Memory.objects.values_list("embedding", flat=True))
    stamps = list(Memory.objects.order_by("id").values_list("embedded_at", flat=True))
    again = reembed("--workspace", "acme", "--embedder", "hashing:64")
    assert again.startswith("nothing to do")
    assert list(Memory.objects.order_by("id").values_list("embedded_at", flat=True)) == stamps


def test_reembed_back_to_the_site_model_clears_the_workspace_embedder(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    make_memory("one")
    reembed("--workspace", "acme", "--embedder", "hashing:64")
    reembed("--workspace", "acme", "--embedder", "hashing")  # the spec of hashing:256, the site's model
    workspace.refresh_from_db()
    assert (workspace.embedder, models_of(workspace)) == ("", {SITE})


def test_reembed_without_a_spec_labels_the_workspace_vectors_of_unknown_model(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    memory = make_memory("a memory from before models were named")
    Memory.objects.filter(id=memory.id).update(embedding_model="", embedding=None)
    assert "re-embedded 1 memories" in reembed("--workspace", "acme")
    assert fresh(memory).embedding_model == SITE


def test_an_interrupted_reembed_keeps_its_committed_batches_and_a_rerun_finishes(
    workspace: Workspace, make_memory: Callable[..., Memory]
) -> None:
    for k in range(5):
        make_memory(f"memory number {k}")

    def stop_after_the_first_batch(step: ReembedProgress) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        workspace_reembed(workspace=workspace, spec="hashing:64", batch=2, progress=stop_after_the_first_batch)
    workspace.refresh_from_db()
    counts = {m: Memory.objects.filter(embedding_model=m).count() for m in models_of(workspace)}
    assert counts == {"hashing:64": 2, SITE: 3}
    assert workspace.embedder == ""  # not moved until every vector is
    result = workspace_reembed(workspace=workspace, spec="hashing:64", batch=2)
    assert (result.reembedded, result.changed) == (3, True)
    assert models_of(workspace) == {"hashing:64"}


def test_reembed_computes_outside_transactions_and_takes_edits_made_while_it_runs(
    workspace: Workspace, user: Any, make_memory: Callable[..., Memory], monkeypatch: pytest.MonkeyPatch
) -> None:
    from memories import embedding_service

    for k in range(6):
        make_memory(f"memory number {k}")
    depth = len(connection.atomic_blocks)  # the test's own transaction
    inside: list[int] = []
    compute = embedding_service._chunk_vectors

    def watched(embedder: Any, ws: Workspace, chunk: Any) -> Any:
        if len(connection.atomic_blocks) > depth:
            inside.append(len(chunk))
        return compute(embedder, ws, chunk)

    monkeypatch.setattr(embedding_service, "_chunk_vectors", watched)
    edited: list[Memory] = []

    def edit_a_done_memory(step: ReembedProgress) -> None:
        if not edited:  # the first batch is committed with the target: an edit now stores the old model again
            edited.append(Memory.objects.filter(embedding_model="hashing:64").first())
            services.memory_update(workspace=workspace, memory=edited[0], actor=user, changes={"content": "edited"})

    result = workspace_reembed(workspace=workspace, spec="hashing:64", batch=2, progress=edit_a_done_memory)
    assert models_of(workspace) == {"hashing:64"} and workspace.embedder == "hashing:64"
    assert result.reembedded == 7  # six, and the edited one again
    assert inside == [1]  # only the straggler, in the transaction of the switch
    assert len(bytes(fresh(edited[0]).embedding)) == 4 * 64 and fresh(edited[0]).content == "edited"


def test_a_bad_spec_or_an_unknown_workspace_is_a_command_error(workspace: Workspace) -> None:
    with pytest.raises(CommandError, match="Unknown EMBEDDER"):
        reembed("--workspace", "acme", "--embedder", "word2vec")
    with pytest.raises(CommandError, match="nowhere"):
        reembed("--workspace", "nowhere")
    with pytest.raises(InvalidInput):
        workspace_reembed(workspace=workspace, spec="hashing:3")
