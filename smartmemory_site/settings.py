"""Settings for SmartMemory site: one file, driven by the environment.

Embedded defaults (SQLite, in-process signal bus, database pins, in-memory channel layer, hashing
embeddings, extractive LLM) run everything from one command; DATABASE_URL, REDIS_URL, NEO4J_URI,
EMBEDDER and LLM_BASE_URL switch each piece to its at-scale engine. See README.md for the table.
"""

from __future__ import annotations

from pathlib import Path

import django_stubs_ext

from smartmemory_site import config

# Lets admin/queryset generics such as ModelAdmin[Memory] be subscripted at runtime.
django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = config.env_bool("DJANGO_DEBUG", False)
SECRET_KEY = config.secret_key_from_env(BASE_DIR)
ALLOWED_HOSTS = config.env_list("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver"])
CSRF_TRUSTED_ORIGINS = config.env_list(
    "DJANGO_CSRF_TRUSTED_ORIGINS", ["http://127.0.0.1:8000", "http://localhost:8000"]
)

# Served over HTTPS (directly or behind a proxy that says so): redirect plain HTTP, send HSTS, and keep the
# session and CSRF cookies off plain HTTP. Off by default, for the loopback site `make run` serves.
HTTPS = config.env_bool("DJANGO_HTTPS", False)
SECURE_SSL_REDIRECT = HTTPS
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_HSTS_SECONDS = config.env_int("DJANGO_HSTS_SECONDS", 31_536_000 if HTTPS else 0, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = config.env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", HTTPS)
SECURE_HSTS_PRELOAD = config.env_bool("DJANGO_HSTS_PRELOAD", False)
# Asking browsers to preload HSTS for the whole domain is its owner's decision, not a default of ours.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]
BEHIND_PROXY = config.env_bool("DJANGO_BEHIND_PROXY", False)
if BEHIND_PROXY:
    # Only behind a proxy that sets this header itself (and strips it from clients).
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
# How many proxies append to X-Forwarded-For: rate limits key on the address the outermost one saw. Without
# a proxy the header is the client's own words and is ignored (REMOTE_ADDR counts).
PROXY_COUNT = config.env_int("DJANGO_PROXY_COUNT", 1 if BEHIND_PROXY else 0, minimum=0)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Content-Security-Policy of every page (smartmemory_site.csp says why each allowance is there).
CONTENT_SECURITY_POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'", "'unsafe-eval'"],
    "style-src": ["'self'", "'unsafe-inline'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}
if config.env_str("DJANGO_CSP_REPORT_URI"):
    CONTENT_SECURITY_POLICY["report-uri"] = [config.env_str("DJANGO_CSP_REPORT_URI")]
# Report violations (to the browser console and report-uri) without blocking: for trying out a change.
CONTENT_SECURITY_POLICY_REPORT_ONLY = config.env_bool("DJANGO_CSP_REPORT_ONLY", False)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "template_partials",
    "channels",
    "history",
    "memories",
    "surfacing",
    "evolution",
    # The MCP adapter (tools over the services; the mcp_stdio command); no models.
    "smartmemory_site.mcp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "smartmemory_site.csp.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # Vary: HX-Request everywhere and no-store on htmx fragments, so Back never shows a bare fragment.
    "smartmemory_site.htmx_cache.HtmxCacheMiddleware",
    "smartmemory_site.login_throttle.LoginThrottleMiddleware",
    # A view that waited out DATABASE_LOCK_TIMEOUT_SECONDS answers 503 with Retry-After, not 500.
    "smartmemory_site.db_busy.DatabaseBusyMiddleware",
]

ROOT_URLCONF = "smartmemory_site.urls"
ASGI_APPLICATION = "smartmemory_site.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "memories.context_processors.navigation",
                "evolution.context_processors.pending_counts",
            ],
        },
    }
]

DATABASES = {"default": config.database_from_env(BASE_DIR)}
# How long a connection waits for a lock before a request answers 503 with Retry-After (core.db_locks):
# SQLite's busy timeout (in DATABASES above) and PostgreSQL's lock_timeout.
DATABASE_LOCK_TIMEOUT_SECONDS = config.lock_timeout_seconds()
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "memories:home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var" / "staticfiles"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
# Serve straight from the app/static directories too, so a fresh checkout works before collectstatic.
WHITENOISE_USE_FINDERS = True

REDIS_URL = config.redis_url_from_env()
NEO4J_URI = config.neo4j_uri_from_env()
NEO4J_USER = config.env_str("NEO4J_USER")
NEO4J_PASSWORD = config.env_str("NEO4J_PASSWORD")
GRAPH_BACKEND = config.graph_backend_from_env(NEO4J_URI)
# sql graph store: workspaces whose CSR snapshot each process keeps (LRU; ~30 MB per 1M edges).
GRAPH_SNAPSHOT_WORKSPACES = config.env_int("GRAPH_SNAPSHOT_WORKSPACES", 16, minimum=1)
# The site's embedder: minilm (the quality model) when the minilm extra is installed, else hashing.
EMBEDDER = config.embedder_from_env()
# Writes of more memories than this at once store them without a vector; the scheduler's embed job gives
# them one in the background (memories.embedding_service.embed_pending), so a bulk import keeps its rate
# with a slow model. Unset: each embedder's own limit (16 for minilm, none for hashing and model2vec);
# 0 defers every write.
EMBED_INLINE_MAX = config.env_int("EMBED_INLINE_MAX", 0, minimum=0) if config.env_str("EMBED_INLINE_MAX") else None
# How long one run of the embed job may embed before it lets the scheduler's other jobs go (it goes on at the
# next tick while memories wait).
EMBED_JOB_SECONDS = config.env_int("EMBED_JOB_SECONDS", 30, minimum=1)
# Vector indexes (memories.vectorindex): how many (workspace, model) indexes a process keeps (LRU; ~150 MB
# each at 100k x 384), up to how many vectors search is exact (above: HNSW), where HNSW indexes persist.
VECTOR_INDEX_CACHE = config.env_int("VECTOR_INDEX_CACHE", 4, minimum=1)
VECTOR_INDEX_EXACT_MAX = config.env_int("VECTOR_INDEX_EXACT_MAX", 20_000, minimum=0)
VECTOR_INDEX_DIR = Path(config.env_str("VECTOR_INDEX_DIR") or BASE_DIR / "var" / "vectors")
LLM_BASE_URL = config.llm_base_url_from_env()
LLM_API_KEY = config.env_str("LLM_API_KEY")
LLM_MODEL = config.env_str("LLM_MODEL", "gpt-4o-mini")
LLM_TIMEOUT_SECONDS = config.env_int("LLM_TIMEOUT_SECONDS", 30, minimum=1)

# Boosts are queued and written in batches, every 5 s by default: a read never waits for a write, and a
# boost reaches the database within seconds.
SIGNAL_FLUSH_SECONDS = config.env_int("SIGNAL_FLUSH_SECONDS", 5, minimum=1)
# The in-process flusher thread is started by the ASGI server; tests flush explicitly.
SIGNAL_BACKGROUND_FLUSH = config.env_bool("SIGNAL_BACKGROUND_FLUSH", True)
# Threads that run Django's synchronous request code under ASGI (smartmemory_site.threadpool).
SYNC_WORKER_THREADS = config.env_int("SYNC_WORKER_THREADS", 8, minimum=1)
# Request bodies over these sizes are refused (413) before they are read (smartmemory_site.bodylimit).
REQUEST_MAX_BYTES = config.env_int("REQUEST_MAX_BYTES", 4 * 1024 * 1024, minimum=1024)
REQUEST_MAX_BULK_BYTES = config.env_int("REQUEST_MAX_BULK_BYTES", 64 * 1024 * 1024, minimum=1024)
# Django's own cap on what request.body may hold, so a direct WSGI/test client path agrees with the ASGI one.
DATA_UPLOAD_MAX_MEMORY_SIZE = REQUEST_MAX_BULK_BYTES
# How long the first answer to a write sent with an Idempotency-Key answers its retries (memories.idempotency).
IDEMPOTENCY_KEY_HOURS = config.env_int("IDEMPOTENCY_KEY_HOURS", 24, minimum=1)
SESSION_PIN_TTL_SECONDS = config.env_int("SESSION_PIN_TTL_SECONDS", 24 * 3600, minimum=1)
# Who works queued evolution runs (evolution.jobs): "thread" (a worker thread in each web process, the
# embedded default), "external" (only `manage.py run_workers`), "inline" (the caller: tests, scripts).
EVOLUTION_WORKER = config.env_str("EVOLUTION_WORKER", "thread")
# How much lower than the requests the threads that work runs and scheduled jobs are scheduled (Linux nice
# increment of those threads, 0-19; 0 keeps theirs): on a machine with few cores a cycle then yields the CPU to
# the web processes instead of sharing it with them.
EVOLUTION_WORKER_NICE = config.env_int("EVOLUTION_WORKER_NICE", 10, minimum=0)
# A run whose worker has not said it is alive for this long is taken over by another worker.
EVOLUTION_RUN_LEASE_SECONDS = config.env_int("EVOLUTION_RUN_LEASE_SECONDS", 120, minimum=1)
# The scheduled jobs every worker loop runs (evolution.scheduler): how often a worker looks for due ones, how
# long a job's lock holds without being prolonged (a worker killed mid-job leaves it to the next after that),
# and the periods of the two jobs every workspace has (the cycle and the dream are per workspace settings).
SCHEDULER_ENABLED = config.env_bool("SCHEDULER_ENABLED", True)
SCHEDULER_CHECK_SECONDS = config.env_int("SCHEDULER_CHECK_SECONDS", 5, minimum=1)
SCHEDULER_LOCK_SECONDS = config.env_int("SCHEDULER_LOCK_SECONDS", 120, minimum=1)
SCHEDULER_LOCK_PREFIX = config.env_str("SCHEDULER_LOCK_PREFIX", "smartmemory:joblock")
RETRIEVAL_STATS_SECONDS = config.env_int("RETRIEVAL_STATS_SECONDS", 300, minimum=1)
DECAY_SWEEP_SECONDS = config.env_int("DECAY_SWEEP_SECONDS", 3600, minimum=1)
# An evolution run commits its writes in transactions of at most about this long (evolution.runner), so
# requests of every workspace get the database between them.
EVOLUTION_TRANSACTION_MS = config.env_int("EVOLUTION_TRANSACTION_MS", 100, minimum=0)
# A run's revert with at most this many records still to undo is done in the request that asks (answered 200 once
# done); a larger one is checked, then queued for a worker (202), so no request works for seconds (evolution.services).
EVOLUTION_REVERT_INLINE_RECORDS = config.env_int("EVOLUTION_REVERT_INLINE_RECORDS", 50, minimum=0)
# How long an evolution run's connection waits for the database (requests wait DATABASE_LOCK_TIMEOUT_SECONDS,
# read in config.database_from_env).
EVOLUTION_LOCK_TIMEOUT_SECONDS = config.env_float("EVOLUTION_LOCK_TIMEOUT_SECONDS", 60.0, minimum=0.05)

# Django's cache holds the rate-limit counters (core.throttles): shared by every process through Redis, or
# each process's own memory in the embedded default.
if REDIS_URL:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "smartmemory",
        }
    }
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "smartmemory"}}
# Rate limits as COUNT/PERIOD (s, min, hour, day) or "off"; a refused request is a 429 with Retry-After.
THROTTLE_RATES = {
    # login POSTs per client address (the site's form and the admin's)
    "login": config.env_rate("THROTTLE_LOGIN", "10/min"),
    # failed logins per username, from any address
    "login_user": config.env_rate("THROTTLE_LOGIN_USER", "30/hour"),
    # failed API token checks per client address
    "token_failure": config.env_rate("THROTTLE_TOKEN_FAILURES", "30/min"),
    # API writes (POST, PUT, PATCH, DELETE but search and context) per user
    "write": config.env_rate("THROTTLE_WRITES", "6000/min"),
}

if REDIS_URL:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}}
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "memories.api_auth.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    # DRF's default parsers with a strict JSON parser (lone surrogates and deep nesting are a 400).
    "DEFAULT_PARSER_CLASSES": [
        "memories.api_parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_RENDERER_CLASSES": [
        "memories.api_render.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "memories.api_errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
    "DEFAULT_THROTTLE_CLASSES": ["core.throttles.WriteRateThrottle"],
    "NUM_PROXIES": PROXY_COUNT,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "SmartMemory site API",
    "DESCRIPTION": "Long-term memory for AI agents: memories, surfacing, evolution.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Request bodies are RequestBody models that say themselves which fields a PATCH may leave out; no
    # "Patched" copy of a component.
    "COMPONENT_SPLIT_PATCH": False,
    # The docs' JavaScript, CSS and favicon come from our static files, never a CDN: a self-hosted install
    # may have no internet at all.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": config.env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}
