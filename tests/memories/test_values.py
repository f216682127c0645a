"""One presenter for JSON-ish values: one line for a cell, nested HTML that wraps for a page."""

from __future__ import annotations

import base64

from memories.values import blob_size, value_html, value_text


def test_scalars_read_as_they_are() -> None:
    assert value_text(None) == "—"
    assert value_text("") == "—"
    assert value_text(True) == "yes"
    assert value_text(3) == "3"
    assert value_text(0.9999984193672903) == "0.999998"
    assert value_text("plain words") == "plain words"


def test_an_object_is_key_value_pairs_not_a_repr() -> None:
    flag = {"reason": "drift", "replaces_in_window": 3, "tags": ["a", "b"]}
    assert value_text(flag) == "reason: drift; replaces_in_window: 3; tags: a, b"
    assert "{" not in value_text(flag) and "'" not in value_text(flag)


def test_long_text_is_cut_with_an_ellipsis() -> None:
    text = value_text("word " * 100, 20)
    assert len(text) == 20 and text.endswith("…")
    assert value_text("word " * 100, None).count("word") == 100


def test_an_embedding_blob_is_named_by_its_size() -> None:
    blob = base64.b64encode(bytes(1536)).decode()
    assert blob_size(blob) == 1536
    assert value_text(blob) == "binary data, 1,536 bytes"
    assert value_text(b"\x00\x01") == "binary data, 2 bytes"
    # A hex digest is text someone may want to read.
    assert value_text("a" * 64) == "a" * 64


def test_html_nests_objects_and_lists_and_escapes_every_string() -> None:
    html = value_html({"note": "<b>x</b>", "items": [{"id": 1}, {"id": 2}], "tags": ["p", "q"], "empty": {}})
    assert html.startswith('<dl class="kv">')
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html
    assert html.count('<dl class="kv">') == 3  # the object and the two in the list
    assert '<ul class="kv-list">' in html
    assert '<span class="kv-v">p, q</span>' in html
    assert '<dt>empty</dt><dd><span class="kv-v">—</span></dd>' in html


def test_html_of_a_deeply_nested_value_ends_in_wrapped_json() -> None:
    value: object = "leaf"
    for _ in range(10):
        value = {"k": value}
    html = value_html(value)
    assert html.count("<dl") == 6
    assert "&quot;leaf&quot;" in html
