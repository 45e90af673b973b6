"""Database access from asyncio code (workers, relays, async views).

Django repairs a broken connection only between requests (``close_old_connections``),
and only in the thread that handled the request. Code that runs sync functions in
executor threads has no such moment: after a database restart every executor thread
would keep a dead connection for good. :func:`db_async` runs a sync function in the
loop's default executor, in a copy of the caller's context (the tenant scope goes
along), and first drops that thread's connections that saw an error, or that sat
idle for a while and no longer answer, so the call reconnects. A connection in
steady use costs nothing extra.

Not asgiref's ``sync_to_async(thread_sensitive=False)``, which does the same but
also walks every context variable before and after each call: about 300 us of the
event loop's time per call, which a worker starting two hundred runs (a dozen calls
each) cannot spare. A change the function makes to a context variable stays in its
own copy.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import psycopg
from django.db import DatabaseError, InterfaceError, OperationalError, connections

from claw_platform.db_pool import needs_check

T = TypeVar("T")


# A connection idle longer than IDLE_CHECK_SECONDS (or used before an outage this
# process saw ended) is tested before use: a database
# restart breaks idle connections silently, and the first statement on one would fail.
# Busy connections (the hot paths) are never tested; one a restart breaks mid-burst
# fails one call. The web process's pool follows the same rule (claw_platform.db_pool).


def drop_broken_connections() -> None:
    now = time.monotonic()
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        suspect = needs_check(getattr(conn, "_claw_last_used", now), now)
        if conn.errors_occurred or (suspect and not conn.in_atomic_block):
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


def _mark_used() -> None:
    now = time.monotonic()
    for conn in connections.all(initialized_only=True):
        conn._claw_last_used = now  # type: ignore[attr-defined]


def listen_connection_params() -> dict[str, Any]:
    """Keyword arguments for a plain psycopg connection to the default database (a
    LISTEN connection of its own, outside Django's connection handling)."""
    params = connections["default"].get_connection_params()
    for key in ("cursor_factory", "context"):
        params.pop(key, None)
    return params


def release_pooled_connections() -> None:
    """Give this thread's pooled connections back (``CLAW_DB_POOL_SIZE``): an executor
    thread that kept one would starve the pool, there being more threads than
    connections. Unpooled connections stay open for the thread's next call."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.in_atomic_block and getattr(conn, "pool", None):
            conn.close()


def db_async(fn: Callable[..., T]) -> Callable[..., Coroutine[Any, Any, T]]:
    def call(*args: Any, **kwargs: Any) -> T:
        drop_broken_connections()
        try:
            return fn(*args, **kwargs)
        finally:
            _mark_used()
            release_pooled_connections()

    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> T:
        context = contextvars.copy_context()
        job = functools.partial(context.run, call, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(None, job)

    return run


def is_database_outage(exc: BaseException) -> bool:
    """A lost or refused database connection (or a statement the server cancelled),
    as opposed to a bug: the work can resume once the database answers."""
    return isinstance(
        exc, OperationalError | InterfaceError | psycopg.OperationalError | psycopg.InterfaceError
    )


UNSAVED_RUN = (
    "The run could not be saved: the database refused one of its writes. "
    "What it had saved before is kept; the details are in the worker's log."
)


def readable_failure(exc: BaseException) -> str:
    """What a client may read of the error that failed a run (its ``error``, the
    ``run.failed`` event, an API answer). A database error's own text (SQL, table and
    column names, values) stays in the log: the client gets :data:`UNSAVED_RUN`."""
    if isinstance(exc, DatabaseError | psycopg.Error):
        return UNSAVED_RUN
    return str(exc)[:500] or type(exc).__name__
