"""``POST /api/v1/channels/<public id>/inbound/``: every platform's webhook (CH1, CH3).

Public (platforms carry no API key), so everything rests on the channel's own
verification: the adapter checks the signature or secret token before anything is
read or stored; an unknown or disabled channel is a 404 like a missing one. Then the
update is stored (a duplicate is acknowledged and ignored), the platform is
answered, and the reply follows on this process's background loop.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from channels_app.adapters import adapter_for
from channels_app.adapters.base import MALFORMED, InboundRequest, VerificationFailed
from channels_app.models import Channel
from channels_app.receive import receive_messages
from claw_platform.api.errors import error_body
from claw_platform.json_input import JsonInputError, parse_json
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.rls import system_bypass

logger = logging.getLogger("claw.channels.inbound")

MAX_INBOUND_BYTES = 256 * 1024


def _error(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse(error_body(code, message), status=status)


@csrf_exempt
def inbound_view(request: HttpRequest, public_id: Any) -> HttpResponse:
    if request.method not in ("POST", "GET"):
        return _error(405, "method_not_allowed", "POST updates here.")
    with system_bypass():  # inbound webhook -> tenant: the channel's public id says which tenant
        channel = (
            Channel.objects.unscoped()
            .select_related("agent")
            .filter(public_id=public_id, enabled=True)
            .first()
        )
    if channel is None:
        return _error(404, "not_found", "No such channel.")
    inbound = InboundRequest(
        body=request.body,
        headers={k.lower(): v for k, v in request.headers.items()},
        query={k: str(v) for k, v in request.GET.items()},
        method=request.method or "POST",
    )
    adapter = adapter_for(channel)
    with tenant_context(channel.tenant_id):
        if request.method == "GET":
            answer = adapter.subscribe_challenge(inbound)
            if answer is None:
                return _error(405, "method_not_allowed", "POST updates here.")
            return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
        try:
            adapter.verify(inbound)
        except VerificationFailed as exc:
            return _error(exc.status, "bad_signature", str(exc))
        try:
            payload = adapter.decode(inbound)
            if payload is None:
                payload = parse_json(inbound.body or b"null")
            elif isinstance(payload, dict) and "interactive" in payload:
                payload = parse_json(payload["interactive"])
            immediate = adapter.immediate_answer(inbound, payload)
            if immediate is not None:
                return HttpResponse(
                    immediate.body, status=immediate.status, content_type=immediate.content_type
                )
            messages = adapter.parse(inbound, payload)
        except JsonInputError as exc:
            return _error(400, "invalid", exc.message)
        except ValueError as exc:
            return _error(400, "invalid", str(exc))
        except MALFORMED as exc:  # signed, but not in the platform's format
            logger.info("%s channel %s: malformed update (%s)", channel.kind, channel.pk, type(exc).__name__)
            return _error(400, "invalid", f"The update is not in {channel.kind}'s format.")
        receive_messages(channel, messages)
        answer = adapter.acknowledgement(payload)
    if answer is not None:
        return HttpResponse(answer.body, status=answer.status, content_type=answer.content_type)
    return JsonResponse({"ok": True})


inbound_view.max_body_bytes = MAX_INBOUND_BYTES  # type: ignore[attr-defined]
