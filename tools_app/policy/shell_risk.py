"""How risky a shell command is, from its parse tree (T12).

A command is *simple* when it parses (bashlex) to exactly one command made of plain
words: no chaining (``;``, ``&&``, ``||``, ``&``, newlines), no pipes, no command or
process substitution (``$(...)``, backticks, ``<(...)``), no parameter expansion
(``$X`` can hide a program name), no redirects, no ``VAR=value`` prefixes, no
compound statements (loops, functions, subshells), and a program that is not a
wrapper running another command (``env``, ``sudo``, ``busybox``, ``sh -c``,
``xargs``, ``nohup``, ``timeout`` ..., also spelled ``/usr/bin/sudo``) nor an
interpreter that runs code from its arguments.

Anything else, and anything that does not parse, is **high** risk whatever the
tool's own risk -- so an approval, a read-only mode or a lowered risk that fits a
simple command never stretches to ``ls; rm -rf x``. A simple command whose program
only reads (``ls``, ``cat``, ``grep`` ...) is *read-only*, which is what the
read-only mode lets through.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass

import bashlex
import bashlex.errors

# Programs that run another program or a script they are given.
WRAPPERS = frozenset(
    {
        "env", "sudo", "doas", "su", "runuser", "pkexec", "busybox", "toybox",
        "sh", "bash", "dash", "zsh", "ksh", "mksh", "fish", "csh", "tcsh", "ash",
        "xargs", "nohup", "timeout", "nice", "ionice", "stdbuf", "setsid", "chroot",
        "unshare", "nsenter", "strace", "ltrace", "time", "watch", "exec", "eval",
        "command", "builtin", "source", ".", "script", "flock", "chrt", "taskset",
        "parallel", "at", "batch", "crontab", "systemd-run", "bwrap", "firejail",
        "expect", "screen", "tmux", "ssh", "trap",
    }
)  # fmt: skip
# Interpreters run code given in their arguments (or read from the workspace), and so
# do build and test runners (package.json scripts, setup.py, conftest.py, build.rs).
INTERPRETERS = frozenset(
    {
        "python", "python3", "python2", "perl", "ruby", "node", "nodejs", "deno", "bun", "php",
        "lua", "tclsh", "awk", "gawk", "mawk", "nawk", "sed", "osascript", "make", "gdb", "vim", "vi",
        "emacs", "git", "npm", "npx", "yarn", "pnpm", "pytest", "tox", "nox", "cargo", "go", "java",
        "mvn", "gradle", "dotnet", "pip", "pip3", "uv", "poetry", "rscript", "Rscript", "julia",
    }
)  # fmt: skip
# Programs that only read (with the option exceptions below).
READ_ONLY_PROGRAMS = frozenset(
    {
        "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "rg", "find", "pwd", "echo",
        "printf", "stat", "file", "du", "df", "tree", "sort", "uniq", "cut", "diff", "cmp", "md5sum",
        "sha1sum", "sha256sum", "sha512sum", "date", "whoami", "id", "uname", "which", "basename",
        "dirname", "realpath", "readlink", "true", "false", "nl", "tac", "rev", "column", "comm",
        "od", "hexdump", "xxd", "strings", "jq", "less", "more", "test", "[", "seq", "expr", "tr",
    }
)  # fmt: skip
# Options that make a read-only program write or run something.
WRITING_OPTIONS = {
    "find": ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0", "-fprintf", "-fls"),
    "sort": ("-o", "--output"),
    "tree": ("-o",),
    "xxd": ("-r",),
}
FIND_RUNNERS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
SYSTEM_BIN_DIRS = frozenset({"/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin"})
DESTRUCTIVE = frozenset({"rm", "dd", "mkfs", "shred", "chmod", "chown", "chgrp", "kill", "pkill", "killall"})


@dataclass(frozen=True, slots=True)
class CommandRisk:
    """What the policy needs to know about one command."""

    simple: bool
    read_only: bool
    program: str
    reason: str

    @property
    def always_high(self) -> bool:
        return not self.simple or self.program in DESTRUCTIVE


def _complex(reason: str, program: str = "") -> CommandRisk:
    return CommandRisk(False, False, program, reason)


class _Inspector(bashlex.ast.nodevisitor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.problem = ""

    def _flag(self, reason: str) -> None:
        if not self.problem:
            self.problem = reason

    def visitcommandsubstitution(self, node: object, command: object) -> None:
        self._flag("command substitution")

    def visitprocesssubstitution(self, node: object, command: object) -> None:
        self._flag("process substitution")

    def visitparameter(self, node: object, value: object) -> None:
        self._flag("parameter expansion")

    def visittilde(self, node: object, value: object) -> None:
        self._flag("tilde expansion")

    def visitredirect(self, node: object, *args: object) -> None:
        self._flag("redirection")

    def visitassignment(self, node: object, parts: object) -> None:
        self._flag("variable assignment")

    def visitheredoc(self, node: object, value: object) -> None:
        self._flag("here-document")


@functools.lru_cache(maxsize=1024)
def classify_command(command: str) -> CommandRisk:
    """The risk facts of ``command`` (cached: the policy asks about the same text twice)."""
    if not command.strip():
        return _complex("empty command")
    if "\n" in command.strip() or "\r" in command:
        return _complex("several lines")
    try:
        trees = bashlex.parse(command)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError, TypeError) as exc:
        return _complex(f"could not be parsed ({type(exc).__name__})")
    if len(trees) != 1:
        return _complex("several commands")
    tree = trees[0]
    if tree.kind != "command":
        return _complex({"list": "chained commands", "pipeline": "a pipeline"}.get(tree.kind, tree.kind))
    inspector = _Inspector()
    inspector.visit(tree)
    if inspector.problem:
        return _complex(inspector.problem)
    words = [part.word for part in tree.parts if part.kind == "word"]
    if len(words) != len(tree.parts) or not words:
        return _complex("not a plain command")
    program = os.path.basename(words[0])
    if program in WRAPPERS:
        return _complex(f"{program} runs another command", program)
    if program in INTERPRETERS or program.startswith(("python", "perl", "ruby", "php")):
        return _complex(f"{program} runs code", program)
    if program == "find" and any(w in FIND_RUNNERS for w in words[1:]):
        return _complex("find -exec runs another command", program)
    if program in DESTRUCTIVE:
        return CommandRisk(True, False, program, f"{program} can destroy data")
    options = WRITING_OPTIONS.get(program, ())
    writes = any(w == o or w.startswith(o + "=") for w in words[1:] for o in options)
    # A program named by a path elsewhere (./ls) is whatever that file is.
    system = "/" not in words[0] or os.path.dirname(words[0]) in SYSTEM_BIN_DIRS
    read_only = program in READ_ONLY_PROGRAMS and not writes and system
    return CommandRisk(True, read_only, program, "a simple command")
