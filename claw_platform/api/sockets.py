"""API keys on the session socket (A6): the first frame carries the key. The key
acts as its creator (the member rule: a member's key opens only that member's
sessions), and the socket closes when the key, its tenant or its creator's
membership or account changes (``claw_platform.api.credential_watch``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rest_framework.exceptions import AuthenticationFailed

from agents.models import Session
from channels_app.access import CLOSE_ACCESS_CHANGED, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from claw_platform.api.auth import authenticate_key
from claw_platform.api.credential_watch import key_credentials
from claw_platform.api.principal import Principal
from claw_platform.tenancy.context import tenant_context

__all__ = [
    "CLOSE_NOT_FOUND",
    "CLOSE_UNAUTHENTICATED",
    "KeySocketAccess",
    "key_access_lost",
    "key_session_access",
]


@dataclass(frozen=True)
class KeySocketAccess:
    session: Session
    can_act: bool
    actor: Any
    credentials: frozenset[str]
    expires_at: datetime | None = None
    api_key_id: int | None = None


def key_session_access(key: Any, session_id: Any) -> KeySocketAccess | int:
    """The session for a valid key that may see it, else the close code: 4401 for a
    bad key, 4404 for a session the key's tenant lacks or the key may not see."""
    if not isinstance(key, str) or not key:
        return CLOSE_UNAUTHENTICATED
    try:
        api_key = authenticate_key(key)
    except AuthenticationFailed:
        return CLOSE_UNAUTHENTICATED
    principal = Principal.for_key(api_key)
    with tenant_context(principal.tenant_id):
        session = (
            Session._base_manager.select_related("agent")
            .filter(pk=session_id, tenant_id=principal.tenant_id, tenant__is_active=True)
            .first()
        )
    if (
        session is None
        or not principal.allows("read")
        or not principal.caller.sees_session_of(session.user_id)
    ):
        return CLOSE_NOT_FOUND
    return KeySocketAccess(
        session,
        principal.allows("write") and principal.caller.acts_in_session_of(session.user_id),
        principal.acting_user,
        key_credentials(api_key.tenant_id, api_key.prefix, api_key.created_by_id),
        api_key.expires_at,
        api_key.pk,
    )


def key_access_lost(key: str, session_id: Any, before: KeySocketAccess) -> int | None:
    """After a change to the socket's credentials: the close code if the key lost
    the session (or now acts with other rights), None if nothing changed for it."""
    now = key_session_access(key, session_id)
    if isinstance(now, int):
        return now
    if now.can_act != before.can_act or now.actor.caller != before.actor.caller:
        return CLOSE_ACCESS_CHANGED
    return None
