"""How every page shows a JSON-ish value: metadata, drift flags, payloads and the before/after of records.

One presenter for all of them, so no page prints a Python repr or one 2,000-pixel line again:

- ``value_text`` is the one-line form for a table cell: scalars as they read, lists joined, objects as
  ``key: value`` pairs, bytes and base64 blobs (embeddings in old records) named by size, cut at ``length``;
- ``value_html`` is the block form for a page: an object is a definition list, a list a bullet list,
  nested to any depth, every string escaped and free to wrap (the ``.kv`` styles in site.css).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

EMPTY: Final = "—"
# A run of base64 this long with no space is a blob (an embedding, a file), never text worth reading; a hex
# digest (64 characters) stays text.
_BLOB: Final = re.compile(r"[A-Za-z0-9+/]{120,}={0,2}")
_MAX_DEPTH: Final = 6


def _cut(text: str, length: int | None) -> str:
    flat = " ".join(text.split())
    if length is None or len(flat) <= length:
        return flat
    return flat[: length - 1].rstrip() + "…"


def blob_size(value: Any) -> int | None:
    """Bytes held by ``value`` when it is binary or a base64 blob, else None."""
    if isinstance(value, bytes | bytearray | memoryview):
        return len(bytes(value))
    if isinstance(value, str) and _BLOB.fullmatch(value.strip()):
        text = value.strip()
        return len(text) * 3 // 4 - text.count("=")
    return None


def _scalar(value: Any) -> str | None:
    """The text of a scalar, or None when ``value`` is a list or an object."""
    if value is None or value == "":
        return EMPTY
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        # Six significant digits: retention 0.9999984193672903 reads as 0.999998, and small values keep theirs.
        return f"{value:.6g}"
    size = blob_size(value)
    if size is not None:
        return f"binary data, {size:,} bytes"
    if isinstance(value, int | str):
        return str(value)
    if isinstance(value, Mapping | list | tuple):
        return None
    return str(value)


def value_text(value: Any, length: int | None = 200) -> str:
    """One line for a table cell: ``a, b`` for a list, ``key: value; key: value`` for an object."""
    text = _scalar(value)
    if text is None:
        if isinstance(value, Mapping):
            text = "; ".join(f"{k}: {value_text(v, None)}" for k, v in value.items()) or EMPTY
        else:
            text = ", ".join(value_text(v, None) for v in value) or EMPTY
    return _cut(text, length)


def _html(value: Any, depth: int) -> str:
    text = _scalar(value)
    if text is not None:
        return f'<span class="kv-v">{escape(text)}</span>'
    if depth >= _MAX_DEPTH:
        # Deeper than any of our records nests: the rest as wrapped JSON rather than more boxes.
        return f'<span class="kv-v">{escape(json.dumps(value, default=str, ensure_ascii=False))}</span>'
    if isinstance(value, Mapping):
        if not value:
            return f'<span class="kv-v">{EMPTY}</span>'
        items = "".join(f"<dt>{escape(str(k))}</dt><dd>{_html(v, depth + 1)}</dd>" for k, v in value.items())
        return f'<dl class="kv">{items}</dl>'
    if not value:
        return f'<span class="kv-v">{EMPTY}</span>'
    if all(_scalar(v) is not None for v in value):
        return f'<span class="kv-v">{escape(", ".join(value_text(v, None) for v in value))}</span>'
    return '<ul class="kv-list">' + "".join(f"<li>{_html(v, depth + 1)}</li>" for v in value) + "</ul>"


def value_html(value: Any) -> SafeString:
    """``value`` as nested HTML that wraps to its container; every string in it is escaped."""
    return mark_safe(_html(value, 0))
