"""Shared fixtures. The database comes from claw_platform.testing.pytest_plugin
(registered in pyproject's addopts): one embedded PostgreSQL per test run."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures.tenants"]


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):  # type: ignore[no-untyped-def]
    # PBKDF2's deliberate slowness costs seconds per fixture set; tests don't need it.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
