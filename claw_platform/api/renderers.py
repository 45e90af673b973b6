"""Lets ``Accept: text/event-stream`` through content negotiation; the views that
accept it answer with a StreamingHttpResponse of server-sent events themselves."""

from __future__ import annotations

from typing import Any

from rest_framework.renderers import BaseRenderer, JSONRenderer


class EventStreamRenderer(BaseRenderer):
    media_type = "text/event-stream"
    format = "sse"
    charset = None

    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        # Only errors reach a renderer on these views: send them as JSON bytes.
        return JSONRenderer().render(data)


SSE_RENDERERS = [JSONRenderer, EventStreamRenderer]


def wants_sse(request: Any) -> bool:
    renderer = getattr(request, "accepted_renderer", None)
    return getattr(renderer, "format", None) == "sse"
