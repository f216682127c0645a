"""Rules-based entity extraction: MENTIONS edges at ingestion and the router's ``entity_count``.

One compiled regex pass over the text finds, at each word start, the first of:

1. ``RFC 7519`` style references (any case, optional space or hyphen) -> kind ``technology``;
2. a term of the curated technical vocabulary (``TECH_TERMS``), by alias, as a whole word or phrase,
   optionally plural -> kind ``technology``, named by its canonical form (``pg`` -> ``PostgreSQL``);
3. a capitalised word (``Alice``, ``McKinsey``, ``O'Brien``); adjacent ones join into one name
   (``Bob Smith``, ``Bank of America``) -> kind ``name``;
4. an ALLCAPS acronym of 2-6 letters (``ACME``, ``CVEs``) -> kind ``acronym``;

plus ``@handles`` (kind ``handle``) and ``#hashtags`` (kind ``hashtag``).

Filters: capitalised words in ``STOP_WORDS`` (pronouns, function words, weekdays, months, chat
filler...) are never names and split a name; a lone capitalised word that starts a sentence is not a
name (sentences start with capitals) unless a possessive or a reporting verb follows (``Alice said``);
acronyms in ``STOP_ACRONYMS`` (OK, FYI, PM, UTC...) and words inside a run of three or more ALLCAPS
words (shouting) are dropped; sentence-initial ``Go`` is the verb unless a tech word or a version
number follows. Capitalised words are recognised in the Latin-1 range (``Zoë``, ``Ørsted``), not beyond.

Entities come back in order of first appearance, deduplicated by ``key`` (the normalised, lower-cased
canonical form).

``count_entities`` counts only proper-noun style entities, as the surfacing router needs: names,
@handles, RFC references, acronyms, and vocabulary terms written with a capital (``Postgres``,
``JWT``, ``CDN``). A lower-case vocabulary word (``postgres``, ``load balancer``) is still extracted
for MENTIONS edges but does not count, so a query in plain lower-case words is not taken for a lookup of a
name: "postgres connection pool settings for prod" has entity_count 0 and routes fast:recency 0.5
(fallback), where counting "postgres" would make it a factual:point-query (single_entity).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "KIND_ACRONYM",
    "KIND_HANDLE",
    "KIND_HASHTAG",
    "KIND_NAME",
    "KIND_TECHNOLOGY",
    "STOP_ACRONYMS",
    "STOP_WORDS",
    "TECH_TERMS",
    "Entity",
    "TechTerm",
    "count_entities",
    "extract_entities",
]

KIND_TECHNOLOGY = "technology"
KIND_NAME = "name"
KIND_HANDLE = "handle"
KIND_HASHTAG = "hashtag"
KIND_ACRONYM = "acronym"


@dataclass(frozen=True, slots=True)
class Entity:
    """An entity mention: display ``name``, dedup ``key`` (normalised lower case) and ``kind``."""

    name: str
    key: str
    kind: str


@dataclass(frozen=True, slots=True)
class TechTerm:
    """A vocabulary entry.

    ``aliases`` match in any case; ``exact`` aliases match only as written (for words that are
    ordinary English in lower case: Go, Rust, React...). ``concept`` marks common-noun terms (load
    balancer, session cookie) that never count as a proper noun for routing unless written in caps.
    """

    canonical: str
    aliases: tuple[str, ...] = ()
    exact: tuple[str, ...] = ()
    concept: bool = False

    @property
    def key(self) -> str:
        return self.canonical.lower()


def _term(canonical: str, aliases: str = "", exact: str = "", concept: bool = False) -> TechTerm:
    """Build a TechTerm from ``|``-separated alias lists; the canonical form is always an alias
    (matched in any case unless it is listed in ``exact``)."""
    exact_aliases = tuple(a for a in exact.split("|") if a)
    any_case = [a for a in aliases.split("|") if a]
    if canonical not in exact_aliases:
        any_case.insert(0, canonical)
    return TechTerm(canonical, tuple(dict.fromkeys(a.lower() for a in any_case)), exact_aliases, concept)


def _word_set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Curated vocabulary. In aliases a space or hyphen matches any run of spaces/hyphens, so
# "load balancer" also finds "load-balancer"; every any-case alias also matches with a plural "s".
TECH_TERMS: tuple[TechTerm, ...] = (
    # Identity, auth and security
    _term("JWT", "jwts|json web token"),
    _term("JWS"),
    _term("JWE"),
    _term("JWKS", "jwk"),
    _term("OAuth", "oauth 1"),
    _term("OAuth2", "oauth 2|oauth 2.0|oauth2.0"),
    _term("OIDC", "openid connect|openid"),
    _term("SAML", "saml2|saml 2.0"),
    _term("SSO", "single sign on", concept=True),
    _term("MFA", "2fa|two factor authentication|multi factor authentication", concept=True),
    _term("LDAP"),
    _term("Kerberos"),
    _term("Keycloak"),
    _term("Auth0"),
    _term("Okta"),
    _term("TLS", "mtls|mutual tls"),
    _term("SSL"),
    _term("HTTPS"),
    _term("CORS", concept=True),
    _term("CSRF", "xsrf", concept=True),
    _term("XSS", "cross site scripting", concept=True),
    _term("HMAC", concept=True),
    _term("RSA"),
    _term("ECDSA"),
    _term("bcrypt"),
    _term("Argon2"),
    _term("session cookie", "session cookies|session id cookie", concept=True),
    _term("access token", concept=True),
    _term("refresh token", concept=True),
    _term("API key", concept=True),
    _term("RBAC", "role based access control", concept=True),
    # Networking, protocols and formats
    _term("HTTP", "http/1.1|http 1.1"),
    _term("HTTP/2", "http2|h2c"),
    _term("HTTP/3", "http3"),
    _term("QUIC"),
    _term("TCP", "tcp/ip"),
    _term("UDP"),
    _term("DNS", concept=True),
    _term("CDN", "content delivery network", concept=True),
    _term("load balancer", "loadbalancer|load balancing", concept=True),
    _term("reverse proxy", concept=True),
    _term("API gateway", concept=True),
    _term("service mesh", concept=True),
    _term("VPN", concept=True),
    _term("SSH"),
    _term("SMTP"),
    _term("WebSocket", "websockets|web socket"),
    _term("WebRTC"),
    _term("MQTT"),
    _term("gRPC"),
    _term("GraphQL"),
    _term("REST", "restful|rest api", exact="REST"),
    _term("OpenAPI", "swagger"),
    _term("JSON"),
    _term("YAML", "yml"),
    _term("Protobuf", "protocol buffers"),
    _term("CSV"),
    _term("SQL"),
    _term("NoSQL"),
    _term("Cypher"),
    _term("API", concept=True),
    _term("SDK", concept=True),
    _term("CLI", concept=True),
    _term("URL", concept=True),
    # Databases, caches, queues, search
    _term("PostgreSQL", "postgres|postgre|pg|psql|pgsql"),
    _term("pgvector"),
    _term("PgBouncer"),
    _term("MySQL"),
    _term("MariaDB"),
    _term("SQLite", "sqlite3"),
    _term("Redis"),
    _term("Memcached", "memcache"),
    _term("Kafka", "apache kafka"),
    _term("RabbitMQ", "rabbit mq"),
    _term("NATS", exact="NATS"),
    _term("Neo4j"),
    _term("FalkorDB"),
    _term("MongoDB", "mongo"),
    _term("Cassandra"),
    _term("ClickHouse"),
    _term("DuckDB"),
    _term("Elasticsearch", "elastic search"),
    _term("OpenSearch"),
    _term("Snowflake", exact="Snowflake"),
    _term("FAISS"),
    _term("Pinecone", exact="Pinecone"),
    _term("Qdrant"),
    _term("Weaviate"),
    _term("Milvus"),
    _term("message queue", "message broker", concept=True),
    _term("connection pool", "connection pooling", concept=True),
    _term("rate limiter", "rate limiting|rate limit", concept=True),
    _term("circuit breaker", concept=True),
    _term("feature flag", concept=True),
    _term("vector database", "vector db|vector store", concept=True),
    # Cloud
    _term("AWS", "amazon web services"),
    _term("S3", "amazon s3"),
    _term("EC2", "amazon ec2"),
    _term("Lambda", "aws lambda", exact="Lambda"),
    _term("ECS"),
    _term("EKS"),
    _term("RDS", "amazon rds"),
    _term("Aurora", exact="Aurora"),
    _term("DynamoDB", "dynamo db"),
    _term("SQS"),
    _term("SNS"),
    _term("CloudFront"),
    _term("Route 53", "route53"),
    _term("IAM"),
    _term("VPC"),
    _term("CloudWatch"),
    _term("Fargate"),
    _term("GCP", "google cloud|google cloud platform"),
    _term("GKE"),
    _term("BigQuery"),
    _term("Cloud Run"),
    _term("Pub/Sub", "pubsub"),
    _term("Azure", "microsoft azure"),
    _term("AKS"),
    _term("Cosmos DB", "cosmosdb"),
    _term("Cloudflare"),
    _term("Heroku"),
    _term("Vercel"),
    _term("Netlify"),
    # Containers, infrastructure, observability, delivery
    _term("Docker", "dockerfile|docker compose"),
    _term("Kubernetes", "k8s|kube"),
    _term("Helm", exact="Helm"),
    _term("Terraform"),
    _term("Ansible"),
    _term("nginx"),
    _term("HAProxy"),
    _term("Envoy", exact="Envoy"),
    _term("Istio"),
    _term("Traefik"),
    _term("Consul", exact="Consul"),
    _term("Vault", "hashicorp vault", exact="Vault"),
    _term("Prometheus"),
    _term("Grafana"),
    _term("Datadog"),
    _term("Sentry", exact="Sentry"),
    _term("OpenTelemetry", "otel"),
    _term("Jaeger"),
    _term("Kibana"),
    _term("Splunk"),
    _term("CI/CD", "ci cd|cicd", concept=True),
    _term("GitHub Actions"),
    _term("Jenkins"),
    _term("CircleCI"),
    _term("Git"),
    _term("GitHub"),
    _term("GitLab"),
    _term("Bitbucket"),
    _term("Jira"),
    _term("Slack", exact="Slack"),
    _term("Linux"),
    _term("Ubuntu"),
    _term("Debian"),
    _term("macOS", "osx|os x"),
    _term("Windows", exact="Windows"),
    _term("cron", "crontab|cron job", concept=True),
    _term("CPU", concept=True),
    _term("GPU", concept=True),
    _term("RAM", exact="RAM", concept=True),
    # Languages, runtimes, frameworks, libraries
    _term("Python", "python3|cpython"),
    _term("Rust", exact="Rust"),
    _term("Go", "golang", exact="Go"),
    _term("Java", exact="Java|JVM"),
    _term("Kotlin"),
    _term("Scala"),
    _term("TypeScript"),
    _term("JavaScript", "ecmascript"),
    _term("Node.js", "nodejs|node js"),
    _term("Deno"),
    _term("Ruby", exact="Ruby"),
    _term("Ruby on Rails", exact="Rails"),
    _term("PHP"),
    _term("C++", "cpp"),
    _term("C#", "csharp"),
    _term(".NET", "dotnet"),
    _term("Swift", exact="Swift"),
    _term("Elixir", exact="Elixir"),
    _term("Haskell"),
    _term("Bash"),
    _term("WebAssembly", "wasm"),
    _term("Django", "django rest framework|drf"),
    _term("Flask", exact="Flask"),
    _term("FastAPI"),
    _term("Celery", exact="Celery"),
    _term("Spring Boot", "spring framework"),
    _term("React", "reactjs|react.js", exact="React"),
    _term("Vue", "vuejs|vue.js", exact="Vue"),
    _term("Angular", "angularjs", exact="Angular"),
    _term("Svelte"),
    _term("Next.js", "nextjs"),
    _term("htmx"),
    _term("Tailwind", "tailwindcss", exact="Tailwind"),
    _term("pytest"),
    _term("NumPy"),
    _term("pandas"),
    _term("PyTorch"),
    _term("TensorFlow"),
    _term("Apache Spark", "pyspark", exact="Spark"),
    _term("Airflow", "apache airflow"),
    # AI
    _term("LLM", "large language model", concept=True),
    _term("RAG", "retrieval augmented generation", exact="RAG", concept=True),
    _term("OpenAI"),
    _term("Anthropic"),
    _term("Hugging Face", "huggingface"),
    _term("model2vec"),
)

# Capitalised words that are never names (nor break out as entities) and end a multi-word name.
STOP_WORDS: frozenset[str] = _word_set(
    """
    I Im Ive Id Ill Me My Mine Myself We Us Our Ours You Your Yours He Him His She Her Hers It Its They
    Them Their Theirs This That These Those There Here Who Whom Whose Which What When Where Why How
    Whatever Whoever Wherever Whenever
    A An The Some Any All Every Each Either Neither No Not None Nothing Nobody Everyone Everybody
    Everything Someone Somebody Something Anyone Anything Both Few Many Much More Most Other Another
    Such Same Own Several Enough
    And But Or Nor So Yet For If Then Than Because Since While Whereas Although Though Unless Until
    Once After Before As Also Too Either Else However Therefore Thus Hence Otherwise Meanwhile Besides
    Moreover Furthermore Still Even Just Only Already Again Always Never Often Sometimes Usually Maybe
    Perhaps Probably Possibly Actually Basically Really Very Quite Rather Almost Soon Later Now Today
    Tonight Tomorrow Yesterday Currently Recently Finally First Second Third Next Last Previously
    In On At By With Without Within From To Into Onto Of Off Over Under About Above Below Across Along
    Around Among Between Behind Beyond During Per Via Through Throughout Toward Towards Upon Against
    Despite Except Inside Outside Near Like Unlike
    Is Are Was Were Be Been Being Am Do Does Did Done Doing Have Has Had Having Can Could Should Would
    Will Shall May Might Must Need Needs Let Lets Get Gets Got Make Makes Made Use Uses Used Using
    See Show Shows List Find Fetch Add Remove Delete Update Create Set Fix Check Run Try Keep Stop Start
    Move Change Send Tell Ask Give Take Look Read Write Please Thanks Thank Welcome Sorry Hi Hello Hey
    Dear Regards Cheers Best Yes Yeah Yep No Nope Ok Okay Sure Right Well Oh Ah Um Uh Hmm Wow Great
    Good Nice Cool Fine True False Null None New Old Big Small Important Urgent Note Notes Todo
    Summary Decision Decisions Context Reason Reasons Action Actions Question Questions Answer Answers
    Issue Issues Problem Problems Solution Result Results Outcome Goal Goals Plan Plans Status Step
    Steps Example Examples Warning Error Errors Bug Bugs Feature Features Task Tasks Item Items Idea
    Ideas Update Updates Re Fwd Subject Cc Bcc Date Time Day Week Weekend Month Year Morning Afternoon
    Evening Night Noon Midnight Q User Users Assistant System Agent Human Bot Team Everyone Mr Mrs Ms
    Mx Dr Prof Sir Madam Jr Sr St Ltd Inc Co
    Monday Tuesday Wednesday Thursday Friday Saturday Sunday Mon Tue Tues Wed Thu Thur Thurs Fri Sat Sun
    January February March April May June July August September October November December Jan Feb
    Mar Apr Jun Jul Aug Sep Sept Oct Nov Dec Spring Summer Autumn Fall Winter Christmas Easter
    """
)

# ALLCAPS tokens that are chat shorthand, units, times or roles rather than entities.
STOP_ACRONYMS: frozenset[str] = _word_set(
    """
    OK OKAY AM PM FYI ASAP TBD TBA TBC TODO FIXME WIP NB PS RE FW FWD IMO IMHO BTW LGTM PTAL ETA EOD EOW
    EOM OOO AFK BRB LOL OMG THX TY NP IIRC AFAIK TLDR TL DR DM PM PR PRS MR QA QQ NIT AKA EG IE ETC VS
    NA ID IDS FAQ DIY AI ML UI UX IT US UK EU HQ CEO CTO CFO COO VP HR PO KPI OKR ROI SLA SLO SLI
    UTC GMT CET CEST EST EDT PST PDT IST JST BST AEST KB MB GB TB PB MS NS US HZ MHZ GHZ
    YES NO NOT AND OR BUT THE IS IT IF TO DO BE WE HE ME MY OF ON IN AT BY UP SO AS AN GO OUT ALL
    NEW OLD FIX ADD BUG NOTE WARN INFO DEBUG ERROR FATAL TRUE FALSE NULL NONE GET PUT POST HEAD
    NEVER ONLY ALWAYS MUST SHOULD SHALL MAY WILL CAN STOP DONE WAIT HELP NOW VERY REALLY THIS THAT
    """
)

# A lone sentence-initial capitalised word is a name when one of these follows it ("Alice said").
_REPORTING_VERBS = _word_set(
    """
    said says asked asks wrote writes thinks thought wants wanted prefers preferred likes liked
    suggested suggests proposed proposes approved approves mentioned mentions reported reports decided
    decides agreed agrees noted notes replied replies told tells owns owned leads led joined confirmed
    confirms reviewed reviews merged merges deployed deploys fixed fixes built builds
    """
)

# Words after a sentence-initial "Go" that make it the language rather than the verb (as does a
# version number: "Go 1.22").
_GO_CUES = _word_set(
    """
    service services code module modules binary binaries program programs version versions toolchain
    runtime generics routines routine developers developer team compiler sdk client server library
    libraries package packages is was has
    """
)

# Tokens before a period that do not end a sentence ("Dr. Smith").
_ABBREVIATIONS = _word_set("mr mrs ms mx dr prof st jr sr vs etc inc ltd co no fig approx e.g i.e cf")

# Name connectors allowed between two capitalised words ("Bank of America").
_NAME_GAPS = frozenset([" "]) | {f" {w} " for w in _word_set("of de da di du van von der den del della la le y &")}

_UPPER = "A-ZÀ-ÖØ-Þ"
_LOWER = "a-zß-öø-ÿ"


def _alias_atom(ch: str) -> str:
    if ch == " ":
        return r"[\s-]+"
    if ch.lower() != ch.upper():
        return f"[{ch.lower()}{ch.upper()}]"
    return re.escape(ch)


def _trie_pattern(aliases: Iterable[str]) -> str:
    """Case-insensitive regex for lower-case ``aliases``, laid out as a character trie.

    A trie lets the engine drop a word after its first differing character instead of trying every
    alias, and longer aliases are tried before their prefixes. The first character is spelt as two
    literal branches (``p...|P...``) because the regex engine skips a branch that starts with a
    non-matching literal without entering it; that, not ``(?i)``, keeps the scan near 100k turns/s.
    """
    trie: dict[str, Any] = {}
    for alias in aliases:
        node = trie
        for ch in alias:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        branches = [_alias_atom(ch) + emit(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    top = [
        re.escape(variant) + emit(child)
        for ch, child in sorted(trie.items())
        for variant in sorted({ch.lower(), ch.upper()})
    ]
    return "(?:" + "|".join(top) + ")"


def _alias_key(alias: str) -> str:
    """Aliases and matched text compare in lower case with spaces and hyphens as one space."""
    return " ".join(alias.lower().replace("-", " ").split())


_ALIAS_TO_TERM: dict[str, TechTerm] = {}
_EXACT_TO_TERM: dict[str, TechTerm] = {}
for _t in TECH_TERMS:
    for _a in _t.aliases:
        _ALIAS_TO_TERM[_alias_key(_a)] = _t
    for _a in _t.exact:
        _EXACT_TO_TERM[_a] = _t

_EXACT_PATTERN = "|".join(re.escape(a) for a in sorted(_EXACT_TO_TERM, key=lambda a: (-len(a), a)))

# Layout notes, all measured: the leading look-ahead rejects spaces and punctuation before any
# alternative is tried; every alternative starts with a literal or a small class; the @ and # branches
# check their left neighbour only after matching the literal (a look-behind first would run at every
# character). Together these make the scan about twice as fast as the naive spelling.
_SCAN_RE = re.compile(
    rf"""
    (?<![\w@\#.'’])(?=[\w.])
    (?:
        (?P<rfc>(?:r|R)[fF][cC][\s-]?(?P<rfc_number>\d{{3,5}}))(?!\w)
      | (?P<exact>{_EXACT_PATTERN})(?![\w@])
      | (?P<tech>{_trie_pattern(_ALIAS_TO_TERM)}(?P<plural>[sS])?)(?![\w@])
      | (?P<word>[{_UPPER}](?:['’][{_UPPER}])?[{_LOWER}]+(?:[{_UPPER}][{_LOWER}]+)*(?:-[{_UPPER}][{_LOWER}]+)?)
        (?P<possessive>['’]s)?(?![\w@])
      | (?P<acronym>[A-Z]{{2,6}})s?(?![\w@])
    )
  | @(?<![\w@.+-]@)(?P<handle>[A-Za-z0-9_](?:[\w.-]*\w)?)
  | \#(?<![\w&\#/]\#)(?P<hashtag>(?![0-9A-Fa-f]{{3}}(?:[0-9A-Fa-f]{{3}})?\b)[A-Za-z](?:[\w-]*\w)?)
    """,
    re.VERBOSE,
)

# Three or more ALLCAPS words in a row are shouting, not acronyms.
_SHOUTING_RE = re.compile(r"\b[A-Z]{2,}\b(?:[ \t,!.?:;-]+[A-Z]{2,}\b){2,}")
_SENTENCE_END = ".!?…"
_SKIP_BACK = " \"'“‘([{*_>•·#-"
_LINE_STARTS = "\n\r\t|"
_NEXT_WORD_RE = re.compile(r"[\s,]*([\w'’]+)")


def _normalise_key(name: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", name).lower().split())


def _starts_sentence(text: str, pos: int) -> bool:
    """True when only openers, bullets and spaces stand between ``pos`` and the start of the text, a
    line or table cell (newline, tab, ``|``), or a sentence-ending mark other than an abbreviation's
    period."""
    i = pos - 1
    while i >= 0 and text[i] in _SKIP_BACK:
        i -= 1
    if i < 0 or text[i] in _LINE_STARTS:
        return True
    if text[i] not in _SENTENCE_END:
        return False
    if text[i] == ".":
        j = i
        while j > 0 and (text[j - 1].isalpha() or text[j - 1] == "."):
            j -= 1
        return text[j:i].lower() not in _ABBREVIATIONS
    return True


def _next_word(text: str, pos: int) -> str:
    m = _NEXT_WORD_RE.match(text, pos)
    return m.group(1) if m else ""


def _has_upper(s: str) -> bool:
    return s != s.lower()


class _Collector:
    """Accumulates entities in order, deduplicated by key, remembering which keys count for routing."""

    __slots__ = ("entities", "routable", "seen")

    def __init__(self) -> None:
        self.entities: list[Entity] = []
        self.seen: set[str] = set()
        self.routable: set[str] = set()

    def add(self, name: str, key: str, kind: str, routable: bool) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.entities.append(Entity(name, key, kind))
        if routable:
            self.routable.add(key)


def _flush_name(text: str, words: list[tuple[str, int, int, bool]], out: _Collector) -> None:
    """Emit the name made of adjacent capitalised ``words`` (text, start, end, possessive)."""
    if not words:
        return
    first_start = words[0][1]
    if len(words) == 1 and _starts_sentence(text, first_start):
        _, _, end, possessive = words[0]
        if not possessive and _next_word(text, end).lower() not in _REPORTING_VERBS:
            return
    name = text[first_start : words[-1][2]]
    out.add(name, _normalise_key(name), KIND_NAME, True)


def _scan(text: str) -> _Collector:
    out = _Collector()
    shouting: list[tuple[int, int]] | None = None
    name_words: list[tuple[str, int, int, bool]] = []
    for m in _SCAN_RE.finditer(text):
        # lastgroup is the outermost group that closed last; a possessive closes after its word.
        kind = m.lastgroup
        if kind == "word" or kind == "possessive":
            word = m.group("word")
            start, end = m.span("word")
            if word in STOP_WORDS:
                _flush_name(text, name_words, out)
                name_words = []
                continue
            if name_words and (name_words[-1][3] or text[name_words[-1][2] : start] not in _NAME_GAPS):
                _flush_name(text, name_words, out)
                name_words = []
            name_words.append((word, start, end, m.group("possessive") is not None))
            continue
        if name_words:
            _flush_name(text, name_words, out)
            name_words = []
        if kind == "tech":
            surface = m.group("tech")
            if m.group("plural"):
                surface = surface[:-1]
            term = _ALIAS_TO_TERM[_alias_key(surface)]
            routable = (_has_upper(surface) and not term.concept) or surface.isupper()
            out.add(term.canonical, term.key, KIND_TECHNOLOGY, routable)
        elif kind == "exact":
            surface = m.group("exact")
            term = _EXACT_TO_TERM[surface]
            if surface == "Go" and _starts_sentence(text, m.start()):
                cue = _next_word(text, m.end()).lower()
                if cue not in _GO_CUES and not cue[:1].isdigit():
                    continue
            out.add(term.canonical, term.key, KIND_TECHNOLOGY, True)
        elif kind == "rfc":
            number = int(m.group("rfc_number"))
            out.add(f"RFC {number}", f"rfc {number}", KIND_TECHNOLOGY, True)
        elif kind == "acronym":
            acronym = m.group("acronym")
            if acronym in STOP_ACRONYMS:
                continue
            if shouting is None:
                shouting = [s.span() for s in _SHOUTING_RE.finditer(text)]
            if any(a <= m.start() < b for a, b in shouting):
                continue
            out.add(acronym, acronym.lower(), KIND_ACRONYM, True)
        elif kind == "handle":
            handle = "@" + m.group("handle")
            out.add(handle, handle.lower(), KIND_HANDLE, True)
        elif kind == "hashtag":
            tag = "#" + m.group("hashtag")
            out.add(tag, tag.lower(), KIND_HASHTAG, False)
    _flush_name(text, name_words, out)
    return out


def extract_entities(text: str) -> list[Entity]:
    """Entities mentioned in ``text``: in order of first appearance, one per key."""
    return _scan(text).entities


def count_entities(text: str) -> int:
    """The router's ``entity_count``: distinct proper-noun style entities in ``text``.

    Counts names, @handles, RFC references, acronyms and vocabulary terms written with a capital
    letter; lower-case vocabulary words and #hashtags are extracted but not counted.
    """
    return len(_scan(text).routable)
