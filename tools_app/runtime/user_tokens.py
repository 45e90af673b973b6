"""A run's per-user tokens (Z5): read for the run's user only, put where the admin
said (a header or an environment variable), never cached across runs.

:func:`read_user_tokens` is the one read of ``UserToken`` rows in a run: filtered on the
run's tenant AND user, so another user's token cannot reach the run by construction.
:func:`with_user_token` gives a server's or tool's spec for this run; a spec that needs
a token the user has not given stays marked ``missing`` and its tools answer
``account_not_connected`` (:func:`account_missing_message`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import TypeVar

from django.db.models import Q

from tools_app.http_tools.toolset import HttpToolSpec
from tools_app.mcp.connection import McpServerSpec
from tools_app.models.user_tokens import UserToken

ACCOUNTS_PAGE = "/chat/accounts/"

Spec = TypeVar("Spec", McpServerSpec, HttpToolSpec)


def token_key(spec: McpServerSpec | HttpToolSpec) -> tuple[str, int]:
    return ("mcp" if isinstance(spec, McpServerSpec) else "http", spec.id)


def read_user_tokens(
    tenant_id: int, user_id: int | None, specs: Iterable[McpServerSpec | HttpToolSpec]
) -> dict[tuple[str, int], str]:
    """The user's tokens for those of ``specs`` that take one (no query when none does)."""
    wanted = [spec for spec in specs if spec.user_token is not None]
    if not wanted or user_id is None:
        return {}
    mcp_ids = [s.id for s in wanted if isinstance(s, McpServerSpec)]
    http_ids = [s.id for s in wanted if isinstance(s, HttpToolSpec)]
    rows = UserToken._base_manager.filter(tenant_id=tenant_id, user_id=user_id).filter(
        Q(mcp_server_id__in=mcp_ids) | Q(http_tool_id__in=http_ids)
    )
    tokens: dict[tuple[str, int], str] = {}
    for row in rows.only("mcp_server_id", "http_tool_id", "token"):
        key = ("mcp", row.mcp_server_id) if row.mcp_server_id else ("http", row.http_tool_id)
        tokens[key] = row.token  # type: ignore[index,assignment]
    return tokens


def with_user_token(spec: Spec, tokens: Mapping[tuple[str, int], str], user_id: int | None) -> Spec:
    """``spec`` for this run: with the user's token in place, or marked missing.
    Process-wide state keyed by the server (tool lists, limits) is kept per user."""
    slot = spec.user_token
    if slot is None:
        return spec
    token = tokens.get(token_key(spec))
    if token is None:
        return replace(spec, user_token_missing=True, user_scope=f"user:{user_id}")
    value = slot.value(token)
    if slot.kind == "env" and isinstance(spec, McpServerSpec):
        return replace(spec, env={**spec.env, slot.name: value}, user_scope=f"user:{user_id}")
    headers = {k: v for k, v in spec.headers.items() if k.lower() != slot.name.lower()}
    headers[slot.name] = value
    return replace(spec, headers=headers, user_scope=f"user:{user_id}")


def account_missing_message(kind: str, name: str, hint: str = "") -> str:
    """What the model reads when the user has not connected their account."""
    what = f" ({hint})" if hint else ""
    return (
        f"The user must connect their account for the {kind} {name} before it can be used: "
        f"they enter their own token{what} on the Connected accounts page of the chat "
        f"({ACCOUNTS_PAGE}). Tell the user this; do not retry until they have."
    )
