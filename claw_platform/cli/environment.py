"""Process start-up shared by `claw`, `manage.py` and the supervised children."""

from __future__ import annotations

import os

from claw_platform.config import var_dir
from claw_platform.embedded_db import EmbeddedDatabase, ensure_database_url


def prepare_environment() -> EmbeddedDatabase | None:
    """Point DATABASE_URL at the embedded server if the operator gave none."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    return ensure_database_url(var_dir())
