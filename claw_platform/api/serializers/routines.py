"""Routines and their run history (C1-C7) over the API: every check the chat tool
and the admin make, each error naming its field, nothing saved when one fails."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import serializers

from agents.actions.routines import Trigger, check_routine_trigger
from agents.models import ActionKind, Agent, Routine, RoutineRun, RoutineStatus, Session, TriggerKind
from agents.routines.delivery import delivery_target_refusal
from agents.routines.shell import check_shell_routine
from channels_app.models import Channel
from claw_platform.api.serializers.base import StrictModelSerializer

TRIGGER_FIELDS = (
    "trigger",
    "cron",
    "timezone",
    "interval_seconds",
    "run_at",
    "event_kind",
    "event_pattern",
    "event_wait_minutes",
)
DELIVERY_FIELDS = ("deliver_channel", "deliver_target", "webhook_url", "webhook_secret")
POLICY_FIELDS = (
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
)


def trigger_field_errors(trigger: Trigger) -> dict[str, list[str]]:
    """``check_routine_trigger``'s refusal as {field: [message]}."""
    try:
        check_routine_trigger(trigger)
    except DjangoValidationError as exc:
        message = "; ".join(exc.messages)
        if "timezone" in message.lower() and "run_at" not in message:
            field = "timezone"
        elif trigger.kind == TriggerKind.EVENT:
            field = next((f for f in ("event_pattern", "event_wait_minutes") if f in message), "event_kind")
        else:
            fields: dict[str, str] = {
                TriggerKind.CRON.value: "cron",
                TriggerKind.INTERVAL.value: "interval_seconds",
                TriggerKind.ONCE.value: "run_at",
            }
            field = fields.get(str(trigger.kind), "trigger")
        return {field: [message]}
    return {}


def check_routine_fields(data: dict[str, Any], instance: Routine | None) -> None:
    """Trigger, action and command of the routine as it would be saved."""

    def value(name: str, default: Any = None) -> Any:
        if name in data:
            return data[name]
        return getattr(instance, name) if instance is not None else default

    trigger = Trigger(
        value("trigger") or "",
        cron=(value("cron", "") or "").strip(),
        timezone=value("timezone", "UTC") or "UTC",
        interval_seconds=value("interval_seconds"),
        run_at=value("run_at"),
        event_kind=value("event_kind", "") or "",
        event_pattern=value("event_pattern", "") or "",
        event_wait_minutes=value("event_wait_minutes"),
    )
    if instance is None or any(name in data for name in TRIGGER_FIELDS):
        errors = trigger_field_errors(trigger)
        if errors:
            raise serializers.ValidationError(errors)
    action = value("action", ActionKind.AGENT)
    if action == ActionKind.HEARTBEAT:
        if instance is None or instance.action != ActionKind.HEARTBEAT:
            raise serializers.ValidationError(
                {"action": ["A heartbeat is set on the agent (its heartbeat settings), not as a routine."]}
            )
    elif action == ActionKind.SHELL:
        try:
            check_shell_routine(value("command", "") or "")
        except DjangoValidationError as exc:
            raise serializers.ValidationError({"command": exc.messages}) from None
    elif not (value("prompt", "") or "").strip():
        raise serializers.ValidationError({"prompt": ["An agent routine needs a prompt."]})
    if value("deliver_channel") is not None and not (value("deliver_target", "") or "").strip():
        raise serializers.ValidationError(
            {"deliver_target": ["Name the chat id to deliver to on the channel."]}
        )


def check_routine_links(agent: Agent | None, session: Session | None, channel: Channel | None) -> None:
    """The routine's session and delivery channel belong to its agent (checked also
    when only the agent changes): a chat with another agent, or another agent's
    bot, is refused naming the field."""
    if agent is None:
        return
    if session is not None and session.agent_id != agent.pk:
        raise serializers.ValidationError({"session": ["The session is not a chat with this agent."]})
    if channel is not None and channel.agent_id != agent.pk:
        raise serializers.ValidationError(
            {"deliver_channel": ["The channel is not one of this agent's; deliver through its own."]}
        )


class RoutineSerializer(StrictModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", queryset=Agent._base_manager.none())
    session = serializers.PrimaryKeyRelatedField(
        queryset=Session._base_manager.none(), required=False, allow_null=True
    )
    status = serializers.ChoiceField(
        choices=[RoutineStatus.ACTIVE, RoutineStatus.PAUSED, RoutineStatus.CANCELLED], required=False
    )
    prompt = serializers.CharField(max_length=20_000, required=False, allow_blank=True)
    user = serializers.SerializerMethodField()
    deliver_channel = serializers.PrimaryKeyRelatedField(
        queryset=Channel._base_manager.none(), required=False, allow_null=True
    )
    webhook_secret = serializers.CharField(write_only=True, required=False, allow_blank=True, max_length=500)
    webhook_secret_set = serializers.SerializerMethodField()

    class Meta:
        model = Routine
        fields = [
            "id",
            "name",
            "agent",
            "session",
            "user",
            "prompt",
            "action",
            "command",
            *TRIGGER_FIELDS,
            *POLICY_FIELDS,
            *DELIVERY_FIELDS,
            "webhook_secret_set",
            "status",
            "consecutive_failures",
            "next_run_at",
            "last_run_at",
            "last_status",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {"name": {"required": False}}
        read_only_fields = [
            "id",
            "user",
            "webhook_secret_set",
            "consecutive_failures",
            "next_run_at",
            "last_run_at",
            "last_status",
            "created_at",
            "updated_at",
        ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        view = self.context.get("view")
        principal = getattr(view, "principal", None) if view is not None else None
        if principal is not None:
            # Only the caller's tenant's agents, and the sessions the caller sees.
            self.fields["agent"].queryset = Agent.objects.all()
            self.fields["session"].queryset = Session.objects.visible_to(principal.caller)
            self.fields["deliver_channel"].queryset = Channel.objects.all()

    def get_webhook_secret_set(self, routine: Routine) -> bool:
        return bool(routine.webhook_secret)

    def get_user(self, routine: Routine) -> str | None:
        return routine.user.get_username() if routine.user_id and routine.user else None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if self.instance is not None and self.instance.action == ActionKind.HEARTBEAT and attrs:
            raise serializers.ValidationError(
                {
                    next(iter(attrs)): [
                        "This is the agent's heartbeat: change it with the agent's heartbeat settings."
                    ]
                }
            )
        check_routine_fields(attrs, self.instance)

        def value(name: str) -> Any:
            if name in attrs:
                return attrs[name]
            return getattr(self.instance, name) if self.instance is not None else None

        check_routine_links(value("agent"), value("session"), value("deliver_channel"))
        channel, target = value("deliver_channel"), (value("deliver_target") or "").strip()
        if channel is not None and target and {"deliver_channel", "deliver_target"} & set(attrs):
            view = self.context.get("view")
            caller = getattr(getattr(view, "principal", None), "caller", None)
            if caller is not None:
                refusal = delivery_target_refusal(channel.pk, target, caller.user_id, caller.role)
                if refusal is not None:
                    raise serializers.ValidationError(
                        {"deliver_target": [refusal[0].upper() + refusal[1:] + "."]}
                    )
        return attrs


class RoutineRunSerializer(serializers.ModelSerializer):
    run = serializers.PrimaryKeyRelatedField(read_only=True)

    class Meta:
        model = RoutineRun
        fields = [
            "id",
            "attempt",
            "scheduled_for",
            "status",
            "reason",
            "output",
            "cost",
            "run",
            "delivery",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields
