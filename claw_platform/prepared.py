"""Hot statements as server-side prepared statements on Django's connection.

Django's psycopg backend binds parameters on the client (every statement reaches
PostgreSQL as new text), so PostgreSQL parses and plans each one anew. For the
statements a run executes every time (its claim, its events, its end) planning cost
PostgreSQL as much as executing them; the run claim's took about 1 ms, under the
claim lock (``bench/stream --tokens 2`` with pg_stat_statements).

:func:`prepared_cursor` is a plain psycopg cursor on the same connection (so in the
caller's transaction, with Django's loaders and its error classes) that prepares
every statement it runs: each is parsed and planned once per connection. Parameters are bound by the
server, so each needs a type PostgreSQL can infer (``%s::uuid`` where a string is
compared with a uuid column, say).

Django turns psycopg's prepared statements off on its connections (for connection
poolers that cannot keep them); the cursor turns them on for its own statements
only. ``CLAW_DB_PREPARE=0`` leaves them off (a PgBouncer older
than 1.21 in transaction mode): the same statements then run unprepared.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from django.conf import settings
from django.db import connection

# A psycopg threshold no statement reaches on its own: only ``prepare=True`` (the
# default of :class:`PreparingCursor`) prepares.
ONLY_WHEN_ASKED = 2**31 - 1

# An expression that makes the rest of the transaction's prepared statements use
# their generic plan, made once per connection, whatever the parameters.
# PostgreSQL's default plans the first five executions for their values, then keeps
# doing so whenever the generic plan does not look cheaper, which for
# ``id = ANY(%s)`` is always.
GENERIC_PLANS = "set_config('plan_cache_mode', 'force_generic_plan', true)"


def prepare_threshold() -> int | None:
    """psycopg's ``prepare_threshold`` for a connection of this product's own."""
    return ONLY_WHEN_ASKED if settings.CLAW_DB_PREPARE else None


class PreparingCursor(psycopg.Cursor[Any]):
    """A cursor whose statements are prepared unless a call says ``prepare=False``."""

    def execute(  # type: ignore[override]
        self, query: Any, params: Any = None, *, prepare: bool | None = True, binary: bool | None = None
    ) -> PreparingCursor:
        super().execute(query, params, prepare=prepare, binary=binary)
        return self


@contextmanager
def prepared_cursor() -> Iterator[PreparingCursor]:
    """A server-binding cursor on Django's connection; errors come out as Django's."""
    from claw_platform.tenancy.rls import sync_raw

    connection.ensure_connection()
    raw = connection.connection
    sync_raw(raw)  # a raw cursor: no execute wrapper mirrors the tenant for it
    previous = raw.prepare_threshold
    raw.prepare_threshold = prepare_threshold()
    try:
        with connection.wrap_database_errors:
            cursor = PreparingCursor(raw)
            try:
                yield cursor
            finally:
                cursor.close()
    finally:
        # Django's own (client-bound) statements are never prepared.
        raw.prepare_threshold = previous
