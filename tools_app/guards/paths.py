"""The path guard (T14): every path a tool touches stays inside its workspace.

:func:`resolve_workspace_path` turns a path the model gave into a real path inside the
workspace, or raises ``ToolError(path_policy_blocked)`` saying why. It refuses:

- NUL bytes, empty paths, and absolute paths or ``..`` that land outside;
- any symbolic link on the way, followed or dangling (so no link-then-``..`` escape
  and no write through a dangling link to a place outside) -- MicroClaw refuses
  symlinks in paths entirely, and so do we;
- files with more than one hard link (a hard link made inside the workspace to a file
  outside would otherwise be read or overwritten through it);
- sensitive names anywhere in the path: ``.ssh``, ``.aws``, ``.gnupg``, ``.kube``,
  ``.config/gcloud``, ``.docker``, ``.env`` files, private keys, credential stores.

The check walks the path one component at a time with ``lstat`` and callers open the
final file with ``O_NOFOLLOW`` (:func:`open_nofollow`), so a link swapped in between
the check and the open is refused by the kernel too.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path, PurePosixPath

from tools_app.registry import PATH_POLICY_BLOCKED, ToolError

SENSITIVE_DIRS = frozenset({".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure", ".password-store"})
SENSITIVE_NESTED = (("config", "gcloud"), (".config", "gcloud"))
SENSITIVE_FILE_PATTERNS = (
    ".env",
    ".env.*",
    "*.env",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".git-credentials",
    ".npmrc",
    ".pypirc",
    "credentials",
    "credentials.json",
    "secret_key",
    "secrets.key",
)
MAX_PATH_CHARS = 4_096


def blocked(message: str) -> ToolError:
    return ToolError(PATH_POLICY_BLOCKED, message)


def sensitive_component(parts: tuple[str, ...]) -> str | None:
    """The first sensitive name among path components, or ``None``."""
    lowered = tuple(p.lower() for p in parts)
    for index, part in enumerate(lowered):
        if part in SENSITIVE_DIRS:
            return parts[index]
        if any(fnmatch.fnmatchcase(part, pattern) for pattern in SENSITIVE_FILE_PATTERNS):
            return parts[index]
        for nested in SENSITIVE_NESTED:
            if lowered[index : index + len(nested)] == nested:
                return "/".join(parts[index : index + len(nested)])
    return None


def relative_parts(workspace: Path, requested: str) -> tuple[str, ...]:
    """Components of ``requested`` relative to ``workspace`` after lexical
    normalisation; refuses what leaves the workspace on paper already."""
    if not isinstance(requested, str) or not requested.strip():
        raise blocked("A path is required.")
    if "\x00" in requested or len(requested) > MAX_PATH_CHARS:
        raise blocked("That path is not allowed.")
    root = PurePosixPath(str(workspace))
    path = PurePosixPath(requested)
    if path.is_absolute():
        try:
            path = path.relative_to(root)
        except ValueError:
            raise blocked(
                f"{requested!r} is outside the workspace. Use a path relative to the workspace."
            ) from None
    parts: list[str] = []
    for part in path.parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not parts:
                raise blocked(f"{requested!r} leaves the workspace. Use a path inside it.")
            parts.pop()
            continue
        parts.append(part)
    return tuple(parts)


def check_path_policy(workspace: Path, requested: str) -> tuple[str, ...]:
    """The checks of :func:`resolve_workspace_path` that need no file system: a path
    that leaves the workspace or names something sensitive is refused. Returns the
    components relative to the workspace. Used before a call is offered for approval
    too (a call the guard refuses anyway is refused at once)."""
    raw_parts = PurePosixPath(requested).parts if isinstance(requested, str) else ()
    parts = relative_parts(workspace, requested)
    sensitive = sensitive_component(tuple(raw_parts) + parts)
    if sensitive is not None:
        raise blocked(f"Access to {sensitive!r} is not allowed: it may hold credentials.")
    return parts


def resolve_workspace_path(
    workspace: Path, requested: str, *, must_exist: bool = False, for_write: bool = False
) -> Path:
    """The real path for ``requested`` inside ``workspace`` (see the module docs)."""
    # Lexical ".." handling is safe only because no component may be a link: a
    # "link/.." would otherwise mean the parent of the link's target.
    parts = check_path_policy(workspace, requested)
    _refuse_links_before_parent_steps(workspace, requested)
    current = workspace
    for index, part in enumerate(parts):
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            if must_exist:
                raise ToolError(
                    "tool_error", f"{'/'.join(parts[: index + 1])!r} does not exist in the workspace."
                ) from None
            # Nothing further down exists either: no link can hide below.
            return workspace.joinpath(*parts)
        except NotADirectoryError:
            raise ToolError("tool_error", f"{'/'.join(parts[:index])!r} is not a directory.") from None
        if stat.S_ISLNK(info.st_mode):
            raise blocked(
                f"{'/'.join(parts[: index + 1])!r} is a symbolic link; links are not followed in the workspace."
            )
        last = index == len(parts) - 1
        if last and stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            raise blocked(f"{'/'.join(parts)!r} has other hard links; it cannot be used.")
        if not last and not stat.S_ISDIR(info.st_mode):
            raise ToolError("tool_error", f"{'/'.join(parts[: index + 1])!r} is not a directory.")
        if last and not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
            raise blocked(f"{'/'.join(parts)!r} is not a regular file or directory.")
    resolved = workspace.joinpath(*parts)
    if for_write and resolved == workspace:
        raise blocked("The workspace itself cannot be written to; name a file inside it.")
    return resolved


def _refuse_links_before_parent_steps(workspace: Path, requested: str) -> None:
    """``link/..`` means the parent of the link's *target* to the kernel but the
    workspace itself on paper: refuse any link met before a ``..`` (link-then-..)."""
    if ".." not in PurePosixPath(requested).parts:
        return
    path = PurePosixPath(requested)
    if path.is_absolute():
        path = path.relative_to(PurePosixPath(str(workspace)))
    current = workspace
    for part in path.parts:
        if part == "..":
            current = current.parent
            continue
        current = current / part
        if current.is_symlink():
            raise blocked(f"{part!r} is a symbolic link; links are not followed in the workspace.")


def open_nofollow(path: Path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a link as the final component (raced in after the check)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as exc:
        if exc.errno in (40,):  # ELOOP: the final component became a link
            raise blocked(f"{path.name!r} is a symbolic link; links are not followed.") from None
        raise


def display_path(workspace: Path, path: Path) -> str:
    """A path as the model should see it: relative to the workspace (X5: no host paths)."""
    try:
        relative = path.relative_to(workspace)
    except ValueError:
        return path.name
    return str(relative) if str(relative) != "." else "."
