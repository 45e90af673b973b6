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

    # Removing a member offers to erase what is kept about them in this tenant
    # (issue 25): their memories and context-file copies, and their workspace.
    delete_confirmation_template = "admin/tenancy/membership/delete_confirmation.html"
    delete_selected_confirmation_template = "admin/tenancy/membership/delete_selected_confirmation.html"

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> Any:
        from agents.actions.personal_data import personal_data

        membership = self.get_object(request, object_id)
        context = dict(extra_context or {})
        if membership is not None and request.method == "GET":
            context["personal_data"] = personal_data(membership.tenant_id, membership.user_id)
        return super().delete_view(request, object_id, context)

    def _erase(self, request: HttpRequest, membership: Membership) -> None:
        from agents.actions.personal_data import do_erase_personal_data
        from claw_platform.audit.actions import client_ip

        if request.POST.get("erase_personal_data") != "on":
            return
        counts = do_erase_personal_data(
            membership.tenant_id,
            membership.user_id,
            workspace=request.POST.get("erase_workspace") == "on",
            actor=request.user,
            ip=client_ip(request),
            reason="removed from the tenant",
        )
        parts = [f"{counts['memories']} memories", f"{counts['files']} personal context files"]
        if "workspace_files" in counts:
            parts.append(f"a workspace of {counts['workspace_files']} files")
        self.message_user(request, f"Erased for {membership.user}: {', '.join(parts)}.")

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        self._erase(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        for membership in queryset.select_related("user"):
            self._erase(request, membership)
        super().delete_queryset(request, queryset)
