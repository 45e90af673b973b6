"""A member's chats, managed from the chat page (U3, issue 26): search over titles and
content, rename, delete with undo, export as Markdown or JSON, and the session's
current token and cost figures.

Every route takes the member rule from :func:`channels_app.access.access_session`
(another member's chat answers 404, exactly like a missing one); the changing ones
also need the right to act in that chat (viewers read, they do not rename or
delete). Search covers the caller's own chats in the current team, like the
sidebar. A deleted chat is hidden at once and removed for good by the maintenance
task once ``CLAW_CHAT_UNDO_DELETE_SECONDS`` have passed; until then Undo restores it.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.db.models import Exists, OuterRef, Q
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from agents.actions.chat_export import FORMATS, export_chat, file_name
from agents.models import Session, Turn
from channels_app.access import SessionAccess, SessionNotFound, access_session
from claw_platform.audit.actions import record_audit_event
from claw_platform.tenancy.context import tenant_context

MAX_QUERY_CHARS = 200
MAX_TITLE_CHARS = 200
SEARCH_RESULTS = 30
SNIPPET_CHARS = 120


def _error(status: int, code: str, message: str, field: str | None = None) -> JsonResponse:
    fields = {field: [message]} if field else {}
    return JsonResponse({"error": {"code": code, "message": message, "fields": fields}}, status=status)


def _access(request: HttpRequest, session_id: Any, *, include_deleted: bool = False) -> SessionAccess:
    try:
        return access_session(request.user, session_id, include_deleted=include_deleted)
    except SessionNotFound:
        raise Http404("No such chat.") from None


def _acting(
    request: HttpRequest, session_id: Any, *, include_deleted: bool = False
) -> SessionAccess | JsonResponse:
    access = _access(request, session_id, include_deleted=include_deleted)
    if not access.can_act:
        return _error(403, "permission_denied", "You can read this chat but not change it.")
    return access


def _snippet(text: str, query: str) -> str:
    at = text.lower().find(query.lower())
    if at < 0:
        return text[:SNIPPET_CHARS]
    start = max(0, at - SNIPPET_CHARS // 3)
    piece = text[start : start + SNIPPET_CHARS]
    return ("…" if start else "") + piece + ("…" if start + SNIPPET_CHARS < len(text) else "")


@require_GET
@login_required
def search_chats(request: HttpRequest) -> JsonResponse:
    """``?q=``: the caller's chats in the current team whose title or messages hold it."""
    tenant = request.tenant  # type: ignore[attr-defined]
    query = request.GET.get("q", "").strip()
    if tenant is None:
        return _error(403, "no_team", "You are not a member of a team.")
    if not query:
        return JsonResponse({"query": "", "results": []})
    if len(query) > MAX_QUERY_CHARS or "\x00" in query:
        return _error(400, "invalid", f"Search for at most {MAX_QUERY_CHARS} characters of text.", "q")
    with tenant_context(tenant.pk):
        matching_turns = Turn._base_manager.filter(session_id=OuterRef("pk"), tenant_id=tenant.pk).filter(
            Q(user_text__icontains=query) | Q(response_text__icontains=query)
        )
        sessions = list(
            Session._base_manager.filter(
                tenant_id=tenant.pk,
                user_id=request.user.pk or 0,
                parent__isnull=True,
                deleted_at__isnull=True,
            )
            .filter(Q(title__icontains=query) | Exists(matching_turns))
            .select_related("agent")
            .order_by("-last_activity_at")[:SEARCH_RESULTS]
        )
        hits: dict[Any, str] = {}
        for session_id, user_text, response_text in (
            Turn._base_manager.filter(session_id__in=[s.pk for s in sessions], tenant_id=tenant.pk)
            .filter(Q(user_text__icontains=query) | Q(response_text__icontains=query))
            .order_by("-number")
            .values_list("session_id", "user_text", "response_text")
        ):
            if session_id not in hits:
                text = user_text if query.lower() in user_text.lower() else response_text
                hits[session_id] = _snippet(text, query)
    return JsonResponse(
        {
            "query": query,
            "results": [
                {
                    "id": str(s.pk),
                    "title": str(s),
                    "agent": s.agent.name,
                    "snippet": hits.get(s.pk, ""),
                    "url": f"/chat/s/{s.pk}/",
                }
                for s in sessions
            ],
        }
    )


@require_POST
@login_required
def rename_chat(request: HttpRequest, session_id: Any) -> JsonResponse:
    access = _acting(request, session_id)
    if isinstance(access, JsonResponse):
        return access
    title = request.POST.get("title", "")
    title = " ".join(title.split())
    if not title:
        return _error(400, "invalid", "A chat's name cannot be empty.", "title")
    if len(title) > MAX_TITLE_CHARS or "\x00" in title:
        return _error(400, "invalid", f"A chat's name has at most {MAX_TITLE_CHARS} characters.", "title")
    session = access.session
    before = session.title
    Session._base_manager.filter(pk=session.pk).update(title=title)
    record_audit_event(
        action="session.renamed",
        actor=request.user,
        tenant_id=session.tenant_id,
        obj=session,
        diff={"title": [before, title]},
    )
    return JsonResponse({"id": str(session.pk), "title": title})


@require_POST
@login_required
def delete_chat(request: HttpRequest, session_id: Any) -> JsonResponse:
    access = _acting(request, session_id)
    if isinstance(access, JsonResponse):
        return access
    session = access.session
    Session._base_manager.filter(pk=session.pk).update(deleted_at=timezone.now())
    record_audit_event(
        action="session.deleted", actor=request.user, tenant_id=session.tenant_id, obj=session, diff={}
    )
    return JsonResponse({"id": str(session.pk), "deleted": True, "restore": f"/chat/s/{session.pk}/restore/"})


@require_POST
@login_required
def restore_chat(request: HttpRequest, session_id: Any) -> JsonResponse:
    access = _acting(request, session_id, include_deleted=True)
    if isinstance(access, JsonResponse):
        return access
    session = access.session
    if session.deleted_at is not None:
        Session._base_manager.filter(pk=session.pk).update(deleted_at=None)
        record_audit_event(
            action="session.restored", actor=request.user, tenant_id=session.tenant_id, obj=session, diff={}
        )
    return JsonResponse({"id": str(session.pk), "deleted": False, "url": f"/chat/s/{session.pk}/"})


@require_GET
@login_required
def export_chat_file(request: HttpRequest, session_id: Any, fmt: str) -> HttpResponse:
    """The chat as a download: ``export.md`` or ``export.json``."""
    access = _access(request, session_id)
    fmt = fmt if fmt in FORMATS else "markdown"
    body, _count = export_chat(access.session, fmt)
    content_type = "application/json" if fmt == "json" else "text/markdown"
    response = HttpResponse(body, content_type=f"{content_type}; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{file_name(access.session, fmt)}"'
    response["X-Content-Type-Options"] = "nosniff"
    return response


@require_GET
@login_required
def chat_usage(request: HttpRequest, session_id: Any) -> JsonResponse:
    """The session's token and cost totals as stored (the header re-reads them when a
    run ends, so approvals and resumed runs never leave it short)."""
    session = _access(request, session_id).session
    return JsonResponse(
        {
            "input_tokens": session.input_tokens,
            "output_tokens": session.output_tokens,
            "cost": f"{session.cost:.4f}",
        }
    )
