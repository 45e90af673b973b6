"""pytest plugin (``-p claw_platform.testing.pytest_plugin``): one embedded PostgreSQL
server per test run, unless DATABASE_URL is given, and a private var directory.

It acts at import time because pytest-django configures Django before any conftest's
hooks run, and settings need DATABASE_URL by then.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest

_run_dir = Path(tempfile.mkdtemp(prefix="claw-tests-"))
os.environ.setdefault("CLAW_VAR_DIR", str(_run_dir / "var"))
os.environ.setdefault("CHANNEL_LAYER_URL", "postgres")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")

_embedded = None
if not os.environ.get("DATABASE_URL"):
    from claw_platform.embedded_db import start_embedded_database

    _embedded = start_embedded_database(_run_dir / "pgdata")
    os.environ["DATABASE_URL"] = _embedded.url


def _interrupt(signum: int, frame: object) -> None:
    # A test run stopped with SIGTERM (a CI timeout, `timeout`) unwinds like Ctrl+C,
    # so pytest_unconfigure still stops the embedded server: none is left running.
    raise KeyboardInterrupt


if _embedded is not None:
    signal.signal(signal.SIGTERM, _interrupt)


def _stop() -> None:
    global _embedded
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
