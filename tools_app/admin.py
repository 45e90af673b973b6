"""Admin for tool configuration: inlines on the Agent page (tool allow/deny, approval
mode and risk, shell and workspace settings, per-tool settings)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest

from claw_platform.admin.scoped import TenantScopedInline
from tools_app.models import AgentToolConfig, ToolSetting


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
