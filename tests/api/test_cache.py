"""The shared cache in PostgreSQL (claw_platform.cache): what the API's rate limits
and the pairing lock-outs rely on."""

from __future__ import annotations

import time

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from claw_platform import cache as cache_module

pytestmark = pytest.mark.django_db


def test_set_is_one_statement_and_reads_back() -> None:
    with CaptureQueriesContext(connection) as queries:
        cache.set("one", {"a": [1, 2.5]}, 60)
    assert len(queries.captured_queries) == 1
    assert "ON CONFLICT" in queries.captured_queries[0]["sql"]
    assert cache.get("one") == {"a": [1, 2.5]}
    cache.set("one", "replaced", 60)
    assert cache.get("one") == "replaced"


def test_expiry_and_no_timeout() -> None:
    cache.set("short", 1, 1)
    cache.set("forever", 2, None)
    assert cache.get("short") == 1
    time.sleep(1.1)
    assert cache.get("short") is None
    assert cache.get("forever") == 2


def test_add_and_incr_still_work() -> None:
    assert cache.add("counter", 1, 60) is True
    assert cache.add("counter", 5, 60) is False
    assert cache.incr("counter") == 2


def test_culls_when_over_max_entries(monkeypatch: pytest.MonkeyPatch) -> None:
    small = cache_module.PostgresCache("claw_cache", {"OPTIONS": {"MAX_ENTRIES": 10}})
    monkeypatch.setattr(cache_module, "CULL_EVERY", 1)
    for i in range(30):
        small.set(f"k{i}", i, 60)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM claw_cache")
        assert cursor.fetchone()[0] <= 11


def test_the_table_is_unlogged() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT relpersistence FROM pg_class WHERE relname = 'claw_cache'")
        assert cursor.fetchone()[0] == "u"
