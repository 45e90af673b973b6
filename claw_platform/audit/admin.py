"""A read-only, filterable list of audit events."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from claw_platform.admin.scoped import NotFoundMixin, sees_every_session
from claw_platform.audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(NotFoundMixin, admin.ModelAdmin):
    list_display = ["created_at", "action", "actor_label", "object_type", "object_repr", "ip"]
    list_filter = ["action", "object_type", ("created_at", admin.DateFieldListFilter)]
    search_fields = ["action", "actor_label", "object_repr", "object_id"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "created_at",
        "tenant",
        "actor",
        "actor_label",
        "action",
        "object_type",
        "object_id",
        "object_repr",
        "ip",
        "pretty_diff",
    ]
    fields = list(readonly_fields)
    list_select_related = ["tenant"]

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        return [*columns, "tenant"] if request.user.is_superuser else columns

    @admin.display(description="Diff")
    def pretty_diff(self, obj: AuditEvent) -> str:
        return format_html("<pre>{}</pre>", json.dumps(obj.diff, indent=2, ensure_ascii=False))

    # The trail names every chat's runs, approvals and their reasons: members, who
    # see only their own chats (the member rule), do not read it.
    def has_module_permission(self, request: HttpRequest) -> bool:
        return sees_every_session(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return sees_every_session(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
