"""What a tool knows about the run that calls it, beyond the engine's RunContext:
the tenant, agent, user and session as the database has them, the user's role, the
workspace and the agent's tool settings (STYLE 7: tools never read request globals).

The executor binds one :class:`ToolContext` into ``RunContext.auth`` under
:data:`TOOL_CONTEXT_KEY`; tools get it with :func:`tool_context`. Everything in it
comes from rows the run was started for, never from the model's arguments.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from agents.engine.interfaces import RunContext
from tools_app.registry import TOOL_ERROR, ToolError

TOOL_CONTEXT_KEY = "claw.tool_context"


@dataclass(frozen=True)
class ToolContext:
    tenant_id: int
    agent_id: int
    agent_slug: str
    agent_type: str
    user_id: int | None
    session_id: str
    role: str
    workspace: Path
    depth: int = 0
    timezone: str = "UTC"
    shell_timeout: float = 60.0
    shell_network: bool = False
    max_file_bytes: int = 1_000_000
    file_size_limit: int = 500_000_000
    # Tool name -> "host" | "sandbox" | "either" (shell tools).
    execution_for: Callable[[str], str] = field(default=lambda _name: "either")

    @property
    def may_write_tenant_memory(self) -> bool:
        return self.role in ("owner", "admin")


def optional_tool_context(ctx: RunContext) -> ToolContext | None:
    """The run's :class:`ToolContext`, or None (checks that can only skip without one)."""
    value = ctx.auth.get(TOOL_CONTEXT_KEY)
    return value if isinstance(value, ToolContext) else None


def tool_context(ctx: RunContext) -> ToolContext:
    """The run's :class:`ToolContext`; a tool error when the run has none (a tool
    called outside a configured run)."""
    value = ctx.auth.get(TOOL_CONTEXT_KEY)
    if not isinstance(value, ToolContext):
        raise ToolError(TOOL_ERROR, "This tool is not available here (no workspace or session).")
    return value
