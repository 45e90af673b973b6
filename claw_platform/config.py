"""Reading and validating the environment.

Every setting the product reads from the environment goes through here, so a bad
value stops start-up with one message naming the variable and saying what is wrong,
rather than a traceback three layers down. ``.env.example`` documents each variable.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import zoneinfo
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import environ
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on", "y", "t"}
_FALSE = {"0", "false", "no", "off", "n", "f", ""}


class ConfigError(ImproperlyConfigured):
    """A variable has a value the product cannot use. The message names it."""

    def __init__(self, variable: str, problem: str) -> None:
        self.variable = variable
        super().__init__(f"{variable}: {problem}")


def var_dir() -> Path:
    """Where the product keeps its state: database, generated keys, workspaces."""
    base = os.environ.get("CLAW_VAR_DIR") or str(Path(__file__).resolve().parent.parent / "var")
    return Path(base).resolve()


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default).strip()


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(name, f"expected true or false, got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(name, f"expected a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(name, f"must be at least {minimum}, got {value}")
    return value


def env_fraction(name: str, default: float) -> float:
    """A number from 0 to 1 (weights, floors)."""
    raw = os.environ.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(name, f"expected a number from 0 to 1, got {raw!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ConfigError(name, f"expected a number from 0 to 1, got {value}")
    return value


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = os.environ.get(name, "").strip().lower() or default
    if value not in choices:
        raise ConfigError(name, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_time_zone(name: str, default: str = "UTC") -> str:
    value = env_str(name, default) or default
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ConfigError(
            name, f"unknown time zone {value!r} (use an IANA name such as Europe/Paris)"
        ) from None
    return value


def secret_from_env_or_file(name: str, path: Path, make: Any) -> str:
    """The variable's value, else a value generated once into ``path`` (mode 0600)."""
    value = env_str(name)
    if value:
        return value
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(value + "\n")
    return str(value)


def django_secret_key(var_dir: Path) -> str:
    return secret_from_env_or_file("SECRET_KEY", var_dir / "secret_key", lambda: secrets.token_urlsafe(50))


def secrets_encryption_keys(var_dir: Path) -> list[str]:
    """Fernet keys for secrets at rest; the first encrypts, all decrypt (rotation)."""
    raw = secret_from_env_or_file(
        "CLAW_SECRETS_KEY", var_dir / "secrets.key", lambda: Fernet.generate_key().decode()
    )
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    for key in keys:
        try:
            Fernet(key.encode())
        except (ValueError, TypeError):
            raise ConfigError(
                "CLAW_SECRETS_KEY",
                "each key must be a url-safe base64 Fernet key of 32 bytes "
                "(generate one with: claw secrets-key)",
            ) from None
    return keys


def database_config(
    url: str,
    variable: str = "DATABASE_URL",
    *,
    pool_size: int = 0,
    conn_max_age: int = 0,
    connect_timeout: int = 10,
) -> dict[str, Any]:
    """Django DATABASES entry for a PostgreSQL URL; anything else is refused.

    ``pool_size`` > 0 puts the connections in a psycopg pool of at most that many
    (``CLAW_DB_POOL_SIZE``; the web process turns it on, see ``asgi.py``): under ASGI
    every request runs in a thread of its own, so without a pool each request pays
    for a new connection. Elsewhere (workers, commands) a connection is kept for
    ``conn_max_age`` seconds (``CLAW_DB_CONN_MAX_AGE``) across tasks instead of one
    per task; executor threads keep theirs for good.

    ``connect_timeout`` (``CLAW_DB_CONNECT_TIMEOUT``) bounds a new connection's set-up
    and, with a pool, the wait for a pooled connection: when the database is away a
    request fails (503) after that long instead of hanging. A URL's own
    ``?connect_timeout=`` wins."""
    scheme = urlsplit(url).scheme
    if scheme not in {"postgres", "postgresql", "pgsql", "postgis"}:
        raise ConfigError(
            variable,
            f"must be a PostgreSQL URL (postgresql://user:pass@host:5432/name), got scheme {scheme!r}",
        )
    try:
        config = environ.Env.db_url_config(url)
    except Exception as exc:  # environ raises assorted errors for malformed URLs
        raise ConfigError(variable, f"malformed URL ({exc})") from None
    if not config.get("NAME"):
        raise ConfigError(variable, "the URL names no database")
    options = config.setdefault("OPTIONS", {})
    # A socket directory given as ?host=/path: psycopg wants it as HOST too, and the
    # channel layer builds its own connections from HOST/PORT.
    if not config.get("HOST") and options.get("host"):
        config["HOST"] = options.pop("host")
    config["ENGINE"] = "django.db.backends.postgresql"
    config["CONN_MAX_AGE"] = 0 if pool_size else conn_max_age
    # With a pool, each checkout is checked; asgi.py narrows that to idle connections.
    config["CONN_HEALTH_CHECKS"] = True
    options.setdefault("connect_timeout", connect_timeout)
    if pool_size:
        from claw_platform.db_pool import pool_options

        options["pool"] = pool_options(pool_size, wait_seconds=float(options["connect_timeout"]))
    return config


def channel_layer_config(url: str, database: dict[str, Any]) -> dict[str, Any]:
    """``postgres`` (default, channels_postgres on the main database), ``redis://…``
    (channels_redis's pub/sub layer) or ``memory://`` (one process only: development and unit tests)."""
    value = url or "postgres"
    if value in {"postgres", "postgresql"}:
        cfg = {k: v for k, v in database.items() if k in {"NAME", "USER", "PASSWORD", "HOST", "PORT"}}
        cfg["ENGINE"] = "django.db.backends.postgresql"
        # channels_postgres builds a Django DatabaseWrapper from this: it needs
        # TIME_ZONE, and the socket/port options of the embedded server.
        cfg["TIME_ZONE"] = None
        cfg["OPTIONS"] = {k: v for k, v in database.get("OPTIONS", {}).items() if k != "pool"}
        return {
            "BACKEND": "claw_platform.channel_layer.PostgresChannelLayer",
            "CONFIG": {**cfg, "PSYCOPG_OPTIONS": {"min_size": 1, "max_size": 20}},
        }
    scheme = urlsplit(value).scheme
    if scheme in {"redis", "rediss"}:
        # channels_redis's pub/sub layer (one PUBLISH per group message), made to lose
        # nothing silently (claw_platform.redis_layer). redis-py 8 caps a pool at 100
        # connections (then fails the call) and times a read out after 5 s.
        host = {"address": value, "max_connections": 1000, "socket_timeout": 30}
        return {
            "BACKEND": "claw_platform.redis_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [host]},
        }
    if scheme == "memory":
        return {"BACKEND": "channels.layers.InMemoryChannelLayer"}
    raise ConfigError("CHANNEL_LAYER_URL", f"use postgres, redis://host:6379/0 or memory://, got {value!r}")


def q_cluster_config(broker_url: str, *, workers: int, timeout: int, retry: int) -> dict[str, Any]:
    """django-q2 settings. ``retry`` must exceed ``timeout`` or a slow task is handed
    to a second worker while the first still runs it (double execution)."""
    if retry <= timeout:
        raise ConfigError("CLAW_Q_RETRY", f"must be greater than CLAW_Q_TIMEOUT ({timeout} s), got {retry} s")
    config: dict[str, Any] = {
        "name": "claw",
        "workers": workers,
        "timeout": timeout,
        "retry": retry,
        "max_attempts": 1,
        "ack_failures": True,
        "catch_up": False,
        "save_limit": 1000,
        "label": "Task queue",
        "poll": 0.2,
        # A run task hands its run to the worker process's event loop and returns;
        # recycling the process would drop the runs in that loop (they would come
        # back only when their lease expires), so recycle rarely.
        "recycle": 100_000,
    }
    value = broker_url or "orm"
    if value == "orm":
        config["orm"] = "default"
        # django-q2's database broker with its hot operations as plain statements.
        config["broker_class"] = "claw_platform.ops.orm_broker.OrmBroker"
        return config
    scheme = urlsplit(value).scheme
    if scheme in {"redis", "rediss"}:
        config["redis"] = value
        return config
    raise ConfigError("CLAW_Q_BROKER_URL", f"use orm or redis://host:6379/1, got {value!r}")


def env_dotted_paths(name: str) -> list[str]:
    """Comma-separated dotted Python paths (checked for form here, imported on use)."""
    paths = env_list(name, [])
    for path in paths:
        if not all(part.isidentifier() for part in path.split(".")) or "." not in path:
            raise ConfigError(name, f"{path!r} is not a dotted path such as mypackage.hooks.audit")
    return paths


def mcp_stdio_commands(name: str) -> dict[str, list[str]]:
    """Operator-approved MCP stdio commands: a JSON object mapping a name tenants pick
    to the command line it starts, e.g. ``{"github": ["/usr/local/bin/github-mcp-server",
    "stdio"]}``. The first item must be an absolute path, so PATH cannot change it."""
    raw = env_str(name)
    if not raw:
        return {}
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(name, f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise ConfigError(
            name, 'expected a JSON object such as {"github": ["/usr/local/bin/github-mcp", "stdio"]}'
        )
    commands: dict[str, list[str]] = {}
    for key, argv in value.items():
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
            raise ConfigError(name, f"{key!r}: expected a non-empty list of strings (the command line)")
        if not os.path.isabs(argv[0]):
            raise ConfigError(name, f"{key!r}: the program must be an absolute path, got {argv[0]!r}")
        commands[str(key)] = list(argv)
    return commands


def optional_http_url(name: str) -> str:
    """An http(s) URL or empty."""
    value = env_str(name)
    if value and urlsplit(value).scheme not in {"http", "https"}:
        raise ConfigError(name, f"expected an http:// or https:// URL, got {value!r}")
    return value.rstrip("/")


def cache_config(url: str) -> dict[str, Any]:
    """The shared cache (API rate limits, pairing lock-outs): ``database`` (default, a
    table in PostgreSQL, shared by every process), ``redis://…`` or ``memory://`` (one
    process only: rate limits would not be shared)."""
    value = url or "database"
    if value == "database":
        return {"BACKEND": "claw_platform.cache.PostgresCache", "LOCATION": "claw_cache"}
    scheme = urlsplit(value).scheme
    if scheme in {"redis", "rediss"}:
        return {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": value}
    if scheme == "memory":
        return {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    raise ConfigError("CLAW_CACHE_URL", f"use database, redis://host:6379/2 or memory://, got {value!r}")


def env_rate(name: str, default: str) -> str:
    """A rate such as ``600/min`` (DRF's throttle format: n/s, n/min, n/hour, n/day)."""
    value = env_str(name, default) or default
    count, _, period = value.partition("/")
    if not count.strip().isdigit() or int(count) < 1 or period.strip()[:1] not in {"s", "m", "h", "d"}:
        raise ConfigError(name, f"expected a rate like 600/min or 10/s, got {value!r}")
    return value


def env_networks(name: str) -> list[str]:
    """Comma-separated IP addresses or networks (``10.0.0.5``, ``10.0.0.0/8``, ``::1``)."""
    items = env_list(name, [])
    for item in items:
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ConfigError(name, f"{item!r} is not an IP address or network such as 10.0.0.0/8") from None
    return items
