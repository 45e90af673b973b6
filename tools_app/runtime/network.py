"""The SSRF guard of a run: the tenant's allow-list, loaded once per run."""

from __future__ import annotations

from agents.engine.interfaces import RunContext
from claw_platform.db import db_async
from tools_app.guards.ssrf import SsrfGuard
from tools_app.runtime.config import tenant_extensions

_GUARD_KEY = "tools_app.ssrf_guard"


def guard_for_tenant(tenant_id: int) -> SsrfGuard:
    return SsrfGuard(tenant_extensions(tenant_id).allow_list)


async def tenant_guard(ctx: RunContext) -> SsrfGuard:
    """The guard for the run's tenant (kept on the run context after the first use)."""
    guard = ctx.extra.get(_GUARD_KEY)
    if isinstance(guard, SsrfGuard):
        return guard
    if not ctx.tenant_id:
        guard = SsrfGuard()  # no tenant, no allow-list: only public addresses
    else:
        guard = await db_async(guard_for_tenant)(int(ctx.tenant_id))
    ctx.extra[_GUARD_KEY] = guard
    return guard
