"""Sub-agents, engine side (E20).

A sub-agent is the same loop run as a child: its own session (opened through
:class:`ChildSessionFactory`, linked to the parent's), a minimal prompt, a 10-iteration
cap (MicroClaw), read-only tools (OpenCode's task agent), depth-based deny lists
(OpenClaw), and its whole cost added to the parent's run totals when it finishes.

Depth: the main agent is depth 0; its sub-agents depth 1. ``max_depth`` (default 1)
is the deepest sub-agent allowed; at that depth the agent is a *leaf* and loses the
spawn and session tools, so with the default a sub-agent cannot spawn another.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

from agents.engine import tracing
from agents.engine.cost import RunTotals
from agents.engine.interfaces import (
    ChildSessionFactory,
    EventSink,
    HookRunner,
    ModelSpec,
    PolicyDecision,
    RunContext,
    RunStore,
    ToolExecutor,
    ToolTraits,
)
from agents.engine.loop import LoopConfig, LoopOutcome, run_agentic_loop
from agents.engine.prompt import PromptContext, build_system_prompt
from agents.engine.types import Message, ToolCallPart, ToolDefinition, ToolResultPart

SUBAGENT_MAX_ITERATIONS = 10  # MicroClaw's MAX_SUB_AGENT_ITERATIONS
DEFAULT_MAX_SPAWN_DEPTH = 1

# Tools that create sub-agents; allowed below max depth only.
SPAWN_TOOLS = frozenset({"sub_agent", "sessions_spawn", "agent", "spawn_agent"})
# OpenClaw's SUBAGENT_TOOL_DENY_ALWAYS plus MicroClaw's side-effecting exclusions
# (messages, memory writes, scheduling): context comes in the task, results go out
# through the parent.
SUBAGENT_TOOL_DENY_ALWAYS = frozenset(
    {
        "gateway",
        "agents_list",
        "whatsapp_login",
        "session_status",
        "cron",
        "memory_search",
        "memory_get",
        "sessions_send",
        "send_message",
        "write_memory",
        "memory_write",
        "schedule_task",
        "update_scheduled_task",
        "export_chat",
        "send_file",
    }
)
# OpenClaw's SUBAGENT_TOOL_DENY_LEAF: what a sub-agent at max depth also loses.
SUBAGENT_TOOL_DENY_LEAF = frozenset({"sessions_list", "sessions_history"}) | SPAWN_TOOLS


def subagent_denied_tools(
    depth: int, max_depth: int = DEFAULT_MAX_SPAWN_DEPTH, extra: frozenset[str] = frozenset()
) -> frozenset[str]:
    """Tools a sub-agent at ``depth`` may not use."""
    denied = SUBAGENT_TOOL_DENY_ALWAYS | extra
    if depth >= max_depth:
        denied |= SUBAGENT_TOOL_DENY_LEAF
    return denied


class RestrictedToolExecutor:
    """A view of a ``ToolExecutor`` limited to what a sub-agent may use.

    Hidden tools are not offered to the model and are refused if called anyway (a
    model can invent a name it saw earlier). With ``read_only`` only tools whose
    traits say read-only remain (spawn tools excepted below max depth).
    """

    def __init__(self, inner: ToolExecutor, *, denied: frozenset[str], read_only: bool = True) -> None:
        self.inner = inner
        self.denied = denied
        self.read_only = read_only

    def allows(self, name: str) -> bool:
        if name in self.denied:
            return False
        if not self.read_only or name in SPAWN_TOOLS:
            return True
        return self.inner.traits(name).read_only

    def definitions(self) -> list[ToolDefinition]:
        return [d for d in self.inner.definitions() if self.allows(d.name)]

    def traits(self, name: str) -> ToolTraits:
        return self.inner.traits(name)

    async def check_policy(self, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        if not self.allows(call.name):
            return PolicyDecision.deny(f"{call.name} is not available to sub-agents")
        return await self.inner.check_policy(call, ctx)

    async def execute(self, call: ToolCallPart, ctx: RunContext) -> ToolResultPart:
        if not self.allows(call.name):
            return ToolResultPart(
                call.id,
                call.name,
                f"{call.name} is not available to sub-agents",
                is_error=True,
                error_type="policy_denied",
            )
        return await self.inner.execute(call, ctx)


@dataclass(slots=True)
class SubagentConfig:
    max_depth: int = DEFAULT_MAX_SPAWN_DEPTH
    max_iterations: int = SUBAGENT_MAX_ITERATIONS
    read_only: bool = True
    extra_denied: frozenset[str] = frozenset()
    parallel_tools: bool = True
    time_budget: float | None = None


@dataclass(slots=True)
class SubagentResult:
    """What the spawning tool returns to its parent's loop."""

    status: Literal["refused"] | str
    text: str
    depth: int
    totals: RunTotals = field(default_factory=RunTotals)
    store: RunStore | None = None
    outcome: LoopOutcome | None = None
    error: str | None = None

    def as_tool_result(self, call: ToolCallPart) -> ToolResultPart:
        if self.status == "completed" or self.status == "max_iterations":
            return ToolResultPart(call.id, call.name, self.text or "(the sub-agent said nothing)")
        error_type = "policy_denied" if self.status == "refused" else f"subagent_{self.status}"
        return ToolResultPart(call.id, call.name, self.text or self.error or self.status, True, error_type)


async def run_subagent(
    task: str,
    *,
    parent: RunContext,
    call_id: str,
    model: ModelSpec,
    tools: ToolExecutor,
    sessions: ChildSessionFactory,
    prompt: PromptContext | str,
    config: SubagentConfig | None = None,
    hooks: HookRunner | None = None,
    events: EventSink | None = None,
    title: str = "",
) -> SubagentResult:
    """Run ``task`` in a child session and return its answer (E20).

    The child gets its own session from ``sessions`` (linked to ``parent``), a
    cancel token tied to the parent's, a minimal prompt, ``max_iterations`` 10,
    read-only tools minus the deny lists for its depth, and fresh totals that are
    added to ``parent.totals`` when it ends -- whatever way it ends. Refused
    (no LLM call, no session) when the parent is already at ``max_depth``.
    """
    cfg = config or SubagentConfig()
    depth = parent.depth + 1
    if depth > cfg.max_depth:
        return SubagentResult(
            "refused",
            f"Sub-agents cannot be started at depth {depth} (the limit is {cfg.max_depth}).",
            depth,
        )
    store = await sessions.open_child(parent=parent, call_id=call_id, title=title or task[:50])
    child = replace(
        parent,
        depth=depth,
        cancel=parent.cancel.child(),
        totals=RunTotals(),
        session_id=str(getattr(store, "session_id", "") or ""),
        extra={**parent.extra, "parent_session_id": parent.session_id, "parent_call_id": call_id},
    )
    denied = subagent_denied_tools(depth, cfg.max_depth, cfg.extra_denied)
    restricted = RestrictedToolExecutor(tools, denied=denied, read_only=cfg.read_only)
    if isinstance(prompt, PromptContext):
        prompt = replace(prompt, is_subagent=True, can_spawn_subagents=depth < cfg.max_depth)
        system = build_system_prompt(prompt, "minimal")
    else:
        system = prompt
    loop_config = LoopConfig(
        model=model,
        system=system,
        purpose="sub_agent",
        max_iterations=cfg.max_iterations,
        parallel_tools=cfg.parallel_tools,
        denied_tools=denied,
        time_budget=cfg.time_budget,
    )
    first = Message.user(task)
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "sub-agent",
        "gen_ai.conversation.id": child.session_id,
        "gen_ai.tool.call.id": call_id,
        "claw.depth": depth,
    }
    with tracing.span("invoke_agent sub-agent", tracing.SPAN_AGENT, attributes) as span:
        span.record_input(task)
        try:
            outcome = await run_agentic_loop(
                [first],
                loop_config,
                tools=restricted,
                store=store,
                ctx=child,
                events=events,
                hooks=hooks,
                unsaved=[first],
            )
        finally:
            # OpenCode: parent.cost += child.cost, also when the child failed midway.
            parent.totals.add_child(child.totals)
        span.set("claw.status", outcome.status)
        if outcome.status not in ("completed", "max_iterations"):
            span.fail(outcome.error or outcome.status, outcome.status)
        span.record_output(outcome.reply)
    return SubagentResult(
        outcome.status,
        outcome.reply,
        depth,
        child.totals,
        store,
        outcome,
        outcome.error,
    )
