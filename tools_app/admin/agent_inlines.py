"""Admin for tool configuration: inlines on the Agent page (tool allow/deny, approval
mode and risk, shell and workspace settings, per-tool settings). Each created,
changed or deleted row writes an audit event with its diff, in the admin's
transaction, like every other configuration change."""

from __future__ import annotations

from typing import Any

from django import forms
from django.http import HttpRequest

from claw_platform.admin.scoped import TenantScopedInline
from claw_platform.audit.actions import client_ip, diff_snapshots, record_audit_event, snapshot
from tools_app.admin.tool_picker import ToolPickerWidget, tool_choices
from tools_app.models import AgentToolConfig, ToolSetting


class AuditedInlineFormSet(forms.BaseInlineFormSet):
    """Writes ``<model>.created|changed|deleted`` audit rows for the inline's rows."""

    audit_request: HttpRequest | None = None

    def _audit(
        self, obj: Any, verb: str, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        request = self.audit_request
        record_audit_event(
            action=f"{obj._meta.model_name}.{verb}",
            actor=request.user if request is not None else None,
            obj=obj,
            diff=diff_snapshots(before, after),
            ip=client_ip(request) if request is not None else None,
        )

    def save_new(self, form: Any, commit: bool = True) -> Any:
        obj = super().save_new(form, commit=commit)
        if commit:
            self._audit(obj, "created", None, snapshot(obj))
        return obj

    def save_existing(self, form: Any, obj: Any, commit: bool = True) -> Any:
        before = snapshot(type(obj)._base_manager.get(pk=obj.pk))
        saved = super().save_existing(form, obj, commit=commit)
        if commit:
            after = snapshot(saved)
            if after != before:
                self._audit(saved, "changed", before, after)
        return saved

    def delete_existing(self, obj: Any, commit: bool = True) -> None:
        if commit:
            self._audit(obj, "deleted", snapshot(obj), None)
        super().delete_existing(obj, commit=commit)


class AuditedInline(TenantScopedInline):
    formset = AuditedInlineFormSet

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        return type(formset.__name__, (formset,), {"audit_request": request})


class AgentToolConfigInline(AuditedInline):
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
        # A picker fed by the registry (issue 26 item 9), for the agent's tenant.
        tenant = getattr(request, "tenant", None)
        tenant_id = obj.tenant_id if obj is not None else getattr(tenant, "pk", None)
        choices = tool_choices(tenant_id)
        widgets = kwargs.setdefault("widgets", {})
        widgets["allowed_tools"] = ToolPickerWidget(choices)
        widgets["denied_tools"] = ToolPickerWidget(choices)
        return super().get_formset(request, obj, **kwargs)


class ToolSettingInline(AuditedInline):
    model = ToolSetting
    fields = ["tool", "approval_mode", "risk", "execution"]
    verbose_name_plural = "per-tool settings"


AGENT_TOOL_INLINES = [AgentToolConfigInline, ToolSettingInline]
