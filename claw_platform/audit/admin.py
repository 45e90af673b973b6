"""A read-only, filterable list of audit events."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponseBase, StreamingHttpResponse
from django.urls import path, reverse
from django.utils.html import format_html

from claw_platform.admin.scoped import NotFoundMixin, request_membership, sees_every_session
from claw_platform.audit.export import FORMATS, export_rows, render
from claw_platform.audit.models import AuditEvent
from claw_platform.tenancy.models import CONFIG_EDITOR_ROLES


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

    def get_urls(self) -> list[Any]:
        export = self.admin_site.admin_view(self.export_view)
        return [path("export/<str:fmt>/", export, name="audit_auditevent_export"), *super().get_urls()]

    def export_view(self, request: HttpRequest, fmt: str) -> HttpResponseBase:
        """The trail as JSONL or CSV, streamed: owners and admins (their tenant's),
        superusers (every row); like /api/v1/audit/export/."""
        if fmt not in FORMATS:
            raise Http404
        membership = request_membership(request)
        if not (request.user.is_superuser or (membership and membership.role in CONFIG_EDITOR_ROLES)):
            raise PermissionDenied
        tenant_id = membership.tenant_id if membership else None
        rows = export_rows(tenant_id, all_tenants=bool(request.user.is_superuser and membership is None))
        response = StreamingHttpResponse(render(fmt, rows), content_type=FORMATS[fmt])
        response["Content-Disposition"] = f'attachment; filename="audit.{fmt}"'
        return response

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        response = super().changelist_view(request, extra_context)
        membership = request_membership(request)
        if hasattr(response, "context_data") and (
            request.user.is_superuser or (membership and membership.role in CONFIG_EDITOR_ROLES)
        ):
            self.message_user(
                request,
                format_html(
                    'Export the trail: <a href="{}">JSON Lines</a> · <a href="{}">CSV</a>',
                    reverse("admin:audit_auditevent_export", args=["jsonl"]),
                    reverse("admin:audit_auditevent_export", args=["csv"]),
                ),
                messages.INFO,
            )
        return response

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
