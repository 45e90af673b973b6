"""Which MCP stdio servers a tenant may start, and with which arguments (T10).

The operator approves command lines in ``CLAW_MCP_STDIO_COMMANDS`` (name -> argv, the
program an absolute path). A tenant's McpServer row names one of them and may add
arguments. The process is started directly (never through a shell), so quoting and
metacharacters mean nothing; what could still smuggle code in are the interpreter
options that run a string or load a module, a preload through the environment, or an
argument that is really two. These are refused:

- options that evaluate or load code: ``-c``, ``-e``, ``--eval``, ``-p``/``--print``,
  ``-r``/``--require``, ``--import``, ``--loader``, ``-m``, ``-x``, ``--exec``,
  ``--init-file``, ``--rcfile`` and friends, in any spelling (``-ce``, ``--eval=...``);
- arguments with NUL or line breaks, or longer than 1,000 characters; more than 32;
- environment variables that change how programs load or find code (``LD_*``,
  ``DYLD_*``, ``PYTHON*``, ``NODE_OPTIONS``, ``PATH``, ``HOME`` ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

MAX_ARGS = 32
MAX_ARG_CHARS = 1_000
MAX_ENV = 32

# Long options that run code or pull in code, for the interpreters and runners an
# MCP server is usually started with (python, node, deno, bun, npx, uvx, ruby, perl, sh).
_CODE_LONG_OPTIONS = frozenset(
    {
        "--eval",
        "--print",
        "--require",
        "--import",
        "--loader",
        "--experimental-loader",
        "--exec",
        "--command",
        "--init-file",
        "--rcfile",
        "--preload",
        "--eval-file",
        "--interactive",
        "--inspect",
        "--inspect-brk",
        "--env-file",
        "--with",
        "--from",
        "--script",
        "--call",
        "--package",
        "--node-options",
    }
)
# Single-letter options that do the same (-c code, -e code, -p code, -r module, -m
# module, -x, -i interactive, -I include dir for ruby/perl, -M module for perl).
_CODE_SHORT_LETTERS = frozenset("cepmrxiIM")
_SHORT_CLUSTER = re.compile(r"^-[A-Za-z]+")

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_ENV_DENIED_PREFIXES = (
    "LD_",
    "DYLD_",
    "PYTHON",
    "NODE_",
    "NPM_CONFIG_",
    "PERL",
    "RUBY",
    "GCONV",
    "BASH_",
    "UV_",
)
_ENV_DENIED = frozenset(
    {
        "PATH",
        "HOME",
        "SHELL",
        "ENV",
        "BASH_ENV",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "JAVA_TOOL_OPTIONS",
        "_JAVA_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "GIT_SSH_COMMAND",
        "GIT_EXEC_PATH",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "TMPDIR",
        "LOCALDOMAIN",
        "HOSTALIASES",
        "RES_OPTIONS",
    }
)


class CommandRefused(ValueError):
    """The command, an argument or an environment variable is not allowed."""


def check_command(name: str, approved: Mapping[str, Sequence[str]]) -> list[str]:
    """The approved command line for ``name``, or :class:`CommandRefused`."""
    argv = approved.get(name)
    if not argv:
        names = ", ".join(sorted(approved)) or "none are configured (CLAW_MCP_STDIO_COMMANDS)"
        raise CommandRefused(f"{name!r} is not an approved MCP command; approved: {names}")
    return list(argv)


def check_arguments(args: object) -> list[str]:
    """Extra arguments a tenant adds, or :class:`CommandRefused` naming the bad one."""
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise CommandRefused('arguments must be a JSON list of strings, e.g. ["--toolsets", "repos"]')
    if len(args) > MAX_ARGS:
        raise CommandRefused(f"at most {MAX_ARGS} arguments")
    for arg in args:
        problem = _argument_problem(arg)
        if problem:
            raise CommandRefused(f"argument {arg[:80]!r} refused: {problem}")
    return list(args)


def _argument_problem(arg: str) -> str | None:
    if len(arg) > MAX_ARG_CHARS:
        return f"longer than {MAX_ARG_CHARS} characters"
    if any(ch in arg for ch in "\x00\r\n"):
        return "contains a NUL or line break"
    if arg.startswith("--"):
        option = arg.split("=", 1)[0].lower()
        if option in _CODE_LONG_OPTIONS:
            return "this option runs or loads code"
        return None
    if _SHORT_CLUSTER.match(arg):
        letters = arg[1:].split("=", 1)[0]
        if _CODE_SHORT_LETTERS & set(letters):
            return "options such as -c, -e, -p, -r, -m, -x or -i run or load code"
    return None


def check_environment(env: object) -> dict[str, str]:
    """Environment variables a tenant sets for the server (tokens and the like)."""
    if env in (None, ""):
        return {}
    if not isinstance(env, dict):
        raise CommandRefused('the environment must be a JSON object, e.g. {"GITHUB_TOKEN": "..."}')
    if len(env) > MAX_ENV:
        raise CommandRefused(f"at most {MAX_ENV} environment variables")
    checked: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise CommandRefused(f"{key!r} is not a valid environment variable name")
        upper = key.upper()
        if upper in _ENV_DENIED or upper.startswith(_ENV_DENIED_PREFIXES):
            raise CommandRefused(f"{key} may not be set: it changes how programs find or load code")
        if not isinstance(value, str) or "\x00" in value:
            raise CommandRefused(f"{key}: the value must be a string without NUL bytes")
        checked[key] = value
    return checked
