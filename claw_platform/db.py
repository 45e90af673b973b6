"""Database access from asyncio code that outlives requests (workers, relays).

Django repairs a broken connection only between requests (``close_old_connections``).
A worker has no requests: after a database restart every thread of its executor
would keep a dead connection for good. :func:`db_async` runs a sync function in a
worker thread like ``sync_to_async(fn, thread_sensitive=False)``, and first drops
that thread's connections that saw an error and no longer answer, so the call (and
every later one) reconnects. A healthy connection costs nothing extra: the check
only runs after an error.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar

import psycopg
from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connections

T = TypeVar("T")


def drop_broken_connections() -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and conn.errors_occurred:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


def db_async(fn: Callable[..., T]) -> Callable[..., Any]:
    @wraps(fn)
    def call(*args: Any, **kwargs: Any) -> T:
        drop_broken_connections()
        return fn(*args, **kwargs)

    return sync_to_async(call, thread_sensitive=False)


def is_database_outage(exc: BaseException) -> bool:
    """A lost or refused database connection (or a statement the server cancelled),
    as opposed to a bug: the work can resume once the database answers."""
    return isinstance(
        exc, OperationalError | InterfaceError | psycopg.OperationalError | psycopg.InterfaceError
    )
