"""Record columns: their JSON is written by orjson and reads back as the values given."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from evolution.models import Action, EvolutionRecord, RecordJSONEncoder
from memories.models import Status


def test_record_json_is_compact_and_decodes_to_the_values_the_stdlib_encoder_writes() -> None:
    value = {"a": [1, 2.5, 1e-07, None, True], "status": Status.ARCHIVED, "n": {"x": "é"}}
    text = json.dumps(value, cls=RecordJSONEncoder)
    assert text == '{"a":[1,2.5,1e-7,null,true],"status":"archived","n":{"x":"é"}}'
    assert json.loads(text) == json.loads(json.dumps(value))


def test_record_json_accepts_numpy_scalars_and_non_text_keys_like_the_stdlib_encoder() -> None:
    value = {1: np.float64(0.25), "k": np.int64(3)}
    assert json.loads(json.dumps(value, cls=RecordJSONEncoder)) == {"1": 0.25, "k": 3}


def test_record_json_leaves_what_orjson_refuses_to_the_stdlib_encoder() -> None:
    assert json.dumps({"big": 2**70}, cls=RecordJSONEncoder) == json.dumps({"big": 2**70})
    with pytest.raises(TypeError):
        json.dumps({"x": object()}, cls=RecordJSONEncoder)


@pytest.mark.django_db
@pytest.mark.api
def test_a_saved_record_reads_back_its_before_and_after(kit: Any) -> None:
    before = {str(kit.mem("m").id): {"retention_score": 0.123456789012345, "status": Status.ACTIVE}}
    record = EvolutionRecord.objects.create(
        workspace=kit.workspace, evolver="E", action=Action.DECAY, before=before, after={"reasons": {"k": "why"}}
    )
    record.refresh_from_db()
    assert record.before == before
    assert record.after == {"reasons": {"k": "why"}}
