"""``/metrics`` (Prometheus text format)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from claw_platform.observability.metrics_access import may_read_metrics
from claw_platform.observability.scrape import render_metrics


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not may_read_metrics(request):
        response = HttpResponse("metrics need a bearer token (claw metrics-token)\n", status=401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        response["Content-Type"] = "text/plain; charset=utf-8"
        return response
    return HttpResponse(render_metrics(), content_type=CONTENT_TYPE_LATEST)
