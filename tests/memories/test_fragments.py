"""List rows and activation bars built in Python: escaping, edit controls, and one markup for every swap."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import pytest
from django.template.loader import render_to_string

from memories import fragments
from memories.models import Memory

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script>'


def memory(**fields: object) -> Memory:
    values: dict[str, object] = {
        "id": uuid.UUID(int=7),
        "content": "plain",
        "memory_type": "fact",
        "origin": "api:test",
        "status": "active",
        "tier": "warm",
        "retention_score": 0.456,
        "activation_boost_count": 3,
        "created_at": T0,
    }
    values.update(fields)
    return Memory(**values)


def row(m: Memory, *, accessed: bool = False) -> fragments.Row:
    return fragments.Row(
        memory=m,
        activation=0.61234,
        url=f"/w/acme/memories/{m.id}/",
        archive_url=f"/w/acme/memories/{m.id}/archive/",
        restore_url=f"/w/acme/memories/{m.id}/restore/",
        excerpt=m.content,
        label=m.content,
        created="2026-01-01",
        created_iso=T0.isoformat(),
        accessed="2026-01-02" if accessed else "",
        accessed_iso="2026-01-02T00:00:00+00:00" if accessed else "",
    )


def test_row_escapes_every_text_of_the_memory() -> None:
    m = memory(content=HOSTILE, subject=HOSTILE, tags=[HOSTILE], origin=HOSTILE, memory_type=HOSTILE, tier=HOSTILE)
    html = fragments.memory_row(row(m), can_edit=True)
    assert "<script>" not in html
    # label, type (badge class and text), excerpt, origin, subject, tag, tier
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") == 8


def test_row_shows_numbers_dates_and_badges_of_the_memory() -> None:
    m = memory(pinned=True, compression_tier=1, conflicts_with=["abc"], subject="auth", tags=["jwt"])
    html = fragments.memory_row(row(m, accessed=True), can_edit=False)
    assert f'<tr id="row-{m.id}" class="mrow" tabindex="-1">' in html
    assert '<td class="c-ret num">0.46</td>' in html
    assert '<time datetime="2026-01-02T00:00:00+00:00">2026-01-02</time>' in html
    for badge in ("pinned</span>", "<span>· auth</span>", "#jwt", "compressed", "conflicts"):
        assert badge in html
    assert 'aria-valuenow="0.612"' in html and 'style="width: 61%"' in html


def test_only_editors_get_the_checkbox_and_the_archive_or_restore_button() -> None:
    active, archived = memory(), memory(status="archived")
    assert 'name="ids"' not in fragments.memory_row(row(active), can_edit=False)
    assert "formaction" not in fragments.memory_row(row(active), can_edit=False)
    editable = fragments.memory_row(row(active), can_edit=True)
    assert 'name="ids"' in editable and ">Archive</button>" in editable
    restorable = fragments.memory_row(row(archived), can_edit=True)
    assert ">Restore</button>" in restorable and 'class="mrow dim"' in restorable
    assert '<td class="c-date c-acc"><span class="muted">never</span></td>' in restorable


@pytest.mark.parametrize("oob", [False, True])
def test_activation_bar_partial_is_the_fragment(oob: bool) -> None:
    m = memory()
    html = render_to_string("memories/partials/activation_bar.html", {"memory": m, "activation": 0.5, "oob": oob})
    assert html.strip() == fragments.activation_bar(m, 0.5, oob=oob)
    assert ('hx-swap-oob="true"' in html) is oob


def test_a_push_carries_every_live_figure_of_the_detail_page_out_of_band() -> None:
    m = memory(activation_score=0.5, activation_last_boost_at=T0, access_count=1, last_accessed=T0)
    html = fragments.activation_push(m, 0.42)
    for element in (f"act-{m.id}", f"act-big-{m.id}", f"act-stored-{m.id}", f"accessed-{m.id}"):
        assert f'id="{element}"' in html
    assert html.count('hx-swap-oob="true"') == 4
    assert ">0.420<" in html
    assert "3 boosts." in html and "1 time, last" in html
    # The page renders the same figures, without the out-of-band marker.
    assert fragments.activation_stored(m) == fragments.activation_stored(m, oob=True).replace(' hx-swap-oob="true"', "")
    assert fragments.accessed(memory(access_count=0)).endswith(">0 times</span>")
