"""The demo workspace: the "why did we pick JWT" story (a decision, and the note, incident and RFC that
explain it, though only the decision says "JWT") and the pieces around it.

Dates are relative to the moment of loading so the demo always shows a mix of fresh, warm and cold
memories: the decision thread from weeks ago, an incident from months ago, preferences that changed
three times this month, a goal with the event that fulfils it, and old episodes that have faded.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from memories import services, tokens
from memories.inputs import MemoryInput, SessionInput, TurnInput
from memories.models import Edge, EdgeType, Memory, MemoryType, Role, Workspace


@dataclass(frozen=True)
class DemoResult:
    workspace: Workspace
    created_workspace: bool
    password: str | None
    token: str
    memories: int
    edges: int


def _ago(now: datetime, **delta: float) -> datetime:
    return now - timedelta(**delta)


def _user(username: str) -> tuple[AbstractBaseUser, str | None]:
    User = get_user_model()
    user = User.objects.filter(username=username).first()
    if user is not None:
        return user, None
    password = secrets.token_urlsafe(12)
    user = User.objects.create_superuser(username=username, email="", password=password)
    return user, password


def _item(content: str, memory_type: str, created: datetime, **extra: Any) -> MemoryInput:
    return MemoryInput(content=content, memory_type=memory_type, created_at=created, origin="import:demo", **extra)


def _story(now: datetime) -> list[tuple[str, MemoryInput]]:
    """Keyed memories of the story; keys name them for the edges below."""
    return [
        (
            "anchor",
            _item(
                "Project Atlas: public REST API for the Acme billing platform. Backend owner Dana Reyes, SRE Lee Park. "
                "Auth service, gateway and billing workers run on Kubernetes behind an nginx load balancer.",
                MemoryType.ANCHOR,
                _ago(now, days=120),
                subject="project-atlas",
            ),
        ),
        (
            "decision",
            _item(
                "Decision: we picked JWT access tokens (15 minute expiry) with rotating refresh tokens for API "
                "authentication instead of server-side session cookies. Stateless verification lets any API node "
                "serve any request.",
                MemoryType.DECISION,
                _ago(now, days=41),
                subject="api-auth",
                tags=("auth", "architecture"),
                confidence=0.95,
            ),
        ),
        (
            "lb_note",
            _item(
                "The nginx load balancer in front of the API does round-robin without sticky sessions; "
                "a shared session store would add a Redis dependency on every request.",
                MemoryType.FACT,
                _ago(now, days=44),
                subject="load-balancer",
                tags=("infra",),
            ),
        ),
        (
            "cookie_incident",
            _item(
                "Incident: users were logged out at random after the scale-out to four API nodes. Session cookies "
                "were only valid on the node that issued them, and the balancer sent the next request elsewhere.",
                MemoryType.EVENT,
                _ago(now, days=47),
                subject="incident-logout",
                tags=("incident", "auth"),
            ),
        ),
        (
            "cookie_fix",
            _item(
                "Postmortem action: stop relying on node-local session state; evaluate stateless tokens.",
                MemoryType.FINDING,
                _ago(now, days=46),
                subject="incident-logout",
            ),
        ),
        (
            "rfc",
            _item(
                "Reference: RFC 7519 defines JSON Web Token; we validate the registered claims exp, iat, iss and sub "
                "and sign with EdDSA keys rotated monthly.",
                MemoryType.SEMANTIC,
                _ago(now, days=40),
                subject="jwt-spec",
                tags=("auth", "reference"),
            ),
        ),
        (
            "revocation",
            _item(
                "Open question from the JWT review: revocation before expiry needs a deny-list checked at the gateway.",
                MemoryType.OBSERVATION,
                _ago(now, days=39),
                subject="api-auth",
            ),
        ),
        (
            "pref1",
            _item(
                "Dana prefers VS Code for reviewing backend pull requests.",
                MemoryType.PREFERENCE,
                _ago(now, days=26),
                subject="dana-editor",
            ),
        ),
        (
            "pref2",
            _item(
                "Dana switched to Neovim for reviews.",
                MemoryType.PREFERENCE,
                _ago(now, days=17),
                subject="dana-editor",
            ),
        ),
        (
            "pref3",
            _item(
                "Dana now uses Zed for reviews.",
                MemoryType.PREFERENCE,
                _ago(now, days=9),
                subject="dana-editor",
            ),
        ),
        (
            "pref4",
            _item(
                "Dana prefers Zed with vim keybindings.",
                MemoryType.PREFERENCE,
                _ago(now, days=2),
                subject="dana-editor",
            ),
        ),
        (
            "tz_pref",
            _item(
                "Lee prefers incident reviews scheduled before 11:00 UTC.",
                MemoryType.PREFERENCE,
                _ago(now, days=30),
                subject="lee-meetings",
            ),
        ),
        (
            "state_a",
            _item(
                "The staging database runs PostgreSQL 14.",
                MemoryType.STATE,
                _ago(now, days=20),
                subject="staging-db",
                confidence=0.8,
            ),
        ),
        (
            "state_b",
            _item(
                "The staging database runs PostgreSQL 15 since the upgrade.",
                MemoryType.STATE,
                _ago(now, days=5),
                subject="staging-db",
                confidence=0.9,
            ),
        ),
        (
            "goal",
            _item(
                "Goal: ship the mobile login flow using the JWT refresh tokens.",
                MemoryType.GOAL,
                _ago(now, days=30),
                subject="mobile-login",
            ),
        ),
        (
            "goal_event",
            _item(
                "Goal: ship the mobile login flow using the JWT refresh tokens — shipped to production today.",
                MemoryType.EVENT,
                _ago(now, days=1),
                subject="mobile-login",
            ),
        ),
        (
            "old1",
            _item(
                "Kickoff meeting for Project Atlas: agreed on REST over GraphQL for partners.",
                MemoryType.EPISODIC,
                _ago(now, days=150),
            ),
        ),
        (
            "old2",
            _item(
                "Benchmarked Kafka against RabbitMQ for billing events; RabbitMQ was enough for now.",
                MemoryType.EPISODIC,
                _ago(now, days=140),
            ),
        ),
        (
            "old3",
            _item("Lee set up Grafana dashboards for API latency.", MemoryType.EPISODIC, _ago(now, days=110)),
        ),
        (
            "procedure",
            _item(
                "To rotate signing keys: publish the new JWKS, wait one token lifetime, then retire the old key.",
                MemoryType.PROCEDURAL,
                _ago(now, days=12),
                subject="key-rotation",
            ),
        ),
        (
            "working1",
            _item("Reviewing the gateway deny-list PR today.", MemoryType.WORKING, _ago(now, hours=3)),
        ),
        (
            "working2",
            _item("Need to confirm refresh token lifetime with Dana.", MemoryType.WORKING, _ago(now, hours=1)),
        ),
    ]


_EDGES = [
    ("decision", "lb_note", EdgeType.RELATED),
    ("decision", "cookie_incident", EdgeType.DERIVED_FROM),
    ("cookie_fix", "cookie_incident", EdgeType.PART_OF),
    ("decision", "cookie_fix", EdgeType.ANSWERED_BY),
    ("decision", "rfc", EdgeType.RELATED),
    ("revocation", "decision", EdgeType.RELATED),
    ("procedure", "rfc", EdgeType.RELATED),
    ("goal", "decision", EdgeType.RELATED),
    ("goal_event", "goal", EdgeType.RESOLVES),
    ("lb_note", "anchor", EdgeType.PART_OF),
    ("old1", "anchor", EdgeType.PART_OF),
]


def _conversation(now: datetime) -> list[SessionInput]:
    return [
        SessionInput(
            started_at=_ago(now, days=42),
            session_id="auth-review",
            turns=(
                TurnInput("Dana", "Why not keep session cookies and add a Redis session store?"),
                TurnInput("Lee", "Every request would hit Redis, and the load balancer has no sticky sessions."),
                TurnInput("Dana", "JWT with short expiry avoids that; RFC 7519 covers the claims we need."),
                TurnInput("Lee", "Then revocation is the risk. We need a deny-list at the gateway."),
                TurnInput("Dana", "Agreed. Let's write the decision down: JWT plus refresh tokens."),
            ),
        ),
        SessionInput(
            started_at=_ago(now, days=2),
            session_id="mobile-sync",
            turns=(
                TurnInput("Lee", "Mobile login is using the refresh endpoint now; error rate is flat."),
                TurnInput("Dana", "Great. Dashboards in Grafana look fine for the gateway too."),
            ),
        ),
    ]


@transaction.atomic
def demo_load(*, slug: str = "demo", username: str = "admin") -> DemoResult:
    """Create the admin user and the demo workspace unless they exist, and issue the user a new API token
    (tokens are stored hashed, so an earlier one cannot be shown again); return what was done."""
    user, password = _user(username)
    token = tokens.api_token_create(user=user, name="load_demo")
    existing = Workspace.objects.filter(slug=slug).first()
    if existing is not None:
        if password is not None:
            # The admin was deleted and created again: give the new account the demo it is printed for.
            services.membership_set(workspace=existing, user=user, role=Role.OWNER)
        return DemoResult(existing, False, password, token.key, existing.memories.count(), existing.edges.count())
    workspace = services.workspace_create(owner=user, slug=slug, name="Demo: Project Atlas")
    now = timezone.now()
    story = _story(now)
    by_key: dict[str, Memory] = {}
    # One at a time and in date order so write-time policies (preference REPLACE, state FLAG) see
    # each memory arrive the way it would have in real life.
    for key, item in sorted(story, key=lambda pair: pair[1].created_at or now):
        by_key[key] = services.memory_create(workspace=workspace, actor=user, item=item, channel="import")
    services.edges_bulk_link(
        workspace=workspace,
        edges=[
            Edge(workspace=workspace, source=by_key[a], target=by_key[b], edge_type=t)
            for a, b, t in _EDGES
            if a in by_key and b in by_key
        ],
    )
    services.conversation_ingest(workspace=workspace, actor=user, sessions=_conversation(now), channel="import")
    return DemoResult(workspace, True, password, token.key, workspace.memories.count(), workspace.edges.count())
