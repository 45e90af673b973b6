"""Who may open a chat session, for the pages and the socket: the member rule
(:mod:`claw_platform.tenancy.member_rule`) for one session.

A session of another tenant, or one the member rule hides (another member's chat), is
refused exactly like a session that does not exist (STYLE rule 4): the caller cannot
tell them apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model

from agents.models import Session
from claw_platform.tenancy.member_rule import ACTING_ROLES, Caller
from claw_platform.tenancy.models import Membership
from claw_platform.tenancy.rls import system_bypass

# A socket's close codes: not signed in (or the key or account no longer works), no
# such session (missing, another tenant's, hidden by the member rule -- the same on
# purpose), and the rights it opened with changed (a role; reconnect for the new ones).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_ACCESS_CHANGED = 4403
CLOSE_NOT_FOUND = 4404


class SessionNotFound(LookupError):
    """No such session for this user (missing, another tenant's, or hidden by the rule)."""


@dataclass(frozen=True)
class SessionAccess:
    session: Session
    membership: Membership

    @property
    def caller(self) -> Caller:
        return Caller.for_membership(self.membership)

    @property
    def can_act(self) -> bool:
        return self.caller.acts_in_session_of(self.session.user_id)


def can_act(membership: Membership | None) -> bool:
    return membership is not None and membership.role in ACTING_ROLES


def access_session(
    user: Any, session_id: Any, *, tenant_id: int | None = None, include_deleted: bool = False
) -> SessionAccess:
    """The session ``session_id`` if ``user`` (an active account) is a member of its
    tenant who may see it (and, when ``tenant_id`` is given, it belongs to that
    tenant); ``SessionNotFound`` otherwise. Runs before any tenant is in context, so
    it reads unscoped and checks itself. A chat its member deleted (still within its
    undo window) is found only with ``include_deleted`` (to restore it)."""
    if user is None or not user.is_authenticated or not user.is_active:
        raise SessionNotFound(session_id)
    # Session id -> tenant: found across tenants, then checked against the membership.
    with system_bypass():
        return _access_session(user, session_id, tenant_id, include_deleted)


def _access_session(
    user: Any, session_id: Any, tenant_id: int | None, include_deleted: bool
) -> SessionAccess:
    session = (
        Session._base_manager.select_related("agent").filter(pk=session_id, tenant__is_active=True).first()
    )
    if session is None or (tenant_id is not None and session.tenant_id != tenant_id):
        raise SessionNotFound(session_id)
    if session.deleted_at is not None and not include_deleted:
        raise SessionNotFound(session_id)
    membership = Membership.objects.unscoped().filter(tenant_id=session.tenant_id, user_id=user.pk).first()
    if membership is None or not Caller.for_membership(membership).sees_session_of(session.user_id):
        raise SessionNotFound(session_id)
    return SessionAccess(session, membership)


def login_access_lost(user_id: Any, session_id: Any, before: SessionAccess) -> int | None:
    """After a change to the account or membership of a socket opened with a login:
    the close code if the user lost the session (or now has another role in its
    tenant), None if nothing changed for it."""
    user = get_user_model()._default_manager.filter(pk=user_id).first()
    if user is None or not user.is_active:
        return CLOSE_UNAUTHENTICATED
    try:
        now = access_session(user, session_id)
    except SessionNotFound:
        return CLOSE_NOT_FOUND
    if now.membership.role != before.membership.role:
        return CLOSE_ACCESS_CHANGED
    return None
