"""The owners' banner (issue 24): budget thresholds crossed this period and routines
paused for running away, shown to owners and admins on the chat and admin pages
until the period resets, the routine resumes, or someone dismisses the line here."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from agents.budgets.alerts import Banner, dismiss_banner, owner_banners
from claw_platform.tenancy.models import Role

BANNER_ROLES = frozenset({Role.OWNER, Role.ADMIN})


def sees_banners(request: HttpRequest) -> bool:
    membership = getattr(request, "membership", None)
    return membership is not None and membership.role in BANNER_ROLES


def banners_for(request: HttpRequest) -> list[Banner]:
    """The banner's lines for this page: none unless an owner or admin looks."""
    if not sees_banners(request):
        return []
    return owner_banners(request.membership.tenant_id)  # type: ignore[attr-defined]


@require_POST
@login_required
def dismiss(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    # Another tenant's line, or a member's attempt: not found, like a missing one.
    if not sees_banners(request) or not dismiss_banner(
        request.membership.tenant_id,  # type: ignore[attr-defined]
        kind,
        pk,
        acting_user=request.user,
    ):
        raise Http404("No such notice.")
    target: Any = request.POST.get("next") or "/chat/"
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        target = "/chat/"
    return HttpResponseRedirect(target)
