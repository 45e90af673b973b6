"""API keys (shown once, on creation), pairing codes and agents' webhook settings in
the admin. Keys and codes are made by the actions, so only hashes are stored."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from claw_platform.admin.scoped import TenantScopedAdmin
from claw_platform.api.actions.keys import do_create_api_key, do_issue_pairing_code, do_revoke_api_key
from claw_platform.api.models import AgentWebhook, ApiKey, PairingCode, Scope
from claw_platform.audit.actions import client_ip


class ScopesForm(forms.ModelForm):
    scopes = forms.MultipleChoiceField(choices=Scope.choices, widget=forms.CheckboxSelectMultiple)


class ApiKeyForm(ScopesForm):
    class Meta:
        model = ApiKey
        fields = ["name", "scopes", "expires_at"]


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    form = ApiKeyForm
    list_display = ["name", "prefix", "scopes", "expires_at", "last_used_at", "revoked_at", "source"]
    list_filter = ["source"]
    search_fields = ["name", "prefix"]
    readonly_fields = ["prefix", "last_used_at", "revoked_at", "source", "created_by", "created_at"]
    actions = ["revoke_keys"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["name", "scopes", "expires_at"]
        return ["name", "scopes", "expires_at", *self.readonly_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return []
        return ["scopes", *self.readonly_fields]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created, plaintext = do_create_api_key(
            request.tenant,  # type: ignore[attr-defined]
            name=form.cleaned_data["name"],
            scopes=list(form.cleaned_data["scopes"]),
            expires_at=form.cleaned_data.get("expires_at"),
            created_by=request.user,
            source="admin",
            acting_user=request.user,
            ip=client_ip(request),
        )
        obj.pk = created.pk
        obj.__dict__.update({k: v for k, v in created.__dict__.items() if not k.startswith("_")})
        messages.warning(request, f"The new key (shown once, copy it now): {plaintext}")

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        # The action wrote the audit row; keep only Django's admin log entry.
        return admin.ModelAdmin.log_addition(self, request, obj, message)

    @admin.action(description="Revoke the selected keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet) -> None:
        for api_key in queryset:
            do_revoke_api_key(api_key, acting_user=request.user, ip=client_ip(request))
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


class PairingCodeForm(ScopesForm):
    class Meta:
        model = PairingCode
        fields = ["name", "scopes"]


@admin.register(PairingCode)
class PairingCodeAdmin(TenantScopedAdmin):
    form = PairingCodeForm
    list_display = ["name", "scopes", "expires_at", "used_at", "created_by"]
    readonly_fields = ["expires_at", "used_at", "api_key", "created_by", "created_at"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["name", "scopes"] if obj is None else ["name", "scopes", *self.readonly_fields]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: PairingCode, form: Any, change: bool) -> None:
        created, code = do_issue_pairing_code(
            request.tenant,  # type: ignore[attr-defined]
            name=form.cleaned_data["name"],
            scopes=list(form.cleaned_data["scopes"]),
            acting_user=request.user,
            ip=client_ip(request),
        )
        obj.pk = created.pk
        obj.__dict__.update({k: v for k, v in created.__dict__.items() if not k.startswith("_")})
        messages.warning(
            request, f"Pairing code (shown once, valid 10 minutes): {code} — POST it to /api/v1/pair/."
        )

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        return admin.ModelAdmin.log_addition(self, request, obj, message)


@admin.register(AgentWebhook)
class AgentWebhookAdmin(TenantScopedAdmin):
    list_display = ["agent", "enabled", "mode", "rate_per_minute", "tolerance_seconds"]
    fields = ["agent", "enabled", "mode", "signing_secret", "tolerance_seconds", "rate_per_minute"]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
