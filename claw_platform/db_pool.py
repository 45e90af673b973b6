"""Health checks of the web process's pooled connections, skipped for busy ones.

psycopg's pool can test a connection each time it is handed out (one round trip),
which catches connections a database restart broke while they sat idle. Under load
a connection is handed out several times per request (the view, then each
``db_async`` call), so that test was a round trip per hand-out. Here a connection
is tested only if it sat in the pool longer than ``IDLE_CHECK_SECONDS``, or if it
was returned before this process last found the database away (a restart broke it
even if it came back a moment ago): :func:`needs_check`, the same rule
``claw_platform.db`` applies to executor threads' connections.

Django builds the pool with its own ``check`` (``CONN_HEALTH_CHECKS``) and offers no
way to pass another, so :func:`install` replaces it on the pool Django built.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from psycopg_pool import ConnectionPool

from claw_platform.outage import database_outage

# Also the rule for executor threads' connections (claw_platform.db).
IDLE_CHECK_SECONDS = 5.0

_returned_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()


def needs_check(last_used: float | None, now: float) -> bool:
    """A connection last used (or returned) at monotonic ``last_used`` may be broken:
    never seen, idle too long, or used before the end of an outage this process saw."""
    if last_used is None or now - last_used > IDLE_CHECK_SECONDS:
        return True
    if database_outage.active:
        return True
    ended = database_outage.ended
    return ended is not None and last_used <= ended


def note_return(conn: Any) -> None:
    """The pool's ``reset`` callback: the connection came back in working order."""
    _returned_at[conn] = time.monotonic()


def check_if_idle(conn: Any) -> None:
    """The pool's ``check`` callback: raises if a connection idle for a while no
    longer answers (the pool then discards it and hands out another)."""
    if needs_check(_returned_at.get(conn), time.monotonic()):
        ConnectionPool.check_connection(conn)


def pool_options(size: int, wait_seconds: float = 10.0) -> dict[str, Any]:
    """``wait_seconds``: the longest a request waits for a connection (the database
    away, or every connection busy) before it fails."""
    return {"min_size": min(2, size), "max_size": size, "timeout": wait_seconds, "reset": note_return}


def install(pool: ConnectionPool | None) -> None:
    """Use :func:`check_if_idle` on ``pool``, Django's (``connection.pool``, None
    when pooling is off)."""
    if pool is None:
        return
    if getattr(pool, "_check", None) is not ConnectionPool.check_connection:
        raise RuntimeError("psycopg_pool changed: cannot install the idle-only connection check")
    pool._check = check_if_idle  # type: ignore[assignment]
    configure = pool._configure

    def configure_new(conn: Any) -> None:
        if configure is not None:
            configure(conn)
        # A new connection is the end of an outage (claw_platform.outage); Django's
        # connection_created cannot say so here: it fires for every checkout, dead
        # connections the pool has not tested yet included.
        database_outage.recovered()

    pool._configure = configure_new
