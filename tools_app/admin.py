"""Admin for tool configuration: inlines on the Agent page (tool allow/deny, approval
mode and risk, shell and workspace settings, per-tool settings) and the sessions'
"always" grants (listed, revocable by deleting)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from claw_platform.admin.scoped import TenantScopedAdmin, TenantScopedInline, can_edit, can_view
from tools_app.models import AgentToolConfig, ToolApprovalGrant, ToolSetting


class AgentToolConfigInline(TenantScopedInline):
    model = AgentToolConfig
    template = "admin/edit_inline/stacked.html"
    max_num = 1
    can_delete = False
    verbose_name_plural = "tools and approvals"
    fields = [
        "allowed_tools",
        "denied_tools",
        "approval_mode",
        "approval_risk",
        "shell_timeout_seconds",
        "shell_network",
        "max_file_bytes",
        "workspace_quota_mb",
    ]

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        widgets = kwargs.setdefault("widgets", {})
        widgets["allowed_tools"] = forms.Textarea(attrs={"rows": 3, "cols": 60})
        widgets["denied_tools"] = forms.Textarea(attrs={"rows": 3, "cols": 60})
        return super().get_formset(request, obj, **kwargs)


class ToolSettingInline(TenantScopedInline):
    model = ToolSetting
    fields = ["tool", "approval_mode", "risk", "execution"]
    verbose_name_plural = "per-tool settings"


AGENT_TOOL_INLINES = [AgentToolConfigInline, ToolSettingInline]


@admin.register(ToolApprovalGrant)
class ToolApprovalGrantAdmin(TenantScopedAdmin):
    list_display = ["tool_name", "session", "arguments_digest", "granted_by", "created_at"]
    list_filter = ["tool_name"]
    readonly_fields = [
        "session",
        "tool_name",
        "arguments",
        "arguments_digest",
        "granted_by",
        "created_at",
    ]
    fields = list(readonly_fields)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)
