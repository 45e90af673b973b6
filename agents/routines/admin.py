"""Admin pages of routines (A2, C5): each routine with its trigger and policies (the
defaults shown on the add form), its last 50 runs, and the actions run now, pause
and resume. The member rule applies (``MemberRuleMixin``): a member sees only the
routines that act for them; changing routines needs the admin or owner role."""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from rest_framework import serializers

from agents.actions.routines import (
    check_active_cap,
    check_routine_trigger,
    check_status_may_change,
    counts_anew,
    do_run_routine_now,
    do_set_routine_status,
    set_status_fields,
    trigger_of,
    wake_schedulers,
)
from agents.models import ActionKind, Agent, Routine, RoutineRun, RoutineStatus, Session, TriggerKind
from claw_platform.admin.scoped import MemberRuleMixin, TenantScopedAdmin, TenantScopedInline
from claw_platform.api.serializers.routines import (
    DELIVERY_FIELDS,
    TRIGGER_FIELDS,
    check_routine_fields,
    check_routine_links,
)

# A heartbeat routine's fields that the agent's heartbeat settings own.
HEARTBEAT_FIXED = (
    "name",
    "agent",
    "user",
    "session",
    "status",
    "action",
    "prompt",
    "command",
    *TRIGGER_FIELDS,
)


class RoutineForm(forms.ModelForm):
    """The admin builds it per request (``get_form``), with the fieldsets' fields."""

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        instance = self.instance if self.instance.pk else None
        always = ("action", "command", "prompt", "deliver_channel", "deliver_target")
        changed = {name: data.get(name) for name in (*TRIGGER_FIELDS, *always) if name in self.fields}
        if instance is not None:
            changed = {k: v for k, v in changed.items() if k in self.changed_data or k in always}
        try:
            check_routine_fields(changed, instance)
        except serializers.ValidationError as exc:
            detail = exc.detail if isinstance(exc.detail, dict) else {"__all__": exc.detail}
            for field, problems in detail.items():
                target = field if field in self.fields else None
                self.add_error(target, [str(p) for p in problems])
        try:
            check_routine_links(data.get("agent"), data.get("session"), data.get("deliver_channel"))
        except serializers.ValidationError as exc:
            for field, problems in exc.detail.items():  # type: ignore[union-attr]
                self.add_error(field, [str(p) for p in problems])
        if not self.errors:
            self._check_status(data)
        return data

    def _check_status(self, data: dict[str, Any]) -> None:
        """What ``do_set_routine_status`` holds the other paths to: a cancelled or
        completed routine stays so, and a routine that becomes active (made active,
        resumed, or moved to another agent or user while active) must fit the cap
        on active routines (``check_active_cap``, the one rule). The admin's change
        view runs the form and the save in one transaction, so the cap's lock holds
        until the routine is saved."""
        stored = self.instance if self.instance.pk else None
        if stored is not None and "status" in self.changed_data:
            try:
                check_status_may_change(stored)
                if data.get("status") == RoutineStatus.ACTIVE and not set(self.changed_data) & set(
                    TRIGGER_FIELDS
                ):
                    set_status_fields(copy.copy(stored), RoutineStatus.ACTIVE, timezone.now())
            except ValidationError as exc:
                self.add_error("status", exc.messages)
                return
        candidate = copy.copy(self.instance)
        for name in ("agent", "user", "status", "action"):
            if name in self.fields:
                setattr(candidate, name, data.get(name))
        if not counts_anew(stored, candidate):
            return
        try:
            check_active_cap(candidate)
        except ValidationError as exc:
            moved = [name for name in ("agent", "user") if name in self.changed_data]
            field = "status" if stored is None or "status" in self.changed_data or not moved else moved[0]
            self.add_error(field, exc.messages)


class RoutineRunInline(TenantScopedInline):
    model = RoutineRun
    fields = (
        "started_at",
        "scheduled_for",
        "attempt",
        "status",
        "reason",
        "run",
        "cost",
        "delivery",
        "finished_at",
    )
    readonly_fields = fields
    ordering = ["-started_at", "-id"]
    show_change_link = True
    max_num = 0
    can_delete = False

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).select_related("run")


@admin.register(Routine)
class RoutineAdmin(MemberRuleMixin, TenantScopedAdmin):
    form = RoutineForm
    list_display = [
        "name",
        "agent",
        "user",
        "trigger",
        "action",
        "status",
        "next_run_at",
        "last_run_at",
        "last_status",
        "consecutive_failures",
    ]
    list_filter = ["status", "trigger", "action", "agent"]
    list_select_related = ["agent", "user"]
    search_fields = ["name", "prompt"]
    readonly_fields = [
        "next_run_at",
        "last_run_at",
        "last_status",
        "consecutive_failures",
        "created_at",
        "updated_at",
    ]
    fieldsets = [
        (None, {"fields": ["name", "agent", "user", "session", "status"]}),
        ("What it does", {"fields": ["action", "prompt", "command"]}),
        ("When", {"fields": list(TRIGGER_FIELDS)}),
        ("Delivery", {"fields": list(DELIVERY_FIELDS)}),
        (
            "Policies",
            {
                "fields": [
                    "missed_policy",
                    "catchup_window_seconds",
                    "max_catchup_runs",
                    "overlap_policy",
                    "jitter_seconds",
                    "max_retries",
                    "retry_backoff_seconds",
                    "timeout_seconds",
                    "max_runs_per_hour",
                    "pause_after_failures",
                ]
            },
        ),
        (
            "State",
            {
                "fields": [
                    "next_run_at",
                    "last_run_at",
                    "last_status",
                    "consecutive_failures",
                    "created_at",
                    "updated_at",
                ]
            },
        ),
    ]
    inlines = [RoutineRunInline]
    actions = ["run_now", "pause", "resume"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.action == ActionKind.HEARTBEAT:
            # Kept in step with the agent's heartbeat settings (heartbeat_schedule): set there.
            fields += [name for name in HEARTBEAT_FIXED if name not in fields]
        return fields

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        tenant = getattr(request, "tenant", None)
        if db_field.name == "agent":
            kwargs["queryset"] = (
                Agent.objects.unscoped().filter(tenant=tenant) if tenant else Agent.objects.none()
            )
        if db_field.name == "deliver_channel":
            from channels_app.models import Channel

            kwargs["queryset"] = (
                Channel.objects.unscoped().filter(tenant=tenant) if tenant else Channel.objects.none()
            )
        if db_field.name == "session":
            sessions = Session.objects.unscoped().filter(tenant=tenant) if tenant else Session.objects.none()
            kwargs["queryset"] = sessions
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def save_model(self, request: HttpRequest, obj: Routine, form: Any, change: bool) -> None:
        if not change or set(form.changed_data) & set(TRIGGER_FIELDS) or "status" in form.changed_data:
            obj.cron = obj.cron.strip()
            try:
                first = check_routine_trigger(trigger_of(obj))
            except ValidationError:
                first = None  # the form checked it; a resumed past one-shot stays without a next run
            obj.next_run_at = first if obj.status == RoutineStatus.ACTIVE else obj.next_run_at
            if obj.trigger == TriggerKind.EVENT and obj.event_cursor is None:
                obj.event_cursor = timezone.now()
        if change and "status" in form.changed_data:
            # As do_set_routine_status: resumed with a clean slate, cancelled for good.
            with contextlib.suppress(ValidationError):  # a past one-shot: the form refused it
                set_status_fields(obj, obj.status, timezone.now())
        if not change and obj.created_by_id is None:
            obj.created_by_id = request.user.pk
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            wake_schedulers()

    def _each(self, request: HttpRequest, queryset: QuerySet, what: str, act: Any) -> None:
        done = 0
        for routine in queryset:
            try:
                act(routine)
                done += 1
            except ValidationError as exc:
                self.message_user(request, f"{routine.name}: {'; '.join(exc.messages)}", messages.WARNING)
            except PermissionDenied:
                self.message_user(request, "You cannot change this tenant's routines.", messages.ERROR)
                return
        self.message_user(request, f"{what}: {done} routine(s).")

    def _check_edit(self, request: HttpRequest) -> None:
        if not self.has_change_permission(request):
            raise PermissionDenied

    @admin.action(description="Run the selected routines now")
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._check_edit(request)
        self._each(request, queryset, "Started", lambda r: do_run_routine_now(r, acting_user=request.user))

    @admin.action(description="Pause the selected routines")
    def pause(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._check_edit(request)
        self._each(
            request,
            queryset.filter(status=RoutineStatus.ACTIVE),
            "Paused",
            lambda r: do_set_routine_status(r, RoutineStatus.PAUSED, acting_user=request.user),
        )

    @admin.action(description="Resume the selected routines")
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._check_edit(request)
        self._each(
            request,
            queryset.filter(status=RoutineStatus.PAUSED),
            "Resumed",
            lambda r: do_set_routine_status(r, RoutineStatus.ACTIVE, acting_user=request.user),
        )


@admin.register(RoutineRun)
class RoutineRunAdmin(MemberRuleMixin, TenantScopedAdmin):
    list_display = [
        "routine",
        "scheduled_for",
        "attempt",
        "status",
        "reason",
        "run",
        "cost",
        "started_at",
        "finished_at",
    ]
    list_filter = ["status"]
    list_select_related = ["routine", "run"]
    readonly_fields = [
        "routine",
        "fire",
        "attempt",
        "scheduled_for",
        "status",
        "reason",
        "output",
        "run",
        "cost",
        "delivery",
        "started_at",
        "finished_at",
    ]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
