"""Who may see and act in a chat session: one answer for the pages and the socket.

A member sees their own sessions; owners and admins see every session of their
tenant (and may act in it, e.g. to approve a call), viewers read them all and act in
none. A session of another tenant, or one a member may not see, is refused exactly
like a session that does not exist (STYLE rule 4): the caller cannot tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.models import Session
from claw_platform.tenancy.models import Membership, Role

# Roles that may send messages, stop runs and decide approvals; viewers only read.
ACTING_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})
# Roles that see every session of the tenant, not only their own.
OVERSEEING_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.VIEWER})


class SessionNotFound(LookupError):
    """No such session for this user (missing, or another tenant's)."""


@dataclass(frozen=True)
class SessionAccess:
    session: Session
    membership: Membership

    @property
    def can_act(self) -> bool:
        return can_act(self.membership)


def can_act(membership: Membership | None) -> bool:
    return membership is not None and membership.role in ACTING_ROLES


def access_session(user: Any, session_id: Any, *, tenant_id: int | None = None) -> SessionAccess:
    """The session ``session_id`` if ``user`` is a member of its tenant (and, when
    ``tenant_id`` is given, it belongs to that tenant); ``SessionNotFound`` otherwise.
    Runs before any tenant is in context, so it reads unscoped and checks itself."""
    if user is None or not user.is_authenticated:
        raise SessionNotFound(session_id)
    session = (
        Session._base_manager.select_related("agent").filter(pk=session_id, tenant__is_active=True).first()
    )
    if session is None or (tenant_id is not None and session.tenant_id != tenant_id):
        raise SessionNotFound(session_id)
    membership = Membership.objects.unscoped().filter(tenant_id=session.tenant_id, user_id=user.pk).first()
    if membership is None:
        raise SessionNotFound(session_id)
    if session.user_id != user.pk and membership.role not in OVERSEEING_ROLES:
        raise SessionNotFound(session_id)
    return SessionAccess(session, membership)
