"""Inlines on the Agent admin page for teams (G5) and model routing (E22). Each
created, changed or deleted row writes an audit event in the admin's transaction."""

from __future__ import annotations

from django import forms
from django.db import models

from agents.models import AgentDelegation, RoutingRule
from tools_app.admin.agent_inlines import AuditedInline


class AgentDelegationInline(AuditedInline):
    model = AgentDelegation
    fk_name = "agent"
    fields = ["target", "mode", "description"]
    verbose_name = "agent it may consult or hand off to"
    verbose_name_plural = "delegation (agents this one may consult or hand off to; DELEGATION.md adds notes)"
    formfield_overrides = {
        **AuditedInline.formfield_overrides,
        # A short text box in the table row.
        models.TextField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 60})},
    }


class RoutingRuleInline(AuditedInline):
    model = RoutingRule
    fields = [
        "name",
        "enabled",
        "priority",
        "channel",
        "min_length",
        "max_length",
        "keywords",
        "patterns",
        "model",
    ]
    verbose_name_plural = (
        "model routing rules (the first matching rule by priority picks the model; /model overrides)"
    )
    formfield_overrides = {
        **AuditedInline.formfield_overrides,
        models.TextField: {"widget": forms.Textarea(attrs={"rows": 2, "cols": 30})},
    }


TEAM_INLINES = [AgentDelegationInline, RoutingRuleInline]
