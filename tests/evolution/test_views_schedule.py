"""The Runs page's schedules: the dream's, beside the cycle's, shown and edited by editors; the background
jobs of the workspace listed with their last run."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from evolution.locks import DatabaseJobLocks
from evolution.scheduler import Scheduler
from memories.models import Workspace

pytestmark = pytest.mark.django_db

RUNS = "/w/acme/evolution/runs/"


@pytest.fixture
def browser(user: Any, workspace: Workspace) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_browser(viewer: Any) -> Client:
    client = Client()
    client.force_login(viewer)
    return client


def page(client: Client) -> str:
    return str(client.get(RUNS).content.decode())


def test_the_runs_page_shows_and_edits_the_dream_schedule_beside_the_cycle(
    browser: Client, viewer_browser: Client, workspace: Workspace
) -> None:
    assert "No scheduled dream" in page(browser)
    saved = browser.post(RUNS + "schedule/", {"schedule": "dream", "hours": "24"})
    assert saved.status_code == 302
    workspace.refresh_from_db()
    assert workspace.evolution_settings["dream_every_hours"] == 24.0
    assert "cycle_every_hours" not in workspace.evolution_settings
    html = page(browser)
    assert "runs every <strong>24 h</strong>; the first runs within a minute" in html
    assert 'id="dream-hours"' in html and 'value="24"' in html
    refused = browser.post(RUNS + "schedule/", {"schedule": "dream", "hours": "100000"})
    body = str(refused.content.decode())
    assert refused.status_code == 400 and 'id="dream-error"' in body and "dream_every_hours" in body
    assert 'id="schedule-error"' not in body
    # A viewer reads the schedule and gets no form.
    viewer_page = page(viewer_browser)
    assert "runs every <strong>24 h</strong>" in viewer_page and 'id="dream-hours"' not in viewer_page
    assert viewer_browser.post(RUNS + "schedule/", {"schedule": "dream", "hours": "0"}).status_code in (403, 404)
    assert browser.post(RUNS + "schedule/", {"schedule": "dream", "hours": "0"}).status_code == 302
    assert "No scheduled dream" in page(browser)


def test_the_runs_page_lists_the_background_jobs_once_they_ran(browser: Client, workspace: Workspace) -> None:
    assert 'id="job-table"' not in page(browser)
    Scheduler(worker="w1", locks=DatabaseJobLocks()).tick()
    html = page(browser)
    assert 'id="job-decay"' in html and "Decay sweep" in html
    assert 'id="job-retrieval"' in html and "Retrieval profiles and co-retrieval counts" in html
    assert 'id="job-dream"' not in html  # not scheduled for this workspace


def test_the_runs_page_says_how_many_memories_wait_for_their_vector_and_what_the_job_did(
    browser: Client, workspace: Workspace
) -> None:
    from memories.bulk import bulk_insert
    from memories.embedding_service import embed_pending
    from memories.models import Memory

    make = [Memory(workspace=workspace, content=f"imported memory {k}", origin="import:test") for k in range(3)]
    bulk_insert(Memory, make)  # stored without a vector, as a large import with a slow model is
    html = page(browser)
    assert 'id="vectors-waiting"' in html and "Waiting for a hashing:256 vector: 3 memories." in html
    embed_pending(workspace=workspace)
    Scheduler(worker="w1", locks=DatabaseJobLocks()).tick()
    html = page(browser)
    assert 'id="vectors-waiting"' not in html
    assert "retrieval" in html and "profiles_compared 0" in html  # each job's last result, in its row
