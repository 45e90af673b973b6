"""Failed sign-ins in the admin, for superusers: who is locked out until when, and an
action (or delete) that lifts it, audited."""

from __future__ import annotations

from typing import Any

from axes.models import AccessAttempt
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from claw_platform.audit.actions import client_ip
from claw_platform.signin.actions import do_unlock_attempts
from claw_platform.signin.limits import current_lock


@admin.register(AccessAttempt)
class AccessAttemptAdmin(admin.ModelAdmin):
    list_display = [
        "username",
        "ip_address",
        "failures_since_start",
        "attempt_time",
        "locked_until",
        "path_info",
    ]
    list_filter = ["attempt_time"]
    search_fields = ["username", "ip_address"]
    date_hierarchy = "attempt_time"
    readonly_fields = [
        "username",
        "ip_address",
        "user_agent",
        "path_info",
        "failures_since_start",
        "attempt_time",
        "locked_until",
    ]
    fields = list(readonly_fields)
    actions = ["unlock"]

    @admin.display(description="Locked out until")
    def locked_until(self, obj: AccessAttempt) -> str:
        lock = current_lock(obj.username, obj.ip_address)
        return f"{lock.until:%Y-%m-%d %H:%M:%S %Z} ({lock.scope})" if lock else "-"

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_active and request.user.is_superuser)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.has_module_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_actions(self, request: HttpRequest) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # "unlock" is the audited delete
        return actions

    @admin.action(description="Unlock: forget the selected failed sign-ins")
    def unlock(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        count = do_unlock_attempts(queryset, acting_user=request.user, ip=client_ip(request))
        self.message_user(request, f"Unlocked: {count} failed sign-in record(s) removed.", messages.SUCCESS)

    def delete_model(self, request: HttpRequest, obj: AccessAttempt) -> None:
        do_unlock_attempts(
            AccessAttempt.objects.filter(pk=obj.pk), acting_user=request.user, ip=client_ip(request)
        )

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[AccessAttempt]) -> None:
        do_unlock_attempts(queryset, acting_user=request.user, ip=client_ip(request))
