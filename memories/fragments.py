"""HTML of the memory list's rows and of the live activation bar, built in Python.

A page of the list renders 50 rows. Through the template engine each row cost ~0.25 ms (some 50
variable lookups, an include, a with and a dozen ifs), which was a third of the page's server time at
1M memories; one f-string per row costs a tenth of that. The markup lives here once and the templates
reach it through the `memory_fragments` tags: the list's `row` partial (full page and the htmx swap
after archive/restore) and the `activation_bar.html` partial (detail page, WebSocket push and the
polling fallback), so every swap target still renders the same markup as the full page. The detail page's
other live figures (the big number, the stored value with its boost count, Accessed) live here too, for the
same reason: the push sends exactly what the page renders.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from html import escape

from django.utils.safestring import SafeString, mark_safe

from memories.models import Memory

_OOB = ' hx-swap-oob="true"'
_PIN = ' <span class="pin" title="Pinned">pinned</span>'


def activation_bar(memory: Memory, activation: float, *, oob: bool = False) -> SafeString:
    """One activation meter; `activation` is the decayed value now (0..1). `oob` marks it for an
    out-of-band swap by id (the socket push and the polling fallback)."""
    v2, v3 = f"{activation:.2f}", f"{activation:.3f}"
    # Only numbers and a UUID: nothing to escape.
    return mark_safe(
        f'<span id="act-{memory.id}" class="act-bar"{_OOB if oob else ""} role="meter" '
        f'aria-valuemin="0" aria-valuemax="1" aria-valuenow="{v3}" aria-label="Activation now {v2}" '
        f'title="activation now {v3} ({int(memory.activation_boost_count)} boosts)" data-value="{activation:.4f}">'
        f'<span class="act-track"><span class="act-fill" style="width: {round(activation * 100)}%"></span></span>'
        f'<span class="act-num">{v2}</span></span>'
    )


def _when(moment: datetime) -> str:
    return f'<time datetime="{moment.isoformat()}">{moment:%Y-%m-%d %H:%M}</time>'


def activation_number(memory: Memory, activation: float, *, oob: bool = False) -> SafeString:
    """The detail page's big "activation now" figure (three decimals)."""
    return mark_safe(f'<span id="act-big-{memory.id}" class="big"{_OOB if oob else ""}>{activation:.3f}</span>')


def activation_stored(memory: Memory, *, oob: bool = False) -> SafeString:
    """The stored activation, its last boost, half-life and boost count, as the detail page words them."""
    boost = memory.activation_last_boost_at
    at = f" at the last boost {_when(boost)}" if boost is not None else ""
    count = int(memory.activation_boost_count)
    return mark_safe(
        f'<span id="act-stored-{memory.id}"{_OOB if oob else ""}>Stored {memory.activation_score:.3f}{at}; '
        f"half-life {memory.activation_half_life_hours:.0f} h; {count} boost{'' if count == 1 else 's'}.</span>"
    )


def accessed(memory: Memory, *, oob: bool = False) -> SafeString:
    """How often and when the memory was last accessed (the detail page's metadata)."""
    count = int(memory.access_count)
    last = f", last {_when(memory.last_accessed)}" if memory.last_accessed is not None else ""
    return mark_safe(
        f'<span id="accessed-{memory.id}"{_OOB if oob else ""}>{count} time{"" if count == 1 else "s"}{last}</span>'
    )


def activation_push(memory: Memory, activation: float) -> SafeString:
    """What the socket and the polling fallback send for one memory: every live figure, each swapped out of band
    by id. A page holds some of them (the list only bars); site.js drops the ones it does not hold."""
    return mark_safe(
        activation_bar(memory, activation, oob=True)
        + activation_number(memory, activation, oob=True)
        + activation_stored(memory, oob=True)
        + accessed(memory, oob=True)
    )


@dataclass(frozen=True)
class Row:
    """One list row with its display strings prepared (views.RowBuilder builds it)."""

    memory: Memory
    activation: float
    url: str
    archive_url: str
    restore_url: str
    excerpt: str
    label: str
    created: str
    created_iso: str
    accessed: str
    accessed_iso: str


def _meta(memory: Memory) -> str:
    """Subject, tags and state badges after the origin, one space apart like inline template text."""
    parts = []
    if memory.subject:
        parts.append(f"<span>· {escape(memory.subject)}</span>")
    parts.extend(f'<span class="tag">#{escape(str(tag))}</span>' for tag in memory.tags)
    if memory.status != "active":
        parts.append(f'<span class="badge st">{escape(memory.status)}</span>')
    if memory.compression_tier:
        parts.append('<span class="badge cmp">compressed</span>')
    if memory.conflicts_with:
        parts.append('<span class="badge warn">conflicts</span>')
    return "\n".join(parts)


def memory_row(row: Row, *, can_edit: bool) -> SafeString:
    """The `<tr>` of one memory; `can_edit` adds the selection checkbox and archive/restore button.

    Every text of the memory passes through html.escape (django.utils.html.escape's own call without
    its lazy-string wrapper, which was most of format_html's cost here); ids, numbers and dates are not
    text.
    """
    m = row.memory
    select = actions = ""
    if can_edit:
        select = (
            f'<td class="sel"><input type="checkbox" name="ids" value="{m.id}" '
            f'aria-label="Select “{escape(row.label)}”"></td>'
        )
        archived = m.status == "archived"
        url = escape(row.restore_url if archived else row.archive_url)
        actions = (
            f'<td class="c-actions">\n          <button type="submit" class="link" formaction="{url}" '
            f'hx-post="{url}" hx-target="closest tr" hx-swap="outerHTML">{"Restore" if archived else "Archive"}'
            "</button>\n        </td>"
        )
    accessed = (
        f'<time datetime="{row.accessed_iso}">{row.accessed}</time>'
        if row.accessed
        else '<span class="muted">never</span>'
    )
    kind = escape(m.memory_type)
    return mark_safe(
        f'<tr id="row-{m.id}" class="mrow{"" if m.status == "active" else " dim"}" tabindex="-1">\n'
        f"        {select}\n"
        f'        <td><span class="badge t-{kind}">{kind}</span>'
        f"{_PIN if m.pinned else ''}</td>\n"
        '        <td class="content">\n'
        f'          <a class="open" href="{escape(row.url)}">{escape(row.excerpt)}</a>\n'
        '          <div class="meta-line">\n'
        f"            <span>{escape(m.origin)}</span>\n"
        f"            {_meta(m)}\n"
        "          </div>\n"
        "        </td>\n"
        f'        <td class="c-act">{activation_bar(m, row.activation)}</td>\n'
        f'        <td class="c-ret num">{m.retention_score:.2f}</td>\n'
        f'        <td class="c-tier">{escape(m.tier)}</td>\n'
        f'        <td class="c-date"><time datetime="{row.created_iso}">{row.created}</time></td>\n'
        f'        <td class="c-date c-acc">{accessed}</td>\n'
        f"        {actions}\n"
        "      </tr>"
    )
