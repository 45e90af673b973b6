"""Per-user credentials (Z5): an MCP server or HTTP tool that needs each user's own
token, and the tokens users enter on the chat's "Connected accounts" page.

A server or tool with ``per_user_token`` set sends the token of the run's user (the
session's user; a routine's runs are its user's) instead of a shared secret: into a
header for HTTP (``Authorization: Bearer {token}`` unless the admin says otherwise),
into an environment variable for a stdio MCP server. A run never reads another user's
token (``tools_app.runtime.user_tokens``); a user who has not connected gets a tool
error telling the model the user must connect their account.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import models

from agents.providers.headers import header_problem
from claw_platform.crypto import EncryptedTextField
from claw_platform.tenancy.models import TenantOwned

DEFAULT_HEADER = "Authorization"
DEFAULT_HEADER_TEMPLATE = "Bearer {token}"
TOKEN_PLACEHOLDER = "{token}"
MAX_TOKEN_CHARS = 4_000


@dataclass(frozen=True, slots=True)
class UserTokenSlot:
    """Where a per-user token goes: ``kind`` is "header" or "env"; ``name`` the header
    or variable; ``template`` the value with ``{token}`` in it."""

    kind: str
    name: str
    template: str

    def value(self, token: str) -> str:
        return self.template.replace(TOKEN_PLACEHOLDER, token)


def token_slot(*, into: str, template: str, kind: str) -> UserTokenSlot:
    """The slot an admin configured, with the defaults filled in (``kind``: "header" for
    HTTP servers and tools, "env" for stdio servers)."""
    name = into.strip() or (DEFAULT_HEADER if kind == "header" else "")
    default = (
        DEFAULT_HEADER_TEMPLATE if kind == "header" and name.lower() == "authorization" else TOKEN_PLACEHOLDER
    )
    return UserTokenSlot(kind=kind, name=name, template=template or default)


def slot_problems(slot: UserTokenSlot) -> dict[str, str]:
    """What is wrong with a configured slot, by form field (empty when it can be used)."""
    errors: dict[str, str] = {}
    if TOKEN_PLACEHOLDER not in slot.template:
        errors["user_token_template"] = "Write {token} where the user's token goes, e.g. 'Bearer {token}'."
    elif any(ch in slot.template for ch in "\r\n\x00"):
        errors["user_token_template"] = "The format may not contain line breaks or NUL."
    if slot.kind == "env":
        from tools_app.mcp.commands import CommandRefused, check_environment

        if not slot.name:
            errors["user_token_into"] = (
                "Name the environment variable the user's token goes into, e.g. GITHUB_TOKEN."
            )
        else:
            try:
                check_environment({slot.name: "x"})
            except CommandRefused as exc:
                errors["user_token_into"] = str(exc)
    else:
        problem = header_problem(slot.name, slot.value("token"))
        if problem:
            errors["user_token_into"] = problem
    return errors


def token_problem(token: str, slot: UserTokenSlot) -> str | None:
    """Why a token a user typed cannot be used in ``slot``, or None."""
    if not token:
        return "Enter the token."
    if len(token) > MAX_TOKEN_CHARS:
        return f"A token is at most {MAX_TOKEN_CHARS} characters."
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in token):
        return "A token may not contain line breaks or other control characters."
    if slot.kind == "header" and not token.isascii():
        return "This token is sent in an HTTP header: it may hold ASCII characters only."
    return None


class PerUserTokenFields(models.Model):
    """The admin's settings of a server or tool whose users each connect their own account."""

    per_user_token = models.BooleanField(
        default=False,
        verbose_name="Each user connects their own account",
        help_text="Send the token of the user the run is for (entered on the chat's Connected accounts "
        "page) instead of a shared one. A user who has not connected gets a clear error.",
    )
    user_token_into = models.CharField(
        max_length=100,
        blank=True,
        verbose_name="User token goes into",
        help_text="HTTP: the request header (default Authorization). stdio MCP: the environment "
        "variable, e.g. GITHUB_TOKEN (required).",
    )
    user_token_template = models.CharField(
        max_length=200,
        blank=True,
        verbose_name="User token format",
        help_text="How the value is written, with {token} for the user's token. Default: "
        "'Bearer {token}' in the Authorization header, '{token}' elsewhere.",
    )
    user_token_hint = models.CharField(
        max_length=200,
        blank=True,
        verbose_name="What users enter",
        help_text="Shown on the Connected accounts page, e.g. 'a GitHub personal access token (repo scope)'.",
    )

    class Meta:
        abstract = True

    def user_token_slot(self) -> UserTokenSlot | None:
        """Where the user's token goes, or None when the row does not take one."""
        if not self.per_user_token:
            return None
        kind = "env" if getattr(self, "transport", "http") == "stdio" else "header"
        return token_slot(into=self.user_token_into, template=self.user_token_template, kind=kind)

    def user_token_problems(self) -> dict[str, str]:
        slot = self.user_token_slot()
        return slot_problems(slot) if slot is not None else {}


class UserToken(TenantOwned):
    """One user's token for one per-user MCP server or HTTP tool; encrypted at rest and
    never shown back, to anyone (the page says "connected" or "not connected")."""

    MEMBER_OWNER = "user"  # the user's own: nobody else reads or replaces it

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    mcp_server = models.ForeignKey(
        "tools_app.McpServer", null=True, blank=True, on_delete=models.CASCADE, related_name="user_tokens"
    )
    http_tool = models.ForeignKey(
        "tools_app.HttpTool", null=True, blank=True, on_delete=models.CASCADE, related_name="user_tokens"
    )
    token = EncryptedTextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "connected account"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(mcp_server__isnull=False, http_tool__isnull=True)
                | models.Q(mcp_server__isnull=True, http_tool__isnull=False),
                name="usertoken_one_target",
            ),
            models.UniqueConstraint(
                fields=["user", "mcp_server"],
                condition=models.Q(mcp_server__isnull=False),
                name="usertoken_unique_mcp",
            ),
            models.UniqueConstraint(
                fields=["user", "http_tool"],
                condition=models.Q(http_tool__isnull=False),
                name="usertoken_unique_http",
            ),
        ]

    def __str__(self) -> str:
        target = self.mcp_server or self.http_tool
        return f"{self.user} · {target}"
