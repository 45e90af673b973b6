"""Admin for tenants and memberships."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.http import HttpRequest

from claw_platform.admin.scoped import (
    AuditedAdminMixin,
    NotFoundMixin,
    TenantScopedAdmin,
    request_membership,
)
from claw_platform.tenancy.models import Membership, Role, Tenant


@admin.register(Tenant)
class TenantAdmin(NotFoundMixin, AuditedAdminMixin, admin.ModelAdmin):
    list_display = ["name", "slug", "is_active", "created_at"]
    search_fields = ["name", "slug"]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        qs = super().get_queryset(request)
        if request.user.is_superuser:
            return qs
        tenant = getattr(request, "tenant", None)
        return qs.filter(pk=tenant.pk) if tenant else qs.none()

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser or request_membership(request))

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        membership = request_membership(request)
        return bool(request.user.is_superuser or (membership and membership.role == Role.OWNER))

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


class MembershipForm(forms.ModelForm):
    username = forms.CharField(
        max_length=150,
        required=False,
        help_text="The username of an existing account to add to this tenant.",
    )

    class Meta:
        model = Membership
        fields = ["role"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["username"].disabled = True
            self.fields["username"].initial = self.instance.user.get_username()
        else:
            self.fields["username"].required = True

    def clean_username(self) -> str:
        username = str(self.cleaned_data.get("username") or "").strip()
        if self.instance.pk:
            return str(self.instance.user.get_username())
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise forms.ValidationError("No account with this username.")
        if (
            self.instance.tenant_id
            and Membership.objects.unscoped().filter(tenant_id=self.instance.tenant_id, user=user).exists()
        ):
            raise forms.ValidationError("This user is already a member.")
        self.instance.user = user
        return username


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    form = MembershipForm
    list_display = ["user", "role", "created_at"]
    list_filter = ["role"]
    search_fields = ["user__username", "user__email"]
    fields = ["username", "role"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        membership = request_membership(request)
        if request.user.is_superuser:
            return True
        if not membership or not membership.can_edit_config:
            return False
        # Only owners may change or remove an owner.
        return not (obj is not None and obj.role == Role.OWNER and membership.role != Role.OWNER)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_change_permission(request, obj)
