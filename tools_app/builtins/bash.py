"""The ``bash`` tool (T2, T15): one command in the workspace, in the bubblewrap
sandbox (on the host only where the operator allows it: per tool host / sandbox /
either, capped by ``CLAW_SHELL_HOST``), with the agent's timeout, a clean
environment and an output cap; refused where it cannot run confined.

Before running, the command's words are checked like paths (T14): a sensitive name
anywhere (``.ssh``, ``.env``, keys ...) is refused, and on the host an absolute path
outside the workspace and the system directories, or a ``..`` that leaves the
workspace, is refused too (MicroClaw's ``path_policy_blocked``). The kernel
confinement of :mod:`tools_app.sandbox.shell` is the wall behind that check.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import PurePosixPath
from typing import Any

from agents.engine.interfaces import RunContext, ToolTraits
from tools_app.context import ToolContext, optional_tool_context, tool_context
from tools_app.guards.paths import sensitive_component
from tools_app.registry import (
    EXECUTION_POLICY_BLOCKED,
    PATH_POLICY_BLOCKED,
    PROCESS_EXIT,
    SPAWN_ERROR,
    TIMEOUT,
    Tool,
    ToolError,
    ToolOutput,
)
from tools_app.sandbox.shell import (
    SANDBOX_HOME,
    SANDBOX_TMP,
    SYSTEM_DIRS,
    SandboxUnavailable,
    choose_mode,
    run_command,
)

SHELL = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="high")
MAX_COMMAND_CHARS = 20_000
MAX_OUTPUT_BYTES = 100_000
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
HOST_READABLE = (
    *SYSTEM_DIRS,
    "/dev/null",
    "/dev/zero",
    "/dev/urandom",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    # bash's own network paths: whether they connect is the sandbox's business.
    "/dev/tcp",
    "/dev/udp",
)


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command, comments=False, posix=True)
    except ValueError:
        return command.split()


def check_command_paths(command: str, context: ToolContext, *, mode: str) -> None:
    """Refuse commands that name sensitive files or places outside the workspace."""
    home = PurePosixPath(SANDBOX_HOME if mode == "sandbox" else str(context.workspace))
    for word in _words(command):
        if _URL.match(word):
            continue  # a URL, not a path (the network itself is the sandbox's business)
        for token in word.replace("=", " ").replace(":", " ").split():
            parts = PurePosixPath(token).parts
            sensitive = sensitive_component(parts)
            if sensitive is not None:
                raise ToolError(
                    PATH_POLICY_BLOCKED, f"The command names {sensitive!r}, which may hold credentials."
                )
            if token.startswith("/"):
                inside = token == str(home) or token.startswith(str(home) + "/")
                system = any(token == d or token.startswith(d + "/") for d in HOST_READABLE)
                if not (inside or system) and not (mode == "sandbox" and token.startswith(SANDBOX_TMP)):
                    raise ToolError(
                        PATH_POLICY_BLOCKED,
                        f"The command uses {token!r}, outside the workspace. Use paths relative to the workspace.",
                    )
            depth = 0
            for part in parts:
                if part == "..":
                    depth -= 1
                    if depth < 0 and not token.startswith("/"):
                        raise ToolError(
                            PATH_POLICY_BLOCKED, f"{token!r} leaves the workspace. Use paths inside it."
                        )
                elif part not in (".", "/"):
                    depth += 1


class BashTool(Tool):
    name = "bash"
    description = (
        "Run a bash command in your workspace (the current directory) and get its output and "
        "exit code. No network unless the agent allows it; only the workspace is writable. "
        "Prefer simple commands: chained, piped or wrapped commands need approval more often."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS},
            "timeout_seconds": {
                "type": "integer",
                "minimum": 1,
                "maximum": 600,
                "description": "Optional; capped by the agent's shell timeout.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }
    traits = SHELL
    # The command's own timeout (the agent's) stops it first; this is the backstop.
    timeout = 630.0
    max_output_chars = 60_000
    # Tells the approval policy which argument holds the command (shell_risk).
    command_argument = "command"

    def precheck(self, args: dict[str, Any], ctx: RunContext) -> None:
        """The command's words against the path policy, for where it would run (a
        shell that cannot run here at all is the run's refusal, not this check's)."""
        context = optional_tool_context(ctx)
        if context is None:
            return
        try:
            mode = choose_mode(context.execution_for(self.name))
        except SandboxUnavailable:
            return
        check_command_paths(args["command"], context, mode=mode)

    async def run(self, args: dict[str, Any], ctx: RunContext) -> ToolOutput:
        context = tool_context(ctx)
        try:
            mode = choose_mode(context.execution_for(self.name))
        except SandboxUnavailable as exc:
            raise ToolError(EXECUTION_POLICY_BLOCKED, str(exc)) from None
        command = args["command"]
        check_command_paths(command, context, mode=mode)
        timeout = min(float(args.get("timeout_seconds") or context.shell_timeout), context.shell_timeout)
        stop = asyncio.Event()
        remove = ctx.cancel.on_cancel(lambda _reason: stop.set())
        try:
            result = await run_command(
                command,
                context.workspace,
                mode=mode,
                time_limit=timeout,
                network=context.shell_network,
                max_output_bytes=MAX_OUTPUT_BYTES,
                file_size_bytes=context.file_size_limit,
                cancel_event=stop,
            )
        except SandboxUnavailable as exc:
            raise ToolError(EXECUTION_POLICY_BLOCKED, str(exc)) from None
        except OSError as exc:
            raise ToolError(
                SPAWN_ERROR, f"The command could not be started ({type(exc).__name__})."
            ) from None
        finally:
            remove()
        output = result.output
        if result.truncated_bytes:
            output += f"\n[output truncated: {result.truncated_bytes} bytes omitted]"
        if result.timed_out:
            raise ToolError(
                TIMEOUT,
                f"The command timed out after {timeout:g} seconds and was stopped.\n{output[-4000:]}",
            )
        if result.cancelled:
            return ToolOutput(f"The command was stopped: the run was cancelled.\n{output}", True, "cancelled")
        text = f"exit code: {result.exit_code}\n{output}" if output else f"exit code: {result.exit_code}"
        if result.exit_code != 0:
            return ToolOutput(text, True, PROCESS_EXIT)
        return ToolOutput(text)
