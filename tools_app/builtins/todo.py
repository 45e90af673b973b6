"""todo_read / todo_write (T7): the session's task list, replaced whole on each write
(as OpenCode's todo tools), kept per session."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from claw_platform.audit.actions import record_audit_event
from claw_platform.db import db_async
from tools_app.context import ToolContext, tool_context
from tools_app.models import SessionTodoList
from tools_app.registry import Tool

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="low")
STATUSES = ["pending", "in_progress", "completed", "cancelled"]
MAX_TODOS = 100
MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]", "cancelled": "[-]"}


def render(items: list[dict[str, Any]]) -> str:
    if not items:
        return "The todo list is empty."
    return "\n".join(f"{i}. {MARKS.get(t['status'], '[ ]')} {t['content']}" for i, t in enumerate(items, 1))


@transaction.atomic
def do_write_todos(context: ToolContext, items: list[dict[str, Any]], *, acting_user: Any) -> None:
    todo_list, created = SessionTodoList._base_manager.get_or_create(
        session_id=context.session_id, defaults={"tenant_id": context.tenant_id, "items": items}
    )
    if not created:
        todo_list.items = items
        todo_list.save(update_fields=["items", "updated_at"])
    record_audit_event(
        action="todos.written", actor=acting_user, obj=todo_list, diff={"items": [None, len(items)]}
    )


def read_todos(context: ToolContext) -> list[dict[str, Any]]:
    items = (
        SessionTodoList._base_manager.filter(session_id=context.session_id, tenant_id=context.tenant_id)
        .values_list("items", flat=True)
        .first()
    )
    return list(items or [])


class TodoReadTool(Tool):
    name = "todo_read"
    description = "Show this conversation's todo list."
    traits = READ_ONLY
    timeout = 10.0
    max_output_chars = 20_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        return render(await db_async(read_todos)(context))


class TodoWriteTool(Tool):
    name = "todo_write"
    description = (
        "Replace this conversation's todo list (send the whole list). Use it to plan multi-step "
        "work and mark progress: status is pending, in_progress, completed or cancelled."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "maxItems": MAX_TODOS,
                "items": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string", "minLength": 1, "maxLength": 500},
                        "status": {"enum": STATUSES},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 10.0
    max_output_chars = 20_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        context = tool_context(ctx)
        items = [{"content": t["content"], "status": t["status"]} for t in args["todos"]]
        await db_async(do_write_todos)(context, items, acting_user=f"agent:{context.agent_slug}")
        return "Todo list saved:\n" + render(items)
