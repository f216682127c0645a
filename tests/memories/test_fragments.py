"""List rows and live activation figures: escaping, edit controls, and one markup for every swap."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from django.template.loader import render_to_string

from memories import fragments
from memories.models import Memory, MemoryScore

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
        "activation_boost_count": 3,
        "created_at": T0,
    }
    values.update(fields)
    memory = Memory(**values)
    memory.score = MemoryScore(retention_score=0.456)
    return memory


def row(m: Memory, *, accessed: bool = False) -> fragments.Row:
    return fragments.Row(
        memory=m,
        bar=fragments.bar(m, 0.61234),
        retention=f"{m.score.retention_score:.2f}",
        url=f"/w/acme/memories/{m.id}/",
        action_url=f"/w/acme/memories/{m.id}/{'restore' if m.status == 'archived' else 'archive'}/",
        excerpt=m.content,
        label=m.content,
        created=fragments.moment(T0, with_time=False),
        accessed=fragments.moment(datetime(2026, 1, 2, tzinfo=UTC), with_time=False) if accessed else None,
    )


def render_row(r: fragments.Row, *, can_edit: bool) -> str:
    # Of the page's access, the row partial reads only whether the viewer may edit.
    access = SimpleNamespace(can_edit=can_edit)
    return render_to_string("memories/partials/memory.html#row", {"row": r, "access": access})


def test_row_escapes_every_text_of_the_memory() -> None:
    m = memory(content=HOSTILE, subject=HOSTILE, tags=[HOSTILE], origin=HOSTILE, memory_type=HOSTILE, tier=HOSTILE)
    html = render_row(row(m), can_edit=True)
    assert "<script>" not in html
    # label, type (badge class and text), excerpt, origin, subject, tag, tier
    assert html.count("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;") == 8


def test_row_shows_numbers_dates_and_badges_of_the_memory() -> None:
    m = memory(pinned=True, compression_tier=1, conflicts_with=["abc"], subject="auth", tags=["jwt"])
    html = render_row(row(m, accessed=True), can_edit=False)
    assert f'<tr id="row-{m.id}" class="mrow" tabindex="-1">' in html
    assert '<td class="c-ret num">0.46</td>' in html
    assert '<time datetime="2026-01-02T00:00:00+00:00">2026-01-02</time>' in html
    assert '<time datetime="2026-01-01T12:00:00+00:00">2026-01-01</time>' in html
    for badge in ("pinned</span>", "<span>· auth</span>", "#jwt", "compressed", "conflicts"):
        assert badge in html
    assert 'aria-valuenow="0.612"' in html and 'style="width: 61%"' in html


def test_only_editors_get_the_checkbox_and_the_archive_or_restore_button() -> None:
    active, archived = memory(), memory(status="archived")
    assert 'name="ids"' not in render_row(row(active), can_edit=False)
    assert "formaction" not in render_row(row(active), can_edit=False)
    editable = render_row(row(active), can_edit=True)
    assert 'name="ids"' in editable and ">Archive</button>" in editable and "/archive/" in editable
    restorable = render_row(row(archived), can_edit=True)
    assert ">Restore</button>" in restorable and 'class="mrow dim"' in restorable and "/restore/" in restorable
    assert '<td class="c-date c-acc"><span class="muted">never</span></td>' in restorable


@pytest.mark.parametrize("oob", [False, True])
def test_the_bar_of_a_row_is_the_bar_of_the_detail_page_and_of_a_push(oob: bool) -> None:
    m = memory()
    alone = render_to_string("memories/partials/memory.html#bar", {"bar": fragments.bar(m, 0.5), "oob": oob})
    assert ('hx-swap-oob="true"' in alone) is oob
    assert 'aria-valuenow="0.500"' in alone and 'title="activation now 0.500 (3 boosts)"' in alone
    in_row = re.search(r'<span id="act-[^"]+" class="act-bar".*?</span></span>', render_row(row(m), can_edit=False))
    pushed = fragments.activation_push(m, 0.61234)
    assert in_row is not None
    assert in_row.group(0) in pushed.replace(' hx-swap-oob="true"', "")


def test_a_push_carries_every_live_figure_of_the_detail_page_out_of_band() -> None:
    m = memory(activation_score=0.5, activation_last_boost_at=T0, access_count=1, last_accessed=T0)
    html = fragments.activation_push(m, 0.42)
    for element in (f"act-{m.id}", f"act-big-{m.id}", f"act-stored-{m.id}", f"accessed-{m.id}"):
        assert f'id="{element}"' in html
    assert html.count('hx-swap-oob="true"') == 4
    assert ">0.420<" in html
    assert '<time datetime="2026-01-01T12:00:00+00:00">2026-01-01 12:00</time>' in html
    assert "3 boosts." in html and "1 time, last" in html
    # The page renders the same figures, without the out-of-band marker.
    live = fragments.live(m, 0.42)
    for name in ("number", "stored", "accessed"):
        page = render_to_string(f"memories/partials/memory.html#{name}", {"live": live})
        assert page and page in html.replace(' hx-swap-oob="true"', "")
    never = render_to_string(
        "memories/partials/memory.html#accessed", {"live": fragments.live(memory(access_count=0), 0)}
    )
    assert never.endswith(">0 times</span>")
    one = render_to_string(
        "memories/partials/memory.html#stored", {"live": fragments.live(memory(activation_boost_count=1), 0)}
    )
    assert "; 1 boost.</span>" in one
