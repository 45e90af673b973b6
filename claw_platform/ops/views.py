"""/healthz (the process answers) and /readyz (it can do its job).

/readyz tells everyone the status and which checks pass; what each check found (the
database's version and socket, the workers' host names, an error's text) only to a
signed-in staff member or superuser: it maps the installation for an attacker.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from claw_platform.ops.checks import check_channel_layer, check_database, check_workers


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = [check_database()]
    if checks[0].ok:
        checks += [check_channel_layer(timeout=2.0), check_workers()]
    ready = all(c.ok for c in checks)
    user = getattr(request, "user", None)
    detailed = bool(
        user and user.is_authenticated and user.is_active and (user.is_staff or user.is_superuser)
    )
    body = {
        "status": "ready" if ready else "not ready",
        "checks": {c.name: {"ok": c.ok, **({"detail": c.detail} if detailed else {})} for c in checks},
    }
    return JsonResponse(body, status=200 if ready else 503)
