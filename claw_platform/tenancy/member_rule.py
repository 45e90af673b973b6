"""Who sees which chats inside a tenant: one rule, in one place (issue 21).

Members see their own sessions and what hangs off them (messages, turns, runs, run
events, approval requests, checkpoints, usage rows ...); owners, admins and viewers
see every session of the tenant; viewers act in none. A caller with no person behind
it (an API key the operator made with ``claw apikey create``, system code) sees the
tenant's, within its scopes.

Every path asks the same two questions: :func:`visible_to` filters a queryset of any
session-hung model to what a :class:`Caller` sees (the REST API, the event stream,
the sockets' replays, the chat pages and the admin all call it), and
:meth:`Caller.sees_session_of` / :meth:`Caller.acts_in_session_of` answer for one
session already read. A model opts in by naming the path from its rows to the
session's owner in ``MEMBER_OWNER`` (``"session__user"`` for a run); a model
without one cannot be filtered, so it cannot be shown by mistake.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet

from claw_platform.tenancy.models import Role

# Roles that may send messages, stop runs and decide approvals; viewers only read.
ACTING_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.MEMBER})
# Roles that see every session of the tenant, not only their own.
OVERSEEING_ROLES = frozenset({Role.OWNER, Role.ADMIN, Role.VIEWER})


@dataclass(frozen=True)
class Caller:
    """Who is looking, for the member rule: a person with a role in one tenant, or
    (``role`` None) the tenant itself -- an operator's key, system code."""

    tenant_id: int
    user_id: int | None = None
    role: str | None = None

    @classmethod
    def for_membership(cls, membership: Any) -> Caller:
        return cls(tenant_id=membership.tenant_id, user_id=membership.user_id, role=str(membership.role))

    @property
    def is_person(self) -> bool:
        return self.role is not None

    @property
    def sees_every_session(self) -> bool:
        return self.role is None or self.role in OVERSEEING_ROLES

    @property
    def can_act(self) -> bool:
        return self.role is None or self.role in ACTING_ROLES

    def sees_session_of(self, owner_id: Any) -> bool:
        """Whether the caller sees a session of this tenant owned by ``owner_id``."""
        return self.sees_every_session or (self.user_id is not None and owner_id == self.user_id)

    def acts_in_session_of(self, owner_id: Any) -> bool:
        """Whether the caller may send, stop, undo, approve or delete in that session."""
        return self.can_act and self.sees_session_of(owner_id)


def member_owner_path(model: type) -> str:
    """The lookup from ``model``'s rows to their session's owner (``MEMBER_OWNER``)."""
    path = getattr(model, "MEMBER_OWNER", None)
    if not isinstance(path, str):
        raise TypeError(
            f"{model.__name__} declares no MEMBER_OWNER: the member rule cannot filter it "
            "(claw_platform.tenancy.member_rule)"
        )
    return path


def visible_to(queryset: QuerySet, caller: Caller) -> QuerySet:
    """``queryset`` cut to what ``caller`` sees: rows of the caller's tenant only, and
    for a member only those of their own sessions. Safe on unscoped querysets too."""
    path = member_owner_path(queryset.model)
    rows = queryset.filter(tenant_id=caller.tenant_id)
    if caller.sees_every_session:
        return rows
    if caller.user_id is None:
        return rows.none()
    return rows.filter(**{path: caller.user_id})
