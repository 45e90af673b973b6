"""``/v1/chat/completions`` and ``/v1/models`` as async views: a request waits for its
run on the event loop (channel layer + database), holding no thread, and every
error is in OpenAI's format (``{"error": {"message", "type", "param", "code"}}``).

Sessions: ``X-Claw-Session: <your key>`` or the ``user`` field names a persistent
session (per agent); without either every request opens a fresh session, seeded
with the request's earlier messages.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework.exceptions import AuthenticationFailed

from agents.actions.attachments import do_attach_images
from agents.actions.conversation import do_set_title, session_for_external_key
from agents.actions.runs import do_send_message
from agents.budgets.http import refuse_if_over_budget_openai, session_charge
from agents.engine.commands import parse_slash_command
from agents.models import Agent, Message, Run, RunStatus, UsageRecord
from agents.runtime.chat import handle_message
from claw_platform.api.actions.sessions import do_open_api_session, do_seed_history
from claw_platform.api.auth import authenticate_key, bearer_token
from claw_platform.api.credential_watch import credential_watch
from claw_platform.api.live import SSE_HEADERS, follow_run, settle_run
from claw_platform.api.openai.wire import (
    ChatRequest,
    WireError,
    chunk_body,
    completion_body,
    model_body,
    parse_chat_request,
    parse_wire_json,
    usage_body,
)
from claw_platform.api.principal import Principal
from claw_platform.api.stream_access import while_allowed
from claw_platform.api.throttling import PrincipalRateThrottle
from claw_platform.db import db_async
from claw_platform.tenancy.context import keep_scope_while_streaming, set_scope, tenant_context

SESSION_HEADER = "HTTP_X_CLAW_SESSION"


def _db(fn: Any) -> Any:
    return db_async(fn)


@dataclass
class _ThrottleRequest:
    auth: Principal


def _authenticate(request: HttpRequest) -> Principal:
    token = bearer_token(request)
    if token is None:
        raise WireError(
            "Send your API key as 'Authorization: Bearer <key>'.",
            status=401,
            code="invalid_api_key",
            error_type="authentication_error",
        )
    try:
        principal = Principal.for_key(authenticate_key(token))
    except AuthenticationFailed as exc:
        raise WireError(
            str(exc.detail), status=401, code="invalid_api_key", error_type="authentication_error"
        ) from None
    throttle = PrincipalRateThrottle()
    if not throttle.allow_request(_ThrottleRequest(principal), None):  # type: ignore[arg-type]
        wait = throttle.wait()
        error = WireError(
            "Rate limit reached for this API key.",
            status=429,
            code="rate_limit_exceeded",
            error_type="rate_limit_error",
        )
        error.retry_after = int(wait or 1)  # type: ignore[attr-defined]
        raise error
    return principal


def _error_response(error: WireError) -> JsonResponse:
    response = JsonResponse(error.body(), status=error.status)
    retry_after = getattr(error, "retry_after", None)
    if retry_after:
        response["Retry-After"] = str(retry_after)
    return response


@csrf_exempt
async def models_view(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """The tenant's enabled agents, as models."""
    if request.method != "GET":
        return _error_response(WireError("Use GET.", status=405, code="method_not_allowed"))
    try:
        principal = await _db(_authenticate)(request)
        body = await _db(_models)(principal, slug)
    except WireError as error:
        return _error_response(error)
    return JsonResponse(body)


def _models(principal: Principal, slug: str | None) -> dict[str, Any]:
    with tenant_context(principal.tenant_id):
        agents = Agent.objects.filter(enabled=True).order_by("slug")
        owner = f"tenant:{principal.tenant_id}"
        if slug is not None:
            agent = agents.filter(slug=slug).first()
            if agent is None:
                raise WireError(
                    f"The model '{slug}' does not exist.", "model", status=404, code="model_not_found"
                )
            return model_body(agent.slug, int(agent.created_at.timestamp()), owner)
        return {
            "object": "list",
            "data": [model_body(a.slug, int(a.created_at.timestamp()), owner) for a in agents],
        }


@dataclass
class _Started:
    run: Run | None
    session_id: Any
    agent_slug: str
    command_text: str | None = None


@csrf_exempt
async def chat_completions_view(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    if request.method != "POST":
        return _error_response(WireError("Use POST.", status=405, code="method_not_allowed"))
    try:
        since = credential_watch.generation()
        principal = await _db(_authenticate)(request)
        # The key's tenant for the rest of the call (the middleware resets the scope
        # when the request ends): its run's settling and usage read that tenant's rows.
        set_scope(principal.tenant_id)
        if not principal.allows("write"):
            raise WireError(
                "This API key cannot write (it needs the 'write' scope).",
                status=403,
                code="insufficient_scope",
                error_type="permission_error",
            )
        # The body middleware stopped at the image cap; without images, the API's own cap.
        body = request.body or b"null"
        over_api_cap = len(body) > settings.CLAW_API_MAX_BODY_BYTES
        if len(body) > settings.CLAW_API_IMAGE_MAX_BODY_BYTES or (
            over_api_cap and b'"image_url"' not in body
        ):
            raise WireError("The request body is too large.", status=413, code="payload_too_large")
        chat = parse_chat_request(parse_wire_json(body))
        if not chat.images and over_api_cap:
            raise WireError("The request body is too large.", status=413, code="payload_too_large")
        queued_at = time.monotonic()
        started = await _db(_start)(principal, chat, request.META.get(SESSION_HEADER, ""))
        if started.command_text is not None:
            return JsonResponse(
                completion_body(
                    f"chatcmpl-cmd-{int(time.time() * 1000)}",
                    chat.model,
                    started.command_text,
                    usage_body(0, 0),
                )
            )
        assert started.run is not None
    except WireError as error:
        return _error_response(error)
    deadline = time.monotonic() + float(settings.CLAW_API_WAIT_SECONDS)
    if chat.stream:
        streaming = keep_scope_while_streaming(
            StreamingHttpResponse(
                _stream(started, chat, deadline, principal, since), content_type="text/event-stream"
            )
        )
        for name, value in SSE_HEADERS.items():
            streaming[name] = value
        streaming["X-Claw-Session"] = str(started.session_id)
        return streaming
    # A new run (its turn set by do_send_message), not one an approval reply resumed.
    new_run = Run.turn.is_cached(started.run)
    run = await settle_run(started.run.pk, deadline=deadline, queued_at=queued_at if new_run else None)
    try:
        text = _outcome_text(run)
    except WireError as error:
        return _error_response(error)
    assert run is not None
    usage = await _db(_usage)(run)
    response = JsonResponse(completion_body(f"chatcmpl-{run.pk}", chat.model, text, usage))
    response["X-Claw-Session"] = str(started.session_id)
    return response


def _start(principal: Principal, chat: ChatRequest, session_key: str) -> _Started:
    with tenant_context(principal.tenant_id):
        agent = Agent.objects.filter(slug=chat.model).first()
        if agent is None or not agent.enabled:
            raise WireError(
                f"The model '{chat.model}' does not exist.", "model", status=404, code="model_not_found"
            )
        key = session_key.strip()[:200] or chat.user
        with transaction.atomic():
            if key:
                session = session_for_external_key(
                    agent,
                    principal.outside_session_key(f"openai:{agent.slug}:{key}"),
                    user=principal.session_user,
                    channel="openai",
                )
                if not principal.caller.acts_in_session_of(session.user_id):
                    raise WireError(
                        "This session key names a session you cannot use.",
                        "user",
                        status=409,
                        code="conflict",
                    )
                if not session.title:
                    do_set_title(session, _title(chat.text))
                    session.title = _title(chat.text)
            else:
                # Titled from the first message: no extra LLM call for a title per request.
                session = do_open_api_session(
                    agent,
                    user=principal.session_user,
                    acting_user=principal.acting_user,
                    channel="openai",
                    title=_title(chat.text),
                )
            if chat.history and not Message.objects.filter(session=session).exists():
                do_seed_history(session, chat.history)
        command = parse_slash_command(chat.text)
        if command is not None and command.name != "stop":
            from asgiref.sync import async_to_sync

            reply = async_to_sync(handle_message)(session.pk, chat.text)
            return _Started(None, session.pk, agent.slug, command_text=reply.text)
        if command is None:
            api_key = principal.api_key
            refuse_if_over_budget_openai(session_charge(session, api_key_id=api_key.pk if api_key else None))
        with transaction.atomic():
            run = do_send_message(
                session,
                chat.text,
                acting_user=principal.acting_user,
                api_key_id=principal.api_key.pk if principal.api_key else None,
            )
            if run is not None and chat.images and command is None:
                do_attach_images(run, chat.images, principal.acting_user)
        if run is None:
            return _Started(None, session.pk, agent.slug, command_text="Nothing is running.")
        if command is not None:
            return _Started(None, session.pk, agent.slug, command_text="Stopped.")
        return _Started(run, session.pk, agent.slug)


# Image requests get their own, larger body cap (read at request time by the
# body middleware, counted on the bytes received).
chat_completions_view.max_body_bytes = lambda: settings.CLAW_API_IMAGE_MAX_BODY_BYTES  # type: ignore[attr-defined]


def _title(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= 80 else line[:79] + "…"


def _outcome_text(run: Run | None) -> str:
    if run is None:
        raise WireError("The run disappeared.", status=500, code="run_lost", error_type="server_error")
    if run.status == RunStatus.COMPLETED:
        return run.turn.response_text
    if run.status == RunStatus.AWAITING_APPROVAL:
        raise WireError(
            f"The agent is waiting for a person to approve a tool call (run {run.pk}); decide it in the "
            "chat or at /api/v1/approvals/, then send your next message.",
            status=409,
            code="approval_required",
        )
    if run.status == RunStatus.CANCELLED:
        raise WireError(f"The run was cancelled: {run.error or 'stopped'}.", status=409, code="run_cancelled")
    if run.status == RunStatus.FAILED:
        raise WireError(
            f"The agent's run failed: {run.error or 'unknown error'}",
            status=502,
            code="run_failed",
            error_type="server_error",
        )
    raise WireError("The run did not finish in time.", status=504, code="timeout", error_type="server_error")


def _usage(run: Run) -> dict[str, Any]:
    totals = (
        UsageRecord.objects.unscoped()
        .filter(turn_id=run.turn_id)
        .aggregate(
            i=Sum("input_tokens"),
            o=Sum("output_tokens"),
            cr=Sum("cache_read_tokens"),
            cw=Sum("cache_write_tokens"),
        )
    )
    return usage_body((totals["i"] or 0) + (totals["cw"] or 0), totals["o"] or 0, totals["cr"] or 0)


def _data(payload: Any) -> bytes:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


async def _stream(
    started: _Started, chat: ChatRequest, deadline: float, principal: Principal, since: int
) -> AsyncIterator[bytes]:
    assert started.run is not None
    run_id = started.run.pk
    completion_id, created = f"chatcmpl-{run_id}", int(time.time())
    yield _data(chunk_body(completion_id, chat.model, created, {"role": "assistant", "content": ""}))
    streamed = ""
    async with while_allowed(principal, since=since) as allowed:
        async for frame in follow_run(run_id, started.session_id, deadline=deadline, still_allowed=allowed):
            kind = frame["type"]
            if kind == "chunk":
                text = str(frame["payload"].get("text", ""))
                streamed += text
                yield _data(chunk_body(completion_id, chat.model, created, {"content": text}))
            elif kind in {"run.completed", "run.failed", "run.cancelled", "approval_needed"}:
                break
        if not allowed():
            yield _data(
                WireError(
                    "This API key no longer has access.",
                    status=401,
                    code="invalid_api_key",
                    error_type="authentication_error",
                ).body()
            )
            yield b"data: [DONE]\n\n"
            return
    run = await settle_run(run_id, deadline=deadline)
    try:
        final = _outcome_text(run)
    except WireError as error:
        yield _data(error.body())
        yield b"data: [DONE]\n\n"
        return
    if not streamed:
        yield _data(chunk_body(completion_id, chat.model, created, {"content": final}))
    elif final.startswith(streamed) and len(final) > len(streamed):
        yield _data(chunk_body(completion_id, chat.model, created, {"content": final[len(streamed) :]}))
    yield _data(chunk_body(completion_id, chat.model, created, {}, "stop"))
    if chat.include_usage and run is not None:
        usage = await _db(_usage)(run)
        yield _data({**chunk_body(completion_id, chat.model, created, {}), "choices": [], "usage": usage})
    yield b"data: [DONE]\n\n"
