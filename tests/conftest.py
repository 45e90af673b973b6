"""Shared fixtures. The database comes from claw_platform.testing.pytest_plugin
(registered in pyproject's addopts): one embedded PostgreSQL per test run."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.tenants", "tests.fakes.fixtures", "tests.fakes.network"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # type: ignore[no-untyped-def]
    # PBKDF2's deliberate slowness costs seconds per fixture set; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _test_code_is_system_code():  # type: ignore[no-untyped-def]
    """A test's own set-up and inspection cross tenants like system code: its statements
    run under ``system_bypass()`` (strict row-level security passes nothing without a
    tenant). What the product runs in a scope of its own (requests and API calls, which
    set their scope, and the threads it starts) stays bound by the wall; a test enters
    ``no_tenant()`` to run as code with no tenant in context."""
    from claw_platform.tenancy.rls import system_bypass

    with system_bypass():  # test code: fixtures and assertions across tenants
        yield


_runtime_credentials: dict = {}


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):  # type: ignore[no-untyped-def]
    """The test database is created and migrated as the owner role (the plugin's
    DATABASE_OWNER_URL); django_db_setup below then hands the tests the runtime role."""
    from claw_platform.db_roles import owner_settings, use_credentials

    owner = owner_settings()
    if owner is not None:
        _runtime_credentials.update(use_credentials("default", owner))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup, django_db_blocker):  # type: ignore[no-untyped-def]
    """Point the PostgreSQL channel layer at the test database (settings built its
    config before pytest-django renamed the database), switch to the runtime role
    (granted, for tests only, TRUNCATE for flushes and UPDATE on sequences for
    resets), and at the end drop the connections worker threads (sync_to_async) left
    open, so the test database can be torn down as the owner."""
    from channels.layers import channel_layers
    from django.conf import settings
    from django.db import connection

    from claw_platform.db_roles import SCHEMA, owner_settings, quote_role, use_credentials

    layer_config = settings.CHANNEL_LAYERS["default"].get("CONFIG", {})
    if "NAME" in layer_config:
        layer_config["NAME"] = connection.settings_dict["NAME"]
        channel_layers.backends.clear()
    owner = owner_settings()
    if owner is not None and _runtime_credentials:
        runtime = quote_role(str(_runtime_credentials["USER"]))
        with django_db_blocker.unblock(), connection.cursor() as cursor:
            cursor.execute(f"GRANT TRUNCATE ON ALL TABLES IN SCHEMA {SCHEMA} TO {runtime}")
            cursor.execute(f"GRANT UPDATE ON ALL SEQUENCES IN SCHEMA {SCHEMA} TO {runtime}")
        use_credentials("default", _runtime_credentials)
    yield
    from django.db import connection

    if owner is not None and _runtime_credentials:
        use_credentials("default", owner)
    with django_db_blocker.unblock(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
