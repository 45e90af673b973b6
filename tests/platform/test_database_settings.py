"""How the product talks to PostgreSQL: the embedded server's connection limit, the
web process's pool, and connections kept by workers."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Any

import pytest
from django.db import connection

from claw_platform import config, db_pool
from claw_platform.embedded_db import MAX_CONNECTIONS

URL = "postgresql://claw:secret@127.0.0.1:5432/claw"


@pytest.mark.django_db
def test_the_embedded_server_allows_every_process_its_connections() -> None:
    from claw_platform.testing import pytest_plugin

    if pytest_plugin._embedded is None:
        pytest.skip("the suite runs on a database given by DATABASE_URL")
    with connection.cursor() as cursor:
        cursor.execute("SHOW max_connections")
        assert int(cursor.fetchone()[0]) >= MAX_CONNECTIONS


def test_a_pooled_configuration_closes_connections_after_each_request() -> None:
    pooled = config.database_config(URL, pool_size=20, conn_max_age=300)
    pool = pooled["OPTIONS"]["pool"]
    assert (pool["min_size"], pool["max_size"], pool["timeout"]) == (2, 20, 10)
    assert pool["reset"] is db_pool.note_return
    assert pooled["CONN_MAX_AGE"] == 0  # Django refuses persistent connections with a pool
    kept = config.database_config(URL, conn_max_age=300)
    assert "pool" not in kept["OPTIONS"]
    assert kept["CONN_MAX_AGE"] == 300
    # The channel layer builds its own pool: it must not be handed Django's.
    layer = config.channel_layer_config("postgres", pooled)
    assert "pool" not in layer["CONFIG"]["OPTIONS"]


def test_the_web_entry_point_pools_and_a_worker_keeps_its_connection() -> None:
    probe = (
        "import os, sys; sys.argv = ['daphne']; import claw_platform.asgi; from django.conf import settings; "
        "d = settings.DATABASES['default']; print(d['OPTIONS'].get('pool', {}).get('max_size'), d['CONN_MAX_AGE'])"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLAW_DB_")}
    web = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert web.stdout.split() == ["20", "0"]
    probe = (
        "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'claw_platform.settings'); "
        "django.setup(); from django.conf import settings; d = settings.DATABASES['default']; "
        "print(d['OPTIONS'].get('pool'), d['CONN_MAX_AGE'])"
    )
    worker = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    assert worker.stdout.split() == ["None", "300"]


def counting_pool(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[object]]:
    """A one-connection pool on the test database, and the connections it tested."""
    from django.db import connection
    from psycopg_pool import ConnectionPool

    checked: list[object] = []
    real_check = ConnectionPool.check_connection
    monkeypatch.setattr(
        ConnectionPool,
        "check_connection",
        staticmethod(lambda conn: checked.append(conn) or real_check(conn)),
    )
    params = {
        k: v for k, v in connection.get_connection_params().items() if k not in {"cursor_factory", "context"}
    }
    pool = ConnectionPool(
        kwargs=params, open=False, check=ConnectionPool.check_connection, **db_pool.pool_options(1)
    )
    return pool, checked


@pytest.mark.django_db
def test_a_pooled_connection_is_tested_only_after_sitting_idle(monkeypatch: pytest.MonkeyPatch) -> None:

    pool, checked = counting_pool(monkeypatch)
    db_pool.install(pool)  # as asgi.py does on the pool Django built
    with pool:
        with pool.connection() as conn:  # new: tested once
            conn.execute("SELECT 1")
        assert len(checked) == 1
        with pool.connection() as conn:  # just returned: handed out untested
            conn.execute("SELECT 1")
        assert len(checked) == 1
        monkeypatch.setattr(db_pool, "IDLE_CHECK_SECONDS", 0.0)
        with pool.connection() as conn:  # idle past the limit: tested again
            conn.execute("SELECT 1")
        assert len(checked) == 2


def back_in_pool(pool: Any) -> None:
    deadline = time.monotonic() + 5
    while pool.get_stats().get("pool_available", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)


@pytest.mark.django_db
def test_a_pooled_connection_returned_before_an_outage_ended_is_tested(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart breaks a connection returned a moment before it: the idle rule alone
    would hand it out untested, and the page asked for first after the restart failed."""

    from claw_platform.outage import DatabaseOutage

    outage = DatabaseOutage()
    monkeypatch.setattr(db_pool, "database_outage", outage)
    pool, checked = counting_pool(monkeypatch)
    db_pool.install(pool)
    with pool:
        with pool.connection() as conn:
            conn.execute("SELECT 1")
        assert len(checked) == 1
        outage.failed(OSError("server closed the connection"), "a test")
        with pool.connection() as conn:  # the database is away: tested
            conn.execute("SELECT 1")
        assert len(checked) == 2
        back_in_pool(pool)  # the pool takes a connection back in a thread of its own
        outage.recovered()
        with pool.connection() as conn:  # returned before the outage ended: tested
            conn.execute("SELECT 1")
        assert len(checked) == 3
        with pool.connection() as conn:  # returned since: handed out untested
            conn.execute("SELECT 1")
        assert len(checked) == 3
