"""Tool configuration and approval actions, each with its audit row.

``do_record_always_approval`` is what the approval UI/API calls when a person
approves a call with "always" (T12): it stores a session grant bound to that exact
tool and the full canonical arguments of the call, so the same call in the same
session runs without asking again -- and nothing else does.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from agents.models import ApprovalRequest, ApprovalStatus, Run
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.models import Membership, Role
from tools_app.models import ToolApprovalGrant
from tools_app.policy.approval import grant_digest
from tools_app.policy.scripts import scripts_key_of


def _check_decider(tenant_id: int, actor: Any) -> None:
    if actor is None or getattr(actor, "is_superuser", False):
        return
    role = (
        Membership.objects.unscoped()
        .filter(tenant_id=tenant_id, user_id=getattr(actor, "pk", None))
        .values_list("role", flat=True)
        .first()
    )
    if role is None or role == Role.VIEWER:
        raise PermissionDenied("You cannot approve this tenant's tool calls.")


@transaction.atomic
def do_record_always_approval(approval: ApprovalRequest, *, acting_user: Any) -> ToolApprovalGrant:
    """Remember "always allow this exact call in this session" for an approval request.

    Call it together with (in the same transaction as) approving the request. The
    grant keys on the request's tool name and the sha256 of its arguments' canonical
    JSON (with the digests of the scripts the call runs, as its request showed them);
    a denied request cannot become a grant. Idempotent per (session, call).
    """
    _check_decider(approval.tenant_id, acting_user)
    locked = ApprovalRequest._base_manager.select_for_update().get(
        pk=approval.pk, tenant_id=approval.tenant_id
    )
    if locked.status == ApprovalStatus.DENIED:
        raise ValueError("A denied call cannot be allowed always.")
    session_id = Run._base_manager.filter(pk=locked.run_id).values_list("session_id", flat=True).get()
    # Bound to the scripts the approver was shown, as the policy looks grants up.
    digest = grant_digest(locked.arguments, scripts_key_of(locked.details))
    grant, created = ToolApprovalGrant._base_manager.get_or_create(
        session_id=session_id,
        tool_name=locked.tool_name,
        arguments_digest=digest,
        defaults={
            "tenant_id": locked.tenant_id,
            "arguments": locked.arguments,
            "approval": locked,
            "granted_by": acting_user if getattr(acting_user, "pk", None) else None,
        },
    )
    if created:
        record_audit_event(
            action="approval.always_granted",
            actor=acting_user,
            obj=grant,
            diff={
                "tool": [None, locked.tool_name],
                "arguments_sha256": [None, digest],
                "session": [None, str(session_id)],
            },
        )
    return grant


@transaction.atomic
def do_revoke_always_approval(grant: ToolApprovalGrant, *, acting_user: Any) -> None:
    """Take an "always allow" grant back: the same call asks again from now on. The
    member rule holds (a member revokes in their own chats; owners and admins in any)."""
    from agents.actions.runs import check_actor, check_session_actor

    caller = check_actor(grant.tenant_id, acting_user)
    check_session_actor(caller, grant.session_id)
    deleted, _ = ToolApprovalGrant._base_manager.filter(pk=grant.pk, tenant_id=grant.tenant_id).delete()
    if deleted:
        record_audit_event(
            action="approval.always_revoked",
            actor=acting_user,
            tenant_id=grant.tenant_id,
            obj=grant,
            diff={"tool": [grant.tool_name, None], "arguments_sha256": [grant.arguments_digest, None]},
        )
