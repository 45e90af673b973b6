"""Memory tools (T4): memory_write, memory_search, memory_update, memory_delete over
the memory store interface (``agents.memory``). The owner -- tenant, agent, user and
whether tenant-wide memory may be changed (owners and admins) -- comes from the run,
so memory never crosses users or tenants unless scoped to (M7)."""

from __future__ import annotations

from typing import Any

from agents.engine.interfaces import READ_ONLY, RunContext, ToolTraits
from agents.memory import MemoryError, MemoryHit, MemoryOwner, default_memory_store
from agents.models import MemoryCategory, MemoryScope
from claw_platform.db import db_async
from tools_app.context import tool_context
from tools_app.registry import TOOL_ERROR, Tool, ToolError

WRITES = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")
SCOPES = list(MemoryScope.values)
CATEGORIES = list(MemoryCategory.values)


def memory_owner(ctx: RunContext) -> MemoryOwner:
    context = tool_context(ctx)
    return MemoryOwner(
        tenant_id=context.tenant_id,
        agent_id=context.agent_id,
        user_id=context.user_id,
        may_write_tenant=context.may_write_tenant_memory,
        session_id=context.session_id,
    )


def _line(hit: MemoryHit) -> str:
    return f"#{hit.id} [{hit.scope}/{hit.category}] {hit.content}"


async def _call(function: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return await db_async(function)(*args, **kwargs)
    except MemoryError as exc:
        raise ToolError(TOOL_ERROR, str(exc)) from None


class MemoryWriteTool(Tool):
    name = "memory_write"
    description = (
        "Save a durable memory. scope: user (about this user; default), agent (for every user "
        "of this agent) or tenant (the whole team; owners and admins only). category: core "
        "(default), daily, conversation."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "content": {"type": "string", "minLength": 1, "maxLength": 4000},
            "scope": {"enum": SCOPES},
            "category": {"enum": CATEGORIES},
        },
        "required": ["content"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        owner = memory_owner(ctx)
        scope = args.get("scope") or (MemoryScope.USER if owner.user_id else MemoryScope.AGENT)
        hit = await _call(
            default_memory_store().write,
            owner,
            args["content"],
            scope=scope,
            category=args.get("category", MemoryCategory.CORE),
        )
        return f"Saved memory #{hit.id} ({hit.scope}/{hit.category})."


class MemorySearchTool(Tool):
    name = "memory_search"
    description = (
        "Search saved memories by keywords (best matches first); an empty query lists the "
        "most recent. Returns lines '#id [scope/category] content'."
    )
    input_schema = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "maxLength": 500},
            "scope": {"enum": SCOPES},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "additionalProperties": False,
    }
    traits = READ_ONLY
    timeout = 15.0
    max_output_chars = 20_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        owner = memory_owner(ctx)
        scopes = [args["scope"]] if args.get("scope") else None
        hits = await _call(
            default_memory_store().search,
            owner,
            args.get("query", ""),
            scopes=scopes,
            limit=args.get("limit", 10),
        )
        return "\n".join(_line(h) for h in hits) if hits else "No memories found."


class MemoryUpdateTool(Tool):
    name = "memory_update"
    description = "Change the content or category of a saved memory, by its #id (from memory_search)."
    input_schema = {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "content": {"type": "string", "minLength": 1, "maxLength": 4000},
            "category": {"enum": CATEGORIES},
        },
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        if "content" not in args and "category" not in args:
            raise ToolError(TOOL_ERROR, "Give a new content, a new category, or both.")
        hit = await _call(
            default_memory_store().update,
            memory_owner(ctx),
            args["id"],
            content=args.get("content"),
            category=args.get("category"),
        )
        return f"Updated memory #{hit.id} ({hit.scope}/{hit.category})."


class MemoryDeleteTool(Tool):
    name = "memory_delete"
    description = "Delete a saved memory by its #id (from memory_search)."
    input_schema = {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 1}},
        "required": ["id"],
        "additionalProperties": False,
    }
    traits = WRITES
    timeout = 15.0
    max_output_chars = 1_000

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        await _call(default_memory_store().delete, memory_owner(ctx), args["id"])
        return f"Deleted memory #{args['id']}."
