"""The chat's Connected accounts page (Z5): each user enters, replaces or removes their
own token for the team's per-user MCP servers and HTTP tools. A token is never shown
back, to anyone: the page says "connected" and since when."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseForbidden, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from channels_app.access import can_act
from channels_app.actions.linking import LINK_CODE_TTL, LinkRefused, do_issue_link_code, do_unlink, my_links
from channels_app.web.security import chat_headers
from claw_platform.audit.actions import client_ip
from tools_app.actions.user_tokens import (
    AccountError,
    connectable,
    do_connect_account,
    do_disconnect_account,
    find_target,
)
from tools_app.models import HttpTool, McpServer


@require_GET
@login_required
@chat_headers
def accounts_page(request: HttpRequest) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None:
        return render(request, "chat/no_team.html", status=403)
    return _render_accounts(request)


def _render_accounts(request: HttpRequest, **extra: object) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    context = {
        "tenant": tenant,
        "accounts": connectable(tenant.pk, request.user.pk),
        "links": my_links(tenant.pk, request.user),
        "link_code_minutes": int(LINK_CODE_TTL.total_seconds() // 60),
        **extra,
    }
    return render(request, "chat/accounts.html", context)


@require_POST
@login_required
@chat_headers
def new_link_code(request: HttpRequest) -> HttpResponse:
    """A one-time code to send to a bot as ``/link CODE``: shown in this answer only
    (never stored in clear, never put in a redirect or a flash message)."""
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None:
        return render(request, "chat/no_team.html", status=403)
    try:
        code = do_issue_link_code(tenant.pk, request.user)
    except LinkRefused as exc:
        return HttpResponseForbidden(str(exc))
    response = _render_accounts(request, new_link_code=code)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@login_required
def unlink_chat_account(request: HttpRequest, pk: int) -> HttpResponseRedirect:
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None or not do_unlink(tenant.pk, request.user, pk):
        raise Http404("No such linked account.")
    messages.success(request, "The chat account is no longer linked.")
    return redirect("chat:accounts")


def _target(request: HttpRequest, kind: str, pk: int) -> McpServer | HttpTool:
    tenant = request.tenant  # type: ignore[attr-defined]
    target = find_target(tenant.pk, kind, pk) if tenant is not None else None
    if target is None:
        raise Http404("No such account to connect.")
    return target


@require_POST
@login_required
def connect_account(request: HttpRequest, kind: str, pk: int) -> HttpResponse:
    target = _target(request, kind, pk)
    if not can_act(request.membership):  # type: ignore[attr-defined]
        # A viewer runs nothing that could use a token; removing one stays open to them.
        return HttpResponseForbidden("Viewers cannot connect accounts: they do not run the team's agents.")
    try:
        do_connect_account(request.user, target, request.POST.get("token", ""), ip=client_ip(request))
    except AccountError as exc:
        messages.error(request, f"{target.name}: {exc}")
    else:
        messages.success(request, f"{target.name}: your account is connected.")
    return redirect("chat:accounts")


@require_POST
@login_required
def disconnect_account(request: HttpRequest, kind: str, pk: int) -> HttpResponseRedirect:
    target = _target(request, kind, pk)
    if do_disconnect_account(request.user, target, ip=client_ip(request)):
        messages.success(request, f"{target.name}: your token was removed.")
    return redirect("chat:accounts")
