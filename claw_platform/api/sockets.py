"""API keys on the session socket (A6): the first frame carries the key."""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import AuthenticationFailed

from agents.models import Session
from claw_platform.api.auth import authenticate_key
from claw_platform.api.principal import Principal

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


def key_session_access(key: Any, session_id: Any) -> tuple[Session, bool, Any] | int:
    """``(session, can_act, actor)`` for a valid key of the session's tenant, else the
    close code: 4401 for a bad key, 4404 for a session the key's tenant lacks."""
    if not isinstance(key, str) or not key:
        return CLOSE_UNAUTHENTICATED
    try:
        principal = Principal.for_key(authenticate_key(key))
    except AuthenticationFailed:
        return CLOSE_UNAUTHENTICATED
    session = (
        Session._base_manager.select_related("agent")
        .filter(pk=session_id, tenant_id=principal.tenant_id, tenant__is_active=True)
        .first()
    )
    if session is None or not principal.allows("read"):
        return CLOSE_NOT_FOUND
    return session, principal.allows("write"), principal.acting_user
