"""The tool registry: what a tool is, where tools come from, and how one run uses them (T1, X2).

- :class:`Tool` -- one tool: name, description, JSON-Schema input, :class:`ToolTraits`
  (read-only, side effects, parallel-safe, risk low/medium/high), a timeout, an output
  cap and ``async run(args, ctx)``. A normal failure raises :class:`ToolError` with
  one of the error types below; anything else a tool raises is a bug.
- :class:`ToolSet` -- a source of tools. Sets compose (:class:`CombinedToolSet`):
  the built-ins now; MCP servers, admin-defined HTTP tools and skills later plug in
  as more sets without touching the executor (STYLE 7, pydantic-ai ``toolsets/``).
- :class:`Registry` -- a named, mutable tool set. ``builtin_registry`` holds the
  built-in tools, registered from ``ToolsAppConfig.ready()``.
- :class:`RegistryToolExecutor` -- the engine's ``ToolExecutor`` for one run: the
  tools filtered per agent (allow/deny) and per user role, argument validation
  (JSON Schema Draft 2020-12), timeouts, output caps, cancellation, timing, and
  typed error results that never raise.

The role rule (X2): ``owner``, ``admin`` and ``member`` get every tool the agent
allows; a ``viewer`` -- and any role this module does not know, so a new role fails
closed -- gets only tools whose traits say ``read_only``. The approval policy (T12)
is a separate, later seam: the ``policy`` callable of the executor.

Nothing here imports Django: the Django side builds executors from agent rows.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import json
import logging
import re
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, relevance

from agents.engine.interfaces import PolicyDecision, RunContext, ToolTraits
from agents.engine.types import ToolCallPart, ToolDefinition, ToolResultPart

logger = logging.getLogger("claw.tools")

# ---------------------------------------------------------------------- error types

# MicroClaw's error types (reference write-up, "Error Types"), names kept exactly.
TOOL_ERROR = "tool_error"  # generic tool failure
UNKNOWN_TOOL = "unknown_tool"  # tool name not found (or not available to this run)
APPROVAL_REQUIRED = "approval_required"  # needs explicit approval first
EXECUTION_POLICY_BLOCKED = "execution_policy_blocked"  # sandbox policy prevents it
PATH_POLICY_BLOCKED = "path_policy_blocked"  # path guard refused a path
ENV_ACCESS_BLOCKED = "env_access_blocked"  # tried to read environment secrets
TIMEOUT = "timeout"  # exceeded its timeout
SPAWN_ERROR = "spawn_error"  # could not start a process
PROCESS_EXIT = "process_exit"  # a process exited non-zero
HOOK_BLOCKED = "hook_blocked"  # a hook blocked the call or its result
MCP_ERROR = "mcp_error"  # an MCP server reported an error
MCP_RATE_LIMITED = "mcp_rate_limited"  # an MCP server is rate limited
MCP_CIRCUIT_OPEN = "mcp_circuit_open"  # an MCP server's circuit breaker is open

MICROCLAW_ERROR_TYPES = frozenset(
    {
        TOOL_ERROR,
        UNKNOWN_TOOL,
        APPROVAL_REQUIRED,
        EXECUTION_POLICY_BLOCKED,
        PATH_POLICY_BLOCKED,
        ENV_ACCESS_BLOCKED,
        TIMEOUT,
        SPAWN_ERROR,
        PROCESS_EXIT,
        HOOK_BLOCKED,
        MCP_ERROR,
        MCP_RATE_LIMITED,
        MCP_CIRCUIT_OPEN,
    }
)

# Added: the write-up has no type for arguments that fail the tool's schema.
INVALID_ARGUMENTS = "invalid_arguments"
# Added: the SSRF guard refused a destination (tools_app/guards/ssrf.py).
SSRF_BLOCKED = "ssrf_blocked"
# Added: a per-user MCP server or HTTP tool whose user has not connected their account
# (tools_app/models/user_tokens.py).
ACCOUNT_NOT_CONNECTED = "account_not_connected"

# Types the engine's tool step produces itself (agents/engine/tool_step.py, loop.py),
# named here so every error type the model can see has one constant.
CANCELLED = "cancelled"
POLICY_DENIED = "policy_denied"
APPROVAL_DENIED = "approval_denied"
INTERRUPTED = "interrupted"
DUPLICATE = "duplicate"

ERROR_TYPES = MICROCLAW_ERROR_TYPES | {
    INVALID_ARGUMENTS,
    SSRF_BLOCKED,
    ACCOUNT_NOT_CONNECTED,
    CANCELLED,
    POLICY_DENIED,
    APPROVAL_DENIED,
    INTERRUPTED,
    DUPLICATE,
}


class ToolError(Exception):
    """A normal tool failure, reported to the model as an error result it can act on.

    ``message`` is shown to the model as is: say what went wrong and what to do
    instead; never put paths, secrets or stack traces in it (X5).
    """

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


class ToolRegistrationError(ValueError):
    """A tool or tool set is malformed or clashes with another (raised at startup)."""


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What ``Tool.run`` may return instead of a plain string.

    Lets a tool return content *and* mark it as an error without raising -- e.g. a
    command's output together with ``process_exit`` -- as MicroClaw's ``ToolResult``.
    """

    content: str
    is_error: bool = False
    error_type: str | None = None


# --------------------------------------------------------------------------- tools

DEFAULT_TIMEOUT_SECONDS = 30.0
DEFAULT_MAX_OUTPUT_CHARS = 30_000
# What provider APIs accept as a tool name (Anthropic and OpenAI agree on this).
TOOL_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
EMPTY_OBJECT_SCHEMA: Mapping[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}


class Tool(ABC):
    """One tool the model may call.

    Subclasses set the attributes (as class attributes for a fixed tool, or in
    ``__init__`` for generated ones such as MCP tools) and implement :meth:`run`.
    The defaults are the cautious ones: traits say "changes things, medium risk".

    ``run`` receives arguments already validated against ``input_schema`` and the
    run's :class:`RunContext` (tenant, user, session, workspace, auth); it never reads
    request globals. It runs on the event loop: blocking work goes through
    ``asyncio.to_thread``. A tool with ``traits.side_effects`` is not torn down when the
    run is cancelled -- it should watch ``ctx.cancel`` itself -- while a side-effect-free
    tool is cancelled at once. Every tool is stopped at ``timeout`` seconds.
    """

    name: str = ""
    description: str = ""
    input_schema: Mapping[str, Any] = EMPTY_OBJECT_SCHEMA
    traits: ToolTraits = ToolTraits()
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS

    @abstractmethod
    async def run(self, args: dict[str, Any], ctx: RunContext) -> str | ToolOutput:
        """Do the work; return the text the model reads, or raise :class:`ToolError`."""

    def precheck(self, args: dict[str, Any], ctx: RunContext) -> None:
        """Refuse, by raising :class:`ToolError`, a call that :meth:`run` would refuse
        anyway for a reason that needs no side effect (the path guard, the shell's
        command checks). Called with valid arguments before a call is offered to a
        person for approval, so nobody is asked about a call that cannot run."""
        return None

    def definition(self) -> ToolDefinition:
        """What the model sees: name, description, input schema."""
        return ToolDefinition(self.name, self.description, dict(self.input_schema))

    @functools.cached_property
    def argument_validator(self) -> Draft202012Validator:
        """The compiled validator for ``input_schema`` (built once per tool)."""
        return Draft202012Validator(dict(self.input_schema))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def check_tool(tool: Tool) -> None:
    """Refuse a malformed tool at registration rather than at its first call."""
    label = f"tool {tool.name!r} ({type(tool).__name__})"
    if not TOOL_NAME_RE.match(tool.name or ""):
        raise ToolRegistrationError(f"{label}: the name must match {TOOL_NAME_RE.pattern}")
    if not tool.description.strip():
        raise ToolRegistrationError(f"{label}: a description is required (the model reads it)")
    if tool.input_schema.get("type") != "object":
        raise ToolRegistrationError(f"{label}: the input schema must be of type 'object'")
    try:
        Draft202012Validator.check_schema(dict(tool.input_schema))
    except SchemaError as exc:
        raise ToolRegistrationError(f"{label}: invalid input schema: {exc.message}") from exc
    if not tool.timeout > 0 or tool.max_output_chars <= 0:
        raise ToolRegistrationError(f"{label}: timeout and max_output_chars must be positive")
    tool.argument_validator  # noqa: B018 -- compile now, not on the first call


# ------------------------------------------------------------------------ tool sets


@runtime_checkable
class ToolSet(Protocol):
    """A source of tools: the built-ins, one MCP server, the tenant's HTTP tools, ...

    ``name`` says where the tools come from (shown in clash errors and logs).
    ``tools()`` lists them as they are now; an executor takes a snapshot when it is
    built, so a set whose tools are found asynchronously (an MCP server's list) does
    that discovery before the executor is built.
    """

    name: str

    def tools(self) -> Sequence[Tool]: ...


class Registry:
    """A named, mutable tool set; names are unique within it.

    Registering the same tool instance twice is a no-op (``AppConfig.ready`` may run
    more than once in tests); a *different* tool under a taken name is refused.
    """

    def __init__(self, name: str, tools: Iterable[Tool] = ()) -> None:
        self.name = name
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> Tool:
        """Add ``tool``; raises :class:`ToolRegistrationError` on a clash or a bad tool."""
        existing = self._tools.get(tool.name)
        if existing is tool:
            return tool
        check_tool(tool)
        if existing is not None:
            raise ToolRegistrationError(
                f"duplicate tool name {tool.name!r} in {self.name!r}: {existing!r} and {tool!r}"
            )
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self) -> Sequence[Tool]:
        return list(self._tools.values())

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<Registry {self.name!r}: {', '.join(self._tools)}>"


class CombinedToolSet:
    """Several tool sets seen as one; a name offered by two sets is refused.

    Clashes are refused rather than resolved by order: a tenant's MCP tool must never
    silently replace a built-in (MCP tools are namespaced ``mcp_{server}_{tool}``).
    Checked when combined and again whenever the tools are listed, since member sets
    may change.
    """

    def __init__(self, *sets: ToolSet, name: str = "") -> None:
        self.sets = sets
        self.name = name or "+".join(s.name for s in sets)
        self.tools()

    def tools(self) -> Sequence[Tool]:
        seen: dict[str, str] = {}
        combined: list[Tool] = []
        for toolset in self.sets:
            for tool in toolset.tools():
                if tool.name in seen:
                    raise ToolRegistrationError(
                        f"duplicate tool name {tool.name!r}: offered by {seen[tool.name]!r} and {toolset.name!r}"
                    )
                seen[tool.name] = toolset.name
                combined.append(tool)
        return combined


builtin_registry = Registry("builtin")
"""The built-in tools (``tools_app.builtins``), filled by ``ToolsAppConfig.ready()``."""


# -------------------------------------------------------------------- role and agent

FULL_TOOL_ROLES = frozenset({"owner", "admin", "member"})
VIEWER = "viewer"


def role_may_use(role: str, traits: ToolTraits) -> bool:
    """X2: may a user with ``role`` have a tool with these traits offered at all?

    Owners, admins and members may use any tool the agent allows (risky ones still go
    through the approval policy); a viewer, or any unknown role, only read-only ones.
    """
    return traits.read_only or role in FULL_TOOL_ROLES


_GLOB_CHARS = frozenset("*?[")


class NameFilter:
    """An agent's allow/deny lists. ``allowed=None`` means every tool; deny wins.

    Entries are exact names or shell-style patterns (``mcp_github_*``), so a whole MCP
    server can be allowed or denied with one entry.
    """

    def __init__(self, allowed: frozenset[str] | None, denied: frozenset[str]) -> None:
        self.allowed = allowed
        self.denied = denied
        self._allowed_patterns = _patterns(allowed or ())
        self._denied_patterns = _patterns(denied)

    def is_denied(self, name: str) -> bool:
        return name in self.denied or any(fnmatch.fnmatchcase(name, p) for p in self._denied_patterns)

    def is_allowed(self, name: str) -> bool:
        return self.allowed is None or (
            name in self.allowed or any(fnmatch.fnmatchcase(name, p) for p in self._allowed_patterns)
        )


def _patterns(entries: Iterable[str]) -> tuple[str, ...]:
    return tuple(e for e in entries if _GLOB_CHARS & set(e))


# ------------------------------------------------------------------------- executor

ToolPolicy = Callable[[Tool, ToolCallPart, RunContext], Awaitable[PolicyDecision]]
"""The approval seam (T12): decides, for a call the agent may make, whether it runs,
needs approval or is denied. ``None`` (the default) allows every such call."""

MAX_REPORTED_ARGUMENT_ERRORS = 5
MAX_ARGUMENT_ERROR_CHARS = 240
MAX_SCHEMA_ECHO_CHARS = 1_000
TRUNCATION_NOTE = "\n[output truncated: {omitted} chars omitted]"


class _Cancelled(Exception):
    """The run was cancelled while this tool ran (internal to the executor)."""


class RegistryToolExecutor:
    """The engine's ``ToolExecutor`` over tool sets, for one run.

    ``tools`` is one tool set or several (combined; clashing names are refused).
    ``allowed``/``denied`` are the agent's lists (see :class:`NameFilter`); ``role`` is
    the acting user's membership role (see :func:`role_may_use`). A tool filtered out
    is invisible: not in ``definitions()``, denied by ``check_policy``, and
    ``unknown_tool`` if called anyway. ``policy`` is the approval seam.

    ``execute`` never raises for a tool failure; every result carries
    ``duration_ms``, and content longer than the tool's ``max_output_chars`` is cut
    with a note saying how much was left out.
    """

    def __init__(
        self,
        tools: ToolSet | Sequence[ToolSet],
        *,
        allowed: frozenset[str] | None = None,
        denied: frozenset[str] = frozenset(),
        role: str,
        policy: ToolPolicy | None = None,
    ) -> None:
        toolset = CombinedToolSet(*tools) if isinstance(tools, Sequence) else tools
        self.role = role
        self.policy = policy
        self.names = NameFilter(allowed, denied)
        self._all: dict[str, Tool] = {}
        self._available: dict[str, Tool] = {}
        for tool in toolset.tools():
            self._all[tool.name] = tool
            if self._refusal(tool) is None:
                self._available[tool.name] = tool
        self._definitions = [tool.definition() for tool in self._available.values()]

    # ------------------------------------------------------------------ listing

    @property
    def available_names(self) -> list[str]:
        """Names of the tools this run may use, in registration order."""
        return list(self._available)

    def definitions(self) -> list[ToolDefinition]:
        """Definitions the model may see (already filtered by agent and role)."""
        return list(self._definitions)

    def traits(self, name: str) -> ToolTraits:
        """Traits of an available tool; cautious defaults for any other name."""
        tool = self._available.get(name)
        return tool.traits if tool is not None else ToolTraits()

    def _refusal(self, tool: Tool) -> str | None:
        """Why this run may not use ``tool``, or ``None`` if it may."""
        if self.names.is_denied(tool.name) or not self.names.is_allowed(tool.name):
            return f"The tool {tool.name!r} is not enabled for this agent."
        if not role_may_use(self.role, tool.traits):
            return (
                f"The tool {tool.name!r} can change things, and the user's role "
                f"({self.role or 'none'}) may only use read-only tools."
            )
        return None

    # ------------------------------------------------------------------- policy

    async def check_policy(self, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        """Deny what this agent/user may not use; ask ``policy`` about the rest."""
        tool = self._available.get(call.name)
        if tool is None:
            known = self._all.get(call.name)
            reason = self._refusal(known) if known is not None else None
            return PolicyDecision.deny(reason or f"There is no tool named {call.name!r}.")
        if self.policy is None:
            return PolicyDecision.allow()
        return await self.policy(tool, call, ctx)

    def precheck(self, call: ToolCallPart, ctx: RunContext) -> tuple[str, str] | None:
        """Why ``call`` would be refused without running -- invalid arguments, or the
        tool's own :meth:`Tool.precheck` (path and command policy) -- as ``(message,
        error type)``, else ``None``. Asked before a call is offered for approval."""
        tool = self._available.get(call.name)
        if tool is None:
            return None
        args = call.arguments
        if not isinstance(args, dict):
            return f"Invalid arguments for {tool.name}: expected a JSON object.", INVALID_ARGUMENTS
        problem = _argument_errors(tool, args)
        if problem is not None:
            return problem, INVALID_ARGUMENTS
        try:
            tool.precheck(dict(args), ctx)
        except ToolError as exc:
            return exc.message, exc.error_type or TOOL_ERROR
        except Exception:
            # A broken check must not block approvals: the call is checked again when it runs.
            logger.exception("precheck of tool %s raised", tool.name)
        return None

    # ------------------------------------------------------------------ execute

    async def execute(self, call: ToolCallPart, ctx: RunContext) -> ToolResultPart:
        """Validate, run with limits, and return the result; never raises for a tool failure."""
        started = time.perf_counter()
        tool = self._available.get(call.name)
        error_type: str | None
        if tool is None:
            content, error_type = self._unknown_tool_text(call.name), UNKNOWN_TOOL
        else:
            content, error_type = await self._run(tool, call, ctx)
            content = _cap(content, tool.max_output_chars)
        return ToolResultPart(
            call.id,
            call.name,
            content,
            is_error=error_type is not None,
            error_type=error_type,
            duration_ms=int((time.perf_counter() - started) * 1000),
        )

    def _unknown_tool_text(self, name: str) -> str:
        available = ", ".join(self._available) or "(none)"
        return f"Unknown tool {name!r}. Available tools: {available}."

    async def _run(self, tool: Tool, call: ToolCallPart, ctx: RunContext) -> tuple[str, str | None]:
        if ctx.cancel.cancelled:
            return f"{tool.name} was not run: the run was cancelled.", CANCELLED
        args = call.arguments
        if not isinstance(args, dict):
            return (
                f"Invalid arguments for {tool.name}: expected a JSON object, got {type(args).__name__}.",
                INVALID_ARGUMENTS,
            )
        problem = _argument_errors(tool, args)
        if problem is not None:
            return problem, INVALID_ARGUMENTS
        try:
            output = await self._call_with_limits(tool, args, ctx)
        except ToolError as exc:
            return exc.message, exc.error_type or TOOL_ERROR
        except _Cancelled:
            return f"{tool.name} was stopped: the run was cancelled.", CANCELLED
        except TimeoutError:
            return (
                f"{tool.name} timed out after {tool.timeout:g} seconds and was stopped. "
                "Try a smaller request or a different approach.",
                TIMEOUT,
            )
        except Exception as exc:
            # A tool bug must not reach the model as a traceback or a path (X5): the
            # model gets the tool name and the exception class, the log gets the rest.
            logger.exception(
                "tool %s raised (tenant=%s run=%s call=%s)", tool.name, ctx.tenant_id, ctx.run_id, call.id
            )
            return (
                f"{tool.name} failed with an internal error ({type(exc).__name__}). "
                "This is not caused by your arguments; try a different approach.",
                TOOL_ERROR,
            )
        if isinstance(output, str):
            return output, None
        if isinstance(output, ToolOutput):
            if output.is_error or output.error_type:
                return output.content, output.error_type or TOOL_ERROR
            return output.content, None
        logger.error("tool %s returned %s, not str or ToolOutput", tool.name, type(output).__name__)
        return f"{tool.name} failed with an internal error (bad result type).", TOOL_ERROR

    async def _call_with_limits(self, tool: Tool, args: dict[str, Any], ctx: RunContext) -> object:
        # The tool runs in its own task so that cancelling it on ``ctx.cancel`` never
        # cancels the caller, while a cancel of the caller (the engine tearing down a
        # side-effect-free call) still reaches the tool through the await.
        task = asyncio.ensure_future(tool.run(dict(args), ctx))
        remove = ctx.cancel.on_cancel(lambda _reason: task.cancel()) if not tool.traits.side_effects else None
        try:
            async with asyncio.timeout(tool.timeout):
                return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # our caller is being cancelled: let it be
            if ctx.cancel.cancelled:
                raise _Cancelled from None
            # The tool cancelled itself for no reason we know of: a bug, not a stop.
            raise RuntimeError("tool task cancelled unexpectedly") from None
        finally:
            if remove is not None:
                remove()
            if not task.done():
                task.cancel()


def _argument_errors(tool: Tool, args: dict[str, Any]) -> str | None:
    """Readable schema errors naming each field path, or ``None`` when valid."""
    validator = tool.argument_validator
    if validator.is_valid(args):
        return None
    # Most relevant first (jsonschema's own ranking, as ``best_match`` uses).
    errors: list[ValidationError] = sorted(validator.iter_errors(args), key=relevance, reverse=True)
    lines = [f"Invalid arguments for {tool.name}:"]
    for error in errors[:MAX_REPORTED_ARGUMENT_ERRORS]:
        message = error.message
        if len(message) > MAX_ARGUMENT_ERROR_CHARS:
            message = message[:MAX_ARGUMENT_ERROR_CHARS] + "..."
        lines.append(f"- at {error.json_path}: {message}")
    schema = json.dumps(tool.input_schema, separators=(",", ":"))
    if len(schema) > MAX_SCHEMA_ECHO_CHARS:
        schema = schema[:MAX_SCHEMA_ECHO_CHARS] + "..."
    lines.append(f"Call {tool.name} again with arguments matching its input schema: {schema}")
    return "\n".join(lines)


def _cap(content: str, limit: int) -> str:
    if len(content) <= limit:
        return content
    return content[:limit] + TRUNCATION_NOTE.format(omitted=len(content) - limit)
