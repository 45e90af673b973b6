"""The tools one run gets (T1, T12, X2, O3): the registry's tool sets filtered by the
agent's configuration and the user's role, with the approval policy as the
``check_policy`` seam, the run's :class:`ToolContext` bound for the tools, and an
audit row for every call.

:func:`load_run_tools` reads the session's "always" grants once per run, and the
agent's tool config and per-tool settings once per revision of the agent; after
that, a call costs no query until the audit row is written.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from agents.engine.interfaces import PolicyDecision, RunContext
from agents.engine.types import ToolCallPart, ToolResultPart
from claw_platform.audit.actions import record_audit_event
from claw_platform.db import db_async
from claw_platform.prepared import prepared_cursor
from claw_platform.versioned_cache import VersionedCache
from tools_app.context import TOOL_CONTEXT_KEY, ToolContext
from tools_app.health import flagged_tools, left_out, record_tool_outcome
from tools_app.policy.approval import AgentPolicy, ApprovalPolicy, ToolRule, arguments_digest
from tools_app.policy.scripts import scripts_key_of
from tools_app.registry import RegistryToolExecutor, Tool, ToolSet
from tools_app.sandbox.operator import capped_network

logger = logging.getLogger("claw.tools.executor")

TOOL_EXECUTED = "tool.executed"


class ConfiguredToolExecutor(RegistryToolExecutor):
    """A :class:`RegistryToolExecutor` with the agent's approval modes, a bound
    :class:`ToolContext` and audited calls."""

    def __init__(
        self,
        tools: ToolSet | Sequence[ToolSet],
        *,
        approval: ApprovalPolicy,
        context: ToolContext | None,
        allowed: frozenset[str] | None = None,
        denied: frozenset[str] = frozenset(),
        role: str,
        audit: bool = True,
        extensions: Any = None,
    ) -> None:
        self.approval = approval
        self.context = context
        self.audit = audit
        # The tenant's MCP servers, HTTP tools and skills for this run (a
        # tools_app.runtime.assembly.RunExtensions): their tool sets are among
        # ``tools``; it also holds the skill catalogue and what must be closed.
        self.extensions = extensions
        self._bound: tuple[RunContext, RunContext] | None = None
        super().__init__(tools, allowed=allowed, denied=denied, role=role, policy=approval)

    def _refusal(self, tool: Tool) -> str | None:
        refusal = super()._refusal(tool)
        if refusal is None and not self.approval.offered(tool):
            return f"The tool {tool.name!r} is not available under this agent's approval settings."
        return refusal

    @property
    def skills(self) -> list[Any]:
        """The skill catalogue for the prompt, when the skill tools survived the filters."""
        if self.extensions is None or "activate_skill" not in self.available_names:
            return []
        return list(self.extensions.skills)

    async def aclose(self) -> None:
        if self.extensions is not None:
            await self.extensions.aclose()

    def call_risk(self, call: ToolCallPart) -> str:
        """The effective risk of a call (what an ApprovalRequest should show)."""
        tool = self._available.get(call.name)
        if tool is None or not isinstance(call.arguments, dict):
            return "high"
        return self.approval.call_risk(tool, call.arguments)[0]

    async def check_policy(self, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        """The policy's decision; a refusal instead of "needs approval" for a call
        that would be refused anyway (:meth:`precheck`); for a call that runs
        workspace scripts and that a person approved (the run resumes), a refusal
        when the scripts are no longer what the approval showed."""
        decision = await super().check_policy(call, ctx)
        if decision.action == "needs_approval":
            # Issue 26 item 7: a call the path or command policy refuses anyway is
            # refused at once (an error the model can act on), never shown to a person.
            refusal = self.precheck(call, self.bind(ctx))
            if refusal is not None:
                return PolicyDecision.deny(refusal[0], error_type=refusal[1])
        if decision.action != "needs_approval" or not (decision.details or {}).get("scripts"):
            return decision
        if not str(ctx.run_id).isdigit():
            return decision
        approved = await db_async(_approved_scripts)(int(ctx.run_id), call.id, str(ctx.tenant_id))
        if approved is not None and approved != scripts_key_of(decision.details):
            return PolicyDecision.deny(
                "Not run: the script this call runs changed after a person approved it. Call the "
                "tool again so the approval shows what would run now."
            )
        return decision

    def bind(self, ctx: RunContext) -> RunContext:
        """``ctx`` with this run's ToolContext in ``auth`` (one copy per run)."""
        if self.context is None:
            return ctx
        bound = self._bound
        if bound is not None and bound[0] is ctx:
            return bound[1]
        result = replace(ctx, auth={**ctx.auth, TOOL_CONTEXT_KEY: self.context})
        self._bound = (ctx, result)
        return result

    async def execute(self, call: ToolCallPart, ctx: RunContext) -> ToolResultPart:
        started = time.perf_counter()
        tool = self._available.get(call.name)
        refusal = self.approval.recheck(tool, call) if tool is not None else None
        if refusal is not None:
            result = ToolResultPart(call.id, call.name, refusal, is_error=True, error_type="policy_denied")
        else:
            result = await super().execute(call, self.bind(ctx))
        if self.context is not None and tool is not None:
            try:
                await db_async(record_tool_outcome)(
                    tenant_id=self.context.tenant_id,
                    agent_id=self.context.agent_id,
                    tool=call.name,
                    is_error=result.is_error,
                    error_type=result.error_type,
                    error=result.content if isinstance(result.content, str) else "",
                )
            except Exception:
                logger.exception("health of tool %s not recorded", call.name)
        if self.audit:
            try:
                await db_async(self._write_audit)(call, result, ctx, started)
            except Exception:
                # The call happened; a failed audit write must not turn it into an error.
                logger.exception("audit row for tool %s not written", call.name)
        return result

    def _write_audit(
        self, call: ToolCallPart, result: ToolResultPart, ctx: RunContext, started: float
    ) -> None:
        arguments = call.arguments if isinstance(call.arguments, dict) else {"_raw": str(call.arguments)}
        tool_ctx = self.context
        record_audit_event(
            action=TOOL_EXECUTED,
            actor=f"agent:{tool_ctx.agent_slug}" if tool_ctx else "agent",
            tenant_id=int(ctx.tenant_id) if str(ctx.tenant_id).isdigit() else None,
            object_type="tool",
            object_id=call.name[:64],
            object_repr=call.name,
            diff={
                "arguments_sha256": arguments_digest(arguments),
                "outcome": result.error_type or "ok",
                "duration_ms": result.duration_ms
                if result.duration_ms is not None
                else int((time.perf_counter() - started) * 1000),
                "session": ctx.session_id,
                "run": ctx.run_id,
                "call": call.id,
                "user": ctx.user_id,
            },
        )


def _approved_scripts(run_id: int, call_id: str, tenant_id: str) -> list[list[str | None]] | None:
    """The scripts an approved request of this run's call showed, None if none was approved."""
    from agents.models import ApprovalRequest, ApprovalStatus

    details = (
        ApprovalRequest._base_manager.filter(
            run_id=run_id, call_id=call_id, tenant_id=tenant_id, status=ApprovalStatus.APPROVED
        )
        .values_list("details", flat=True)
        .first()
    )
    return None if details is None else scripts_key_of(details)


# ---------------------------------------------------------------------- building


def agent_policy(config: Any, settings_rows: Sequence[Any]) -> AgentPolicy:
    """An :class:`AgentPolicy` from an AgentToolConfig (or ``None``) and ToolSettings."""
    rules = tuple(ToolRule(s.tool, s.approval_mode, s.risk, s.execution) for s in settings_rows)
    if config is None:
        return AgentPolicy(rules=rules)
    return AgentPolicy(mode=config.approval_mode, approval_risk=config.approval_risk, rules=rules)


def execution_resolver(policy: AgentPolicy) -> Any:
    def execution_for(name: str) -> str:
        rule = policy.rule_for(name)
        return (rule.execution if rule is not None else "") or "either"

    return execution_for


# The agent's tool configuration and policy, per agent: (config_version, expiry,
# config row, policy). A change to either row bumps the agent's config_version
# (tools_app.signals), which the run's ResolvedAgent carries.
_tool_configs: VersionedCache[int, tuple[Any, AgentPolicy]] = VersionedCache(ttl=300.0)


def _agent_tool_config(agent: Any) -> tuple[Any, AgentPolicy]:
    """The agent's AgentToolConfig (or None) and policy, read once per revision of
    the agent (the rows are only read from, never changed, by a run)."""
    from tools_app.models import AgentToolConfig, ToolSetting

    version = getattr(agent, "version", None)
    hit = _tool_configs.get(agent.agent_id, version) if version is not None else None
    if hit is not None:
        return hit
    config = AgentToolConfig._base_manager.filter(agent_id=agent.agent_id).first()
    policy = agent_policy(config, list(ToolSetting._base_manager.filter(agent_id=agent.agent_id)))
    if version is not None:
        _tool_configs.put(agent.agent_id, version, (config, policy))
    return config, policy


def role_denied_tools(agent: Any, session: Any, toolsets: Sequence[ToolSet]) -> frozenset[str]:
    """Tools the agent's role and team leave out (G4, G5): ``delegate`` without
    anyone to delegate to (nor an agent to hand back to); for a task agent every
    tool that is not read-only, and spawning."""
    denied: set[str] = set()
    if not getattr(agent, "delegates", ()) and not getattr(session, "handed_off_from_id", None):
        denied.add("delegate")
    if getattr(agent, "role", "") == "task":
        denied |= {"delegate", "sub_agent"}
        denied |= {tool.name for toolset in toolsets for tool in toolset.tools() if not tool.traits.read_only}
    return frozenset(denied)


def load_run_tools(
    agent: Any,
    session: Any,
    role: str,
    *,
    extensions: Any = None,
    grants: Sequence[tuple[str, str]] | None = None,
) -> ConfiguredToolExecutor:
    """The executor for a run of ``agent`` (a ResolvedAgent) in ``session`` for a user
    of ``role``: the session's grants (one indexed query, unless the caller read them:
    ``grants``) and the agent's config and per-tool settings (two more, once per
    revision of the agent). The built-ins come first; ``extensions``
    (``run_extensions``) add the tenant's MCP, HTTP and skill tool sets under the
    same configuration and policy."""
    from tools_app.models import parse_name_list
    from tools_app.registry import builtin_registry
    from tools_app.workspace import ensure_workspace, workspace_path

    config, policy = _agent_tool_config(agent)
    if grants is None:
        with prepared_cursor() as cursor:  # per run: a plain statement
            cursor.execute(
                "SELECT tool_name, arguments_digest FROM tools_app_toolapprovalgrant WHERE session_id = %s",
                [session.pk],
            )
            grants = cursor.fetchall()
    allowed_entries = parse_name_list(config.allowed_tools) if config is not None else []
    allowed: frozenset[str] | None = frozenset(allowed_entries) if allowed_entries else None
    if not agent.model.supports_tools:
        allowed = frozenset()
    denied = frozenset(parse_name_list(config.denied_tools)) if config is not None else frozenset()
    toolsets = [builtin_registry, *(extensions.toolsets if extensions is not None else [])]
    denied |= role_denied_tools(agent, session, toolsets)
    if left_out():  # self-repair: tools that kept failing, until an admin clears them
        denied |= flagged_tools(agent.agent_id)
    workspace = ensure_workspace(
        workspace_path(
            tenant_id=session.tenant_id,
            agent_id=agent.agent_id,
            agent_type=agent.agent_type,
            user_id=session.user_id,
        )
    )
    context = ToolContext(
        tenant_id=session.tenant_id,
        agent_id=agent.agent_id,
        agent_slug=agent.slug,
        agent_type=agent.agent_type,
        user_id=session.user_id,
        session_id=str(session.pk),
        role=role,
        workspace=workspace,
        depth=session.depth,
        timezone=agent.timezone,
        shell_timeout=float(config.shell_timeout_seconds) if config else 60.0,
        # The operator's cap, also over rows saved before it was set (issue 21).
        shell_network=capped_network(bool(config.shell_network)) if config else False,
        max_file_bytes=int(config.max_file_bytes) if config else 1_000_000,
        file_size_limit=int(config.workspace_quota_mb) * 1_000_000 if config else 500_000_000,
        execution_for=execution_resolver(policy),
    )
    return ConfiguredToolExecutor(
        toolsets,
        approval=ApprovalPolicy(policy, grants, workspace=workspace),
        context=context,
        allowed=allowed,
        denied=denied,
        role=role,
        extensions=extensions,
    )
