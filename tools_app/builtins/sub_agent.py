"""The ``sub_agent`` tool (E20) over the engine's sub-agent module.

The child runs in its own session linked to the parent's (one level deeper), with the
parent agent's model, a minimal prompt, at most 10 iterations and only read-only
tools minus the depth deny lists (``agents.engine.subagent``); its cost is added to
the parent run's totals and to the parent session's cost.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import F

from agents.engine.interfaces import RunContext, ToolTraits
from agents.engine.prompt import PromptContext
from agents.engine.subagent import SubagentConfig, run_subagent
from agents.engine.types import ToolCallPart
from claw_platform.db import db_async
from tools_app.context import ToolContext, tool_context
from tools_app.registry import TOOL_ERROR, Tool, ToolError, ToolOutput

SPAWNS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="low")


def _load(context: ToolContext) -> tuple[Any, Any, Any, Any]:
    from agents.models import ModelProfile, Session, Turn
    from agents.runtime.resolution import model_config, resolve_agent
    from agents.runtime.store import DjangoChildSessions, TurnBinding
    from agents.runtime.tools import session_role
    from tools_app.executor import load_run_tools

    session = Session._base_manager.select_related("agent", "user").get(
        pk=context.session_id, tenant_id=context.tenant_id
    )
    agent = resolve_agent(session.agent_id)
    model = agent.model
    if session.model_override_id:
        profile = (
            ModelProfile._base_manager.select_related("provider")
            .filter(pk=session.model_override_id, tenant_id=session.tenant_id)
            .first()
        )
        if profile is not None:
            model = model_config(profile)
    tools = load_run_tools(agent, session, session_role(session))
    turn = Turn._base_manager.filter(session_id=session.pk).order_by("-id").first()
    # The child factory uses the parent's session, agent and user; the turn is only a label.
    binding = TurnBinding(
        session.tenant_id,
        session.pk,
        session.active_thread_id,
        turn.pk if turn else 0,
        session.agent_id,
        session.user_id,
    )
    return agent, model, tools, DjangoChildSessions(binding)


def _close(store: Any, status: str, text: str, parent_session: str, cost: Decimal) -> None:
    from agents.actions.conversation import do_finish_turn
    from agents.models import Session, Turn

    turn = Turn._base_manager.filter(pk=store.binding.turn_id).first()
    if turn is not None:
        do_finish_turn(
            turn, status=status if status in ("completed", "failed", "cancelled") else "completed", text=text
        )
    if cost:
        Session._base_manager.filter(pk=parent_session).update(cost=F("cost") + cost)


class SubAgentTool(Tool):
    name = "sub_agent"
    description = (
        "Hand a focused task to a sub-agent that works on its own (read-only tools, up to 10 steps) "
        "and returns its answer. Describe the task completely: it does not see this conversation."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 20_000},
            "title": {"type": "string", "maxLength": 100},
        },
        "required": ["task"],
        "additionalProperties": False,
    }
    traits = SPAWNS
    timeout = 600.0
    max_output_chars = 30_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> ToolOutput:
        from agents.runtime.llm import model_spec

        context = tool_context(ctx)
        agent, model, tools, sessions = await db_async(_load)(context)
        if not agent.model.supports_tools:
            raise ToolError(TOOL_ERROR, "Sub-agents need a model with tool support.")
        prompt = PromptContext(
            agent_name=f"{agent.name} (sub-agent)",
            agent_id=agent.slug,
            tools=[d for d in tools.definitions() if tools.traits(d.name).read_only],
            timezone=agent.timezone,
            model=model.model,
            provider=model.provider_name,
        )
        call = ToolCallPart(str(ctx.extra.get("call_id") or f"sub-{ctx.run_id}"), self.name, args)
        before = ctx.totals.cost
        result = await run_subagent(
            args["task"],
            parent=ctx,
            call_id=call.id,
            model=model_spec(model),
            tools=tools,
            sessions=sessions,
            prompt=prompt,
            config=SubagentConfig(),
            title=args.get("title") or args["task"][:50],
        )
        if result.store is not None:
            await db_async(_close)(
                result.store, result.status, result.text, context.session_id, ctx.totals.cost - before
            )
        part = result.as_tool_result(call)
        return ToolOutput(part.content, part.is_error, part.error_type)
