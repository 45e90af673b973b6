"""pytest plugin (``-p claw_platform.testing.pytest_plugin``): one embedded PostgreSQL
server per test process (each xdist worker has its own), unless DATABASE_URL is given,
and a private var directory.

Tests run the way the product does: the test database is created and migrated as the
owner role (``DATABASE_OWNER_URL``) and the tests connect as the runtime role
(``DATABASE_URL``). Given only a DATABASE_URL (an outside server, CI), that URL is the
owner and the run creates a runtime role of its own, ``claw_test_runtime_<random>``
(dropped at the end: several runs may share one server).

It acts at import time because pytest-django configures Django before any conftest's
hooks run, and settings need DATABASE_URL by then.
"""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import signal
import tempfile
import warnings
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

# Variables this plugin set for its own embedded server carry this mark. An xdist
# worker inherits them from its controller: it starts a server of its own instead, so
# tests that stop or restart "the" database (tests/ui/test_faults.py) or read its
# roles touch only their own worker's.
_EMBEDDED_MARK = "CLAW_TESTS_EMBEDDED_SERVER"
if os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get(_EMBEDDED_MARK) == os.environ.get("DATABASE_URL"):
    # The controller's metrics folder lies in its var directory (the settings set it):
    # shared, one worker's runs would count in the other's metrics tests.
    _inherited_var = os.environ.get("CLAW_VAR_DIR", "")
    if _inherited_var and os.environ.get("PROMETHEUS_MULTIPROC_DIR", "").startswith(_inherited_var):
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR")
    for _name in ("DATABASE_URL", "DATABASE_OWNER_URL", "CLAW_VAR_DIR", _EMBEDDED_MARK):
        os.environ.pop(_name, None)

_run_dir = Path(tempfile.mkdtemp(prefix="claw-tests-"))
os.environ.setdefault("CLAW_VAR_DIR", str(_run_dir / "var"))
os.environ.setdefault("CHANNEL_LAYER_URL", "postgres")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")

_embedded = None
if not os.environ.get("DATABASE_URL"):
    from claw_platform.embedded_db import start_embedded_database

    _embedded = start_embedded_database(_run_dir / "pgdata")
    os.environ["DATABASE_URL"] = _embedded.url
    os.environ["DATABASE_OWNER_URL"] = _embedded.owner_url
    os.environ[_EMBEDDED_MARK] = _embedded.url

TEST_RUNTIME_ROLE = f"claw_test_runtime_{secrets.token_hex(4)}"
_created_role_on: str | None = None


def _with_credentials(url: str, user: str, password: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"))


def _create_test_runtime_role(owner_url: str) -> str | None:
    """The runtime role for a run on an outside server: created (or its password reset)
    with the given URL, which must be allowed to create roles. Its URL, or None."""
    import psycopg

    from claw_platform.db_roles import runtime_role_statements

    password = secrets.token_hex(24)
    database = urlsplit(owner_url).path.lstrip("/") or "postgres"
    # Roles belong to the server; the test database is PUBLIC-connectable when made.
    statements = [s for s, _ in runtime_role_statements(TEST_RUNTIME_ROLE, password, database)]
    try:
        with psycopg.connect(owner_url, dbname="postgres", autocommit=True) as conn:
            for statement in statements[:-1]:
                conn.execute(statement)
    except psycopg.Error as exc:
        warnings.warn(
            f"tests run as the owner role: could not create {TEST_RUNTIME_ROLE} ({exc})", stacklevel=1
        )
        return None
    return _with_credentials(owner_url, TEST_RUNTIME_ROLE, password)


# Given only DATABASE_URL: it is the owner. xdist's workers inherit both variables
# from the controller, which made the role once.
if _embedded is None and not os.environ.get("DATABASE_OWNER_URL"):
    _given = os.environ["DATABASE_URL"]
    _runtime_url = _create_test_runtime_role(_given)
    if _runtime_url is not None:
        os.environ["DATABASE_OWNER_URL"] = _given
        os.environ["DATABASE_URL"] = _runtime_url
        _created_role_on = _given


def _drop_test_runtime_role() -> None:
    import psycopg

    from claw_platform.db_roles import quote_role

    if _created_role_on is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        with psycopg.connect(_created_role_on, dbname="postgres", autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {quote_role(TEST_RUNTIME_ROLE)}")
    except psycopg.Error as exc:
        warnings.warn(f"could not drop the test role {TEST_RUNTIME_ROLE}: {exc}", stacklevel=1)


def _interrupt(signum: int, frame: object) -> None:
    # A test run stopped with SIGTERM (a CI timeout, `timeout`) unwinds like Ctrl+C,
    # so pytest_unconfigure still stops the embedded server: none is left running.
    raise KeyboardInterrupt


if _embedded is not None:
    signal.signal(signal.SIGTERM, _interrupt)


def _stop() -> None:
    global _embedded, _created_role_on
    _drop_test_runtime_role()
    _created_role_on = None
    if _embedded is not None:
        _embedded.stop()
        _embedded = None
    shutil.rmtree(_run_dir, ignore_errors=True)


# The server starts when this plugin is imported, before pytest has read its command
# line: a run that ends there (a usage error, an option no plugin knows) never reaches
# pytest_unconfigure, and left its server running.
atexit.register(_stop)


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop()
