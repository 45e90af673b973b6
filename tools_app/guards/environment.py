"""The environment a shell command sees (T15): built from nothing, never copied.

The product's processes hold SECRET_KEY, DATABASE_URL, CLAW_SECRETS_KEY, provider
keys and whatever else the operator exported; a command the model wrote must see
none of it. :func:`shell_environment` therefore starts from an empty mapping and
adds a fixed set of harmless variables; :func:`looks_secret` names what would be
refused if a caller tried to add more (``extra``), as a second wall.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Names that must never reach a command, whatever the value.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH|COOKIE|SESSION", re.I)
_SECRET_EXACT = frozenset(
    {"DATABASE_URL", "CHANNEL_LAYER_URL", "CLAW_Q_BROKER_URL", "DJANGO_SETTINGS_MODULE"}
)


def looks_secret(name: str) -> bool:
    return name.upper() in _SECRET_EXACT or bool(_SECRET_NAME.search(name)) or name.startswith("CLAW_")


def shell_environment(home: str, *, tmpdir: str, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """A minimal environment for a command whose home is ``home``."""
    env = {
        "PATH": SAFE_PATH,
        "HOME": home,
        "PWD": home,
        "TMPDIR": tmpdir,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "SHELL": "/bin/bash",
        "USER": "agent",
        "LOGNAME": "agent",
        "PAGER": "cat",
        "GIT_TERMINAL_PROMPT": "0",
    }
    for name, value in (extra or {}).items():
        if looks_secret(name):
            raise ValueError(f"{name} looks like a secret and is not passed to commands")
        env[name] = value
    return env
