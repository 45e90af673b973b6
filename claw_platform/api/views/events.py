"""The tenant's event stream (U5): every stored run event of the tenant as
server-sent events, resumable with ``Last-Event-ID`` (the event's id)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.request import Request

from claw_platform.api.live import SSE_HEADERS, follow_tenant, latest_tenant_event_id, sse
from claw_platform.api.renderers import SSE_RENDERERS
from claw_platform.api.stream_access import while_allowed
from claw_platform.api.views.base import TenantAPIView
from claw_platform.api.views.conversation import _int_param


class TenantEventsView(TenantAPIView):
    """Run events of every session of the tenant that the caller sees (a member:
    their own sessions'; run.started, tool.call, tool.result, approval_needed,
    run.completed …; not the token chunks). The stream ends when the caller's
    rights change (a key revoked, a member removed ...). A new
    connection starts with events after ``Last-Event-ID`` (or ``?after=``), else
    with what happens from now on. The server ends the stream after
    ``CLAW_SSE_MAX_SECONDS`` (or ``?timeout=``); reconnect with the last id."""

    renderer_classes = SSE_RENDERERS

    @extend_schema(
        parameters=[
            OpenApiParameter("after", int, description="Replay events with a higher id (as Last-Event-ID)."),
            OpenApiParameter("timeout", int, description="End the stream after this many seconds."),
            OpenApiParameter("Last-Event-ID", str, location=OpenApiParameter.HEADER, required=False),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(OpenApiTypes.STR, description="server-sent events")
        },
    )
    def get(self, request: Request) -> Any:
        principal, since = self.principal, self.credentials_since
        after = _int_param(request, "after", request.META.get("HTTP_LAST_EVENT_ID"), minimum=0)
        if after is None:
            after = latest_tenant_event_id(principal.tenant_id)
        timeout = _int_param(request, "timeout", None, minimum=1) or settings.CLAW_SSE_MAX_SECONDS
        deadline = time.monotonic() + min(float(timeout), float(settings.CLAW_SSE_MAX_SECONDS))

        async def body() -> AsyncIterator[bytes]:
            yield b": connected\n\n"
            async with while_allowed(principal, since=since) as allowed:
                async for event_id, frame in follow_tenant(
                    principal.caller, after_id=after, deadline=deadline, still_allowed=allowed
                ):
                    if not event_id:
                        yield b": keep-alive\n\n"
                        continue
                    yield sse(frame["type"], frame, event_id)

        response = StreamingHttpResponse(body(), content_type="text/event-stream")
        for name, value in SSE_HEADERS.items():
            response[name] = value
        return response
