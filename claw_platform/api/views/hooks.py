"""Inbound webhooks (A4): ``POST /api/v1/hooks/<agent slug>/``.

In order, as ZeroClaw's gateway: body cap (64 KB), bearer key (write scope), a
per-source rate limit (the agent's ``rate_per_minute`` per key and address), the
HMAC signature when the agent's webhook has a secret (``X-Claw-Timestamp`` and
``X-Claw-Signature: sha256=<hex of HMAC-SHA256(secret, "<timestamp>.<body>")>``,
refused outside the replay window), the ``Idempotency-Key`` (a repeat gets the first
response and starts nothing), then the JSON body ``{"message": "...",
"session_key": "...", "mode": "sync" | "async"}``.

A ``sync`` repeat whose first caller got no answer (it hung up, or still waits) gets
the run's outcome once the run has settled, and a 202 with the run until then: the
record follows the run, not the first connection.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, transaction
from django.http import HttpResponse, StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from agents.actions.conversation import do_set_title, session_for_external_key
from agents.actions.runs import do_send_message
from agents.budgets.http import refuse_if_over_budget_api, session_charge
from agents.models import Agent, Run, Session
from claw_platform.api.actions.sessions import do_open_api_session
from claw_platform.api.errors import ApiError
from claw_platform.api.live import SETTLED_STATUSES, settle_run
from claw_platform.api.models import AgentWebhook, IdempotencyRecord, WebhookMode
from claw_platform.api.parsers import parse_api_json
from claw_platform.api.serializers.base import StrictSerializer
from claw_platform.api.serializers.conversation import MAX_MESSAGE_CHARS, RunSerializer, run_payload
from claw_platform.api.throttling import FixedRateThrottle, source_address
from claw_platform.api.views.base import TenantAPIView
from claw_platform.db import db_async

MAX_HOOK_BODY_BYTES = 64 * 1024
# Unix seconds: a number a float can hold (a 400-digit one overflowed the window check).
TIMESTAMP = re.compile(r"[0-9]{1,12}")
DEFAULT_WEBHOOK = AgentWebhook(
    enabled=True, signing_secret="", tolerance_seconds=300, mode=WebhookMode.SYNC, rate_per_minute=60
)


class HookBody(StrictSerializer):
    message = serializers.CharField(max_length=MAX_MESSAGE_CHARS, trim_whitespace=False)
    session_key = serializers.CharField(
        max_length=200,
        required=False,
        help_text="Same key, same session (history kept); default: a new session.",
    )
    mode = serializers.ChoiceField(
        choices=WebhookMode.values, required=False, help_text="Default: the agent's setting."
    )
    is_group = serializers.BooleanField(
        required=False,
        default=False,
        help_text="A group conversation (E16): the agent's MEMORY.md and personal memories stay "
        "out. Once set on a session_key's session it stays set.",
    )

    def validate_message(self, text: str) -> str:
        if not text.strip():
            raise serializers.ValidationError("The message needs some text.")
        return text


HookReply = inline_serializer(
    "HookReply",
    {
        "response": serializers.CharField(allow_null=True),
        "model": serializers.CharField(),
        "run": RunSerializer(),
    },
)


def signature_for(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def check_signature(webhook: AgentWebhook, request: Request, body: bytes) -> None:
    timestamp = request.META.get("HTTP_X_CLAW_TIMESTAMP", "")
    signature = request.META.get("HTTP_X_CLAW_SIGNATURE", "")
    if not timestamp or not signature:
        raise ApiError(
            401, "signature_required", "This hook needs X-Claw-Timestamp and X-Claw-Signature headers."
        )
    if not TIMESTAMP.fullmatch(timestamp):
        raise ApiError(400, "invalid", "X-Claw-Timestamp must be Unix seconds.")
    sent_at = int(timestamp)
    if abs(time.time() - sent_at) > webhook.tolerance_seconds:
        raise ApiError(403, "stale_signature", "The signed timestamp is outside the replay window.")
    expected = signature_for(webhook.signing_secret, timestamp, body)
    if not hmac.compare_digest(expected, signature.strip()):
        raise ApiError(403, "bad_signature", "The signature does not match the body.")


def hook_reply(run: Run | None, agent_slug: str) -> dict[str, Any]:
    if run is None:
        return {"response": None, "model": agent_slug, "run": None}
    payload = run_payload(run)
    return {
        "response": payload.get("reply") if run.status == "completed" else None,
        "model": agent_slug,
        "run": payload,
    }


class HookView(TenantAPIView):
    max_body_bytes = MAX_HOOK_BODY_BYTES

    @extend_schema(
        request=HookBody,
        responses={200: HookReply, 202: HookReply},
        parameters=[
            OpenApiParameter("Idempotency-Key", str, location=OpenApiParameter.HEADER, required=False),
            OpenApiParameter("X-Claw-Timestamp", str, location=OpenApiParameter.HEADER, required=False),
            OpenApiParameter("X-Claw-Signature", str, location=OpenApiParameter.HEADER, required=False),
        ],
    )
    def post(self, request: Request, slug: str) -> Any:
        raw = request.body
        agent = Agent.objects.filter(slug=slug).first()
        if agent is None:
            raise ApiError(404, "not_found", "No such hook.")
        webhook = AgentWebhook.objects.filter(agent=agent).first() or DEFAULT_WEBHOOK
        if not webhook.enabled:
            raise ApiError(404, "not_found", "No such hook.")
        source = f"hook_{agent.pk}_{self.principal.api_key.pk if self.principal.api_key else 'u'}_{source_address(request)}"
        throttle = FixedRateThrottle(f"{webhook.rate_per_minute}/min", source)
        if not throttle.allow_request(request, self):
            self.throttled(request, throttle.wait())
        if webhook.signing_secret:
            check_signature(webhook, request, raw)
        body = HookBody(data=parse_api_json(raw or b"null"))
        body.is_valid(raise_exception=True)
        mode = body.validated_data.get("mode") or webhook.mode

        idem_key = (request.META.get("HTTP_IDEMPOTENCY_KEY") or "").strip()
        if len(idem_key) > 200:
            raise ApiError(400, "invalid", "Idempotency-Key is limited to 200 characters.")
        scope = f"hook:{agent.pk}"
        request_hash = hashlib.sha256(raw).hexdigest()
        try:
            with transaction.atomic():
                record = None
                if idem_key:
                    record = IdempotencyRecord.objects.create(
                        scope=scope, key=idem_key, request_hash=request_hash
                    )
                run = self._start(agent, body.validated_data)
                if record is not None:
                    # The record follows the run: a repeat reads it, whatever becomes
                    # of this request's connection.
                    record.run = run
                    if mode == WebhookMode.ASYNC:
                        record.status_code = 202
                        record.response = _as_json(hook_reply(run, agent.slug))
                    record.save(update_fields=["run", "status_code", "response"])
        except IntegrityError:
            return self._replay(scope, idem_key, request_hash, agent.slug)
        if mode == WebhookMode.ASYNC:
            return Response(hook_reply(run, agent.slug), status=202)
        return self._wait(run, agent.slug, scope, idem_key if idem_key else None)

    def _start(self, agent: Agent, data: dict[str, Any]) -> Run:
        key = data.get("session_key")
        if key:
            session = session_for_external_key(
                agent,
                self.principal.outside_session_key(f"hook:{key}"),
                user=self.principal.session_user,
                channel="webhook",
            )
            if not self.principal.caller.acts_in_session_of(session.user_id):
                raise ApiError(
                    409,
                    "conflict",
                    "session_key: It names a session you cannot use.",
                    {"session_key": ["It names a session you cannot use."]},
                )
            if data.get("is_group") and not session.is_group:
                # Only ever on: a group's chat never gets personal memory back.
                Session._base_manager.filter(pk=session.pk).update(is_group=True)
                session.is_group = True
            if not session.title:
                # Titled here: no extra LLM call for a title per hook.
                do_set_title(session, f"webhook {key}")
                session.title = f"webhook {key}"
        else:
            session = do_open_api_session(
                agent,
                user=self.principal.session_user,
                acting_user=self.principal.acting_user,
                channel="webhook",
                title=" ".join(data["message"].split())[:80],
                is_group=bool(data.get("is_group")),
            )
        key = self.principal.api_key
        refuse_if_over_budget_api(session_charge(session, api_key_id=key.pk if key else None))
        run = do_send_message(
            session,
            data["message"],
            acting_user=self.principal.acting_user,
            api_key_id=key.pk if key else None,
        )
        if run is None:
            raise ApiError(409, "nothing_running", "Nothing is running.")
        return Run.objects.select_related("turn").get(pk=run.pk)

    def _replay(self, scope: str, key: str, request_hash: str, slug: str) -> HttpResponse:
        record = IdempotencyRecord.objects.select_related("run__turn").filter(scope=scope, key=key).first()
        if record is None:  # pragma: no cover - the unique row that refused us is gone
            raise ApiError(409, "conflict", "Retry the request.")
        if record.request_hash != request_hash:
            raise ApiError(422, "idempotency_mismatch", "This Idempotency-Key was used with another body.")
        if record.status_code is not None:
            status, reply = record.status_code, record.response
        else:
            status, reply = _outcome_of(record, slug)
        response = Response(reply, status=status)
        response["Idempotent-Replayed"] = "true"
        return response

    def _wait(self, run: Run, slug: str, scope: str, idem_key: str | None) -> StreamingHttpResponse:
        deadline = time.monotonic() + float(settings.CLAW_API_WAIT_SECONDS)
        run_id, tenant_id = run.pk, run.tenant_id

        async def body() -> AsyncIterator[bytes]:
            settled = await settle_run(run_id, deadline=deadline)
            reply = _as_json(hook_reply(settled, slug))
            if idem_key and settled is not None and settled.status in SETTLED_STATUSES:
                await db_async(_remember)(tenant_id, scope, idem_key, reply)
            yield json.dumps(reply).encode()

        return StreamingHttpResponse(body(), content_type="application/json", status=200)


def _as_json(reply: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(reply, cls=DjangoJSONEncoder))  # type: ignore[no-any-return]


def _outcome_of(record: IdempotencyRecord, slug: str) -> tuple[int, Any]:
    """A repeat of a ``wait``-mode request whose first caller got no answer (it left,
    or is still waiting): the run's outcome once it settled (remembered from then
    on), a 202 with the run while it is still going."""
    run = record.run
    if run is None:
        # Its run was deleted (with its session), or the record predates runs on records.
        if timezone.now() - record.created_at < timedelta(seconds=settings.CLAW_API_WAIT_SECONDS):
            raise ApiError(
                409, "in_progress", "The first request with this Idempotency-Key is still running."
            )
        raise ApiError(410, "run_gone", "The run of the first request with this Idempotency-Key is gone.")
    reply = _as_json(hook_reply(run, slug))
    if run.status not in SETTLED_STATUSES:
        return 202, reply
    _remember(record.tenant_id, record.scope, record.key, reply)
    return 200, reply


def _remember(tenant_id: int, scope: str, key: str, reply: dict[str, Any]) -> None:
    """The settled outcome, kept for later repeats (the first writer wins)."""
    IdempotencyRecord.objects.unscoped().filter(
        tenant_id=tenant_id, scope=scope, key=key, status_code__isnull=True
    ).update(status_code=200, response=reply)
