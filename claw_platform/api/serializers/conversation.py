"""Sessions, messages, runs, run events and approvals."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from agents.models import Agent, ApprovalRequest, Message, Run, RunEvent, Session
from claw_platform.api.serializers.base import StrictSerializer

MAX_MESSAGE_CHARS = 100_000


class SessionSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Session
        fields = [
            "id",
            "agent",
            "user",
            "title",
            "channel",
            "external_key",
            "depth",
            "parent",
            "is_group",
            "handed_off_from",
            "active_thread",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cost",
            "created_at",
            "last_activity_at",
        ]
        read_only_fields = fields


class SessionCreateSerializer(StrictSerializer):
    agent = serializers.SlugField(max_length=64, help_text="The agent's slug.")
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    external_key = serializers.CharField(
        max_length=300,
        required=False,
        allow_null=True,
        default=None,
        help_text="Your own key for the conversation; the same key opens the same session.",
    )
    is_group = serializers.BooleanField(
        required=False,
        default=False,
        help_text="A group chat: the agent answers only messages that mention it (its name or @slug).",
    )

    def validate_agent(self, slug: str) -> Agent:
        agent = Agent.objects.filter(slug=slug).first()
        if agent is None:
            raise serializers.ValidationError("No agent with this slug.")
        return agent


class MessageSerializer(serializers.ModelSerializer):
    class Meta:
        model = Message
        fields = ["id", "seq", "role", "parts", "state", "turn", "thread", "created_at"]
        read_only_fields = fields


class SendMessageSerializer(StrictSerializer):
    text = serializers.CharField(max_length=MAX_MESSAGE_CHARS, trim_whitespace=False)
    mode = serializers.ChoiceField(
        choices=["wait", "async", "stream"],
        default="async",
        help_text="wait: 200 with the final reply; async: 202 with the run; stream: the run's events as SSE.",
    )
    timeout = serializers.IntegerField(
        min_value=1, max_value=3600, required=False, help_text="Seconds to wait in wait/stream mode."
    )

    def validate_text(self, text: str) -> str:
        if not text.strip():
            raise serializers.ValidationError("A message needs some text.")
        return text


class RunSerializer(serializers.ModelSerializer):
    reply = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = [
            "id",
            "session",
            "agent",
            "turn",
            "status",
            "model_name",
            "model_route",
            "api_key",
            "attempt",
            "cancel_requested",
            "event_seq",
            "error",
            "reply",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_reply(self, run: Run) -> str | None:
        """The reply so far: the final text of a finished run, else the partial text."""
        turn = run.turn
        return turn.response_text or turn.partial_text or None


class RunDetailSerializer(RunSerializer):
    """A run on its own (``GET runs/<id>/``): with what memory recall put into its
    prompt (M6's injection log; ``memory-injections/?run=`` lists the same)."""

    memory = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "memory"]
        read_only_fields = fields

    def get_memory(self, run: Run) -> list[dict[str, Any]]:
        return [
            {
                "id": log.pk,
                "query": log.query,
                "method": log.method,
                "candidates": log.candidates,
                "selected": log.selected,
                "tokens": log.tokens,
                "is_group": log.is_group,
            }
            for log in run.memory_injections.order_by("id")
        ]


class RunEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = RunEvent
        fields = ["id", "run", "seq", "type", "payload", "created_at"]
        read_only_fields = fields


class ApprovalSerializer(serializers.ModelSerializer):
    session = serializers.UUIDField(source="run.session_id", read_only=True)

    class Meta:
        model = ApprovalRequest
        fields = [
            "id",
            "run",
            "session",
            "call_id",
            "tool_name",
            "arguments",
            "risk",
            "request_reason",
            "details",
            "status",
            "decided_by",
            "decided_at",
            "reason",
            "created_at",
        ]
        read_only_fields = fields


class DecisionSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


# Building a ModelSerializer's fields costs ten times representing one run with them;
# representing keeps no state, so one serializer serves every thread.
_run_serializer = RunSerializer()


def run_payload(run: Run) -> dict[str, Any]:
    return dict(_run_serializer.to_representation(run))
