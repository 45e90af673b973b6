"""Shared fixtures. The database comes from claw_platform.testing.pytest_plugin
(registered in pyproject's addopts): one embedded PostgreSQL per test run."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.tenants", "tests.fakes.fixtures", "tests.fakes.network"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # type: ignore[no-untyped-def]
    # PBKDF2's deliberate slowness costs seconds per fixture set; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """Point the PostgreSQL channel layer at the test database (settings built its
    config before pytest-django renamed the database), and at the end drop the
    connections worker threads (sync_to_async) left open, so the test database can
    be torn down."""
    from channels.layers import channel_layers
    from django.conf import settings
    from django.db import connection

    layer_config = settings.CHANNEL_LAYERS["default"].get("CONFIG", {})
    if "NAME" in layer_config:
        layer_config["NAME"] = connection.settings_dict["NAME"]
        channel_layers.backends.clear()
    yield
    from django.db import connection

    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
