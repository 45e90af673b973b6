"""Who sees and changes which memories outside a run (API, chat page, admin).

A user's own memories are visible to that user and to the tenant's owners and
admins (to correct or remove them), never to viewers or other members. Shared
memories (agent and tenant scope) are visible to everyone in the tenant and
changed only by owners and admins. A caller with no person behind it (an
operator's key) acts for the tenant.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from agents.models import MemoryEntry, MemoryScope
from claw_platform.tenancy.member_rule import Caller
from claw_platform.tenancy.models import Role

MANAGING_ROLES = frozenset({Role.OWNER, Role.ADMIN})


def manages_memory(caller: Caller) -> bool:
    return caller.role is None or caller.role in MANAGING_ROLES


def memories_visible_to(caller: Caller) -> QuerySet[MemoryEntry]:
    rows = MemoryEntry._base_manager.filter(tenant_id=caller.tenant_id)
    if manages_memory(caller):
        return rows
    shared = Q(scope__in=[MemoryScope.AGENT, MemoryScope.TENANT])
    if caller.user_id is not None:
        shared |= Q(scope=MemoryScope.USER, user_id=caller.user_id)
    return rows.filter(shared)


def may_change_memory(caller: Caller, entry: MemoryEntry) -> bool:
    if not caller.can_act:
        return False
    if manages_memory(caller):
        return True
    return entry.scope == MemoryScope.USER and entry.user_id == caller.user_id
