"""The chat's "What I remember about you" page (M7, issue 25): a user sees the
memories kept about them in the current team and deletes any of them, or all of
them with their own copies of the agents' context files ("forget everything about
me"). Only the caller's own personal memories, whatever their role: an owner
corrects other people's memories in the admin, not here. Another user's or team's
memory id answers 404, exactly like a missing one. Viewers may forget what is
about them too: it changes no one else's chats."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from agents.actions.memory import do_delete_memory
from agents.memory.store import MemoryOwner
from agents.models import AgentFile, MemoryEntry, MemoryScope
from channels_app.web.security import chat_headers
from claw_platform.audit.actions import client_ip, record_audit_event
from claw_platform.tenancy.context import tenant_context

SHOWN = 500


def _mine(request: HttpRequest) -> QuerySet[MemoryEntry]:
    tenant = request.tenant  # type: ignore[attr-defined]
    user_id = request.user.pk
    if tenant is None or user_id is None:
        return MemoryEntry._base_manager.none()
    return MemoryEntry._base_manager.filter(tenant_id=tenant.pk, scope=MemoryScope.USER, user_id=user_id)


def _owner(request: HttpRequest) -> MemoryOwner:
    return MemoryOwner(
        tenant_id=request.tenant.pk,  # type: ignore[attr-defined]
        agent_id=None,
        user_id=request.user.pk,
        actor=f"{request.user.get_username()} (chat page)",
    )


@require_GET
@login_required
@chat_headers
def memories_page(request: HttpRequest) -> HttpResponse:
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None:
        return render(request, "chat/no_team.html", status=403)
    with tenant_context(tenant.pk):
        rows = _mine(request).exclude(category="archived").order_by("-updated_at")
        total = rows.count()
        shown = list(rows.values("pk", "content", "category", "updated_at")[:SHOWN])
    return render(request, "chat/memories.html", {"tenant": tenant, "memories": shown, "total": total})


@require_POST
@login_required
def forget_memory(request: HttpRequest, pk: int) -> HttpResponseRedirect:
    if request.tenant is None:  # type: ignore[attr-defined]
        raise Http404("No such memory.")
    with tenant_context(request.tenant.pk):  # type: ignore[attr-defined]
        entry = _mine(request).filter(pk=pk).first()
        if entry is None:
            raise Http404("No such memory.")
        do_delete_memory(entry, _owner(request))
    messages.success(request, "Forgotten.")
    return redirect("chat:memories")


@require_POST
@login_required
def forget_everything(request: HttpRequest) -> HttpResponseRedirect:
    tenant = request.tenant  # type: ignore[attr-defined]
    if tenant is None:
        raise Http404("You are not a member of a team.")
    if request.POST.get("confirm") != "forget":
        messages.error(request, 'Type "forget" to confirm: this cannot be undone.')
        return redirect("chat:memories")
    with tenant_context(tenant.pk), transaction.atomic():
        memories, _ = _mine(request).delete()
        files, _ = AgentFile._base_manager.filter(
            tenant_id=tenant.pk, user_id=int(request.user.pk or 0)
        ).delete()
        record_audit_event(
            action="memory.forget_me",
            actor=request.user,
            tenant_id=tenant.pk,
            diff={"memories": [memories, 0], "files": [files, 0]},
            ip=client_ip(request),
        )
    messages.success(request, f"Forgotten: {memories} memories and {files} personal files.")
    return redirect("chat:memories")
