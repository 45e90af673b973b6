"""The two database roles (issue 21, defect 1).

The OWNER role owns the tables and runs the migrations (``DATABASE_OWNER_URL``); the
RUNTIME role (``DATABASE_URL``) is what the web server, workers, tasks and commands
connect as: not a superuser, owner of nothing, no BYPASSRLS, granted only
SELECT/INSERT/UPDATE/DELETE on tables, USAGE/SELECT on sequences and EXECUTE on
functions, with default privileges so that tables later migrations create are
granted as well.

Without ``DATABASE_OWNER_URL`` the owner is ``DATABASE_URL`` itself (an outside
PostgreSQL set up before the two roles existed): everything keeps working, and
``claw doctor`` reports that the product runs as the table owner as a failure.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_ROLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
# What an owner's connection settings replace on the runtime's (the database name stays:
# a test run's database is the runtime's renamed one).
_CREDENTIALS = ("USER", "PASSWORD", "HOST", "PORT")
SCHEMA = "public"


def quote_role(name: str) -> str:
    """A role name as an SQL identifier; refuses anything but a plain name."""
    if not _ROLE_NAME.match(name or ""):
        raise ValueError(f"not a plain PostgreSQL role name: {name!r}")
    return f'"{name}"'


def runtime_role_statements(role: str, password: str, database: str) -> list[tuple[str, list[Any]]]:
    """Create (or reset) the runtime role; run as a superuser or a CREATEROLE role."""
    q = quote_role(role)
    flags = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS"
    exists = f"EXISTS (SELECT 1 FROM pg_roles WHERE rolname = {_literal(role)})"  # noqa: S608 - role checked
    create = f"IF NOT {exists} THEN CREATE ROLE {q} {flags}"
    return [
        (f"DO $$ BEGIN {create}; END IF; END $$", []),
        (f"ALTER ROLE {q} {flags}", []),
        # ALTER ROLE takes no bind parameters: the password is a quoted literal.
        (f"ALTER ROLE {q} PASSWORD {_literal(password)}", []),
        (f"GRANT CONNECT, TEMPORARY ON DATABASE {quote_role(database)} TO {q}", []),
    ]


def _literal(value: str) -> str:
    if "\x00" in value:
        raise ValueError("a password cannot contain NUL")
    return "'" + value.replace("'", "''") + "'"


def runtime_grant_statements(runtime: str, owner: str) -> list[str]:
    """Grants on what exists now and default privileges for what the owner creates
    later; idempotent. Run as ``owner`` (or a superuser) in the product's database."""
    r, o = quote_role(runtime), quote_role(owner)
    return [
        f"GRANT USAGE ON SCHEMA {SCHEMA} TO {r}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {SCHEMA} TO {r}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {r}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {SCHEMA} TO {r}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {SCHEMA} "
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {r}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {SCHEMA} GRANT USAGE, SELECT ON SEQUENCES TO {r}",
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {o} IN SCHEMA {SCHEMA} GRANT EXECUTE ON FUNCTIONS TO {r}",
    ]


def owner_settings() -> dict[str, Any] | None:
    """The owner's connection settings (``DATABASE_OWNER_URL``), or None when the owner
    is the runtime's own URL."""
    from django.conf import settings

    owner: dict[str, Any] | None = getattr(settings, "DATABASE_OWNER", None)
    return owner


def runtime_role() -> str:
    from django.conf import settings

    return str(settings.CLAW_DB_RUNTIME_ROLE)


def is_owner_connection(alias: str = "default") -> bool:
    """True when ``alias`` connects with the owner's credentials (or there is no
    separate owner)."""
    from django.db import connections

    owner = owner_settings()
    if owner is None:
        return True
    return bool(connections[alias].settings_dict.get("USER") == owner.get("USER"))


def use_credentials(alias: str, source: dict[str, Any]) -> dict[str, Any]:
    """Point ``alias`` at ``source``'s credentials (closing its connection); returns the
    credentials it had, for putting them back."""
    from django.db import connections

    conn = connections[alias]
    previous = {key: conn.settings_dict.get(key) for key in _CREDENTIALS}
    if all(conn.settings_dict.get(key) == source.get(key) for key in _CREDENTIALS):
        return previous
    conn.close()
    for key in _CREDENTIALS:
        conn.settings_dict[key] = source.get(key)
    return previous


@contextmanager
def as_owner(alias: str = "default") -> Iterator[None]:
    """Run the block (migrations) connected as the owner role. A no-op without
    ``DATABASE_OWNER_URL`` or when the connection already is the owner's."""
    owner = owner_settings()
    if owner is None or is_owner_connection(alias):
        yield
        return
    previous = use_credentials(alias, owner)
    try:
        yield
    finally:
        use_credentials(alias, previous)


def grant_runtime_privileges(using: str = "default") -> None:
    """Grant the runtime role its privileges on every table, sequence and function, and
    by default on those the owner creates later. Needs the owner's connection; without
    a separate owner (runtime == owner) there is nothing to grant."""
    from django.db import connections

    owner = owner_settings()
    runtime = runtime_role()
    if owner is None or owner.get("USER") == runtime:
        return
    with connections[using].cursor() as cursor:
        cursor.execute("SELECT current_user")
        current = cursor.fetchone()[0]
        for statement in runtime_grant_statements(runtime, current):
            cursor.execute(statement)


def grant_after_migrate(sender: Any, using: str = "default", **kwargs: Any) -> None:
    """post_migrate: grants follow every migrate (run as the owner). ``flush`` sends
    post_migrate too, as the runtime role, which grants nothing."""
    if is_owner_connection(using):
        grant_runtime_privileges(using)
