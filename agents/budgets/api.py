"""``/api/v1/budgets/`` (list, create, update, delete, with spend so far and when the
period resets), ``/api/v1/kill-switches/`` and ``/api/v1/spend-settings/``.

Reading needs the ``read`` scope (a member sees the budgets set on themselves, the
member rule), writing the ``admin`` scope. Targets (agent, user, key, routine) are
looked up inside the caller's tenant only: another tenant's agent is "not found"."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.budgets.actions import (
    do_create_budget,
    do_delete_budget,
    do_lift_kill_switch,
    do_save_spend_settings,
    do_stop_llm_calls,
    do_update_budget,
)
from agents.budgets.guard import budget_state
from agents.budgets.models import (
    MAX_CALLS_PER_HOUR,
    MAX_LIMIT,
    RATE_SCOPES,
    SCOPE_FIELD,
    Budget,
    BudgetPeriod,
    BudgetScope,
    KillSwitch,
    SpendSettings,
)
from agents.budgets.periods import is_valid_zone
from agents.models import Agent, Routine
from claw_platform.api.errors import ApiError
from claw_platform.api.models import ApiKey
from claw_platform.api.serializers.base import StrictModelSerializer, StrictSerializer
from claw_platform.api.views.base import TenantAPIView, TenantViewSet
from claw_platform.audit.actions import client_ip
from claw_platform.tenancy.models import Membership


class _ScopedSlugField(serializers.SlugRelatedField):
    """A slug of the caller's tenant: another tenant's is 'does not exist'."""

    def get_queryset(self) -> Any:
        return self.queryset.model.objects.all()  # type: ignore[union-attr]


class _MemberField(serializers.PrimaryKeyRelatedField):
    """A user of the caller's tenant (by id)."""

    def get_queryset(self) -> Any:
        ids = Membership.objects.values_list("user_id", flat=True)
        return get_user_model()._default_manager.filter(pk__in=ids)


class BudgetSerializer(StrictModelSerializer):
    scope = serializers.ChoiceField(choices=BudgetScope.choices, default=BudgetScope.TENANT)
    period = serializers.ChoiceField(choices=BudgetPeriod.choices, default=BudgetPeriod.MONTH)
    user = _MemberField(queryset=get_user_model()._default_manager.none(), required=False, allow_null=True)
    agent = _ScopedSlugField(
        slug_field="slug", queryset=Agent._base_manager.none(), required=False, allow_null=True
    )
    api_key = serializers.PrimaryKeyRelatedField(
        queryset=ApiKey._base_manager.none(), required=False, allow_null=True
    )
    routine = serializers.PrimaryKeyRelatedField(
        queryset=Routine._base_manager.none(), required=False, allow_null=True
    )
    limit = serializers.DecimalField(
        max_digits=16,
        decimal_places=6,
        min_value=Decimal("0"),
        max_value=MAX_LIMIT,
        required=False,
        allow_null=True,
    )
    calls_per_hour = serializers.IntegerField(
        min_value=1, max_value=MAX_CALLS_PER_HOUR, required=False, allow_null=True
    )
    thresholds = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=100), max_length=10, required=False
    )
    spent = serializers.SerializerMethodField()
    reserved = serializers.SerializerMethodField()
    remaining = serializers.SerializerMethodField()
    period_start = serializers.SerializerMethodField()
    resets_at = serializers.SerializerMethodField()
    calls_this_hour = serializers.SerializerMethodField()

    class Meta:
        model = Budget
        fields = [
            "id",
            "name",
            "scope",
            "user",
            "agent",
            "api_key",
            "routine",
            "limit",
            "period",
            "hard_limit",
            "thresholds",
            "calls_per_hour",
            "enabled",
            "spent",
            "reserved",
            "remaining",
            "period_start",
            "resets_at",
            "calls_this_hour",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_at", "updated_at"]

    def _state(self, budget: Budget) -> Any:
        cache = self.context.setdefault("_states", {})
        if budget.pk not in cache:
            cache[budget.pk] = budget_state(budget)
        return cache[budget.pk]

    def get_spent(self, budget: Budget) -> str:
        return str(self._state(budget).spent)

    def get_reserved(self, budget: Budget) -> str:
        return str(self._state(budget).reserved)

    def get_remaining(self, budget: Budget) -> str | None:
        remaining = self._state(budget).remaining
        return None if remaining is None else str(remaining)

    def get_period_start(self, budget: Budget) -> str | None:
        value = self._state(budget).period_start
        return value.isoformat() if value else None

    def get_resets_at(self, budget: Budget) -> str | None:
        value = self._state(budget).resets_at
        return value.isoformat() if value else None

    def get_calls_this_hour(self, budget: Budget) -> int:
        return int(self._state(budget).calls_this_hour)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        merged = {
            name: attrs.get(name, getattr(self.instance, name, None) if self.instance else None)
            for name in ("scope", "user", "agent", "api_key", "routine", "limit", "calls_per_hour")
        }
        scope = BudgetScope(merged["scope"] or BudgetScope.TENANT)
        errors: dict[str, list[str]] = {}
        target = SCOPE_FIELD.get(scope)
        for name in SCOPE_FIELD.values():
            if name == target and merged[name] is None:
                errors[name] = [f"A {scope.value} budget needs its {name.replace('_', ' ')}."]
            elif name != target and merged[name] is not None:
                errors[name] = [f"Only a {name} budget names a {name.replace('_', ' ')}."]
        if merged["limit"] is None and merged["calls_per_hour"] is None:
            errors["limit"] = ["Set a money limit, a call rate (calls_per_hour), or both."]
        if merged["calls_per_hour"] is not None and scope not in RATE_SCOPES:
            errors["calls_per_hour"] = ["A call rate is set on a tenant or an agent budget."]
        if errors:
            raise serializers.ValidationError(errors)
        for name in SCOPE_FIELD.values():
            if name != target:
                attrs[name] = None
        if "thresholds" in attrs:
            attrs["thresholds"] = sorted(set(attrs["thresholds"]))
        return attrs


class BudgetViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    """Money budgets and call rates, with their spend so far and reset time."""

    serializer_class = BudgetSerializer
    write_scope = "admin"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    lookup_value_regex = r"[0-9]{1,18}"
    filterset_fields = ["scope", "enabled", "period"]

    def scoped_queryset(self) -> Any:
        return (
            Budget.objects.visible_to(self.principal.caller)
            .select_related("agent", "user")
            .order_by("scope", "id")
        )

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = do_create_budget(
            self.principal.tenant_id,
            dict(serializer.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = do_update_budget(
            serializer.instance,
            dict(serializer.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    def perform_destroy(self, instance: Budget) -> None:
        do_delete_budget(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))


class KillSwitchSerializer(StrictModelSerializer):
    agent = _ScopedSlugField(
        slug_field="slug", queryset=Agent._base_manager.none(), required=False, allow_null=True
    )
    reason = serializers.CharField(max_length=300, required=False, allow_blank=True)

    class Meta:
        model = KillSwitch
        fields = ["id", "agent", "active", "reason", "created_at", "lifted_at"]
        read_only_fields = ["id", "active", "created_at", "lifted_at"]


class KillSwitchViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, TenantViewSet
):
    """ "Stop all LLM calls now" for the tenant or one agent; ``lift`` turns it off."""

    serializer_class = KillSwitchSerializer
    read_scope = "admin"
    write_scope = "admin"
    lookup_value_regex = r"[0-9]{1,18}"
    filterset_fields = ["active"]

    def scoped_queryset(self) -> Any:
        return KillSwitch.objects.select_related("agent").order_by("-created_at", "-id")

    def perform_create(self, serializer: Any) -> None:
        agent = serializer.validated_data.get("agent")
        serializer.instance = do_stop_llm_calls(
            self.principal.tenant_id,
            agent_id=agent.pk if agent else None,
            reason=serializer.validated_data.get("reason", ""),
            acting_user=self.principal.acting_user,
            ip=client_ip(self.request),
        )

    @action(detail=True, methods=["post"], filterset_fields=[])
    def lift(self, request: Request, pk: str) -> Response:
        switch = do_lift_kill_switch(
            self.get_object(), acting_user=self.principal.acting_user, ip=client_ip(request)
        )
        return Response(KillSwitchSerializer(switch).data)


class SpendSettingsSerializer(StrictSerializer):
    timezone = serializers.CharField(max_length=64, required=False)
    alert_webhook_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
    alert_webhook_secret = serializers.CharField(
        max_length=500, required=False, allow_blank=True, write_only=True
    )

    def validate_timezone(self, value: str) -> str:
        if not is_valid_zone(value):
            raise serializers.ValidationError("Unknown time zone (use an IANA name such as Europe/Paris).")
        return value


def _settings_body(row: SpendSettings | None) -> dict[str, Any]:
    return {
        "timezone": row.timezone if row else "UTC",
        "alert_webhook_url": row.alert_webhook_url if row else "",
        "alert_webhook_secret": "set" if row and row.alert_webhook_secret else "not set",
    }


class SpendSettingsView(TenantAPIView):
    """The tenant's time zone (budget periods, reports) and alert webhook; the
    webhook's signing secret is write-only ("set" / "not set")."""

    read_scope = "admin"
    write_scope = "admin"

    @extend_schema(responses=SpendSettingsSerializer)
    def get(self, request: Request) -> Response:
        return Response(_settings_body(SpendSettings.objects.first()))

    @extend_schema(request=SpendSettingsSerializer, responses=SpendSettingsSerializer)
    def patch(self, request: Request) -> Response:
        body = SpendSettingsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if not body.validated_data:
            raise ApiError(
                400, "invalid", "Nothing to change: send timezone, alert_webhook_url or alert_webhook_secret."
            )
        row = do_save_spend_settings(
            self.principal.tenant_id,
            dict(body.validated_data),
            acting_user=self.principal.acting_user,
            ip=client_ip(request),
        )
        return Response(_settings_body(row))
