"""The stock middleware behave the same when their hooks run on the event loop
(claw_platform.middleware): under ASGI (Django's AsyncClient drives the async
handler) a login persists its session, CSRF is enforced, flash messages survive a
redirect, and the security headers and slash redirects are still there."""

from __future__ import annotations

import re
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from claw_platform import middleware
from tests.fixtures.tenants import PASSWORD, make_tenant_set

pytestmark = pytest.mark.django_db(transaction=True)


def csrf_token(html: str) -> str:
    match = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert match, "no CSRF token in the form"
    return match.group(1)


async def signed_in(username: str) -> AsyncClient:
    client = AsyncClient(enforce_csrf_checks=True)
    page = await client.get("/chat/login/")
    assert page.status_code == 200
    response = await client.post(
        "/chat/login/",
        {
            "username": username,
            "password": PASSWORD,
            "csrfmiddlewaretoken": csrf_token(page.content.decode()),
        },
    )
    assert response.status_code == 302, response.content[:500]
    return client


async def test_a_login_persists_its_session_and_csrf_is_enforced() -> None:
    tenants: Any = await sync_to_async(make_tenant_set)("a")
    refused = await AsyncClient(enforce_csrf_checks=True).post(
        "/chat/login/", {"username": "a_member", "password": PASSWORD}
    )
    assert refused.status_code == 403  # no CSRF token
    client = await signed_in("a_member")
    home = await client.get("/chat/")
    assert home.status_code == 200
    assert tenants.tenant.name in home.content.decode()


async def test_a_flash_message_survives_the_redirect() -> None:
    await sync_to_async(make_tenant_set)("a")
    client = await signed_in("a_member")
    home = await client.get("/chat/")
    response = await client.post(
        "/chat/new/", {"agent": "999999", "csrfmiddlewaretoken": csrf_token(home.content.decode())}
    )
    assert response.status_code == 302
    page = await client.get(response["Location"])
    assert "Pick one of the team&#x27;s agents." in page.content.decode()
    again = await client.get("/chat/")
    assert "Pick one of the team" not in again.content.decode()  # shown once


async def test_security_headers_and_slash_redirects_remain() -> None:
    client = AsyncClient()
    health = await client.get("/healthz")
    assert health["X-Frame-Options"] == "DENY"
    assert health["X-Content-Type-Options"] == "nosniff"
    assert health["Referrer-Policy"] == "same-origin"
    redirect = await client.get("/admin")
    assert redirect.status_code == 301
    assert redirect["Location"] == "/admin/"


async def test_hooks_run_on_the_event_loop_and_a_session_save_in_a_thread(monkeypatch: Any) -> None:
    await sync_to_async(make_tenant_set)("a")
    threads: dict[str, set[int]] = {"security": set(), "session_save": set()}
    security_hook = middleware.SecurityMiddleware.process_request
    session_hook = middleware.SessionMiddleware.process_response

    def security(self: Any, request: Any) -> Any:
        threads["security"].add(threading.get_ident())
        return security_hook(self, request)

    def session(self: Any, request: Any, response: Any) -> Any:
        if request.session.modified:
            threads["session_save"].add(threading.get_ident())
        return session_hook(self, request, response)

    monkeypatch.setattr(middleware.SecurityMiddleware, "process_request", security)
    monkeypatch.setattr(middleware.SessionMiddleware, "process_response", session)
    await signed_in("a_member")  # two requests; the login modifies the session
    assert threads["security"] == {threading.get_ident()}  # this test's event loop
    assert threads["session_save"]
    assert threading.get_ident() not in threads["session_save"]
