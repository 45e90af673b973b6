"""Isolation, generated from the routing: every HTTP route of ``ROOT_URLCONF`` (the
API, /v1/, the chat pages, the admin, the health checks and whatever is added
later) and every WebSocket route of the ASGI router is called with another tenant's
credentials on tenant A's objects, and with another member's on member M1's chats:

- tenant B's owner (login cookie, and a key the owner made) and B's operator key get
  nothing of tenant A: 404 (or 403, or the sign-in page) on A's objects, none of A's
  text in any list;
- member M2 gets nothing of M1's sessions (and what hangs off them): 404, the same
  as for a missing chat, on every route and socket, by cookie and by key;
- A's viewer (cookie and key) cannot act: no unsafe call succeeds.

Every route must be classified in ``ROUTES`` by its URL name (its pattern when it has
none): a new route or socket without a classification fails the suite. The admin's
model pages are checked by tests/platform/test_admin_isolation.py (which covers every
tenant-owned admin model and the member rule); here every other admin model is
checked to be closed to tenant users."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib import admin
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from agents.actions.config import do_create_agent
from agents.actions.routines import Trigger, do_create_routine
from agents.budgets.models import Budget, KillSwitch
from agents.models import Attachment, MemoryEntry, MemoryInjection, Session
from claw_platform.api.models import ApiKey
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import client_for, make_key, make_person_key
from tests.fixtures.tenants import PASSWORD, MemberChats, make_budget_rows
from tests.platform.test_admin_isolation import TENANT_MODELS
from tools_app.actions.extensions import do_create_http_tool

pytestmark = pytest.mark.django_db(transaction=True)

# Kinds of tenant A's objects a route's ids can name. The session-hung ones are
# M1's: members other than M1 must not reach them.
MEMBER_KINDS = frozenset({"session", "run", "approval", "routine", "memory", "memoryinjection", "attachment"})


@dataclass(frozen=True)
class Public:
    """Holds no tenant's data."""

    reason: str


@dataclass(frozen=True)
class Collection:
    """Lists (or creates in) the caller's own tenant: its answers must hold none of
    A's text for B, and none of M1's for M2. ``query`` is added to GETs."""

    auth: str = "api"  # "api": cookie and key; "login": the cookie only; "key": a key only
    query: str = ""


@dataclass(frozen=True)
class Scoped:
    """Takes ids of one of A's objects (``kind``): B gets 404/403 on every method,
    and for a session-hung kind M2 gets 404 too."""

    kind: str
    auth: str = "api"


@dataclass(frozen=True)
class Checked:
    """Checked by a test of its own (named), not generically."""

    where: str


Route = Public | Collection | Scoped | Checked

ROUTES: dict[str, Route] = {
    # -- platform
    "healthz": Public("the process answers"),
    "readyz": Public("readiness and the failing check's name"),
    "metrics": Checked(
        "tests/observability/test_metrics.py: a bearer token or an allowed address; counts by status, "
        "provider, model and tool, no tenant's text or ids"
    ),
    "<root redirect>": Public("redirects to /chat/"),
    # -- REST API
    "v1:agent-list": Collection(),
    "v1:agent-detail": Scoped("agent"),
    "v1:agent-files": Scoped("agent"),
    "v1:agent-file": Scoped("agent"),
    "v1:agent-revisions": Scoped("agent"),
    "v1:agent-revision": Scoped("agent"),
    "v1:agent-restore": Scoped("agent"),
    "v1:provider-list": Collection(),
    "v1:provider-detail": Scoped("provider"),
    "v1:modelprofile-list": Collection(),
    "v1:modelprofile-detail": Scoped("modelprofile"),
    "v1:session-list": Collection(),
    "v1:session-detail": Scoped("session"),
    "v1:session-messages": Scoped("session"),
    "v1:session-undo": Scoped("session"),
    "v1:session-redo": Scoped("session"),
    "v1:run-list": Collection(),
    "v1:run-detail": Scoped("run"),
    "v1:run-cancel": Scoped("run"),
    "v1:run-events": Scoped("run"),
    "v1:approval-list": Collection(),
    "v1:approval-detail": Scoped("approval"),
    "v1:approval-approve": Scoped("approval"),
    "v1:approval-deny": Scoped("approval"),
    "v1:auditevent-list": Collection(),
    "v1:auditevent-detail": Scoped("auditevent"),
    "admin:audit_auditevent_export": Checked(
        "tests/observability/test_audit_trail.py: owners and admins of the tenant only, its rows only"
    ),
    "v1:audit-export": Checked(
        "tests/observability/test_audit_trail.py: streamed, the caller's tenant only, admin scope "
        "(members and viewers 403)"
    ),
    "v1:apikey-list": Collection(),
    "v1:apikey-detail": Scoped("apikey"),
    "v1:routine-list": Collection(),
    "v1:routine-detail": Scoped("routine"),
    "v1:routine-run": Scoped("routine"),
    "v1:routine-runs": Scoped("routine"),
    "v1:memory-list": Collection(),
    "v1:memory-detail": Scoped("memory"),
    "v1:memory-search": Checked(
        "tests/memory/test_memory_api.py::test_search_recalls_only_what_the_caller_may_see"
    ),
    # B's agent has the same slug: B gets its own snapshot, M2 their own memories.
    "v1:memory-snapshot": Collection(query="?agent=assistant"),
    "v1:memoryinjection-list": Collection(),
    "v1:memoryinjection-detail": Scoped("memoryinjection"),
    "v1:usage": Collection(),
    "v1:budget-list": Collection(),
    "v1:budget-detail": Scoped("budget"),
    "v1:killswitch-list": Collection(),
    "v1:killswitch-detail": Scoped("killswitch"),
    "v1:killswitch-lift": Scoped("killswitch"),
    "v1:spend-settings": Collection(),
    "v1:events": Collection(query="?after=0&timeout=1"),
    "v1:hook": Scoped("agent"),
    "v1:pairing-codes": Collection(),
    "v1:pair": Public(
        "exchanges a one-time code for a key of the code's own tenant (test_hooks_pairing_events)"
    ),
    "v1:channel-inbound": Public(
        "a chat platform's webhook: nothing is read or stored before the channel's own signature or "
        "secret token is verified; it acts only in the channel's tenant (tests/chat_platforms)"
    ),
    "api-schema": Public("the API's schema"),
    "api-docs": Public("the API's docs page"),
    # -- OpenAI-compatible
    "openai-models": Collection(auth="key"),
    "openai-model": Scoped("agent", auth="key"),
    "openai-chat-completions": Checked("test_chat_completions_reach_only_the_callers_agents_and_sessions"),
    # -- chat pages
    "chat:home": Collection(auth="login"),
    "chat:session": Scoped("session", auth="login"),
    "chat:transcript": Scoped("session", auth="login"),
    "chat:rename": Scoped("session", auth="login"),
    "chat:delete": Scoped("session", auth="login"),
    "chat:restore": Scoped("session", auth="login"),
    "chat:export_markdown": Scoped("session", auth="login"),
    "chat:export_json": Scoped("session", auth="login"),
    "chat:usage": Scoped("session", auth="login"),
    "chat:upload_attachment": Scoped("session", auth="login"),
    "chat:attachment_image": Scoped("attachment", auth="login"),
    "chat:search": Collection(auth="login", query="?q=M1"),
    "chat:new": Checked("test_the_chat_pages_start_chats_only_with_the_callers_own_agents"),
    "chat:switch_tenant": Checked("test_the_chat_pages_start_chats_only_with_the_callers_own_agents"),
    "chat:memories": Collection(auth="login"),
    "chat:forget_memory": Scoped("memory", auth="login"),
    # Forgetting everything about oneself stays open to a viewer; it touches only the caller's rows.
    "chat:forget_everything": Checked(
        "tests/memory/test_memory_page.py::test_forget_everything_erases_only_the_callers_memories_and_files"
    ),
    "chat:accounts": Collection(auth="login"),
    "chat:connect_account": Scoped("accounttarget", auth="login"),
    # Removing one's own token stays open to a viewer (tenant B and other members: that test).
    "chat:disconnect_account": Checked("test_the_connected_accounts_page_never_shows_a_token"),
    "usage_report": Collection(auth="login"),
    "dismiss_banner": Checked("test_a_banner_is_dismissed_only_by_its_tenants_owners"),
    "chat:new_link_code": Checked(
        "tests/chat_platforms/test_linking.py::test_a_code_links_only_within_its_own_tenant"
    ),
    "chat:unlink_chat_account": Checked(
        "tests/chat_platforms/test_linking.py::test_a_member_links_and_unlinks_their_account_with_a_one_time_code"
    ),
    "chat:login": Public("the sign-in form"),
    "chat:logout": Public("signs the caller out"),
    # -- the admin (its model pages: see ADMIN_MODEL_ROUTE)
    "admin:index": Public("the names of the models the caller may open"),
    "admin:app_list": Public("the names of an app's models the caller may open"),
    "admin:login": Public("the sign-in form"),
    "admin:logout": Public("signs the caller out"),
    "admin:password_change": Public("the caller's own password"),
    "admin:password_change_done": Public("a confirmation page"),
    "admin:jsi18n": Public("translations for the admin's scripts"),
    "admin:agents_agentrevision_restore": Checked(
        "tests/platform/test_admin_chat_items.py::test_a_revisions_page_colours_its_diff_and_restores"
    ),
    "admin:agents_llmprovider_test_connection": Checked(
        "tests/agents/test_admin_picker_and_connection.py::"
        "test_test_connection_answers_through_the_guard_and_never_shows_the_key"
    ),
    "admin:autocomplete": Checked(
        "tests/platform/test_admin_isolation.py::test_autocomplete_offers_only_the_tenants_objects"
    ),
    "admin:view_on_site": Checked("test_admin_view_on_site_finds_nothing_of_another_tenant_or_member"),
    "<admin catch-all>": Public("redirects to the sign-in page, or 404"),
}

# admin:<app>_<model>_<view>, and the unnamed <object_id>/ redirect to the change page.
ADMIN_MODEL_ROUTE = re.compile(r"^admin:(?P<model>\w+?)_(?P<view>changelist|add|history|delete|change)$")
ADMIN_OBJECT_REDIRECT = re.compile(r"^admin/(?P<app>\w+)/(?P<model>\w+)/<path:object_id>/$")

# Admin models that are not tenant-owned: closed to every tenant user (checked below),
# open to superusers, who operate the whole platform.
PLATFORM_ADMIN_MODELS = {
    "auth.user": "accounts (superusers only)",
    "auth.group": "Django's permission groups (unused)",
    "django_q.schedule": "the task queue (superusers only)",
    "django_q.success": "the task queue (superusers only)",
    "django_q.failure": "the task queue (superusers only)",
    "django_q.ormq": "the task queue (superusers only)",
    "tenancy.tenant": "the caller's own tenant only (test_admin_isolation: test_tenant_page_...)",
    "audit.auditevent": "the caller's tenant's trail (test_admin_isolation: test_audit_list_...)",
    "axes.accessattempt": "sign-in lock-outs (superusers only: claw_platform/signin/admin.py)",
}

# WebSocket routes of the ASGI router, by pattern.
SOCKET_ROUTES: dict[str, Route] = {
    "ws/sessions/<uuid:session_id>/": Scoped("session"),
    "": Public(
        "the catch-all: closes every unknown socket path with 4404 (tests/api/test_malformed_input.py)"
    ),
}


# ------------------------------------------------------------------ walking


@dataclass(frozen=True)
class HttpRoute:
    key: str  # the URL name, or the pattern of an unnamed route
    pattern: str
    callback: Any


def http_routes() -> list[HttpRoute]:
    """Every route of ROOT_URLCONF, with its namespaced name."""
    found: list[HttpRoute] = []

    def walk(patterns: list[Any], prefix: str, namespaces: list[str]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                inner = namespaces + ([pattern.namespace] if pattern.namespace else [])
                walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
            elif isinstance(pattern, URLPattern):
                full = prefix + str(pattern.pattern)
                name = ":".join([*namespaces, pattern.name]) if pattern.name else None
                found.append(HttpRoute(name or unnamed_key(full), full, pattern.callback))

    walk(get_resolver().url_patterns, "", [])
    return found


def unnamed_key(pattern: str) -> str:
    if pattern == "":
        return "<root redirect>"
    if pattern == "admin/(?P<url>.*)$":
        return "<admin catch-all>"
    return pattern


def socket_routes() -> list[str]:
    """Every WebSocket route the ASGI application serves, found by walking its
    router (whatever middleware wraps it)."""
    from claw_platform.asgi import application

    found: list[str] = []

    def walk(app: Any, prefix: str, depth: int = 0) -> None:
        assert depth < 20, "the ASGI application nests too deep to walk"
        if isinstance(app, URLRouter):
            for route in app.routes:
                inner = getattr(route.callback, "application", None) or getattr(
                    route.callback, "consumer_class", None
                )
                if isinstance(inner, URLRouter):
                    walk(inner, prefix + str(route.pattern), depth + 1)
                else:
                    found.append(prefix + str(route.pattern))
            return
        for attribute in ("application", "inner", "app"):
            inner = getattr(app, attribute, None)
            if inner is not None:
                walk(inner, prefix, depth + 1)
                return
        raise AssertionError(f"cannot see inside {app!r}: teach socket_routes() how")

    walk(application.application_mapping["websocket"], "")
    return found


def classification(route: HttpRoute) -> Route | str:
    """The route's class, or (admin model pages) the admin model it belongs to."""
    if route.key in ROUTES:
        return ROUTES[route.key]
    if route.key == "admin:auth_user_password_change":
        return "auth.user"
    named = ADMIN_MODEL_ROUTE.match(route.key)
    if named:
        return admin_model_label(named.group("model"))
    redirect = ADMIN_OBJECT_REDIRECT.match(route.pattern)
    if redirect:
        return f"{redirect.group('app')}.{redirect.group('model')}"
    raise AssertionError(
        f"route {route.key!r} ({route.pattern!r}) has no isolation check: classify it in "
        "tests/api/test_isolation.py ROUTES"
    )


def admin_model_label(app_and_model: str) -> str:
    for model in admin.site._registry:
        if f"{model._meta.app_label}_{model._meta.model_name}" == app_and_model:
            return str(model._meta.label_lower)
    raise AssertionError(f"no admin model {app_and_model!r}")


def methods_of(callback: Any) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions:
        allowed = callback.initkwargs.get("http_method_names", callback.cls.http_method_names)
        return sorted(m.upper() for m in actions if m in allowed)
    view_class = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
    if view_class is not None:
        return sorted(m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(view_class, m))
    return ["GET", "POST"]  # a function view: its decorators refuse the others


def concrete(pattern: str, ids: dict[str, str]) -> str:
    """The pattern (Django path or router regex) with ids filled in."""
    path = pattern.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: ids[m.group(1)], path)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids[m.group(1)], path)
    path = path.replace("\\.", ".").replace("/?", "/")
    assert not re.search(r"[\\()\[\]<>^$?*+]", path), f"cannot fill in {pattern!r}"
    return "/" + path


# ------------------------------------------------------------------ fixtures


@dataclass
class World:
    chats: MemberChats
    ids: dict[str, dict[str, str]]  # kind -> url kwargs naming A's object of that kind
    tenant_markers: list[str]  # text only tenant A holds
    member_markers: list[str] = field(default_factory=list)  # text only M1's chats hold


@pytest.fixture
def world(tenant_a, tenant_b, member_chats) -> World:
    only = do_create_agent(tenant_a.tenant, slug="a-only", name="A only", model=tenant_a.model)
    per_user = do_create_http_tool(
        tenant_a.tenant,
        agents=[only],
        name="a_own_account_tool",
        description="Acts with each user's own account.",
        url_template="https://api.a.example/mine",
        per_user_token=True,
    )
    make_key(tenant_a, "read", name="a key")
    key = ApiKey.objects.unscoped().get(tenant=tenant_a.tenant, name="a key")
    audit = AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    assert audit is not None
    for prefix, tenant_set in (("a", tenant_a), ("b", tenant_b)):
        make_budget_rows(tenant_set.tenant, prefix, tenant_set.agent)
    budget = Budget.objects.unscoped().get(tenant=tenant_a.tenant)
    switch = KillSwitch.objects.unscoped().get(tenant=tenant_a.tenant)
    chats = member_chats
    routine = do_create_routine(
        tenant_id=tenant_a.tenant.pk,
        agent_id=tenant_a.agent.pk,
        user_id=chats.m1.pk,
        session_id=chats.session.pk,
        name="m1-routine-nightly",
        prompt="m1-routine-prompt",
        trigger=Trigger("cron", cron="0 3 * * *"),
        acting_user=None,
    )
    # M1's personal memory, and what recall put into M1's chat.
    memory = MemoryEntry.objects.unscoped().create(
        tenant=tenant_a.tenant,
        scope="user",
        user=chats.m1,
        agent=tenant_a.agent,
        content="M1 personal memory",
    )
    injection = MemoryInjection.objects.unscoped().create(
        tenant=tenant_a.tenant,
        session=chats.session,
        run=chats.run,
        query="M1 secret plans",
        method="weighted",
    )
    base = {"slug": only.slug, "file_name": "SOUL.md", "number": "1"}
    ids = {
        "agent": base,
        "session": {"pk": str(chats.session.pk), "session_id": str(chats.session.pk)},
        "run": {"pk": str(chats.run.pk)},
        "approval": {"pk": str(chats.approval.pk)},
        "provider": {"pk": str(tenant_a.provider.pk)},
        "modelprofile": {"pk": str(tenant_a.model.pk)},
        "apikey": {"pk": str(key.pk)},
        "auditevent": {"pk": str(audit.pk)},
        "accounttarget": {"kind": "http", "pk": str(per_user.pk)},
        "routine": {"pk": str(routine.pk)},
        "budget": {"pk": str(budget.pk)},
        "killswitch": {"pk": str(switch.pk)},
        "memory": {"pk": str(memory.pk)},
        "memoryinjection": {"pk": str(injection.pk)},
        "attachment": {
            "session_id": str(chats.session.pk),
            "attachment_id": str(Attachment.objects.unscoped().filter(session=chats.session).first().pk),
        },
    }
    tenant_markers = [
        "a_member",
        "Tenant A",
        "a-provider",
        "a-model",
        "a-only",
        str(chats.session.pk),
        "a_own_account_tool",
        "a-member-budget",
        "a drill",
        "alerts.a.example",
    ]
    member_markers = [
        *chats.markers,
        "rm -r logs",
        "m1-only-model",
        "m1-routine-nightly",
        "m1-routine-prompt",
        "a-member-budget",
        "M1 personal memory",
    ]
    return World(chats, ids, tenant_markers, member_markers)


@dataclass
class Caller:
    name: str
    client: Any
    by: str  # "login" or "key"


def login(user: Any) -> Client:
    client = Client()
    assert client.login(username=user.username, password=PASSWORD)
    return client


def tenant_b_callers(tenant_b: Any) -> list[Caller]:
    return [
        Caller("B owner's login", login(tenant_b.owner), "login"),
        Caller("B owner's key", client_for(make_person_key(tenant_b, tenant_b.owner, "admin")), "key"),
        Caller("B operator key", client_for(make_key(tenant_b, "admin")), "key"),
    ]


def m2_callers(chats: MemberChats) -> list[Caller]:
    return [
        Caller("M2's login", login(chats.m2), "login"),
        Caller("M2's key", client_for(make_person_key(chats.tenant_set, chats.m2, "write")), "key"),
    ]


def viewer_callers(tenant_a: Any) -> list[Caller]:
    return [
        Caller("A viewer's login", login(tenant_a.viewer), "login"),
        Caller("A viewer's key", client_for(make_person_key(tenant_a, tenant_a.viewer, "admin")), "key"),
    ]


def applies(auth: str, caller: Caller) -> bool:
    return auth == "api" or auth == caller.by


BODY = json.dumps(
    {
        "model": "a-only",
        "messages": [{"role": "user", "content": "hi"}],
        "message": "hi",
        "text": "hi",
        "agent": "a-only",
        "name": "x",
        "scopes": ["read"],
    }
)


def call(caller: Caller, method: str, path: str) -> Any:
    if method == "GET":
        response = caller.client.get(path)
    else:
        response = caller.client.generic(method, path, BODY, content_type="application/json")
    body = b"".join(response) if getattr(response, "streaming", False) else response.content
    return response.status_code, response.get("Location", ""), body


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def leaked(markers: list[str], path: str, body: bytes) -> list[str]:
    """The markers in ``body``, except those the caller named in the path itself."""
    return [m for m in markers if m not in path and m.encode() in body]


def refused(status: int, location: str) -> bool:
    """404/403/401/405, or a redirect to a sign-in page (a login-only page, a key)."""
    return status in (401, 403, 404, 405) or (status == 302 and "login" in location)


def scoped_routes() -> Iterator[tuple[HttpRoute, Scoped]]:
    for route in http_routes():
        kind = classification(route)
        if isinstance(kind, Scoped):
            yield route, kind


def collection_routes() -> Iterator[tuple[HttpRoute, Collection]]:
    for route in http_routes():
        kind = classification(route)
        if isinstance(kind, Collection):
            yield route, kind


# ------------------------------------------------------------------ the tests


def test_every_route_and_socket_is_classified():
    keys = set()
    for route in http_routes():
        kind = classification(route)
        keys.add(route.key)
        if isinstance(kind, str):  # an admin model's page
            assert kind in PLATFORM_ADMIN_MODELS or kind in {m._meta.label_lower for m in TENANT_MODELS}, (
                f"admin model {kind} is neither tenant-owned (tests/platform/test_admin_isolation.py) "
                "nor listed in PLATFORM_ADMIN_MODELS"
            )
    stale = set(ROUTES) - keys
    assert not stale, f"ROUTES names routes that no longer exist: {sorted(stale)}"
    sockets = socket_routes()
    assert sockets, "no WebSocket route found"
    assert set(sockets) == set(SOCKET_ROUTES), f"classify every socket in SOCKET_ROUTES: {sockets}"


def test_another_tenant_gets_nothing_of_tenant_a(world, tenant_b):
    checked = 0
    for caller in tenant_b_callers(tenant_b):
        for route, kind in scoped_routes():
            if not applies(kind.auth, caller):
                continue
            path = concrete(route.pattern, world.ids[kind.kind])
            for method in methods_of(route.callback):
                status, location, body = call(caller, method, path)
                assert refused(status, location), (caller.name, method, path, status, body[:300])
                assert not leaked(world.tenant_markers, path, body), (caller.name, method, path, body[:300])
                checked += 1
        for route, collection in collection_routes():
            if not applies(collection.auth, caller):
                continue
            path = concrete(route.pattern, {}) + collection.query
            status, _location, body = call(caller, "GET", path)
            assert status in (200, 403, 405), (caller.name, path, status, body[:300])
            for marker in world.tenant_markers:
                assert marker.encode() not in body, (caller.name, path, marker)
            checked += 1
    assert checked >= 150, checked


MISSING = {
    "session": {
        "pk": "6f1c2d1e-0000-4000-8000-000000000000",
        "session_id": "6f1c2d1e-0000-4000-8000-000000000000",
    },
    "run": {"pk": "999999999"},
    "approval": {"pk": "999999999"},
    "routine": {"pk": "999999999"},
    "memory": {"pk": "999999999"},
    "memoryinjection": {"pk": "999999999"},
    "attachment": {"session_id": "6f1c2d1e-0000-4000-8000-000000000000", "attachment_id": "999999999"},
}


def test_another_member_gets_nothing_of_m1s_chats(world):
    checked = 0
    for caller in m2_callers(world.chats):
        for route, kind in scoped_routes():
            if kind.kind not in MEMBER_KINDS or not applies(kind.auth, caller):
                continue
            path = concrete(route.pattern, world.ids[kind.kind])
            missing = concrete(route.pattern, MISSING[kind.kind])
            for method in methods_of(route.callback):
                status, location, body = call(caller, method, path)
                # Exactly what a missing chat answers: a 404, or the same refusal.
                expected, _, _ = call(caller, method, missing)
                assert status == expected, (caller.name, method, path, status, expected, body[:300])
                assert refused(status, location), (caller.name, method, path, status)
                assert not leaked(world.member_markers, path, body), (caller.name, method, path, body[:300])
                checked += 1
        for route, collection in collection_routes():
            if not applies(collection.auth, caller):
                continue
            path = concrete(route.pattern, {}) + collection.query
            status, _location, body = call(caller, "GET", path)
            assert status in (200, 403, 405), (caller.name, path, status, body[:300])
            for marker in world.member_markers:
                assert marker.encode() not in body, (caller.name, path, marker)
            checked += 1
    assert checked >= 40, checked
    assert Session.objects.unscoped().filter(pk=world.chats.session.pk).exists()


def test_viewers_cannot_act(world, tenant_a):
    tried = 0
    for caller in viewer_callers(tenant_a):
        for route, kind in [*scoped_routes(), *collection_routes()]:
            if not applies(kind.auth, caller):
                continue
            ids = world.ids[kind.kind] if isinstance(kind, Scoped) else {}
            path = concrete(route.pattern, ids)
            for method in methods_of(route.callback):
                if method in SAFE_METHODS:
                    continue
                status, location, body = call(caller, method, path)
                assert refused(status, location), (caller.name, method, path, status, body[:300])
                tried += 1
    assert tried >= 40, tried


def test_admin_model_pages_outside_the_tenant_models_are_closed_to_tenant_users(tenant_a, tenant_b):
    for label in PLATFORM_ADMIN_MODELS:
        if label in ("tenancy.tenant", "audit.auditevent"):
            continue  # tenant-scoped pages of their own, tested in test_admin_isolation
        app, model = label.split(".")
        for user in (tenant_b.owner, tenant_a.viewer):
            client = login(user)
            for path in (
                f"/admin/{app}/{model}/",
                f"/admin/{app}/{model}/add/",
                f"/admin/{app}/{model}/1/change/",
            ):
                response = client.get(path)
                assert response.status_code in (403, 404), (user.username, path, response.status_code)


def test_admin_view_on_site_finds_nothing_of_another_tenant_or_member(world, tenant_b):
    from django.contrib.contenttypes.models import ContentType

    session_type = ContentType.objects.get_for_model(Session)
    path = f"/admin/r/{session_type.pk}/{world.chats.session.pk}/"
    for user in (tenant_b.owner, world.chats.m2):
        response = login(user).get(path)
        assert response.status_code == 404, (user.username, response.status_code)


def test_chat_completions_reach_only_the_callers_agents_and_sessions(world, tenant_b):
    body = {"model": "a-only", "messages": [{"role": "user", "content": "hi"}]}
    for caller in tenant_b_callers(tenant_b):
        if caller.by != "key":
            continue
        response = caller.client.post("/v1/chat/completions", body, format="json")
        assert response.status_code == 404, (caller.name, response.content)
    # A member's session names are their own: M2 naming M1's reaches a new session
    # (tests/api/test_member_rule.py::test_members_naming_the_same_outside_session_get_their_own).


def test_the_chat_pages_start_chats_only_with_the_callers_own_agents(world, tenant_a, tenant_b):
    outsider_owner = login(tenant_b.owner)
    before = Session.objects.unscoped().filter(tenant=tenant_a.tenant).count()
    response = outsider_owner.post("/chat/new/", {"agent": tenant_a.agent.pk})
    assert response.status_code == 302
    assert Session.objects.unscoped().filter(tenant=tenant_a.tenant).count() == before
    response = outsider_owner.post("/chat/team/", {"tenant": tenant_a.tenant.pk})
    assert response.status_code == 302
    home = outsider_owner.get("/chat/").content.decode()
    assert "Tenant A" not in home
    viewer = login(tenant_a.viewer)
    viewer.post("/chat/new/", {"agent": tenant_a.agent.pk})
    assert Session.objects.unscoped().filter(tenant=tenant_a.tenant).count() == before


# ------------------------------------------------------------------ sockets


async def socket_answer(path: str, *, user: Any = None, key: str | None = None) -> tuple[str, Any]:
    """How the socket at ``path`` answers a login (``user``) or a key: ("closed",
    code) or ("open", can_act)."""
    from claw_platform.asgi import application

    headers = [(b"host", b"127.0.0.1")]
    if user is not None:
        cookie = await sync_to_async(login)(user)
        headers += [
            (b"origin", b"http://127.0.0.1"),
            (b"cookie", f"sessionid={cookie.cookies['sessionid'].value}".encode()),
        ]
    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=10)
    if not connected:
        return "closed", code
    try:
        if key is None:
            await communicator.send_json_to({"type": "message", "text": "hi from a socket"})
            frame = await communicator.receive_output(timeout=10)
            if frame["type"] == "websocket.close":
                return "closed", frame["code"]
            can_act = "Viewers" not in frame.get("text", "")
            return "open", can_act
        await communicator.send_json_to({"type": "auth", "key": key})
        frame = await communicator.receive_output(timeout=10)
        if frame["type"] == "websocket.close":
            return "closed", frame["code"]
        return "open", json.loads(frame["text"])["payload"]["can_act"]
    finally:
        await communicator.disconnect()


async def test_every_socket_refuses_other_tenants_and_other_members(world, tenant_a, tenant_b):
    chats = world.chats
    for pattern, kind in SOCKET_ROUTES.items():
        if isinstance(kind, Public):
            continue
        assert isinstance(kind, Scoped)
        path = concrete(pattern, world.ids[kind.kind])
        b_owner_key = await sync_to_async(make_person_key)(tenant_b, tenant_b.owner, "admin")
        b_operator_key = await sync_to_async(make_key)(tenant_b, "admin")
        m2_key = await sync_to_async(make_person_key)(chats.tenant_set, chats.m2, "write")
        viewer_key = await sync_to_async(make_person_key)(tenant_a, tenant_a.viewer, "admin")
        for who, answer in (
            ("B owner's login", await socket_answer(path, user=tenant_b.owner)),
            ("B owner's key", await socket_answer(path, key=b_owner_key)),
            ("B operator key", await socket_answer(path, key=b_operator_key)),
            ("M2's login", await socket_answer(path, user=chats.m2)),
            ("M2's key", await socket_answer(path, key=m2_key)),
        ):
            assert answer == ("closed", 4404), (who, path, answer)
        for who, answer in (
            ("A viewer's login", await socket_answer(path, user=tenant_a.viewer)),
            ("A viewer's key", await socket_answer(path, key=viewer_key)),
        ):
            assert answer == ("open", False), (who, path, answer)
