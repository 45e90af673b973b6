"""Tenant isolation, generated from the URL configuration: every route of the API is
called with tenant B's admin key on tenant A's objects and must answer 404 or 403;
every collection must hold nothing of A's. A route this test does not know fails it,
so a new route must be added here (with its ids) before it can ship."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver

from agents.actions.config import do_create_agent
from agents.actions.conversation import do_create_session
from agents.models import ApprovalRequest, Run, Session
from claw_platform.api import urls as api_urls
from claw_platform.api.models import ApiKey
from claw_platform.audit.models import AuditEvent
from tests.api.conftest import client_for, make_key

pytestmark = pytest.mark.django_db(transaction=True)

# Routes that take no tenant's ids, with why.
UNSCOPED = {
    "api/schema/": "the public schema",
    "api/docs/": "the public docs page",
    "api/v1/pair/": "exchanges a code for a key of the code's own tenant (tests/api/test_pairing.py)",
}


def routes() -> list[tuple[str, Any]]:
    """(path pattern, callback) for every route under the API's URL configuration."""
    found: list[tuple[str, Any]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                found.append(
                    ((prefix + str(pattern.pattern)).replace("^", "").replace("$", ""), pattern.callback)
                )

    walk(api_urls.urlpatterns, "")
    return found


def methods_of(callback: Any) -> list[str]:
    actions = getattr(callback, "actions", None)
    if actions:
        allowed = callback.initkwargs.get("http_method_names", callback.cls.http_method_names)
        return sorted(m.upper() for m in actions if m in allowed)
    view_class = getattr(callback, "view_class", None) or (
        getattr(getattr(callback, "cls", None), "__name__", None) and callback.cls
    )
    if view_class is not None:
        return sorted(m.upper() for m in ("get", "post", "put", "patch", "delete") if hasattr(view_class, m))
    return {"chat_completions_view": ["POST"], "models_view": ["GET"]}[callback.__name__]


def concrete(pattern: str, ids: dict[str, str]) -> str:
    """The pattern (Django path or router regex) with A's ids filled in."""
    path = pattern.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: ids[m.group(1)], path)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids[m.group(1)], path)
    path = path.replace("\\.", ".").replace("/?", "/")
    assert not re.search(r"[\\()\[\]<>^$?*+]", path), f"cannot fill in {pattern!r}"
    return "/" + path


@pytest.fixture
def a_objects(tenant_a):
    only = do_create_agent(tenant_a.tenant, slug="a-only", name="A only", model=tenant_a.model)
    session = Session.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    run = Run.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    approval = ApprovalRequest.objects.unscoped().create(
        tenant=tenant_a.tenant, run=run, call_id="c1", tool_name="delete_file", arguments={}
    )
    make_key(tenant_a, "read", name="a key")
    key = ApiKey.objects.unscoped().get(tenant=tenant_a.tenant)
    audit = AuditEvent.objects.unscoped().filter(tenant=tenant_a.tenant).first()
    do_create_session(only, title="a-only chat")
    return {
        "slug": only.slug,
        "pk": str(session.pk),
        "id": str(session.pk),
        "number": "1",
        "file_name": "SOUL.md",
        "markers": ["a_member", "Tenant A", "a-provider", "a-model", "a-only", str(session.pk)],
        "by_basename": {
            "session": str(session.pk),
            "run": str(run.pk),
            "approval": str(approval.pk),
            "auditevent": str(audit.pk),
            "apikey": str(key.pk),
            "provider": str(tenant_a.provider.pk),
            "modelprofile": str(tenant_a.model.pk),
        },
    }


def basename_of(callback: Any) -> str | None:
    initkwargs = getattr(callback, "initkwargs", {})
    return initkwargs.get("basename")


def test_every_route_refuses_another_tenants_objects_and_lists_none_of_them(tenant_a, tenant_b, a_objects):
    client = client_for(make_key(tenant_b, "admin", name="b admin"))
    checked = 0
    for pattern, callback in routes():
        if pattern in UNSCOPED:
            continue
        ids = dict(a_objects)
        basename = basename_of(callback)
        if basename in a_objects["by_basename"]:
            ids["pk"] = ids["id"] = a_objects["by_basename"][basename]
        has_ids = bool(re.search(r"<|\(\?P<", pattern))
        path = concrete(pattern, ids)
        for method in methods_of(callback):
            if has_ids:
                body = {
                    "model": "a-only",
                    "messages": [{"role": "user", "content": "hi"}],
                    "message": "hi",
                    "text": "hi",
                }
                response = client.generic(
                    method, path, data=__import__("json").dumps(body), content_type="application/json"
                )
                assert response.status_code in (403, 404), (
                    method,
                    path,
                    response.status_code,
                    response.content[:300],
                )
            elif method == "GET":
                query = "?after=0&timeout=1" if path.endswith("/events/") else ""
                response = client.get(path + query)
                content = b"".join(response) if getattr(response, "streaming", False) else response.content
                assert response.status_code == 200, (path, response.status_code, content[:300])
                for marker in a_objects["markers"]:
                    assert marker.encode() not in content, (path, marker)
            elif path == "/v1/chat/completions":
                response = client.post(
                    path, {"model": "a-only", "messages": [{"role": "user", "content": "hi"}]}, format="json"
                )
                assert response.status_code == 404, response.content
            else:
                continue  # creating in one's own tenant: tests/api/test_basics.py
            checked += 1
    assert checked >= 40, checked
