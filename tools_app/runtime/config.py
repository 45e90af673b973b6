"""A tenant's tool extensions as plain data, cached per process (G2 for tools_app).

:func:`tenant_extensions` returns the tenant's enabled hooks, MCP servers, HTTP tools,
skills (catalogue only) and allow-list. Each process keeps them for a TTL; every save
or delete of those rows (admin, actions) bumps the tenant's ``ExtensionsVersion``
(``tools_app/signals.py``), and a cache hit costs one indexed read of that number, so
a change made in the admin applies to the next run in every process.

Only this tenant's rows are ever read: every query filters on ``tenant_id``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import models

from claw_platform.prepared import prepared_cursor
from claw_platform.versioned_cache import VersionedCache
from tools_app.guards.ssrf import EMPTY_ALLOW_LIST, AllowEntry, AllowList
from tools_app.hooks.runner import HookSpec
from tools_app.http_tools.toolset import HttpToolSpec
from tools_app.mcp.commands import CommandRefused, check_arguments, check_command, check_environment
from tools_app.mcp.connection import McpServerSpec
from tools_app.models import AllowedHost, Hook, HttpTool, McpServer, Skill
from tools_app.skills.tools import SkillSpec

logger = logging.getLogger("claw.tools")

CACHE_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class AgentExtensions:
    """What applies to one agent."""

    hooks: tuple[HookSpec, ...]
    mcp_servers: tuple[McpServerSpec, ...]
    http_tools: tuple[HttpToolSpec, ...]
    skills: tuple[SkillSpec, ...]
    allow_list: AllowList


@dataclass(frozen=True)
class TenantExtensions:
    tenant_id: int
    version: int
    hooks: tuple[HookSpec, ...] = ()
    mcp_servers: tuple[McpServerSpec, ...] = ()
    http_tools: tuple[HttpToolSpec, ...] = ()
    skills: tuple[SkillSpec, ...] = ()
    allow_list: AllowList = EMPTY_ALLOW_LIST
    problems: tuple[str, ...] = ()  # rows left out, and why (logged once per load)
    _per_agent: dict[int, AgentExtensions] = field(default_factory=dict, repr=False, compare=False)

    def for_agent(self, agent_id: int) -> AgentExtensions:
        hit = self._per_agent.get(agent_id)
        if hit is None:
            hit = self._per_agent[agent_id] = AgentExtensions(
                hooks=tuple(h for h in self.hooks if h.applies_to(agent_id)),
                mcp_servers=tuple(s for s in self.mcp_servers if s.applies_to(agent_id)),
                http_tools=tuple(t for t in self.http_tools if t.applies_to(agent_id)),
                skills=tuple(s for s in self.skills if s.applies_to(agent_id)),
                allow_list=self.allow_list,
            )
        return hit


_cache: VersionedCache[int, TenantExtensions] = VersionedCache(CACHE_TTL_SECONDS)


def extensions_version(tenant_id: int) -> int:
    """The tenant's extensions version (read for every run: a plain statement)."""
    with prepared_cursor() as cursor:
        cursor.execute("SELECT version FROM tools_app_extensionsversion WHERE tenant_id = %s", [tenant_id])
        row = cursor.fetchone()
    return int(row[0]) if row is not None and row[0] is not None else 0


def tenant_extensions(tenant_id: int) -> TenantExtensions:
    """The tenant's current extensions (from this process's cache when still current)."""
    version = extensions_version(tenant_id)
    hit = cached_extensions(tenant_id, version)
    if hit is not None:
        return hit
    loaded = load_extensions(tenant_id, version)
    _cache.put(tenant_id, version, loaded)
    return loaded


def cached_extensions(tenant_id: int, version: int) -> TenantExtensions | None:
    """The tenant's extensions from this process's cache if they are at ``version``
    (read by the caller), else None: ask :func:`tenant_extensions`."""
    return _cache.get(tenant_id, version)


def invalidate(tenant_id: int | None = None) -> None:
    """Drop one tenant's cached extensions (or all): this process's half of invalidation."""
    _cache.invalidate(tenant_id)


def _agent_ids(model: type[models.Model], tenant_id: int) -> dict[int, frozenset[int]]:
    """Row id -> chosen agent ids, for the rows that chose some (the others apply to all)."""
    through: Any = model.agents.through  # type: ignore[attr-defined]
    name = str(model._meta.model_name)
    column = name + "_id"
    chosen: dict[int, set[int]] = {}
    rows = through._base_manager.filter(**{f"{name}__tenant_id": tenant_id}).values_list(column, "agent_id")
    for row_id, agent_id in rows:
        chosen.setdefault(row_id, set()).add(agent_id)
    return {row_id: frozenset(ids) for row_id, ids in chosen.items()}


def load_extensions(tenant_id: int, version: int) -> TenantExtensions:
    problems: list[str] = []
    extensions = TenantExtensions(
        tenant_id=tenant_id,
        version=version,
        hooks=tuple(_hooks(tenant_id)),
        mcp_servers=tuple(_mcp_servers(tenant_id, problems)),
        http_tools=tuple(_http_tools(tenant_id, problems)),
        skills=tuple(_skills(tenant_id)),
        allow_list=AllowList(
            tuple(
                AllowEntry(pattern, port)
                for pattern, port in AllowedHost._base_manager.filter(tenant_id=tenant_id).values_list(
                    "pattern", "port"
                )
            )
        ),
        problems=tuple(problems),
    )
    for problem in problems:
        logger.warning("tenant %s: %s (left out)", tenant_id, problem)
    return extensions


def _hooks(tenant_id: int) -> Iterable[HookSpec]:
    agents = _agent_ids(Hook, tenant_id)
    for hook in Hook._base_manager.filter(tenant_id=tenant_id, enabled=True):
        yield HookSpec(
            id=hook.pk,
            tenant_id=tenant_id,
            name=hook.name,
            event=hook.event,
            kind=hook.kind,
            priority=hook.priority,
            on_error=hook.on_error,
            timeout_ms=hook.timeout_ms,
            command=hook.command,
            url=hook.url,
            secret=hook.secret or "",
            callable=hook.callable,
            config=dict(hook.config or {}),
            agent_ids=agents.get(hook.pk),
        )


def _mcp_servers(tenant_id: int, problems: list[str]) -> Iterable[McpServerSpec]:
    agents = _agent_ids(McpServer, tenant_id)
    for server in McpServer._base_manager.filter(tenant_id=tenant_id, enabled=True):
        argv: tuple[str, ...] = ()
        env: dict[str, str] = {}
        if server.transport == "stdio":
            # Checked again on every load: the operator may have withdrawn a command
            # since the row was saved.
            try:
                argv = tuple(check_command(server.command, settings.CLAW_MCP_STDIO_COMMANDS)) + tuple(
                    check_arguments(server.args)
                )
                env = check_environment(server.env_map())
            except CommandRefused as exc:
                problems.append(f"MCP server {server.name}: {exc}")
                continue
        token_problems = server.user_token_problems()
        if token_problems:
            problems.append(f"MCP server {server.name}: {'; '.join(token_problems.values())}")
            continue
        yield McpServerSpec(
            id=server.pk,
            tenant_id=tenant_id,
            name=server.name,
            transport=server.transport,
            revision=server.updated_at.isoformat(),
            argv=argv,
            env=env,
            url=server.url,
            headers=server.header_map() if server.transport == "http" else {},
            timeout=float(server.timeout_seconds),
            rate_limit_per_minute=server.rate_limit_per_minute,
            max_concurrency=server.max_concurrency,
            circuit_failure_threshold=server.circuit_failure_threshold,
            circuit_cooldown_seconds=float(server.circuit_cooldown_seconds),
            description=server.description,
            agent_ids=agents.get(server.pk),
            user_token=server.user_token_slot(),
            user_token_hint=server.user_token_hint,
        )


def _http_tools(tenant_id: int, problems: list[str]) -> Iterable[HttpToolSpec]:
    agents = _agent_ids(HttpTool, tenant_id)
    for tool in HttpTool._base_manager.filter(tenant_id=tenant_id, enabled=True):
        token_problems = tool.user_token_problems()
        if token_problems:
            problems.append(f"HTTP tool {tool.name}: {'; '.join(token_problems.values())}")
            continue
        yield HttpToolSpec(
            id=tool.pk,
            tenant_id=tenant_id,
            name=tool.name,
            description=tool.description,
            input_schema=dict(tool.input_schema),
            method=tool.method,
            url_template=tool.url_template,
            headers=tool.header_map(),
            timeout=float(tool.timeout_seconds),
            max_response_bytes=tool.max_response_bytes,
            agent_ids=agents.get(tool.pk),
            user_token=tool.user_token_slot(),
            user_token_hint=tool.user_token_hint,
        )


def _skills(tenant_id: int) -> Iterable[SkillSpec]:
    agents = _agent_ids(Skill, tenant_id)
    for skill_id, name, description in Skill._base_manager.filter(
        tenant_id=tenant_id, enabled=True
    ).values_list("pk", "name", "description"):
        yield SkillSpec(id=skill_id, name=name, description=description, agent_ids=agents.get(skill_id))
