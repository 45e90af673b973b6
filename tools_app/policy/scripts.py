"""What a shell command will actually run (T12, issue 21).

``bash x.sh`` looks the same whatever ``x.sh`` says, and ``write_file`` can make it
say anything just before. :func:`inspect_command` therefore finds the workspace
files a command runs as code and reads them, so that:

- the policy rates the call by what runs: a shell script is parsed with the same
  rules as a command (:mod:`tools_app.policy.shell_risk`), any other script
  (Python, Node, a binary ...) and a file that cannot be read are high risk;
- the approval request shows the approver each file's content (the first
  :data:`SHOWN_BYTES`) and its sha256, with encoded arguments decoded
  (:mod:`tools_app.policy.decoding`);
- an approval -- once or "always" -- is bound to those digests: a script changed
  after it was checked or approved is not run (``ApprovalPolicy.recheck``).

Files that run: ``bash|sh|dash|zsh|ksh x``, ``sh < x``, ``cat x | sh``,
``source x``, ``. x``, ``./x`` or ``dir/x``, ``python3 x.py``, ``node x.js``,
``perl``, ``ruby``, ``php``, ``lua``, ``Rscript``, ``awk -f x``, ``sed -f x`` --
also behind ``env``, ``nohup``, ``timeout``, ``nice``, ``exec``, ``sudo`` and
the like, inside ``$(...)``, loops, ``bash -c '...'`` and pipelines. Only files of
the workspace are read, through the path guard (never a link, never a place
outside); a file named but missing is reported as such, and rated high.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import bashlex
import bashlex.errors

from tools_app.policy.decoding import Decoded, decode_obvious
from tools_app.policy.shell_risk import classify_command

SHOWN_BYTES = 4_096
HASHED_BYTES = 32_000_000  # larger files are bound by size, inode and change time
MAX_SCRIPTS = 4
SANDBOX_HOME = "/workspace"

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
SOURCING = frozenset({"source", "."})
INTERPRETERS = {
    "python": "python",
    "perl": "perl",
    "ruby": "ruby",
    "node": "javascript",
    "nodejs": "javascript",
    "deno": "javascript",
    "bun": "javascript",
    "php": "php",
    "lua": "lua",
    "rscript": "r",
    "tclsh": "tcl",
}
FILE_OPTION_PROGRAMS = frozenset({"awk", "gawk", "mawk", "nawk", "sed"})
# Options that take the next word as their value (so it is not the script).
_VALUE_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "-W", "-X", "-I", "-e", "-r", "-M", "-l", "-E"})
_INLINE_OPTIONS = frozenset({"-c", "-e", "-E", "-r", "-m", "--eval", "-p", "--print"})
# Programs that run the command that follows their own options.
_WRAPPERS = frozenset(
    {
        "env", "nohup", "nice", "ionice", "timeout", "time", "stdbuf", "setsid", "exec", "command",
        "builtin", "sudo", "doas", "xargs", "chrt", "taskset", "flock", "unbuffer", "strace", "ltrace",
    }
)  # fmt: skip
_WRAPPER_VALUE_OPTIONS = frozenset({"-n", "-u", "-g", "-k", "-s", "-o", "-e", "-i", "-c", "-p", "-E", "-C"})


@dataclass(frozen=True, slots=True)
class ScriptFile:
    """One workspace file a command runs."""

    path: str  # relative to the workspace
    runner: str  # how it is run: "bash", "source", "python3", "./" (executed itself) ...
    language: str  # "shell", "python", ..., "binary", "unknown"
    sha256: str | None  # None: missing or not readable (see ``note``)
    size: int = 0
    content: str = ""  # the first SHOWN_BYTES, as text
    truncated: bool = False
    note: str = ""  # why no content is shown

    def as_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "runner": self.runner,
            "language": self.language,
            "sha256": self.sha256,
            "bytes": self.size,
            "content": self.content,
            "truncated": self.truncated,
            "note": self.note,
        }


@dataclass(frozen=True)
class CommandInsight:
    """The scripts a command runs and its decoded arguments."""

    scripts: tuple[ScriptFile, ...] = ()
    decoded: tuple[Decoded, ...] = ()
    _risk: tuple[str, str] | None = field(default=None, repr=False, compare=False)

    def scripts_key(self) -> list[list[str | None]]:
        """What an approval binds to: each script's path and digest."""
        return [[s.path, s.sha256] for s in self.scripts]

    def details(self) -> dict[str, Any]:
        """What an approval request shows besides the arguments (JSON)."""
        shown: dict[str, Any] = {}
        if self.scripts:
            shown["scripts"] = [s.as_json() for s in self.scripts]
        if self.decoded:
            shown["decoded"] = [d.as_json() for d in self.decoded]
        return shown

    def high_risk_reason(self) -> str:
        """Why a script this command runs makes the call high risk ("" if none does)."""
        for script in self.scripts:
            reason = _script_risk(script)
            if reason:
                return reason
        return ""


def scripts_key_of(details: Any) -> list[list[str | None]]:
    """:meth:`CommandInsight.scripts_key` of stored ``details`` (an approval's)."""
    scripts = details.get("scripts") if isinstance(details, dict) else None
    if not isinstance(scripts, list):
        return []
    return [[str(s.get("path")), s.get("sha256")] for s in scripts if isinstance(s, dict)]


def inspect_command(command: str, workspace: Path | None) -> CommandInsight:
    """The scripts ``command`` runs (read from ``workspace``; none without one) and
    its obviously encoded arguments."""
    scripts: list[ScriptFile] = []
    if workspace is not None:
        seen: set[tuple[str, str]] = set()
        for runner, word in _script_words(command, depth=0):
            relative = _workspace_relative(word, workspace)
            if relative is None or (runner, relative) in seen:
                continue
            seen.add((runner, relative))
            if word.startswith("~") or any(ch in word for ch in "$*?[`"):
                # Which file runs is decided when the command runs: nothing to show.
                note = "is not a file name but a pattern or a variable"
                scripts.append(ScriptFile(relative, runner, "unknown", None, note=note))
            else:
                scripts.append(_read_script(workspace, relative, runner))
            if len(scripts) >= MAX_SCRIPTS:
                break
    texts = [command, *(s.content for s in scripts if s.language == "shell")]
    decoded: list[Decoded] = []
    for text in texts:
        decoded += [d for d in decode_obvious(text) if d not in decoded]
    return CommandInsight(tuple(scripts), tuple(decoded))


# ------------------------------------------------------------------ finding


def _script_words(command: str, *, depth: int) -> list[tuple[str, str]]:
    """(runner, word naming the file) for each file ``command`` runs as code."""
    if depth > 2:
        return []
    found: list[tuple[str, str]] = []
    for words, redirect_in, piped_from in _commands(command):
        found += _runs(words, redirect_in, piped_from, depth=depth)
    return found


def _commands(command: str) -> list[tuple[list[str], str | None, list[str]]]:
    """Each simple command: its words, the file of its ``<`` redirect, and the
    words of a ``cat`` piped into it."""
    try:
        trees = bashlex.parse(command)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError, TypeError):
        return [(words, None, []) for words in _split_fallback(command)]
    collector = _Collector()
    for tree in trees:
        collector.visit(tree)
    return collector.commands


class _Collector(bashlex.ast.nodevisitor):  # type: ignore[misc]
    def __init__(self) -> None:
        self.commands: list[tuple[list[str], str | None, list[str]]] = []
        self._piped: dict[int, list[str]] = {}

    def visitpipeline(self, node: Any, parts: Any) -> None:
        commands = [p for p in parts if p.kind == "command"]
        for before, after in itertools.pairwise(commands):
            words = _node_words(before)
            if words and os.path.basename(words[0]) == "cat":
                self._piped[id(after)] = [w for w in words[1:] if not w.startswith("-")]

    def visitcommand(self, node: Any, parts: Any) -> None:
        redirect_in = None
        for part in parts:
            if part.kind == "redirect" and part.type == "<" and getattr(part.output, "kind", "") == "word":
                redirect_in = part.output.word
        self.commands.append((_node_words(node), redirect_in, self._piped.get(id(node), [])))


def _node_words(node: Any) -> list[str]:
    return [part.word for part in node.parts if part.kind == "word"]


def _split_fallback(command: str) -> list[list[str]]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    try:
        for token in lexer:
            if token and set(token) <= set(";&|()<>"):
                commands.append([])
            else:
                commands[-1].append(token)
    except ValueError:
        return [command.split()]
    return [c for c in commands if c]


def _runs(
    words: list[str], redirect_in: str | None, piped: list[str], *, depth: int
) -> list[tuple[str, str]]:
    words = _unwrap(words)
    if not words:
        return []
    program = os.path.basename(words[0])
    args = words[1:]
    if program in SOURCING:
        return [(program, args[0])] if args else []
    if program in SHELLS:
        if program == "busybox" and args and args[0] in SHELLS:
            args = args[1:]
        inline = _option_value(args, "-c")
        if inline is not None:
            return _script_words(inline, depth=depth + 1)
        script = _first_operand(args)
        if script is not None:
            return [(program, script)]
        return [(program, f) for f in ([redirect_in] if redirect_in else piped)]
    language = _interpreter_language(program)
    if language is not None:
        if any(a in _INLINE_OPTIONS or a.startswith("--eval=") for a in args):
            return []
        if program in ("deno", "bun") and args[:1] == ["run"]:
            args = args[1:]
        script = _first_operand(args)
        if script is not None:
            return [(program, script)]
        return [(program, f) for f in ([redirect_in] if redirect_in else piped)]
    if program in FILE_OPTION_PROGRAMS:
        return [(program, args[i + 1]) for i, a in enumerate(args[:-1]) if a in ("-f", "--file")]
    if "/" in words[0] and not words[0].startswith(("/usr/", "/bin/", "/sbin/", "/lib")):
        return [("./", words[0])]
    return []


def _unwrap(words: list[str]) -> list[str]:
    """``words`` without leading wrappers (``env A=1``, ``timeout 5``, ``nice -n 5``)."""
    for _ in range(6):
        if not words or os.path.basename(words[0]) not in _WRAPPERS:
            return words
        wrapper = os.path.basename(words[0])
        rest = words[1:]
        while rest and (rest[0].startswith("-") or (wrapper == "env" and "=" in rest[0])):
            option = rest.pop(0)
            if option in _WRAPPER_VALUE_OPTIONS and rest:
                rest.pop(0)
            if option == "--":
                break
        if wrapper in ("timeout", "flock", "taskset", "chrt") and rest:
            rest = rest[1:]  # the duration, lock file, CPU mask or priority
        words = rest
    return words


def _option_value(args: list[str], option: str) -> str | None:
    for index, arg in enumerate(args):
        if arg == option or (arg.startswith("-") and not arg.startswith("--") and option[1] in arg[1:]):
            return args[index + 1] if index + 1 < len(args) else ""
        if not arg.startswith(("-", "+")):
            return None
    return None


def _first_operand(args: list[str]) -> str | None:
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        if arg == "--":
            continue
        if arg in _VALUE_OPTIONS:
            skip = True
            continue
        if arg.startswith(("-", "+")):
            continue
        return arg
    return None


def _interpreter_language(program: str) -> str | None:
    name = program.lower()
    for prefix, language in INTERPRETERS.items():
        if name == prefix or (name.startswith(prefix) and name[len(prefix) :].replace(".", "").isdigit()):
            return language
    return None


def _workspace_relative(word: str, workspace: Path) -> str | None:
    """``word`` as a path relative to the workspace, or None when it names a place
    elsewhere (a system file is not the model's to write)."""
    if not word or "\x00" in word:
        return None
    path = PurePosixPath(word)
    for home in (SANDBOX_HOME, str(workspace)):
        if path.is_absolute() and (str(path) == home or str(path).startswith(home.rstrip("/") + "/")):
            path = PurePosixPath(os.path.relpath(str(path), home))
            break
    if path.is_absolute() or ".." in path.parts:
        return None
    text = os.path.normpath(str(path))
    return None if text in (".", "") else text


# ------------------------------------------------------------------ reading


def _read_script(workspace: Path, relative: str, runner: str) -> ScriptFile:
    from tools_app.guards.paths import open_nofollow, resolve_workspace_path
    from tools_app.registry import ToolError

    try:
        resolved = resolve_workspace_path(workspace, relative, must_exist=True)
        fd = open_nofollow(resolved, os.O_RDONLY)
    except ToolError as exc:
        missing = "does not exist" in exc.message
        note = "does not exist (yet)" if missing else f"cannot be read: {exc.message}"
        return ScriptFile(relative, runner, "unknown", None, note=note)
    except OSError as exc:
        return ScriptFile(relative, runner, "unknown", None, note=f"cannot be read ({exc.strerror})")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return ScriptFile(relative, runner, "unknown", None, note="is not a regular file")
        with os.fdopen(os.dup(fd), "rb") as handle:
            head = handle.read(SHOWN_BYTES)
            digest = hashlib.sha256(head)
            if info.st_size <= HASHED_BYTES:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
                sha256 = digest.hexdigest()
            else:
                sha256 = f"large:{info.st_size}:{info.st_ino}:{info.st_ctime_ns}"
    finally:
        os.close(fd)
    language = _language(runner, head)
    if language == "binary":
        return ScriptFile(relative, runner, language, sha256, info.st_size, note="binary file: not shown")
    text = head.decode("utf-8", errors="replace").replace("\x00", "\\x00")
    return ScriptFile(relative, runner, language, sha256, info.st_size, text, info.st_size > SHOWN_BYTES)


def _language(runner: str, head: bytes) -> str:
    if head.startswith(b"\x7fELF") or b"\x00" in head[:1024]:
        return "binary"
    if runner in SHELLS or runner in SOURCING:
        return "shell"
    if runner != "./":
        return _interpreter_language(runner) or (runner if runner in FILE_OPTION_PROGRAMS else "unknown")
    if head.startswith(b"#!"):
        line = head[2:].split(b"\n", 1)[0].decode("utf-8", errors="replace").split()
        if line and os.path.basename(line[0]) == "env":
            line = [w for w in line[1:] if not w.startswith("-")]
        program = os.path.basename(line[0]) if line else ""
        if program in SHELLS:
            return "shell"
        return _interpreter_language(program) or program or "unknown"
    return "shell"  # bash runs a file without #! as a shell script


def _script_risk(script: ScriptFile) -> str:
    name = script.path
    if script.sha256 is None:
        return f"it runs {name}, which {script.note or 'cannot be read'}"
    if script.language != "shell":
        return f"it runs {name} ({script.language}), whose code is high risk"
    if script.truncated:
        return f"it runs {name}, a shell script too long to check"
    lines = [
        line for line in script.content.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        return ""
    facts = classify_command("\n".join(lines))
    if facts.always_high:
        return f"it runs {name}, which has {facts.reason}"
    return ""
