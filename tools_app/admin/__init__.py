"""Admin for the tenant's tool extensions: hooks, MCP servers, HTTP tools, skills and
the allow-list of internal hosts. Tenant-scoped and audited (TenantScopedAdmin);
secrets (signing secrets, headers, environments) are write-only like every secret
field (claw_platform.secret_fields), and checked by the models' clean()."""

from __future__ import annotations

import json
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest

from claw_platform.admin.scoped import MemberRuleMixin, TenantScopedAdmin
from tools_app.actions.approvals import do_revoke_always_approval
from tools_app.health import do_clear_tool_flag
from tools_app.hooks.callables import registered_callables
from tools_app.models import AllowedHost, Hook, HttpTool, McpServer, Skill, ToolApprovalGrant, ToolHealth


class HookForm(forms.ModelForm):
    """Built per request by the admin (its agent choices are the tenant's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [("", "---------"), *registered_callables().items()]
        self.fields["callable"] = forms.ChoiceField(
            choices=choices,
            required=False,
            help_text="Python hooks the operator registered (kind python). The ready-made ones are off "
            "until you add a hook that uses them.",
        )


@admin.register(Hook)
class HookAdmin(TenantScopedAdmin):
    form = HookForm
    fields = [
        "name",
        "description",
        "event",
        "kind",
        "enabled",
        "priority",
        "on_error",
        "timeout_ms",
        "agents",
        "command",
        "url",
        "secret",
        "callable",
        "config",
    ]
    list_display = ["name", "event", "kind", "priority", "on_error", "enabled"]
    list_filter = ["event", "kind", "enabled"]
    search_fields = ["name", "description"]
    filter_horizontal = ["agents"]


class McpServerForm(forms.ModelForm):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        approved = sorted(settings.CLAW_MCP_STDIO_COMMANDS)
        self.fields["command"] = forms.ChoiceField(
            choices=[("", "---------"), *((name, name) for name in approved)],
            required=False,
            help_text="stdio: the commands the operator approved (CLAW_MCP_STDIO_COMMANDS).",
        )


# Per-user tokens (Z5): the admin sets where a user's token goes; the users enter their
# own on the chat's Connected accounts page, and nobody sees them here.
PER_USER_TOKEN_FIELDS = [
    "per_user_token",
    "user_token_into",
    "user_token_template",
    "user_token_hint",
    "connected_users",
]


class ConnectedUsers:
    """How many users connected their account to a per-user server or tool."""

    @admin.display(description="Users connected")
    def connected_users(self, obj: McpServer | HttpTool) -> str:
        if obj.pk is None:
            return "-"
        count = obj.user_tokens.count()
        return f"{count} user{'s' if count != 1 else ''} (their tokens are never shown)"


@admin.register(McpServer)
class McpServerAdmin(ConnectedUsers, TenantScopedAdmin):
    form = McpServerForm
    fields = [
        "name",
        "description",
        "transport",
        "command",
        "args",
        "env",
        "url",
        "headers",
        *PER_USER_TOKEN_FIELDS,
        "timeout_seconds",
        "rate_limit_per_minute",
        "max_concurrency",
        "circuit_failure_threshold",
        "circuit_cooldown_seconds",
        "enabled",
        "agents",
    ]
    list_display = [
        "name",
        "transport",
        "command",
        "url",
        "timeout_seconds",
        "rate_limit_per_minute",
        "enabled",
    ]
    readonly_fields = ["connected_users"]
    list_filter = ["transport", "enabled"]
    search_fields = ["name", "description", "url"]
    filter_horizontal = ["agents"]
    actions = ["refresh_tools"]

    @admin.action(description="Fetch the tool lists of the selected servers again")
    def refresh_tools(self, request: HttpRequest, queryset: Any) -> None:
        # A new revision of the row: every process fetches the list at its next run.
        for server in queryset:
            server.save(update_fields=["updated_at"])
        self.message_user(request, "The tool lists will be fetched again at the next run.")


@admin.register(HttpTool)
class HttpToolAdmin(ConnectedUsers, TenantScopedAdmin):
    fields = [
        "name",
        "description",
        "input_schema",
        "method",
        "url_template",
        "headers",
        *PER_USER_TOKEN_FIELDS,
        "timeout_seconds",
        "max_response_bytes",
        "enabled",
        "agents",
    ]
    readonly_fields = ["connected_users"]
    list_display = ["name", "method", "url_template", "enabled"]
    list_filter = ["method", "enabled"]
    search_fields = ["name", "description", "url_template"]
    filter_horizontal = ["agents"]


@admin.register(Skill)
class SkillAdmin(TenantScopedAdmin):
    list_display = ["name", "description", "enabled"]
    list_filter = ["enabled"]
    search_fields = ["name", "description", "body"]
    filter_horizontal = ["agents"]


@admin.register(AllowedHost)
class AllowedHostAdmin(TenantScopedAdmin):
    list_display = ["pattern", "port", "note"]
    search_fields = ["pattern", "note"]


# The per-agent tool settings, shown as inlines on the Agent page (agents.admin).
from tools_app.admin.agent_inlines import AGENT_TOOL_INLINES  # noqa: E402

__all__ = ["AGENT_TOOL_INLINES"]


@admin.register(ToolHealth)
class ToolHealthAdmin(TenantScopedAdmin):
    """Self-repair (R3): tools failing in a row per agent; flagged ones are left out
    of the agent's tools (CLAW_TOOL_FLAGGED_LEFT_OUT) until cleared here."""

    list_display = ["tool", "agent", "consecutive_failures", "flagged_at", "last_failed_at"]
    list_filter = [("flagged_at", admin.EmptyFieldListFilter), "agent"]
    list_select_related = ["agent"]
    search_fields = ["tool"]
    readonly_fields = [
        "agent",
        "tool",
        "consecutive_failures",
        "last_error",
        "last_failed_at",
        "flagged_at",
        "updated_at",
    ]
    actions = ["clear_flag"]


@admin.register(ToolApprovalGrant)
class ToolApprovalGrantAdmin(MemberRuleMixin, TenantScopedAdmin):
    """The "always allow" grants (T12): one exact call allowed for the rest of a
    session. Revoke takes one back (audited); nothing is edited here."""

    list_display = ["tool_name", "session", "arguments_short", "granted_by", "created_at"]
    list_filter = ["tool_name"]
    list_select_related = ["session", "granted_by"]
    readonly_fields = ["session", "tool_name", "arguments", "arguments_digest", "approval", "granted_by"]
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    @admin.action(description="Clear the flag (offer the tool again)")
    def clear_flag(self, request: HttpRequest, queryset: Any) -> None:
        if not self.has_change_permission(request):
            self.message_user(request, "You cannot change this tenant's tools.", level="error")
            return
        rows = list(queryset.filter(flagged_at__isnull=False))
        for row in rows:
            do_clear_tool_flag(row, acting_user=request.user)
        self.message_user(request, f"Cleared: {len(rows)} tool(s).")

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    @admin.display(description="Arguments")
    def arguments_short(self, grant: ToolApprovalGrant) -> str:
        text = json.dumps(grant.arguments, ensure_ascii=False)
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.action(description="Revoke the selected grants (the calls ask again)")
    def revoke(self, request: HttpRequest, queryset: QuerySet) -> None:
        count = 0
        try:
            for grant in queryset:
                do_revoke_always_approval(grant, acting_user=request.user)
                count += 1
        except PermissionDenied:
            self.message_user(request, "You cannot revoke this grant.", messages.ERROR)
            return
        self.message_user(request, f"Revoked {count} grant(s).")
