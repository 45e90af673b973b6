"""The chat UI's pages (U3). Thin: access checks, one action, one template.

Everything live (tokens, tool cards, approvals, stop) goes over the session's socket
(``channels_app.consumers``); these views render the first state of a page and take
the few form posts that change which page you are on.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from agents.actions.conversation import do_create_session
from agents.engine.commands import COMMANDS
from agents.models import Agent, Session
from agents.runtime.resolution import ModelConfig, tenant_models
from channels_app.access import SessionNotFound, access_session, can_act
from channels_app.transcript import session_summary, session_turns
from channels_app.web.banners import banners_for
from channels_app.web.security import chat_headers
from claw_platform.tenancy.context import tenant_context
from claw_platform.tenancy.lookup import active_membership
from claw_platform.tenancy.middleware import SESSION_TENANT_KEY
from claw_platform.tenancy.models import Membership
from claw_platform.tenancy.rls import system_bypass

SIDEBAR_SESSIONS = 50

# One line per slash command for the composer's hints (S4); the server answers them.
COMMAND_HINTS: dict[str, str] = {
    "help": "list the commands",
    "new": "start a new conversation thread",
    "clear": "clear the agent's context (history is kept)",
    "skills": "list the agent's skills; /skills <name> activates one",
    "undo": "take back the last turn",
    "redo": "bring back an undone turn",
    "compact": "summarise older history now",
    "summarize": "summarise older history now",
    "model": "show or switch this session's model",
    "models": "list the models you can switch to",
    "agent": "show or switch the agent of this chat",
    "tools": "the tools this agent may use",
    "status": "agent, model, tokens and cost",
    "stop": "stop the running reply",
    "thread": "switch to a thread by id",
    "resume": "switch to a thread by id",
    "ping": "check the server answers",
    "version": "show the version",
}


def _memberships(request: HttpRequest) -> list[Membership]:
    with system_bypass():  # the user's own memberships in every team (the team switcher)
        return list(
            Membership.objects.unscoped()
            .select_related("tenant")
            .filter(user_id=request.user.pk, tenant__is_active=True)
            .order_by("tenant__name")
        )


def model_choice(model: ModelConfig) -> str:
    """What the model picker sends after ``/model``: ``provider:model``, or the bare
    model name when the provider's name has spaces (one argument only)."""
    full = f"{model.provider_name}:{model.model}"
    return model.model if any(c.isspace() for c in full) else full


def header_pickers(session: Session, agents: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat header's agent and model pickers (they send ``/agent`` and ``/model``).
    Names and labels only: never a provider's address or key."""
    models = tenant_models(session.tenant_id)
    current = next((m for m in models if m.profile_id == session.model_override_id), None)
    return {
        "agents": [{"slug": a["slug"], "name": a["name"]} for a in agents],
        "agent": session.agent.slug,
        "models": [
            {"value": model_choice(m), "label": m.display_name, "vision": m.supports_vision} for m in models
        ],
        "model": model_choice(current) if current else "",
    }


def _page_context(request: HttpRequest, session: Session | None, acting: bool) -> dict[str, Any]:
    tenant = request.tenant  # type: ignore[attr-defined]
    agents = list(Agent.objects.filter(enabled=True).order_by("name").values("id", "slug", "name"))
    sessions = list(
        Session.objects.filter(user_id=request.user.pk, parent__isnull=True, deleted_at__isnull=True)
        .select_related("agent")
        .order_by("-last_activity_at")[:SIDEBAR_SESSIONS]
    )
    data: dict[str, Any] = {
        "session": None,
        "turns": [],
        "can_act": acting,
        "commands": [{"name": n, "hint": COMMAND_HINTS[n]} for n in COMMANDS if n in COMMAND_HINTS],
    }
    if session is not None:
        data["session"] = session_summary(session)
        data["turns"] = session_turns(session)
        data["socket"] = f"/ws/sessions/{session.pk}/"
        data["pickers"] = header_pickers(session, agents)
    return {
        "tenant": tenant,
        "memberships": _memberships(request),
        "agents": agents,
        "sessions": sessions,
        "current": session,
        "can_create": can_act(request.membership),  # type: ignore[attr-defined]
        "chat_data": data,
        "owner_banners": banners_for(request),
    }


@require_GET
@login_required
@chat_headers
def chat_home(request: HttpRequest) -> HttpResponse:
    if request.tenant is None:  # type: ignore[attr-defined]
        return render(request, "chat/no_team.html", status=403)
    return render(request, "chat/chat.html", _page_context(request, None, acting=False))


def _open(request: HttpRequest, session_id: Any) -> tuple[Session, bool]:
    try:
        access = access_session(request.user, session_id)
    except SessionNotFound:
        raise Http404("No such chat.") from None
    if request.tenant is None or access.session.tenant_id != request.tenant.pk:  # type: ignore[attr-defined]
        # A session of another team the user belongs to: switch to that team.
        request.session[SESSION_TENANT_KEY] = access.session.tenant_id
        membership = active_membership(request.user, access.session.tenant_id)
        request.membership = membership  # type: ignore[attr-defined]
        request.tenant = membership.tenant if membership else None  # type: ignore[attr-defined]
    return access.session, access.can_act


@require_GET
@login_required
@chat_headers
def chat_session(request: HttpRequest, session_id: Any) -> HttpResponse:
    session, acting = _open(request, session_id)
    with tenant_context(session.tenant_id):
        return render(request, "chat/chat.html", _page_context(request, session, acting))


@require_GET
@login_required
def chat_transcript(request: HttpRequest, session_id: Any) -> JsonResponse:
    """The session's turns as JSON: the page re-reads them after a command that
    changed the history (/new, /undo, /compact ...)."""
    session, _ = _open(request, session_id)
    return JsonResponse({"session": session_summary(session), "turns": session_turns(session)})


@require_POST
@login_required
def new_session(request: HttpRequest) -> HttpResponseRedirect:
    if request.tenant is None or not can_act(request.membership):  # type: ignore[attr-defined]
        messages.error(request, "You can read this team's chats but not start one.")
        return redirect("chat:home")
    agent = Agent.objects.filter(pk=_int(request.POST.get("agent")), enabled=True).first()
    if agent is None:
        messages.error(request, "Pick one of the team's agents.")
        return redirect("chat:home")
    session = do_create_session(agent, user=request.user, channel="web")
    return redirect(reverse("chat:session", args=[session.pk]))


@require_POST
@login_required
def switch_tenant(request: HttpRequest) -> HttpResponseRedirect:
    tenant_id = _int(request.POST.get("tenant"))
    membership = active_membership(request.user, tenant_id)
    if membership is None or membership.tenant_id != tenant_id:
        messages.error(request, "You are not a member of that team.")
    else:
        request.session[SESSION_TENANT_KEY] = tenant_id
    return redirect("chat:home")


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None
