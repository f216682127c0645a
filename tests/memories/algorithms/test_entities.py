"""Entity extraction for MENTIONS edges and the router's entity_count."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.algorithms.entities import (
    KIND_ACRONYM,
    KIND_HANDLE,
    KIND_HASHTAG,
    KIND_NAME,
    KIND_TECHNOLOGY,
    STOP_WORDS,
    TECH_TERMS,
    Entity,
    TechTerm,
    count_entities,
    extract_entities,
)
from surfacing.algorithms.router import RouteDecision
from surfacing.algorithms.router import route as surfacing_route

# The project's own prose, for consistency checks at scale.
CORPUS = sorted((Path(__file__).resolve().parents[3] / "docs").glob("*.md"))


def keys(text: str) -> list[str]:
    return [e.key for e in extract_entities(text)]


# --- The demo's "why did we pick JWT" story ----------------------------------------------------------

SEED_001_STORY = [
    ("Why did we pick JWT?", [Entity("JWT", "jwt", KIND_TECHNOLOGY)]),
    (
        "Decision: we picked JWT because the load balancer round-robins requests and session cookies "
        "broke sticky sessions.",
        [
            Entity("JWT", "jwt", KIND_TECHNOLOGY),
            Entity("load balancer", "load balancer", KIND_TECHNOLOGY),
            Entity("session cookie", "session cookie", KIND_TECHNOLOGY),
        ],
    ),
    (
        "The session-cookie failure thread: users were logged out whenever the LB moved them to another node.",
        [Entity("session cookie", "session cookie", KIND_TECHNOLOGY), Entity("LB", "lb", KIND_ACRONYM)],
    ),
    (
        "Token format follows RFC 7519; refresh tokens are rotated as in rfc6749.",
        [
            Entity("RFC 7519", "rfc 7519", KIND_TECHNOLOGY),
            Entity("refresh token", "refresh token", KIND_TECHNOLOGY),
            Entity("RFC 6749", "rfc 6749", KIND_TECHNOLOGY),
        ],
    ),
    (
        "Alice said the nginx load-balancers terminate TLS, so Bob Smith moved auth to OAuth2 with OIDC.",
        [
            Entity("Alice", "alice", KIND_NAME),
            Entity("nginx", "nginx", KIND_TECHNOLOGY),
            Entity("load balancer", "load balancer", KIND_TECHNOLOGY),
            Entity("TLS", "tls", KIND_TECHNOLOGY),
            Entity("Bob Smith", "bob smith", KIND_NAME),
            Entity("OAuth2", "oauth2", KIND_TECHNOLOGY),
            Entity("OIDC", "oidc", KIND_TECHNOLOGY),
        ],
    ),
]


@pytest.mark.parametrize(("text", "expected"), SEED_001_STORY)
def test_the_jwt_story_yields_its_entities_in_order(text: str, expected: list[Entity]) -> None:
    assert extract_entities(text) == expected


def test_the_jwt_story_sentence_names_its_terms() -> None:
    # The story of the demo in one sentence, hyphenated as people write it.
    text = (
        "Ask why we picked JWT and get back the decision, the load-balancer note, the session-cookie failure "
        "thread and the RFC it cites: they sit in the graph neighbourhood of the items that say JWT."
    )
    assert {"jwt", "load balancer", "session cookie"} <= set(keys(text))


# --- Vocabulary and aliases ---------------------------------------------------------------------------

ALIASES = [
    ("we run postgres 15", "postgresql", "PostgreSQL"),
    ("PostgreSQL is the primary store", "postgresql", "PostgreSQL"),
    ("dump it with pg before the upgrade", "postgresql", "PostgreSQL"),
    ("the Postgres replica lags", "postgresql", "PostgreSQL"),
    ("k8s upgrade tonight", "kubernetes", "Kubernetes"),
    ("move the jobs to Kubernetes", "kubernetes", "Kubernetes"),
    ("login via OAuth 2.0 now", "oauth2", "OAuth2"),
    ("we adopted OpenID Connect", "oidc", "OIDC"),
    ("the Load-Balancer health check", "load balancer", "load balancer"),
    ("two load balancers in front", "load balancer", "load balancer"),
    ("the service is written in golang", "go", "Go"),
    ("see RFC-7519 for claims", "rfc 7519", "RFC 7519"),
    ("see rfc7519 for claims", "rfc 7519", "RFC 7519"),
    ("upgrade nodejs first", "node.js", "Node.js"),
    ("upgrade Node.js first", "node.js", "Node.js"),
    ("the HTTP2 upgrade", "http/2", "HTTP/2"),
    ("serve it over http/2", "http/2", "HTTP/2"),
    ("rotate the JWTs weekly", "jwt", "JWT"),
    ("put static files on a content delivery network", "cdn", "CDN"),
    ("store the blobs in Amazon S3", "s3", "S3"),
    ("a single sign-on rollout", "sso", "SSO"),
    ("our ci/cd pipeline", "ci/cd", "CI/CD"),
    ("the grpc gateway", "grpc", "gRPC"),
    ("switch to a restful design", "rest", "REST"),
    ("queue it in RabbitMQ", "rabbitmq", "RabbitMQ"),
    ("graph lives in neo4j", "neo4j", "Neo4j"),
    ("written in C++ and C#", "c++", "C++"),
]


@pytest.mark.parametrize(("text", "key", "name"), ALIASES)
def test_aliases_map_to_one_canonical_term(text: str, key: str, name: str) -> None:
    found = {e.key: e for e in extract_entities(text)}
    assert key in found
    assert found[key] == Entity(name, key, KIND_TECHNOLOGY)


def test_the_vocabulary_is_large_and_unambiguous() -> None:
    assert len(TECH_TERMS) >= 150
    canonical_keys = [t.key for t in TECH_TERMS]
    assert len(set(canonical_keys)) == len(canonical_keys)
    normalised = Counter(" ".join(a.replace("-", " ").split()) for t in TECH_TERMS for a in t.aliases)
    assert [a for a, n in normalised.items() if n > 1] == []
    exact = Counter(a for t in TECH_TERMS for a in t.exact)
    assert [a for a, n in exact.items() if n > 1] == []


@pytest.mark.parametrize("term", TECH_TERMS, ids=lambda t: t.key)
def test_every_alias_is_found_inside_a_sentence(term: TechTerm) -> None:
    for alias in term.aliases + term.exact:
        assert keys(f"we use {alias} here") == [term.key], alias


@pytest.mark.parametrize(
    "text",
    [
        "please react to the alert",
        "the rest of the day",
        "rust on the old bike",
        "go to the settings page",
        "a lambda function in the script",
        "swift progress on the vault door",
        "the spark plug and the flask of tea",
    ],
)
def test_ambiguous_terms_need_their_written_form(text: str) -> None:
    assert keys(text) == []


def test_case_sensitive_terms_match_as_written() -> None:
    assert keys("the React app calls a REST endpoint on AWS Lambda written in Rust") == [
        "react",
        "rest",
        "lambda",
        "rust",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Go ahead and merge it.", []),
        ("Go to the dashboard first.", []),
        ("We rewrote the ingest service in Go last year.", ["go"]),
        ("Go modules are pinned in the repo.", ["go"]),
        ("Ship it. Go 1.22 is required.", ["go"]),
    ],
)
def test_go_is_the_language_only_in_a_tech_context(text: str, expected: list[str]) -> None:
    assert keys(text) == expected


def test_words_inside_identifiers_are_not_terms() -> None:
    assert keys("run pg_dump and check redis_url, awsome mysqlx and gopher") == []


# --- Names --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ask Alice about the rollout.", ["Alice"]),
        ("The contract with Acme Corp renews soon.", ["Acme Corp"]),
        ("We met Bob Smith from the Bank of America.", ["Bob Smith", "Bank of America"]),
        ("Loop in Jean-Luc O'Brien and McKinsey's team.", ["Jean-Luc O'Brien", "McKinsey"]),
        ("Dr. Smith approved it.", ["Smith"]),
        ("Alice said the numbers look fine.", ["Alice"]),
        ("Alice's notebook has the query.", ["Alice"]),
        ("Bob Smith will review it.", ["Bob Smith"]),
        ("Yesterday Alice approved the change.", ["Alice"]),
        ("Owner: Carol Jones", ["Carol Jones"]),
        ("Deploy the hotfix. Revert it if latency grows.", []),
        ("On Monday in March we talked to Dana about it.", ["Dana"]),
        ("Meeting moved to Friday, May 3.", []),
        ("Hi Erik, thanks!", ["Erik"]),
    ],
)
def test_capitalised_names_outside_sentence_starts(text: str, expected: list[str]) -> None:
    found = extract_entities(text)
    assert [e.name for e in found] == expected
    assert all(e.kind == KIND_NAME for e in found)


def test_weekdays_months_and_pronouns_are_never_entities() -> None:
    for word in ["Monday", "Sunday", "January", "March", "May", "December", "We", "They", "The"]:
        assert word in STOP_WORDS
        assert keys(f"we spoke about it, {word} maybe") == []
    assert keys("we spoke about it, I think") == []


def test_a_stop_word_splits_a_capitalised_run() -> None:
    assert [e.name for e in extract_entities("we told Alice Monday Bob would call")] == ["Alice", "Bob"]


def test_a_vocabulary_term_splits_a_name() -> None:
    assert extract_entities("talk to the Acme Redis team") == [
        Entity("Acme", "acme", KIND_NAME),
        Entity("Redis", "redis", KIND_TECHNOLOGY),
    ]


# --- Handles, hashtags, acronyms ----------------------------------------------------------------------


def test_handles_and_hashtags() -> None:
    assert extract_entities("ping @bob.smith and @Carol on #incident-42 and #Oncall.") == [
        Entity("@bob.smith", "@bob.smith", KIND_HANDLE),
        Entity("@Carol", "@carol", KIND_HANDLE),
        Entity("#incident-42", "#incident-42", KIND_HASHTAG),
        Entity("#Oncall", "#oncall", KIND_HASHTAG),
    ]


def test_emails_colours_issue_numbers_and_url_fragments_are_not_handles_or_hashtags() -> None:
    assert keys("mail bob@example.com, colour #fff or #a1b2c3, issue #123, see /docs#setup") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("the ACME deal", ["acme"]),
        ("two CVEs were filed", ["cve"]),
        ("OK, FYI the PM call is at 3 PM UTC", []),
        ("PLEASE DO NOT MERGE THIS BRANCH", []),
        ("MERGE ACME NOW", []),
        ("the NASA and ESA teams", ["nasa", "esa"]),
        ("a TOOLONGWORD is not an acronym", []),
    ],
)
def test_allcaps_acronyms(text: str, expected: list[str]) -> None:
    found = extract_entities(text)
    assert [e.key for e in found] == expected
    assert all(e.kind == KIND_ACRONYM for e in found)


# --- Order, dedupe, keys -----------------------------------------------------------------------------


def test_entities_come_in_order_of_first_appearance_once_per_key() -> None:
    text = "Postgres and Redis. We like postgres; pg and REDIS too. Ask Alice, then alice's friend ALICE."
    assert extract_entities(text) == [
        Entity("PostgreSQL", "postgresql", KIND_TECHNOLOGY),
        Entity("Redis", "redis", KIND_TECHNOLOGY),
        Entity("Alice", "alice", KIND_NAME),
    ]


def test_keys_are_normalised_lower_case() -> None:
    assert keys("meet Zoë  Ångström at ＡＣＭＥ") == ["zoë", "ångström"]


# --- Routing counts (router rule 1: entity_count >= 2 -> deep) -----------------------------------------


def route(query: str) -> RouteDecision:
    """The project's surfacing router fed with this module's entity counter, as the context service does."""
    return surfacing_route(query, entity_count=count_entities(query))


@pytest.mark.parametrize(
    ("query", "count", "strategy", "confidence"),
    [
        ("what is the db", 0, "fast:recency", 0.5),
        ("postgres connection pool settings for prod", 0, "fast:recency", 0.5),
        ("Show, all items", 0, "factual:point-query", 0.7),
        ("invoices", 0, "factual:point-query", 0.65),
        ("what caused the outage", 0, "deep:multi-hop", 0.75),
        ("why did we pick JWT?", 1, "deep:multi-hop", 0.75),
    ],
)
def test_reference_router_vectors_hold_with_this_entity_counter(
    query: str, count: int, strategy: str, confidence: float
) -> None:
    assert count_entities(query) == count
    decision = route(query)
    assert (decision.strategy, decision.confidence) == (strategy, confidence)


@pytest.mark.parametrize(
    ("query", "count", "reason"),
    [
        ("Postgres and Redis latency", 2, "entity_count:2"),
        ("JWT rotation schedule", 1, "single_entity"),
        ("ask @carol about RFC 7519", 2, "entity_count:2"),
        ("Alice's notes on Kafka", 2, "entity_count:2"),
        ("load balancer timeout settings", 0, "fallback"),
        ("the CDN cache rules", 1, "single_entity"),
        ("notes tagged #oncall", 0, "fallback"),
    ],
)
def test_routing_counts_proper_noun_style_entities_only(query: str, count: int, reason: str) -> None:
    assert count_entities(query) == count
    assert route(query).reasons == (reason,)


def test_lower_case_vocabulary_is_extracted_for_mentions_but_not_counted() -> None:
    text = "postgres connection pool settings for prod"
    assert keys(text) == ["postgresql", "connection pool"]
    assert count_entities(text) == 0
    assert count_entities("Postgres connection pool settings for prod") == 1


# --- Robustness and scale ----------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=300))
def test_any_text_gives_unique_lower_case_keys_and_a_bounded_count(text: str) -> None:
    found = extract_entities(text)
    assert len({e.key for e in found}) == len(found)
    assert all(e.key == e.key.lower() and e.name for e in found)
    assert 0 <= count_entities(text) <= len(found)
    assert extract_entities(text) == found


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["JWT", "Alice", "postgres", "the", "load", "balancer", "@bob", "#ops", "RFC", "7519", "Go", ".", ","]
        ),
        max_size=40,
    )
)
def test_token_soup_never_breaks_the_scanner(tokens: list[str]) -> None:
    text = " ".join(tokens)
    assert count_entities(text) <= len(extract_entities(text))


def test_pathological_inputs_finish() -> None:
    for text in ["@" + "a-" * 5000, "#" + "b-" * 5000, "A " * 5000, "load " * 5000, "x" * 50_000, "." * 50_000]:
        extract_entities(text)


def test_many_turns_are_processed_consistently() -> None:
    # Sanity check at ingestion scale (throughput is measured outside the suite).
    lines = [line for p in CORPUS for line in p.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) > 500
    rng = random.Random(1)
    turns = [rng.choice(lines) for _ in range(20_000)]
    results = [extract_entities(t) for t in turns]
    assert len(results) == 20_000
    by_text = {t: r for t, r in zip(turns, results, strict=True)}
    assert all(by_text[t] == r for t, r in zip(turns, results, strict=True))
