"""The shared cache in PostgreSQL (``CLAW_CACHE_URL=database``, the default).

Django's ``DatabaseCache`` spends five round trips and a WAL flush on every
``set`` (a ``COUNT(*)`` to decide on culling, then a transaction with a SELECT and
an UPDATE or INSERT); the API's rate limit sets a key on every call. Here a ``set``
is one upsert on an UNLOGGED table (migration ``api/0002``: a commit that touched
only it waits for no disk flush), and the count that decides on culling runs on
one ``set`` in ``CULL_EVERY``. What the cache holds (rate-limit windows,
lock-outs) may be lost in a database crash; nothing else is kept there.
"""

from __future__ import annotations

import base64
import pickle
from datetime import UTC, datetime
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router
from django.utils.timezone import now as tz_now

CULL_EVERY = 50


class PostgresCache(DatabaseCache):
    _sets = 0

    def set(self, key: str, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        key = self.make_and_validate_key(key, version=version)
        seconds = self.get_backend_timeout(timeout)
        expires = (
            datetime.max.replace(tzinfo=UTC) if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)
        )
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        table = connection.ops.quote_name(self._table)  # type: ignore[attr-defined]  # settings, quoted
        encoded = base64.b64encode(pickle.dumps(value, self.pickle_protocol)).decode("latin1")
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (cache_key, value, expires) VALUES (%s, %s, %s) "  # noqa: S608
                "ON CONFLICT (cache_key) DO UPDATE SET value = EXCLUDED.value, expires = EXCLUDED.expires",
                [key, encoded, connection.ops.adapt_datetimefield_value(expires.replace(microsecond=0))],
            )
            PostgresCache._sets += 1
            if PostgresCache._sets % CULL_EVERY == 0:
                cursor.execute(f"SELECT COUNT(*) FROM {table}")  # noqa: S608
                count = cursor.fetchone()[0]
                if count > self._max_entries:
                    self._cull(db, cursor, tz_now(), count)  # type: ignore[attr-defined]
