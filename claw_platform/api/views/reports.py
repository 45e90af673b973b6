"""Usage aggregates (by agent, user, model, day over a period) and the audit trail."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import django_filters
from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import mixins, serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.budgets.guard import tenant_zone
from agents.budgets.usage_report import DIMENSIONS, csv_lines, parse_groups, usage_rows
from agents.budgets.usage_report import UsageQuery as ReportQuery
from agents.models import Agent
from claw_platform.api.serializers.access import AuditEventSerializer, UsageRowSerializer
from claw_platform.api.views.base import TenantAPIView, TenantViewSet
from claw_platform.audit.export import FORMATS, export_rows, render
from claw_platform.audit.models import AuditEvent

MAX_PERIOD_DAYS = 400


class UsageQuery(serializers.Serializer):
    group_by = serializers.CharField(
        required=False,
        default="agent",
        help_text="Comma-separated: " + ", ".join(DIMENSIONS) + ".",
    )
    since = serializers.DateField(required=False, help_text="First day (default: 30 days ago).")
    until = serializers.DateField(required=False, help_text="Last day, included (default: today).")
    agent = serializers.SlugField(required=False, help_text="Only this agent (slug).")
    format = serializers.ChoiceField(
        choices=["json", "csv"], required=False, default="json", help_text="csv: a streamed CSV file."
    )

    def validate_group_by(self, value: str) -> list[str]:
        try:
            return parse_groups(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        today = self.context["today"]
        attrs.setdefault("until", today)
        attrs.setdefault("since", attrs["until"] - timedelta(days=29))
        if attrs["since"] > attrs["until"]:
            raise serializers.ValidationError({"since": ["Must not be after until."]})
        if (attrs["until"] - attrs["since"]).days > MAX_PERIOD_DAYS:
            raise serializers.ValidationError(
                {"since": [f"The period is limited to {MAX_PERIOD_DAYS} days."]}
            )
        return attrs


UsageResponse = inline_serializer(
    "UsageReport",
    {
        "since": serializers.DateField(),
        "until": serializers.DateField(),
        "group_by": serializers.ListField(child=serializers.CharField()),
        "results": UsageRowSerializer(many=True),
    },
)


def tenant_today(tenant_id: int) -> date:
    """Today in the tenant's time zone (its reports' days)."""
    return timezone.now().astimezone(ZoneInfo(tenant_zone(tenant_id))).date()


class UsageView(TenantAPIView):
    """Tokens, cost and LLM calls of the tenant, grouped, from the daily rollup; days
    are the tenant's (its time zone). A member: their own calls. ``?format=csv``:
    the same rows as a CSV file."""

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # ``format`` names the report's format here, not DRF's renderer override;
        # errors are still the API's JSON.
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[UsageQuery], responses={(200, "application/json"): UsageResponse, (200, "text/csv"): str}
    )
    def get(self, request: Request) -> Response | StreamingHttpResponse:
        tenant_id = self.principal.tenant_id
        query = UsageQuery(data=request.query_params, context={"today": tenant_today(tenant_id)})
        query.is_valid(raise_exception=True)
        q = query.validated_data
        agent_id = None
        if q.get("agent"):
            agent_id = (
                Agent.objects.unscoped()
                .filter(tenant_id=tenant_id, slug=q["agent"])
                .values_list("pk", flat=True)
                .first()
            )
            if agent_id is None:
                raise serializers.ValidationError({"agent": ["No such agent in this tenant."]})
        groups: list[str] = q["group_by"]
        rows = usage_rows(
            self.principal.caller, ReportQuery(q["since"], q["until"], tuple(groups), agent_id=agent_id)
        )
        if q["format"] == "csv":
            response = StreamingHttpResponse(csv_lines(groups, rows), content_type="text/csv; charset=utf-8")
            name = f"usage-{'-'.join(groups)}-{q['since']:%Y%m%d}-{q['until']:%Y%m%d}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            return response
        return Response(
            {
                "since": q["since"],
                "until": q["until"],
                "group_by": groups,
                "results": UsageRowSerializer(rows, many=True).data,
            }
        )


class UtcDateTimeFilter(django_filters.IsoDateTimeFilter):
    """Any ISO offset Python accepts, compared in UTC (PostgreSQL refuses offsets
    beyond ±15:59 that Python parses)."""

    def filter(self, qs: Any, value: Any) -> Any:
        if value is not None:
            try:
                value = value.astimezone(UTC)
            except (OverflowError, ValueError):
                raise serializers.ValidationError({self.field_name: ["Out of range."]}) from None
        return super().filter(qs, value)


class AuditFilter(django_filters.FilterSet):
    action = django_filters.CharFilter()
    object_type = django_filters.CharFilter()
    object_id = django_filters.CharFilter()
    since = UtcDateTimeFilter(field_name="created_at", lookup_expr="gte")
    until = UtcDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = AuditEvent
        fields = ["action", "object_type", "object_id", "since", "until"]


class AuditEventViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """The tenant's audit trail, newest first (admin scope)."""

    serializer_class = AuditEventSerializer
    filterset_class = AuditFilter
    read_scope = "admin"
    lookup_value_regex = r"[0-9]{1,18}"

    def scoped_queryset(self) -> Any:
        return AuditEvent.objects.all().order_by("-created_at", "-id")


class AuditExportQuery(serializers.Serializer):
    format = serializers.ChoiceField(choices=["jsonl", "csv"], required=False, default="jsonl")
    since = serializers.DateField(required=False, help_text="First day (included).")
    until = serializers.DateField(required=False, help_text="Last day (included).")
    action = serializers.CharField(required=False, max_length=64, help_text="Only this action.")


class AuditExportView(TenantAPIView):
    """The tenant's audit trail as JSON Lines or CSV, oldest first, streamed (admin
    scope: owners and admins; members and viewers get nothing)."""

    read_scope = "admin"

    def perform_content_negotiation(self, request: Request, force: bool = False) -> Any:
        # ``format`` names the export's format here, not DRF's renderer override;
        # errors are still the API's JSON.
        renderer = self.get_renderers()[0]
        return renderer, renderer.media_type

    @extend_schema(
        parameters=[AuditExportQuery], responses={(200, "application/x-ndjson"): str, (200, "text/csv"): str}
    )
    def get(self, request: Request) -> StreamingHttpResponse:
        query = AuditExportQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        tz = timezone.get_current_timezone()
        since = timezone.make_aware(datetime.combine(q["since"], time.min), tz) if q.get("since") else None
        until = (
            timezone.make_aware(datetime.combine(q["until"] + timedelta(days=1), time.min), tz)
            if q.get("until")
            else None
        )
        fmt = q["format"]
        rows = export_rows(self.principal.tenant_id, since=since, until=until, action=q.get("action", ""))
        response = StreamingHttpResponse(render(fmt, rows), content_type=FORMATS[fmt])
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.{fmt}"'
        return response
