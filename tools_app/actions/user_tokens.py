"""A user connects or disconnects their own account for a per-user MCP server or HTTP
tool (Z5). Only ever the caller's own token: the row is keyed by (tenant, user,
target), so nobody can read, replace or remove another user's. Each change is audited
without the token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction

from claw_platform.audit.actions import record_audit_event
from tools_app.models import HttpTool, McpServer, UserToken
from tools_app.models.user_tokens import token_problem

KINDS: dict[str, tuple[str, type[McpServer] | type[HttpTool]]] = {
    "mcp": ("MCP server", McpServer),
    "http": ("HTTP tool", HttpTool),
}


class AccountError(ValueError):
    """The token cannot be stored (the message says why, for the user)."""


@dataclass(frozen=True)
class Connectable:
    """A per-user server or tool as the Connected accounts page lists it."""

    kind: str  # "mcp" | "http"
    label: str  # "MCP server" | "HTTP tool"
    target: McpServer | HttpTool
    connected_at: Any  # when the user's token was last set, or None


def connectable(tenant_id: int, user_id: int | None) -> list[Connectable]:
    """The tenant's enabled per-user servers and tools, with whether ``user_id`` connected."""
    if user_id is None:
        return []
    tokens = {
        (("mcp", m) if m else ("http", h)): at
        for m, h, at in UserToken._base_manager.filter(tenant_id=tenant_id, user_id=user_id).values_list(
            "mcp_server_id", "http_tool_id", "updated_at"
        )
    }
    found: list[Connectable] = []
    for kind, (label, model) in KINDS.items():
        rows = model._base_manager.filter(tenant_id=tenant_id, enabled=True, per_user_token=True).order_by(
            "name"
        )
        for row in rows:
            found.append(Connectable(kind, label, row, tokens.get((kind, row.pk))))
    return found


def find_target(tenant_id: int, kind: str, pk: int) -> McpServer | HttpTool | None:
    """One of the tenant's enabled per-user servers or tools, or None."""
    entry = KINDS.get(kind)
    if entry is None:
        return None
    return (
        entry[1]
        ._base_manager.filter(  # type: ignore[no-any-return]
            tenant_id=tenant_id, pk=pk, enabled=True, per_user_token=True
        )
        .first()
    )


def _where(target: McpServer | HttpTool) -> dict[str, Any]:
    return {"mcp_server": target} if isinstance(target, McpServer) else {"http_tool": target}


@transaction.atomic
def do_connect_account(user: Any, target: McpServer | HttpTool, token: str, *, ip: str | None = None) -> None:
    """Store (or replace) ``user``'s token for ``target``."""
    token = token.strip()
    slot = target.user_token_slot()
    if slot is None:
        raise AccountError("This does not take a personal token.")
    problem = token_problem(token, slot)
    if problem:
        raise AccountError(problem)
    row, created = UserToken._base_manager.select_for_update().get_or_create(
        tenant_id=target.tenant_id, user=user, **_where(target), defaults={"token": token}
    )
    if not created:
        row.token = token
        row.save(update_fields=["token", "updated_at"])
    _audit("account.connected" if created else "account.token_replaced", user, target, ip)


@transaction.atomic
def do_disconnect_account(user: Any, target: McpServer | HttpTool, *, ip: str | None = None) -> bool:
    """Remove ``user``'s token for ``target``; False when there was none."""
    deleted, _ = UserToken._base_manager.filter(
        tenant_id=target.tenant_id, user=user, **_where(target)
    ).delete()
    if deleted:
        _audit("account.disconnected", user, target, ip)
    return bool(deleted)


def _audit(action: str, user: Any, target: McpServer | HttpTool, ip: str | None) -> None:
    record_audit_event(
        action=action,
        actor=user,
        tenant_id=target.tenant_id,
        object_type=target._meta.label_lower,
        object_id=str(target.pk),
        object_repr=f"{target} (the account of {user.get_username()})",
        ip=ip,
    )
