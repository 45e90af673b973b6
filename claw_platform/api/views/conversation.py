"""Sessions (with undo/redo and messages), runs (with cancel and events) and
approvals. A message starts a run; ``mode`` says how the caller hears of it."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import django_filters
from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import transaction
from django.http import Http404, StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, inline_serializer
from rest_framework import mixins, serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from agents.actions.runs import AgentDisabled, do_cancel_run, do_decide_approval, do_send_message
from agents.budgets.http import refuse_if_over_budget_api, session_charge
from agents.engine.commands import parse_slash_command
from agents.models import (
    ApprovalRequest,
    ApprovalStatus,
    Message,
    MessageState,
    Run,
    RunEvent,
    RunStatus,
    Session,
)
from agents.runtime.chat import handle_message
from agents.runtime.events import EPHEMERAL_EVENTS
from claw_platform.api.actions.sessions import (
    do_delete_session,
    do_open_api_session,
    do_redo_turn,
    do_undo_turn,
)
from claw_platform.api.errors import ApiError
from claw_platform.api.live import SSE_HEADERS, follow_run, settle_run, sse
from claw_platform.api.renderers import SSE_RENDERERS, wants_sse
from claw_platform.api.serializers.conversation import (
    ApprovalSerializer,
    DecisionSerializer,
    MessageSerializer,
    RunDetailSerializer,
    RunEventSerializer,
    RunSerializer,
    SendMessageSerializer,
    SessionCreateSerializer,
    SessionSerializer,
    run_payload,
)
from claw_platform.api.stream_access import while_allowed
from claw_platform.api.views.base import TenantViewSet
from claw_platform.audit.actions import client_ip

CommandReplySerializer = inline_serializer(
    "CommandReply",
    {"command": serializers.CharField(), "text": serializers.CharField(), "status": serializers.CharField()},
)
NO_SESSION = "No Session matches the given query."  # get_object's words
TurnNumberSerializer = inline_serializer("TurnNumber", {"turn": serializers.IntegerField()})


def _deadline(seconds: int | None) -> float:
    return time.monotonic() + float(seconds or settings.CLAW_API_WAIT_SECONDS)


def wait_response(run: Run, seconds: int | None, *, queued_at: float | None = None) -> StreamingHttpResponse:
    """200 with the run once it finished or paused for approval (or the wait ran
    out: then it is still ``running``). Streamed, so no thread waits for it."""
    deadline = _deadline(seconds)
    run_id = run.pk

    async def body() -> AsyncIterator[bytes]:
        settled = await settle_run(run_id, deadline=deadline, queued_at=queued_at)
        yield json.dumps(run_payload(settled) if settled else {}, cls=DjangoJSONEncoder).encode()

    return StreamingHttpResponse(body(), content_type="application/json", status=200)


def stream_response(
    view: TenantViewSet,
    run: Run,
    seconds: int | None,
    *,
    after: int = 0,
    first: dict[str, Any] | None = None,
) -> StreamingHttpResponse:
    """The run's events as server-sent events (``id`` is the stored sequence number;
    chunk/thinking carry none), until it finishes or pauses for approval, or the
    caller's rights change."""
    deadline = _deadline(seconds)
    run_id, session_id = run.pk, run.session_id
    principal, since = view.principal, view.credentials_since

    async def body() -> AsyncIterator[bytes]:
        if first is not None:
            yield sse("run.created", first)
        async with while_allowed(principal, since=since) as allowed:
            async for frame in follow_run(
                run_id, session_id, after=after, deadline=deadline, still_allowed=allowed
            ):
                ephemeral = frame["type"] in EPHEMERAL_EVENTS
                yield sse(frame["type"], frame, None if ephemeral else frame["seq"])

    response = StreamingHttpResponse(body(), content_type="text/event-stream")
    for name, value in SSE_HEADERS.items():
        response[name] = value
    return response


class SessionFilter(django_filters.FilterSet):
    agent = django_filters.CharFilter(field_name="agent__slug", help_text="The agent's slug.")
    channel = django_filters.CharFilter()
    external_key = django_filters.CharFilter()

    class Meta:
        model = Session
        fields = ["agent", "channel", "external_key"]


class SessionViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, TenantViewSet
):
    """Conversations with an agent."""

    serializer_class = SessionSerializer
    filterset_class = SessionFilter
    http_method_names = ["get", "post", "delete", "head", "options"]

    def scoped_queryset(self) -> Any:
        return (
            Session.objects.visible_to(self.principal.caller)
            .filter(deleted_at__isnull=True)  # deleted in the chat page, within its undo window
            .select_related("agent")
            .order_by("-last_activity_at", "id")
        )

    @extend_schema(
        request=SessionCreateSerializer, responses={201: SessionSerializer, 200: SessionSerializer}
    )
    def create(self, request: Request) -> Response:
        body = SessionCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        key = data.get("external_key")
        if key:
            existing = Session.objects.filter(external_key=key).select_related("agent").first()
            if existing is not None and not self.principal.caller.sees_session_of(existing.user_id):
                raise ApiError(
                    409,
                    "conflict",
                    "This external_key belongs to another session.",
                    {"external_key": ["In use by another session."]},
                )
            if existing is not None:
                if existing.agent_id != data["agent"].pk:
                    raise ApiError(
                        409,
                        "conflict",
                        "This external_key belongs to a session of another agent.",
                        {"external_key": ["In use by another agent's session."]},
                    )
                return Response(SessionSerializer(existing).data, status=200)
        session = do_open_api_session(
            data["agent"],
            user=self.principal.session_user,
            acting_user=self.principal.acting_user,
            title=data.get("title") or "",
            external_key=key or None,
            ip=client_ip(request),
            is_group=data.get("is_group", False),
        )
        return Response(SessionSerializer(session).data, status=201)

    def perform_destroy(self, instance: Session) -> None:
        do_delete_session(instance, acting_user=self.principal.acting_user, ip=client_ip(self.request))

    @extend_schema(request=None, responses=TurnNumberSerializer)
    @action(detail=True, methods=["post"], filterset_class=None)
    def undo(self, request: Request, pk: str) -> Response:
        number = do_undo_turn(
            self.get_object(), acting_user=self.principal.acting_user, ip=client_ip(request)
        )
        return Response({"turn": number})

    @extend_schema(request=None, responses=TurnNumberSerializer)
    @action(detail=True, methods=["post"], filterset_class=None)
    def redo(self, request: Request, pk: str) -> Response:
        number = do_redo_turn(
            self.get_object(), acting_user=self.principal.acting_user, ip=client_ip(request)
        )
        return Response({"turn": number})

    @extend_schema(methods=["GET"], responses=MessageSerializer(many=True))
    @extend_schema(
        methods=["POST"],
        request=SendMessageSerializer,
        responses={
            200: OpenApiResponse(
                RunSerializer, description="wait mode: the settled run; or a slash command's answer"
            ),
            202: OpenApiResponse(RunSerializer, description="async mode: the queued run"),
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="stream mode: the run's events"
            ),
        },
    )
    @action(detail=True, methods=["get", "post"], filterset_class=None, renderer_classes=SSE_RENDERERS)
    def messages(self, request: Request, pk: str) -> Any:
        if request.method == "GET":
            session = self.get_object()
            queryset = Message.objects.filter(
                session=session, thread_id=session.active_thread_id, state=MessageState.ACTIVE
            ).order_by("seq")
            page = self.paginate_queryset(queryset)
            return self.get_paginated_response(MessageSerializer(page, many=True).data)
        body = SendMessageSerializer(data=request.data)
        if not body.is_valid():
            self.get_object()  # a missing or another tenant's session: 404 before the body's errors
            raise serializers.ValidationError(body.errors)
        text, mode, timeout = (
            body.validated_data["text"],
            body.validated_data["mode"],
            body.validated_data.get("timeout"),
        )
        command = parse_slash_command(text)
        queued_at = time.monotonic()
        if command is None:
            self._refuse_over_budget(pk)
            run = self._send(pk, text)
        else:
            session = self.get_object()
            if command.name != "stop":
                reply = async_to_sync(handle_message)(session.pk, text)
                return Response({"command": reply.command, "text": reply.text, "status": reply.status})
            run = do_send_message(session, text, acting_user=self.principal.acting_user)
        if run is None:
            raise ApiError(409, "nothing_running", "Nothing is running in this session.")
        new_run = Run.turn.is_cached(run)  # its turn set by do_send_message
        if not new_run:  # an approval reply or /stop: read it as it is now
            run = Run.objects.select_related("turn").get(pk=run.pk)
        if command is not None or mode == "async":
            return Response(run_payload(run), status=202 if command is None else 200)
        if mode == "wait":
            return wait_response(run, timeout, queued_at=queued_at if new_run else None)
        return stream_response(self, run, timeout, first=run_payload(run))

    def _refuse_over_budget(self, pk: str) -> None:
        """402 before anything is queued when the session's budgets are spent
        (agents.budgets); a missing session is left to ``_send``'s 404."""
        try:
            session_id = uuid.UUID(pk)
        except ValueError:
            return
        session = (
            Session.objects.visible_to(self.principal.caller)
            .filter(pk=session_id)
            .only("tenant_id", "user_id", "agent_id")
            .first()
        )
        if session is not None:
            key = self.principal.api_key
            refuse_if_over_budget_api(session_charge(session, api_key_id=key.pk if key else None))

    def _send(self, pk: str, text: str) -> Run | None:
        """A message to session ``pk`` of the caller's tenant. The action's locking read
        of the session is the lookup (no read of it beforehand)."""
        try:
            session_id = uuid.UUID(pk)
        except ValueError:
            raise Http404(NO_SESSION) from None
        try:
            return do_send_message(
                Session(pk=session_id, tenant_id=self.principal.tenant_id),
                text,
                acting_user=self.principal.acting_user,
                require_enabled=True,
                api_key_id=self.principal.api_key.pk if self.principal.api_key else None,
            )
        except Session.DoesNotExist:
            raise Http404(NO_SESSION) from None
        except AgentDisabled as disabled:
            raise ApiError(409, "agent_disabled", f"The agent {str(disabled)!r} is disabled.") from None


class RunFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=RunStatus.choices)
    session = django_filters.UUIDFilter(field_name="session_id")
    agent = django_filters.CharFilter(field_name="agent__slug", help_text="The agent's slug.")

    class Meta:
        model = Run
        fields = ["status", "session", "agent"]


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Runs: one agent turn each, executed by a worker."""

    serializer_class = RunSerializer
    filterset_class = RunFilter
    lookup_value_regex = r"[0-9]{1,18}"

    def get_serializer_class(self) -> Any:
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def scoped_queryset(self) -> Any:
        return Run.objects.visible_to(self.principal.caller).select_related("turn").order_by("-id")

    @extend_schema(request=None, responses=RunSerializer)
    @action(detail=True, methods=["post"], filterset_class=None)
    def cancel(self, request: Request, pk: str) -> Response:
        run = self.get_object()
        with transaction.atomic():
            do_cancel_run(run, acting_user=self.principal.acting_user, reason="cancelled through the API")
        return Response(run_payload(Run.objects.select_related("turn").get(pk=run.pk)))

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Only events with a higher sequence number."),
            OpenApiParameter("timeout", int, description="SSE: seconds to follow the run at most."),
        ],
        responses={
            200: RunEventSerializer(many=True),
            (200, "text/event-stream"): OpenApiResponse(
                OpenApiTypes.STR, description="the events as SSE, live"
            ),
        },
    )
    @action(
        detail=True,
        methods=["get"],
        filterset_class=None,
        pagination_class=None,
        renderer_classes=SSE_RENDERERS,
    )
    def events(self, request: Request, pk: str) -> Any:
        run = self.get_object()
        after = _int_param(request, "after", request.META.get("HTTP_LAST_EVENT_ID") or 0, minimum=0)
        if wants_sse(request):
            return stream_response(self, run, _int_param(request, "timeout", None, minimum=1))
        events = RunEvent.objects.filter(run=run, seq__gt=after).order_by("seq")[:1000]
        return Response(RunEventSerializer(events, many=True).data)


def _int_param(request: Request, name: str, default: Any, *, minimum: int) -> Any:
    raw = request.query_params.get(name)
    value = default if raw is None or raw == "" else raw
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise serializers.ValidationError(
            {name: [f"Expected a whole number, got {str(value)[:40]!r}."]}
        ) from None
    if number < minimum or number > 10**12:
        raise serializers.ValidationError({name: [f"Must be at least {minimum}."]})
    return number


class ApprovalFilter(django_filters.FilterSet):
    status = django_filters.ChoiceFilter(choices=ApprovalStatus.choices)
    run = django_filters.NumberFilter(field_name="run_id")
    session = django_filters.UUIDFilter(field_name="run__session_id")

    class Meta:
        model = ApprovalRequest
        fields = ["status", "run", "session"]


class ApprovalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantViewSet):
    """Tool calls waiting for a person's decision (``?status=pending``)."""

    serializer_class = ApprovalSerializer
    filterset_class = ApprovalFilter
    lookup_value_regex = r"[0-9]{1,18}"

    def scoped_queryset(self) -> Any:
        return ApprovalRequest.objects.visible_to(self.principal.caller).select_related("run").order_by("-id")

    @extend_schema(request=DecisionSerializer, responses=ApprovalSerializer)
    @action(detail=True, methods=["post"], filterset_class=None)
    def approve(self, request: Request, pk: str) -> Response:
        return self._decide(request, True)

    @extend_schema(request=DecisionSerializer, responses=ApprovalSerializer)
    @action(detail=True, methods=["post"], filterset_class=None)
    def deny(self, request: Request, pk: str) -> Response:
        return self._decide(request, False)

    def _decide(self, request: Request, approved: bool) -> Response:
        approval = self.get_object()
        body = DecisionSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            with transaction.atomic():
                decided = do_decide_approval(
                    approval,
                    approved,
                    acting_user=self.principal.acting_user,
                    reason=body.validated_data["reason"],
                )
        except ValueError as exc:
            raise ApiError(409, "conflict", str(exc)) from None
        return Response(ApprovalSerializer(decided).data)
