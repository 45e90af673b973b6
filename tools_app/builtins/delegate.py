"""The ``delegate`` tool (G5): consult another agent of the team or hand the chat
over to it. Who may be reached is the agent's delegation list in the admin; the
checks live in ``agents.runtime.delegation``.

A consultation is a child run of the other agent in a child session (one level
deeper, the same person's): that agent's own prompt, files and tools (read-only
when it is a task agent), its answer returned as the tool result and its cost
added to this run's totals (so this run's budgets count it) and to this session's
cost; its usage rows name this run. A handoff moves the session to the other agent
for the messages that follow, emits ``handoff`` on the live stream and stores it.
"""

from __future__ import annotations

from typing import Any

from agents.engine.interfaces import RunContext, ToolTraits
from agents.engine.prompt import build_system_prompt
from agents.engine.subagent import SPAWN_TOOLS, SubagentConfig, run_subagent
from agents.engine.types import ToolCallPart
from claw_platform.db import db_async
from tools_app.context import tool_context
from tools_app.registry import TOOL_ERROR, Tool, ToolError, ToolOutput

DELEGATES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="low")
HANDOFF_EVENT = "handoff"


def _role(session_id: str, tenant_id: int) -> str:
    from agents.models import Session
    from agents.runtime.tools import session_role

    return session_role(Session._base_manager.get(pk=session_id, tenant_id=tenant_id))


class DelegateTool(Tool):
    name = "delegate"
    description = (
        "Work with another agent of your team (listed under Delegation in your instructions). "
        "action consult: ask the agent a complete, standalone question; its answer comes back "
        "to you. action handoff: the agent takes over this chat from the user's next message "
        "(say why in reason); then tell the user briefly who will answer."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["consult", "handoff"]},
            "agent": {"type": "string", "minLength": 1, "maxLength": 64, "description": "The agent's slug."},
            "task": {
                "type": "string",
                "maxLength": 20_000,
                "description": "consult: the full question (the agent does not see this chat).",
            },
            "reason": {"type": "string", "maxLength": 500, "description": "handoff: why."},
        },
        "required": ["action", "agent"],
        "additionalProperties": False,
    }
    traits = DELEGATES
    timeout = 600.0
    max_output_chars = 30_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> ToolOutput:
        from agents.runtime.delegation import DelegationRefused, check_delegation

        context = tool_context(ctx)
        action = args["action"]
        role = await db_async(_role)(context.session_id, context.tenant_id)
        try:
            checked = await db_async(check_delegation)(
                tenant_id=context.tenant_id,
                agent_id=context.agent_id,
                session_id=context.session_id,
                role=role,
                slug=args["agent"],
                action=action,
            )
        except DelegationRefused as refused:
            return ToolOutput(str(refused), True, "policy_denied")
        if action == "handoff":
            return await self._hand_off(checked, args.get("reason") or "", ctx)
        task = (args.get("task") or "").strip()
        if not task:
            raise ToolError(TOOL_ERROR, "consult needs task: the complete question for the other agent.")
        return await self._consult(checked, task, role, ctx)

    async def _hand_off(self, checked: Any, reason: str, ctx: RunContext) -> ToolOutput:
        from agents.actions.teams import do_hand_off_session

        handed_back = checked.link is None
        previous = await db_async(do_hand_off_session)(
            checked.session, checked.target, reason=reason, handed_back=handed_back
        )
        events = ctx.extra.get("events")
        if events is not None:
            await events.emit(
                HANDOFF_EVENT,
                {
                    "from": previous.slug,
                    "from_name": previous.name,
                    "to": checked.target.slug,
                    "to_name": checked.target.name,
                    "reason": reason,
                },
            )
        return ToolOutput(
            f"Handed this chat over to {checked.target.name} ({checked.target.slug}); it answers the "
            "user's next message. Tell the user so in one short sentence and stop."
        )

    async def _consult(self, checked: Any, task: str, role: str, ctx: RunContext) -> ToolOutput:
        from agents.budgets.scope import charging, current_charge
        from agents.runtime.chat import prompt_context
        from agents.runtime.delegation import MAX_DELEGATION_DEPTH, open_consultation
        from agents.runtime.llm import model_spec
        from agents.runtime.resolution import resolve_agent
        from agents.runtime.tools import close_tools, registry_tools
        from tools_app.builtins.sub_agent import _close

        target = await db_async(resolve_agent)(checked.target.pk)
        if not target.model.supports_tools:
            raise ToolError(TOOL_ERROR, f"{target.name} cannot be consulted: its model has no tool support.")
        run_id = str(ctx.run_id)
        child, store = await db_async(open_consultation)(
            checked, task, int(run_id) if run_id.isdigit() else None
        )
        tools = await registry_tools(target, child)
        try:
            prompt = prompt_context(target, child, tools, target.model, first_run=False)
            call = ToolCallPart(str(ctx.extra.get("call_id") or f"delegate-{ctx.run_id}"), self.name, {})
            before = ctx.totals.cost

            class _Opened:
                async def open_child(self, **_: Any) -> Any:
                    return store

            # The consulted agent's budgets pay for its calls, and this run's too.
            charge = current_charge()
            with charging(charge.with_agent(target.agent_id) if charge is not None else None):
                result = await run_subagent(
                    task,
                    parent=ctx,
                    call_id=call.id,
                    model=model_spec(target.model),
                    tools=tools,
                    sessions=_Opened(),
                    prompt=build_system_prompt(prompt, "full"),
                    config=SubagentConfig(
                        max_depth=MAX_DELEGATION_DEPTH,
                        max_iterations=target.max_iterations,
                        read_only=target.role == "task",
                        extra_denied=SPAWN_TOOLS if target.role == "task" else frozenset(),
                        parallel_tools=target.parallel_tools,
                        time_budget=float(target.time_budget_seconds),
                    ),
                )
            await db_async(_close)(
                store, result.status, result.text, str(checked.session.pk), ctx.totals.cost - before
            )
        finally:
            await close_tools(tools)
        part = result.as_tool_result(call)
        text = part.content if isinstance(part.content, str) else str(part.content)
        return ToolOutput(
            f"{target.name} answers:\n{text}" if not part.is_error else text, part.is_error, part.error_type
        )
