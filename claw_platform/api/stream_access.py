"""Event streams (SSE) end when their caller's rights change (issue 21, defect 5):
a stream opened with a key that is then revoked, or by a member who is then removed,
stops within a poll interval (``claw_platform.api.live``), as the sockets close."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from claw_platform.api.auth import principal_changed
from claw_platform.api.credential_watch import credential_watch, key_credentials, login_credentials
from claw_platform.api.principal import Principal
from claw_platform.db import db_async


def principal_credentials(principal: Principal) -> frozenset[str]:
    if principal.api_key is not None:
        key = principal.api_key
        return key_credentials(key.tenant_id, key.prefix, key.created_by_id)
    return login_credentials(principal.tenant_id, principal.user.pk)


@asynccontextmanager
async def while_allowed(principal: Principal, *, since: int) -> AsyncIterator[Callable[[], bool]]:
    """A callable that says whether ``principal`` still holds the rights it had when
    it was authenticated (``since``: ``credential_watch.generation()`` read then)."""
    allowed = True

    async def check() -> None:
        nonlocal allowed
        if await db_async(principal_changed)(principal):
            allowed = False

    expires_at = principal.api_key.expires_at if principal.api_key is not None else None
    entry = credential_watch.watch(
        principal_credentials(principal), check, since=since, expires_at=expires_at
    )
    try:
        yield lambda: allowed
    finally:
        credential_watch.unwatch(entry)
