"""A database outage, logged once when it starts and once when it ends, per process.

While PostgreSQL is away every part of a process fails on its own schedule: each
web request, the worker's run watcher and sweeper, the run dispatcher, the relay
pump, django-q2's pusher and monitor. Each used to log its traceback every time, a
few per second, thousands over an outage, burying whatever else happened.

:class:`OutageLogFilter` (on the log handlers, ``settings.LOGGING``) sees every
record: one whose exception (attached, or given as the message or an argument) is a
lost or refused connection is not written; the first of them makes
:data:`database_outage` write one line saying the database is unavailable. Django
calls :func:`connection_made` for every connection it opens (``connection_created``,
each pooled checkout in the web process included): the first one after an outage
writes one line saying it is back, with how long it was away and how many errors
went unlogged. Other errors are logged as before, tracebacks and all.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import psycopg
from django.db import InterfaceError, OperationalError

logger = logging.getLogger("claw.outage")

# SQLSTATEs of a server that is going away or cannot take the connection: class 08
# (connection exception), an administrator's or a crash's shutdown, too many
# connections. A deadlock, a serialization failure or a statement timeout is an
# OperationalError too, but the database is there: those are logged as errors.
_AWAY_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})


def lost_connection(exc: BaseException | None) -> bool:
    """``exc`` (or an exception it was raised from) says the database cannot be
    reached: refused, cut, timed out connecting, or shutting down."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            state = getattr(exc, "sqlstate", None)
            return state is None or state.startswith("08") or state in _AWAY_STATES
        if isinstance(exc, OperationalError | InterfaceError) and exc.__cause__ is None:
            return True  # Django's own (a closed connection), no driver error behind it
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


class DatabaseOutage:
    """Whether this process has found the database away, since when, and how many
    errors it has not logged since."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.since: float | None = None
        self.ended: float | None = None  # monotonic time the last outage ended
        self.unlogged = 0

    @property
    def active(self) -> bool:
        return self.since is not None

    def active_within(self, seconds: float) -> bool:
        """Away now, or back less than ``seconds`` ago: what a thread found dead on a
        periodic check may have died of."""
        ended = self.ended
        return self.active or (ended is not None and time.monotonic() - ended < seconds)

    def failed(self, exc: BaseException, where: str) -> None:
        with self._lock:
            self.unlogged += 1
            if self.since is not None:
                return
            self.since = time.monotonic()
        summary = " ".join(str(exc).split())[:200] or type(exc).__name__
        logger.error(
            "the database is unavailable (%s, seen by %s); its errors are not logged until it answers again",
            summary,
            where,
        )

    def count_unlogged(self) -> None:
        with self._lock:
            self.unlogged += 1

    def recovered(self) -> None:
        if self.since is None:  # the common case: no lock, no work
            return
        with self._lock:
            if self.since is None:
                return
            away, unlogged = time.monotonic() - self.since, self.unlogged
            self.since, self.unlogged, self.ended = None, 0, time.monotonic()
        logger.warning(
            "the database answers again after %.1f s away (%d errors not logged meanwhile)", away, unlogged
        )


database_outage = DatabaseOutage()


def connection_made(connection: Any = None, **kwargs: Any) -> None:
    """``connection_created``: a connection opened, so the database is there. Not for
    a pooled connection (a checkout, maybe of a dead one): the pool says so itself when
    it makes a new one (``claw_platform.db_pool``)."""
    if getattr(connection, "pool", None) is None:
        database_outage.recovered()


def _exception_of(record: logging.LogRecord) -> BaseException | None:
    if record.exc_info and record.exc_info[1] is not None:
        return record.exc_info[1]
    if isinstance(record.msg, BaseException):  # django-q2: logger.error(exc, ...)
        return record.msg
    args = record.args if isinstance(record.args, tuple) else ()
    return next((a for a in args if isinstance(a, BaseException)), None)


class OutageLogFilter(logging.Filter):
    """Drops the records of a lost database connection (see the module's docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or record.name == logger.name:
            return True
        exc = _exception_of(record)
        if exc is not None and lost_connection(exc):
            database_outage.failed(exc, record.name)
            return False
        if database_outage.active and record.name.startswith("psycopg.pool"):
            # The pool's word on each connection the outage closed ("discarding closed
            # connection"), one per pooled connection: part of the same outage.
            database_outage.count_unlogged()
            return False
        return True
