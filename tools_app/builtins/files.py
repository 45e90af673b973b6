"""Workspace file tools (T2): read_file, write_file, edit_file, list_dir, glob, grep.

Every path goes through the path guard (T14, :mod:`tools_app.guards.paths`) and is
shown to the model relative to the workspace, never as a host path (X5). File sizes
are capped by the agent's ``max_file_bytes``; listings and matches by counts.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import stat
from pathlib import Path
from typing import Any

from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from tools_app.context import ToolContext, optional_tool_context, tool_context
from tools_app.guards.paths import (
    blocked,
    check_path_policy,
    display_path,
    open_nofollow,
    resolve_workspace_path,
    sensitive_component,
)
from tools_app.registry import TOOL_ERROR, Tool, ToolError

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
MAX_LIST_ENTRIES = 500
MAX_GLOB_RESULTS = 500
MAX_GREP_MATCHES = 200
MAX_GREP_LINE_CHARS = 400
MAX_WALK_FILES = 20_000

PATH_PROPERTY = {"type": "string", "minLength": 1, "maxLength": 1024}


def _read_text(context: ToolContext, requested: str) -> tuple[Path, str]:
    path = resolve_workspace_path(context.workspace, requested, must_exist=True)
    if path.is_dir():
        raise ToolError(TOOL_ERROR, f"{requested!r} is a directory; use list_dir.")
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
            raise ToolError("path_policy_blocked", f"{requested!r} cannot be read.")
        if info.st_size > context.max_file_bytes:
            raise ToolError(
                TOOL_ERROR,
                f"{requested!r} is {info.st_size} bytes, over this agent's limit of "
                f"{context.max_file_bytes}. Read part of it with bash (head, tail, sed -n).",
            )
        data = handle.read(context.max_file_bytes + 1)
    if b"\x00" in data[:8192]:
        raise ToolError(TOOL_ERROR, f"{requested!r} looks like a binary file; it cannot be shown as text.")
    return path, data.decode("utf-8", errors="replace")


def _write_text(context: ToolContext, requested: str, content: str) -> tuple[Path, bool]:
    data = content.encode("utf-8")
    if len(data) > context.max_file_bytes:
        raise ToolError(
            TOOL_ERROR,
            f"The content is {len(data)} bytes, over this agent's limit of {context.max_file_bytes}.",
        )
    path = resolve_workspace_path(context.workspace, requested, for_write=True)
    if path.is_dir():
        raise ToolError(TOOL_ERROR, f"{requested!r} is a directory.")
    existed = path.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    # Checked again after creating the parents: nothing may have become a link.
    resolve_workspace_path(context.workspace, requested, for_write=True)
    fd = open_nofollow(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        if os.fstat(handle.fileno()).st_nlink > 1:
            raise ToolError(
                "path_policy_blocked", f"{requested!r} has other hard links; it cannot be written."
            )
        handle.write(data)
    return path, existed


class WorkspaceFileTool(Tool):
    """A tool over one workspace path (argument ``path``, default the workspace)."""

    writes = False

    def precheck(self, args: dict[str, Any], ctx: RunContext) -> None:
        """The path guard's checks that need no file system (outside, sensitive)."""
        context = optional_tool_context(ctx)
        if context is None:
            return
        parts = check_path_policy(context.workspace, args.get("path", "."))
        if self.writes and not parts:
            raise blocked("The workspace itself cannot be written to; name a file inside it.")


class ReadFileTool(WorkspaceFileTool):
    name = "read_file"
    description = (
        "Read a text file from your workspace. Paths are relative to the workspace. "
        "Optionally give offset (first line, 1-based) and limit (number of lines)."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_PROPERTY,
            "offset": {"type": "integer", "minimum": 1},
            "limit": {"type": "integer", "minimum": 1, "maximum": 10_000},
        },
        "required": ["path"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 30.0
    max_output_chars = 100_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        _, text = await asyncio.to_thread(_read_text, context, args["path"])
        offset = args.get("offset")
        limit = args.get("limit")
        if offset is None and limit is None:
            return text
        lines = text.splitlines(keepends=True)
        start = (offset or 1) - 1
        end = start + limit if limit else len(lines)
        return "".join(lines[start:end])


class WriteFileTool(WorkspaceFileTool):
    name = "write_file"
    description = (
        "Create or overwrite a text file in your workspace (parent folders are created). "
        "Paths are relative to the workspace."
    )
    input_schema = {
        "type": "object",
        "properties": {"path": PATH_PROPERTY, "content": {"type": "string"}},
        "required": ["path", "content"],
        "additionalProperties": False,
    }
    traits = WRITES
    writes = True
    timeout = 30.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        path, existed = await asyncio.to_thread(_write_text, context, args["path"], args["content"])
        verb = "Overwrote" if existed else "Created"
        return f"{verb} {display_path(context.workspace, path)} ({len(args['content'].encode())} bytes)."


class EditFileTool(WorkspaceFileTool):
    name = "edit_file"
    description = (
        "Replace text in a file of your workspace: old_string must occur exactly once "
        "(or set replace_all). Include enough surrounding text to make it unique."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "path": PATH_PROPERTY,
            "old_string": {"type": "string", "minLength": 1},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"},
        },
        "required": ["path", "old_string", "new_string"],
        "additionalProperties": False,
    }
    traits = WRITES
    writes = True
    timeout = 30.0
    max_output_chars = 2_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return await asyncio.to_thread(self._edit, context, args)

    def _edit(self, context: ToolContext, args: dict[str, Any]) -> str:
        _, text = _read_text(context, args["path"])
        old, new = args["old_string"], args["new_string"]
        count = text.count(old)
        if count == 0:
            raise ToolError(
                TOOL_ERROR, "old_string was not found in the file; read it and copy the text exactly."
            )
        if count > 1 and not args.get("replace_all"):
            raise ToolError(
                TOOL_ERROR,
                f"old_string occurs {count} times; add surrounding text to make it unique, or set replace_all.",
            )
        updated = text.replace(old, new) if args.get("replace_all") else text.replace(old, new, 1)
        path, _ = _write_text(context, args["path"], updated)
        return f"Edited {display_path(context.workspace, path)}: {count if args.get('replace_all') else 1} replacement(s)."


class ListDirTool(WorkspaceFileTool):
    name = "list_dir"
    description = "List the files and folders of a folder in your workspace (default: the workspace itself)."
    input_schema = {
        "type": "object",
        "properties": {"path": PATH_PROPERTY},
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 30.0
    max_output_chars = 30_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return await asyncio.to_thread(self._list, context, args.get("path", "."))

    def _list(self, context: ToolContext, requested: str) -> str:
        path = resolve_workspace_path(context.workspace, requested, must_exist=True)
        if not path.is_dir():
            raise ToolError(TOOL_ERROR, f"{requested!r} is not a folder.")
        lines: list[str] = []
        with os.scandir(path) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.name == ".tmp" and path == context.workspace:
                    continue
                if len(lines) >= MAX_LIST_ENTRIES:
                    lines.append(f"... (more than {MAX_LIST_ENTRIES} entries)")
                    break
                info = entry.stat(follow_symlinks=False)
                if entry.is_symlink():
                    lines.append(f"link  {entry.name}")
                elif entry.is_dir(follow_symlinks=False):
                    lines.append(f"dir   {entry.name}/")
                else:
                    lines.append(f"file  {entry.name} ({info.st_size} bytes)")
        where = display_path(context.workspace, path)
        return f"{where}:\n" + ("\n".join(lines) if lines else "(empty)")


def _walk_files(context: ToolContext, start: Path) -> list[Path]:
    """Regular files under ``start``, links and sensitive names skipped, bounded."""
    files: list[Path] = []
    for root, dirs, names in os.walk(start, followlinks=False):
        root_path = Path(root)
        dirs[:] = sorted(
            d
            for d in dirs
            if not (root_path / d).is_symlink()
            and sensitive_component((d,)) is None
            and not (d == ".tmp" and root_path == context.workspace)
        )
        for name in sorted(names):
            candidate = root_path / name
            if sensitive_component((name,)) is not None or candidate.is_symlink():
                continue
            files.append(candidate)
            if len(files) >= MAX_WALK_FILES:
                return files
    return files


def _glob_matches(pattern: str, relative: str) -> bool:
    if fnmatch.fnmatchcase(relative, pattern):
        return True
    # "**/x" also matches x at the top level.
    return pattern.startswith("**/") and fnmatch.fnmatchcase(relative, pattern[3:])


class GlobTool(WorkspaceFileTool):
    name = "glob"
    description = (
        "Find files in your workspace by pattern, e.g. **/*.py or notes/*.md ('*' also "
        "crosses folders). Optionally start in a sub-folder (path)."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 300},
            "path": PATH_PROPERTY,
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 30.0
    max_output_chars = 30_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return await asyncio.to_thread(self._glob, context, args["pattern"], args.get("path", "."))

    def _glob(self, context: ToolContext, pattern: str, requested: str) -> str:
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            raise ToolError(
                "path_policy_blocked", "The pattern must be relative and stay inside the workspace."
            )
        start = resolve_workspace_path(context.workspace, requested, must_exist=True)
        found = []
        for path in _walk_files(context, start):
            relative = path.relative_to(start).as_posix()
            if _glob_matches(pattern, relative):
                found.append(display_path(context.workspace, path))
                if len(found) >= MAX_GLOB_RESULTS:
                    found.append(f"... (more than {MAX_GLOB_RESULTS} files)")
                    break
        return "\n".join(found) if found else f"No files match {pattern!r}."


class GrepTool(WorkspaceFileTool):
    name = "grep"
    description = (
        "Search the text files of your workspace for a regular expression; prints "
        "file:line: text. Optionally limit to files matching include (e.g. *.py) or a sub-folder (path)."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1, "maxLength": 500},
            "path": PATH_PROPERTY,
            "include": {"type": "string", "maxLength": 200},
            "ignore_case": {"type": "boolean"},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 30.0
    max_output_chars = 40_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return await asyncio.to_thread(self._grep, context, args)

    def _grep(self, context: ToolContext, args: dict[str, Any]) -> str:
        try:
            regex = re.compile(args["pattern"], re.IGNORECASE if args.get("ignore_case") else 0)
        except re.error as exc:
            raise ToolError(TOOL_ERROR, f"Invalid regular expression: {exc}.") from None
        start = resolve_workspace_path(context.workspace, args.get("path", "."), must_exist=True)
        include = args.get("include")
        files = [start] if start.is_file() else _walk_files(context, start)
        matches: list[str] = []
        for path in files:
            if include and not fnmatch.fnmatchcase(path.name, include):
                continue
            try:
                info = path.lstat()
                if info.st_size > context.max_file_bytes or info.st_nlink > 1:
                    continue
                data = path.read_bytes()
            except OSError:
                continue
            if b"\x00" in data[:8192]:
                continue
            shown = display_path(context.workspace, path)
            for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{shown}:{number}: {line[:MAX_GREP_LINE_CHARS]}")
                    if len(matches) >= MAX_GREP_MATCHES:
                        matches.append(f"... (stopped at {MAX_GREP_MATCHES} matches)")
                        return "\n".join(matches)
        return "\n".join(matches) if matches else f"No matches for {args['pattern']!r}."
