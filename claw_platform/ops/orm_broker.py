"""django-q2's database broker, each operation one plain statement.

django-q2's ``ORM`` broker builds ORM queries for every task: a read and then one
conditional update per task to take it, a ``Collector`` delete to acknowledge it,
and before each call ``close_old_connections`` followed by a ``SELECT 1`` health
check. In a burst of 200 runs (``bench/stream --tokens 2``, py-spy) django-q2's
threads held the worker's GIL in 18% of the samples, mostly in the broker; with
this one the worker spent about 6% less CPU on that burst. This broker keeps its
table, its semantics (a taken task is locked until ``retry`` seconds have passed,
then handed out again unless acknowledged) and its other methods, and writes the
hot three as single statements:

- ``dequeue`` takes up to ``bulk`` due tasks in one ``UPDATE … SKIP LOCKED``, so two
  clusters never take the same task;
- ``acknowledge`` / ``delete`` is one ``DELETE``;
- ``enqueue`` is one ``INSERT`` (inside the caller's transaction when there is one:
  the run and its task commit together).

All three are prepared statements (``claw_platform.prepared``).

A connection a database restart broke is not found by a check before every call
any more: the statement fails, the connection is closed, and the statement runs
once more on a new one (``dequeue`` and ``delete`` only; they are safe to repeat).
Every minute each thread still lets Django close its obsolete connections.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from django.db import DatabaseError, close_old_connections, connections
from django.utils import timezone
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ

from claw_platform.prepared import prepared_cursor

# Between two calls of close_old_connections by one thread (CONN_MAX_AGE, errors).
TIDY_EVERY = 60.0

# The table's name comes from the model (no input reaches these strings).
_TABLE = OrmQ._meta.db_table
_DEQUEUE_SQL = (
    f'UPDATE {_TABLE} SET "lock" = %s WHERE id IN ('  # noqa: S608
    f'SELECT id FROM {_TABLE} WHERE "key" = %s AND "lock" < %s ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED'
    ") RETURNING id, payload"
)
_DELETE_SQL = f"DELETE FROM {_TABLE} WHERE id = %s"  # noqa: S608
_ENQUEUE_SQL = f'INSERT INTO {_TABLE} ("key", payload, "lock") VALUES (%s, %s, %s) RETURNING id'  # noqa: S608


class OrmBroker(ORM):  # type: ignore[misc]
    """``Q_CLUSTER["broker_class"]`` for the database broker (``CLAW_Q_BROKER_URL=orm``)."""

    def __init__(self, list_key: str | None = None) -> None:
        super().__init__(list_key=list_key)
        self._tidied = threading.local()

    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        """The queue's table (django-q2's ``ORM`` also closes the calling thread's old
        connections here, in autocommit, and every broker calls it when built: a
        caller holding a cursor then lost its connection to the pool mid-work, while
        another thread took it). Connections are tidied in ``_execute``."""
        return OrmQ.objects.using(Conf.ORM)

    def enqueue(self, task: str) -> int:
        rows = self._execute(_ENQUEUE_SQL, [self.list_key or Conf.CLUSTER_NAME, task, timezone.now()])
        return int(rows[0][0])

    def dequeue(self) -> list[tuple[int, str]] | None:
        now = timezone.now()
        rows = self._execute(
            _DEQUEUE_SQL,
            [now + timedelta(seconds=Conf.RETRY), self.list_key, now, Conf.BULK],
            repeatable=True,
        )
        if rows:
            return sorted((int(task_id), payload) for task_id, payload in rows)
        time.sleep(Conf.POLL)  # an empty queue: as django-q2's broker, wait a poll
        return None

    def delete(self, task_id: Any) -> None:
        self._execute(_DELETE_SQL, [task_id], repeatable=True)

    def _execute(self, statement: str, params: list[Any], *, repeatable: bool = False) -> list[Any]:
        """Run one statement; its rows (or nothing). Outside a transaction a statement
        that is safe to repeat gets a second try on a new connection."""
        conn = connections[Conf.ORM]
        outside = not conn.in_atomic_block
        if outside and time.monotonic() - getattr(self._tidied, "at", 0.0) > TIDY_EVERY:
            self._tidied.at = time.monotonic()
            close_old_connections()
        for attempt in (1, 2):
            try:
                with prepared_cursor() as cursor:
                    cursor.execute(statement, params)
                    return cursor.fetchall() if cursor.description else []
            except DatabaseError:
                if attempt == 2 or not (outside and repeatable) or conn.is_usable():
                    raise
                conn.close()  # broken (the database restarted): a new one next
        raise AssertionError("unreachable")
