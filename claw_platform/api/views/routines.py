"""Routines (C1-C7): list, create, get, update, delete, ``POST …/run/`` (run now) and
``GET …/runs/`` (the history). Reading needs the read scope, changing the write
scope; a member sees and changes only the routines that act for them (the member
rule: ``Routine.MEMBER_OWNER``), owners and admins all of the tenant's."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.actions.routines import (
    ActiveCapReached,
    Trigger,
    do_create_routine,
    do_run_routine_now,
    do_set_routine_status,
    do_update_routine,
)
from agents.models import ActionKind, Routine, RoutineRun
from claw_platform.api.errors import ApiError
from claw_platform.api.serializers.routines import (
    DELIVERY_FIELDS,
    POLICY_FIELDS,
    RoutineRunSerializer,
    RoutineSerializer,
)
from claw_platform.api.views.base import TenantViewSet
from claw_platform.audit.actions import record_audit_event

HISTORY_SHOWN = 50


def _refused(exc: DjangoValidationError, field: str = "non_field_errors") -> serializers.ValidationError:
    return serializers.ValidationError({field: exc.messages})


class RoutineViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.UpdateModelMixin,
    mixins.DestroyModelMixin,
    TenantViewSet,
):
    serializer_class = RoutineSerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    lookup_value_regex = r"[0-9]{1,18}"
    filterset_fields = ["status", "trigger", "action"]

    def scoped_queryset(self) -> Any:
        return (
            Routine.objects.visible_to(self.principal.caller).select_related("agent", "user").order_by("id")
        )

    def _check_can_act(self) -> None:
        if not self.principal.caller.can_act:
            raise ApiError(403, "forbidden", "Viewers cannot change routines.")

    def perform_create(self, serializer: Any) -> None:
        self._check_can_act()
        data = dict(serializer.validated_data)
        user = self.principal.session_user
        trigger = Trigger(
            data.get("trigger", ""),
            cron=(data.get("cron") or "").strip(),
            timezone=data.get("timezone") or "UTC",
            interval_seconds=data.get("interval_seconds"),
            run_at=data.get("run_at"),
            event_kind=data.get("event_kind") or "",
            event_pattern=data.get("event_pattern") or "",
            event_wait_minutes=data.get("event_wait_minutes"),
        )
        options = {
            name: data[name]
            for name in (*POLICY_FIELDS, *DELIVERY_FIELDS, "action", "command")
            if name in data
        }
        if data.get("status") == "paused":
            options["status"] = "paused"  # made paused: it does not count against the cap
        session = data.get("session")
        try:
            routine = do_create_routine(
                tenant_id=self.principal.tenant_id,
                agent_id=data["agent"].pk,
                user_id=getattr(user, "pk", None),
                session_id=session.pk if session is not None else None,
                name=data.get("name") or (data.get("prompt") or data.get("command") or "routine")[:80],
                prompt=data.get("prompt") or "",
                trigger=trigger,
                acting_user=self.principal.acting_user,
                options=options,
            )
        except ActiveCapReached as exc:
            raise _refused(exc, "status") from None  # made active: it would count past the cap
        except DjangoValidationError as exc:
            raise _refused(exc) from None
        serializer.instance = routine

    def perform_update(self, serializer: Any) -> None:
        self._check_can_act()
        data = dict(serializer.validated_data)
        status = data.pop("status", None)
        routine = serializer.instance
        # The field a refusal names: the status being set, else the agent an active
        # routine moves to (the cap on active routines counts it there).
        field = "status" if status else ("agent" if "agent" in data else "non_field_errors")
        try:
            with transaction.atomic():
                # Paused first, then moved: a routine paused in the same request does
                # not count where it moves to.
                if status is not None and status != "active" and status != routine.status:
                    routine = do_set_routine_status(routine, status, acting_user=self.principal.acting_user)
                if data:
                    routine = do_update_routine(routine, data, acting_user=self.principal.acting_user)
                if status == "active" and status != routine.status:
                    routine = do_set_routine_status(routine, status, acting_user=self.principal.acting_user)
        except DjangoValidationError as exc:
            raise _refused(exc, field) from None
        serializer.instance = routine

    def perform_destroy(self, instance: Routine) -> None:
        self._check_can_act()
        if instance.action == ActionKind.HEARTBEAT:
            raise ApiError(
                409,
                "heartbeat_routine",
                "This is the agent's heartbeat: turn it off with the agent's heartbeat_enabled.",
            )
        with transaction.atomic():
            record_audit_event(
                action="routine.deleted", actor=self.principal.acting_user, obj=instance, diff={}
            )
            instance.delete()

    @extend_schema(request=None, responses=RoutineSerializer)
    @action(detail=True, methods=["post"], filterset_fields=[])
    def run(self, request: Request, pk: str) -> Response:
        """Run now: starts within a second on a worker (overlap and hourly cap apply)."""
        routine = self.get_object()
        self._check_can_act()
        try:
            do_run_routine_now(routine, acting_user=self.principal.acting_user)
        except DjangoValidationError as exc:
            raise _refused(exc, "status") from None
        return Response(
            RoutineSerializer(Routine.objects.get(pk=routine.pk), context={"view": self}).data, 202
        )

    @extend_schema(request=None, responses=RoutineRunSerializer(many=True))
    @action(detail=True, methods=["get"], filterset_fields=[], pagination_class=None)
    def runs(self, request: Request, pk: str) -> Response:
        routine = self.get_object()
        rows = RoutineRun.objects.filter(routine=routine).order_by("-started_at", "-id")[:HISTORY_SHOWN]
        return Response(RoutineRunSerializer(rows, many=True).data)
