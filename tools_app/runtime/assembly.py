"""What a run gets from its tenant's extensions: tool sets, skills, hooks.

- :func:`run_extensions` -- the MCP servers' tool sets (listed concurrently; a server
  that cannot be listed is left out), the HTTP tools, the skill tools, and the skill
  catalogue for the prompt; everything that opens connections is closed by
  ``aclose()``. A tenant's tool whose name a built-in already has is left out (logged)
  instead of failing every run of the tenant.
- :class:`RunToolExecutor` -- the registry executor that also carries these, so the
  run can feed the catalogue to the prompt and close the connections at its end.
- :func:`tenant_hook_runner` -- the engine's HookRunner for the run.

Nothing here lets an agent change any of it: the tool sets only read configuration.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

from agents.engine.interfaces import HookRunner, NullHookRunner
from agents.engine.prompt import SkillSummary
from claw_platform.db import db_async
from tools_app.guards.ssrf import SsrfGuard
from tools_app.hooks.runner import ConfiguredHookRunner
from tools_app.http_tools.toolset import HttpToolSet, HttpToolSpec
from tools_app.mcp.connection import McpConnection, McpServerSpec
from tools_app.mcp.toolset import AccountMissingToolSet, open_mcp_toolset
from tools_app.registry import RegistryToolExecutor, Tool, ToolSet
from tools_app.runtime.audit import BufferedHookAudit
from tools_app.runtime.config import AgentExtensions, tenant_extensions
from tools_app.runtime.user_tokens import read_user_tokens, with_user_token
from tools_app.skills.tools import SkillToolSet

logger = logging.getLogger("claw.tools")


class _Closeable(Protocol):
    async def aclose(self) -> None: ...


def mcp_workdir(tenant_id: int, server: str) -> Path:
    """A stdio MCP server's working directory and HOME: the tenant's own."""
    return Path(settings.VAR_DIR) / "mcp" / str(tenant_id) / server


def hook_workdir(tenant_id: int) -> Path:
    """A shell hook's working directory and HOME: the tenant's own."""
    return Path(settings.VAR_DIR) / "hooks" / str(tenant_id)


class _Without:
    """A tool set minus names taken by earlier sets."""

    def __init__(self, inner: ToolSet, taken: set[str]) -> None:
        self.inner = inner
        self.name = inner.name
        self.taken = taken

    def tools(self) -> Sequence[Tool]:
        return [tool for tool in self.inner.tools() if tool.name not in self.taken]


@dataclass
class RunExtensions:
    toolsets: list[ToolSet] = field(default_factory=list)
    skills: list[SkillSummary] = field(default_factory=list)
    closers: list[_Closeable] = field(default_factory=list)
    # The run's hook runner, built from the extensions read for its tools (the run
    # closes it with its hooks, not with these).
    hooks: HookRunner | None = None

    async def aclose(self) -> None:
        closers, self.closers = self.closers, []
        results = await asyncio.gather(*(c.aclose() for c in closers), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                logger.warning("closing a run's tool connections failed: %r", result)


def agent_extensions(tenant_id: int, agent_id: int) -> AgentExtensions:
    """The tenant's extensions that apply to the agent (a database read: sync)."""
    return tenant_extensions(tenant_id).for_agent(agent_id)


async def run_extensions(
    *,
    tenant_id: int,
    agent_id: int,
    user_id: int | None = None,
    taken: Iterable[str] = (),
    extensions: AgentExtensions | None = None,
) -> RunExtensions:
    """The tenant's tool sets for one run of ``agent_id`` for ``user_id`` (whose own
    tokens per-user servers and tools use); names in ``taken`` are kept out.
    ``extensions``: the agent's, when the caller has read them (``agent_extensions``)."""
    ext = extensions if extensions is not None else await db_async(agent_extensions)(tenant_id, agent_id)
    specs: tuple[McpServerSpec | HttpToolSpec, ...] = (*ext.mcp_servers, *ext.http_tools)
    tokens = (
        await db_async(read_user_tokens)(tenant_id, user_id, specs)
        if any(spec.user_token is not None for spec in specs)
        else {}
    )
    mcp_specs = [with_user_token(spec, tokens, user_id) for spec in ext.mcp_servers]
    http_specs = [with_user_token(spec, tokens, user_id) for spec in ext.http_tools]
    result = RunExtensions()
    names = set(taken)
    guard = SsrfGuard(ext.allow_list)

    def add(toolset: ToolSet) -> None:
        kept = _Without(toolset, set(names))
        dropped = [t.name for t in toolset.tools() if t.name in names]
        if dropped:
            logger.warning(
                "tenant %s: tools %s of %s left out (names taken)", tenant_id, dropped, toolset.name
            )
        names.update(t.name for t in kept.tools())
        result.toolsets.append(kept)

    connections = [
        McpConnection(spec, guard=guard, workdir=mcp_workdir(tenant_id, spec.name))
        for spec in mcp_specs
        if not spec.user_token_missing
    ]
    result.closers.extend(connections)
    listed = await asyncio.gather(*(open_mcp_toolset(c.spec, c) for c in connections))
    for toolset in listed:
        if toolset is not None:
            add(toolset)
    for spec in mcp_specs:
        if spec.user_token_missing:
            add(AccountMissingToolSet(spec))
    if http_specs:
        http = HttpToolSet(http_specs, guard)
        result.closers.append(http)
        add(http)
    if ext.skills:
        skills = SkillToolSet(ext.skills)
        add(skills)
        result.skills = skills.summaries
    return result


class RunToolExecutor(RegistryToolExecutor):
    """``RegistryToolExecutor`` plus the run's extensions (skill catalogue, connections)."""

    def __init__(
        self, tools: ToolSet | Sequence[ToolSet], *, extensions: RunExtensions | None = None, **kwargs: Any
    ):
        self.extensions = extensions or RunExtensions()
        super().__init__(tools, **kwargs)

    @property
    def skills(self) -> list[SkillSummary]:
        """The catalogue for the prompt, when the skill tools survived the agent's filters."""
        return self.extensions.skills if "activate_skill" in self.available_names else []

    async def aclose(self) -> None:
        await self.extensions.aclose()


async def tenant_hook_runner(*, tenant_id: int, agent_id: int) -> HookRunner:
    """The hooks of the tenant that apply to the agent; the null runner when there are none."""
    return hook_runner(await db_async(agent_extensions)(tenant_id, agent_id))


def hook_runner(ext: AgentExtensions) -> HookRunner:
    """A run's runner for the agent's hooks in ``ext`` (read by the caller)."""
    if not ext.hooks:
        return NullHookRunner()
    return ConfiguredHookRunner(
        ext.hooks,
        audit=BufferedHookAudit(),
        guard=SsrfGuard(ext.allow_list),
        shell_dir=hook_workdir,
        shell_enabled=settings.CLAW_HOOKS_SHELL,
    )


async def close_run_resources(*resources: object) -> None:
    """Close what a run opened (tool connections, hook clients, audit buffers)."""
    for resource in resources:
        close = getattr(resource, "aclose", None)
        if close is None:
            continue
        try:
            await close()
        except Exception:
            logger.exception("closing %r failed", resource)
