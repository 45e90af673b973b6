"""Base ModelAdmin for tenant-owned models.

Scoping comes from the tenant manager (change lists, change views, autocomplete and
foreign-key choices all go through it); permissions come from the member's role;
every add, change and delete writes an audit event with a diff inside the admin's
own transaction; a missing or foreign object is a 404, not a redirect.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest

from claw_platform.audit.actions import client_ip, diff_snapshots, record_audit_event, snapshot
from claw_platform.json_input import JsonInputDecoder
from claw_platform.tenancy.member_rule import Caller, visible_to
from claw_platform.tenancy.models import Membership


def request_membership(request: HttpRequest) -> Membership | None:
    return getattr(request, "membership", None)


def can_edit(request: HttpRequest) -> bool:
    if request.user.is_superuser:
        return True
    membership = request_membership(request)
    return bool(membership and membership.can_edit_config)


def can_view(request: HttpRequest) -> bool:
    return bool(request.user.is_superuser or request_membership(request))


def request_caller(request: HttpRequest) -> Caller | None:
    """The admin user as the member rule sees them (None: not a member)."""
    membership = request_membership(request)
    return Caller.for_membership(membership) if membership is not None else None


def sees_every_session(request: HttpRequest) -> bool:
    """Superusers, and owners, admins and viewers (the member rule)."""
    caller = request_caller(request)
    return bool(request.user.is_superuser or (caller is not None and caller.sees_every_session))


class MemberRuleMixin:
    """For models that hang off sessions (``MEMBER_OWNER``): a member sees the rows
    of their own sessions only, on every page (lists, object pages, history,
    actions); the member rule in :mod:`claw_platform.tenancy.member_rule`."""

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        queryset: QuerySet = super().get_queryset(request)  # type: ignore[misc]
        if request.user.is_superuser:
            return queryset  # the whole platform (ClawAdminSite.admin_view)
        caller = request_caller(request)
        return visible_to(queryset, caller) if caller is not None else queryset.none()


class NotFoundMixin:
    """A missing object, or one of another tenant, is a 404 on every object URL,
    checked before permissions so a 403 never tells that an id exists."""

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        obj = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        if obj is None:
            raise Http404("No such object.")
        return obj


class AuditedAdminMixin:
    """Audit rows for admin add / change / delete, with before/after diffs."""

    def audit_snapshot(self, obj: models.Model) -> dict[str, Any]:
        return snapshot(obj)

    def audit_action_name(self, obj: models.Model, verb: str) -> str:
        return f"{obj._meta.model_name}.{verb}"

    def _before(self, request: HttpRequest) -> dict[tuple[str, Any], Any]:
        if not hasattr(request, "_claw_audit_before"):
            request._claw_audit_before = {}  # type: ignore[attr-defined]
        return request._claw_audit_before  # type: ignore[attr-defined,no-any-return]

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if change and obj.pk is not None:
            fresh = type(obj)._base_manager.get(pk=obj.pk)
            self._before(request)[(obj._meta.label, obj.pk)] = self.audit_snapshot(fresh)
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def _record(
        self,
        request: HttpRequest,
        obj: Any,
        verb: str,
        before: dict[str, Any] | None,
        after: dict[str, Any] | None,
    ) -> None:
        record_audit_event(
            action=self.audit_action_name(obj, verb),
            actor=request.user,
            obj=obj,
            diff=diff_snapshots(before, after),
            ip=client_ip(request),
        )

    def log_addition(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        self._record(request, obj, "created", None, self.audit_snapshot(obj))
        return super().log_addition(request, obj, message)  # type: ignore[misc]

    def log_change(self, request: HttpRequest, obj: Any, message: Any) -> Any:
        before = self._before(request).pop((obj._meta.label, obj.pk), None)
        after = self.audit_snapshot(obj)
        if before is None or before != after:
            self._record(request, obj, "changed", before, after)
        return super().log_change(request, obj, message)  # type: ignore[misc]

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        before = self.audit_snapshot(obj)
        self._record(request, obj, "deleted", before, None)
        super().delete_model(request, obj)  # type: ignore[misc]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        with transaction.atomic():
            for obj in queryset:
                self._record(request, obj, "deleted", self.audit_snapshot(obj), None)
            super().delete_queryset(request, queryset)  # type: ignore[misc]


# JSON typed into the admin is read by the product's one JSON parser (a depth limit).
JSON_FORM_FIELDS: dict[type[models.Field[Any, Any]], dict[str, Any]] = {
    models.JSONField: {"decoder": JsonInputDecoder}
}


class TenantScopedAdmin(NotFoundMixin, AuditedAdminMixin, admin.ModelAdmin):
    formfield_overrides = JSON_FORM_FIELDS

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        if request.user.is_superuser and "tenant" not in columns:
            columns.append("tenant")
        return columns

    def get_list_filter(self, request: HttpRequest) -> Any:
        filters = list(super().get_list_filter(request))
        if request.user.is_superuser:
            filters.append("tenant")
        return filters

    # -- permissions by role ---------------------------------------------------
    def has_module_permission(self, request: HttpRequest) -> bool:
        return can_view(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        # New rows belong to the tenant the user acts in; a superuser with no
        # membership has no tenant to create them in.
        return can_edit(request) and getattr(request, "tenant", None) is not None

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)

    # -- tenant on new rows ----------------------------------------------------
    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        if not change and obj.tenant_id is None:
            obj.tenant = request.tenant  # type: ignore[attr-defined]
        super().save_model(request, obj, form, change)

    def save_formset(self, request: HttpRequest, form: Any, formset: Any, change: bool) -> None:
        for inline_form in formset.forms:
            instance = inline_form.instance
            if getattr(instance, "tenant_id", "absent") is None:
                instance.tenant_id = form.instance.tenant_id
        super().save_formset(request, form, formset, change)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        base = super().get_form(request, obj, change, **kwargs)
        tenant = getattr(request, "tenant", None)
        if obj is not None or tenant is None:
            return base

        class NewRowForm(base):  # type: ignore[misc,valid-type]
            # Model.clean() and the (tenant, ...) unique checks need the tenant
            # before validation runs, not only at save time.
            def __init__(self, *args: Any, **kw: Any) -> None:
                super().__init__(*args, **kw)
                if self.instance.tenant_id is None:
                    self.instance.tenant = tenant

        return NewRowForm

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is get_user_model():
            kwargs["queryset"] = tenant_users(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


class TenantScopedInline(admin.TabularInline):
    extra = 0
    formfield_overrides = JSON_FORM_FIELDS

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_view(request)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return can_edit(request)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.related_model is get_user_model():
            kwargs["queryset"] = tenant_users(request)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


def tenant_users(request: HttpRequest) -> QuerySet:
    """Users who are members of the request's tenant (all users for a superuser)."""
    user_model = get_user_model()
    if request.user.is_superuser:
        return user_model.objects.all()
    tenant = getattr(request, "tenant", None)
    if tenant is None:
        return user_model.objects.none()
    member_ids = Membership.objects.unscoped().filter(tenant=tenant).values("user_id")
    return user_model.objects.filter(pk__in=member_ids)
