"""Malformed and hostile input (issue 21, defect 9): JSON nested ~1,100 deep on every
JSON route, NUL and lone surrogates in the OpenAI endpoint, a 400-digit webhook
timestamp, a socket path that is not a UUID and a deeply nested socket frame. Each is
a 4xx in the API's error shape (or a clean socket close), never a 500."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.urls import URLPattern, URLResolver

from agents.actions.conversation import do_create_session
from agents.models import Run
from claw_platform.api import urls as api_urls
from claw_platform.api.actions.keys import do_issue_pairing_code
from claw_platform.api.models import AgentWebhook
from claw_platform.json_input import MAX_DEPTH, JsonInputError, parse_json
from tests.api.conftest import client_for, make_key

pytestmark = pytest.mark.django_db(transaction=True)

DEEP = 1_100
DEEP_ARRAY = "[" * DEEP + "]" * DEEP
DEEP_OBJECT = '{"a":' * DEEP + "1" + "}" * DEEP
# Shallow enough for the standard library, deeper than the product takes.
NESTED = '{"message": ' + "[" * (MAX_DEPTH + 5) + "]" * (MAX_DEPTH + 5) + "}"


def api_error(response: Any) -> dict[str, Any]:
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "fields"}, body
    return body["error"]  # type: ignore[no-any-return]


def json_routes() -> list[tuple[str, list[str]]]:
    """(path pattern, methods that take a body) for every route of the API's URL
    configuration: a new route is covered without being listed here."""
    found: list[tuple[str, list[str]]] = []

    def walk(patterns: list[Any], prefix: str) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                callback = pattern.callback
                actions = getattr(callback, "actions", None)
                view = getattr(callback, "view_class", None) or getattr(callback, "cls", None)
                if actions:
                    methods = [m.upper() for m in actions if m in ("post", "put", "patch")]
                elif view is not None:
                    methods = [m.upper() for m in ("post", "put", "patch") if hasattr(view, m)]
                else:
                    methods = ["POST"]  # function views: they say no to other methods themselves
                found.append((prefix + str(pattern.pattern), methods))

    walk(api_urls.urlpatterns, "")
    return [(p, m) for p, m in found if m]


def concrete(pattern: str, ids: dict[str, str]) -> str:
    path = pattern.replace("^", "").replace("$", "")
    path = re.sub(r"\(\?P<(\w+)>[^)]*\)", lambda m: ids.get(m.group(1), "1"), path)
    path = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: ids.get(m.group(1), "1"), path)
    return "/" + path.replace("\\.", ".").replace("/?", "/")


def test_the_parser_refuses_depth_nul_and_lone_surrogates_and_names_the_field():
    assert parse_json(b'{"a": [1, {"b": "c"}]}') == {"a": [1, {"b": "c"}]}
    assert parse_json("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    for text in (DEEP_ARRAY, DEEP_OBJECT, NESTED, "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)):
        with pytest.raises(JsonInputError, match="nested more than"):
            parse_json(text)
    with pytest.raises(JsonInputError) as nul:
        parse_json(b'{"messages": [{"content": "a\\u0000b"}]}')
    assert nul.value.field == "messages.0.content"
    with pytest.raises(JsonInputError) as key:
        parse_json('{"a\\u0000": 1}')
    assert "NUL" in key.value.message
    for lone in (b'"\\ud800"', '"\udc80"', b'"\xed\xa0\x80"'):
        with pytest.raises(JsonInputError, match="Not valid JSON"):
            parse_json(lone)
    with pytest.raises(JsonInputError):
        parse_json("1" + "0" * 400)
    assert parse_json('"\\ud83d\\ude00 \\u00e9"') == "\U0001f600 \u00e9"


def test_deep_json_on_every_json_route_is_a_400_in_the_error_shape(live_agent):
    tenant = live_agent
    session = do_create_session(tenant.agent, title="deep")
    ids = {
        "slug": tenant.agent.slug,
        "pk": str(session.pk),
        "id": str(session.pk),
        "number": "1",
        "file_name": "SOUL.md",
    }
    client = client_for(make_key(tenant, "admin"))
    refused = 0
    for pattern, methods in json_routes():
        path = concrete(pattern, ids)
        for method in methods:
            for body in (DEEP_ARRAY, DEEP_OBJECT):
                response = client.generic(method, path, body, content_type="application/json")
                assert response.status_code < 500, (
                    method,
                    path,
                    response.status_code,
                    response.content[:300],
                )
                if response.status_code >= 400:
                    error = response.json()["error"]
                    assert error["message"], (method, path, error)
                if response.status_code == 400:
                    refused += 1
    # Sessions, messages, agents, providers, model profiles, keys, pairing codes,
    # hooks, /v1/chat/completions, …: every route that reads its body said 400.
    assert refused >= 20, refused
    created = client.post("/api/v1/sessions/", NESTED, content_type="application/json")
    assert created.status_code == 400
    assert "nested more than" in api_error(created)["message"]


def test_a_nul_in_an_api_field_is_refused_naming_the_field(live_agent):
    client = client_for(make_key(live_agent, "write"))
    session = do_create_session(live_agent.agent, title="nul")
    response = client.generic(
        "POST",
        f"/api/v1/sessions/{session.pk}/messages/",
        b'{"text": "hello\\u0000world", "mode": "async"}',
        content_type="application/json",
    )
    assert response.status_code == 400, response.content
    error = api_error(response)
    assert error["fields"] == {"text": ["Text may not contain the NUL character (\\u0000)."]}
    assert not Run.objects.unscoped().filter(session=session).exists()


def test_deep_json_on_pairing_is_a_400_and_counts_as_a_failed_attempt(tenant_a, settings):
    from django.core.cache import cache

    cache.clear()  # lock-outs other tests earned from this address
    settings.CLAW_PAIR_MAX_FAILURES = 2
    _pairing, code = do_issue_pairing_code(
        tenant_a.tenant, name="kiosk", scopes=["read"], acting_user=tenant_a.owner
    )
    client = client_for(None)
    first = client.generic("POST", "/api/v1/pair/", DEEP_ARRAY, content_type="application/json")
    assert first.status_code == 400, first.content
    assert api_error(first)["code"] == "parse_error"
    deep_code = '{"code":' * 400 + '"x"' + "}" * 400  # within the endpoint's 4 KB cap
    second = client.generic(
        "POST", "/api/v1/pair/", deep_code, content_type="application/json", HTTP_X_PAIRING_CODE=code
    )
    assert second.status_code == 429, second.content
    assert api_error(second)["code"] == "locked_out"
    # Locked out: even the right code is refused now.
    assert client.post("/api/v1/pair/", {"code": code}, format="json").status_code == 429


def test_nul_and_lone_surrogates_in_openai_content_or_user_are_a_400_naming_the_param(live_agent):
    client = client_for(make_key(live_agent, "write"))

    def post(raw: bytes) -> Any:
        return client.generic("POST", "/v1/chat/completions", raw, content_type="application/json")

    cases = [
        (
            b'{"model": "assistant", "messages": [{"role": "user", "content": "a\\u0000b"}]}',
            "messages[0].content",
        ),
        (
            b'{"model": "assistant", "messages": [{"role": "user", "content": "hi"}], "user": "u\\u0000"}',
            "user",
        ),
        (
            b'{"model": "assistant", "messages": [{"role": "user", "content": [{"type": "text", "text": "\\u0000"}]}]}',
            "messages[0].content[0].text",
        ),
        (b'{"model": "assistant", "messages": [{"role": "user", "content": "a\\ud800b"}]}', None),
        (b'{"model": "assistant", "messages": [{"role": "user", "content": "hi"}], "user": "\\udfff"}', None),
        (b'{"model": "assistant", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', None),
    ]
    for raw, param in cases:
        response = post(raw)
        assert response.status_code == 400, (raw, response.content)
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error", error
        assert error["param"] == param, (raw, error)
    assert not Run.objects.unscoped().filter(tenant=live_agent.tenant, session__channel="openai").exists()


def test_a_400_digit_webhook_timestamp_is_a_400(live_agent):
    AgentWebhook.objects.unscoped().create(
        tenant=live_agent.tenant, agent=live_agent.agent, signing_secret="s3cret", mode="async"
    )
    client = client_for(make_key(live_agent, "write"))
    for timestamp in ("9" * 400, "-5", "1e9", "\uff11\uff12\uff13"):
        response = client.generic(
            "POST",
            "/api/v1/hooks/assistant/",
            json.dumps({"message": "hi"}),
            content_type="application/json",
            HTTP_X_CLAW_TIMESTAMP=timestamp,
            HTTP_X_CLAW_SIGNATURE="sha256=" + "0" * 64,
        )
        assert response.status_code == 400, (timestamp, response.content)
        assert "Unix seconds" in api_error(response)["message"]


async def test_a_socket_path_that_is_not_a_uuid_is_closed_cleanly(tenant_a):
    from claw_platform.asgi import application

    for path in ("/ws/sessions/not-a-uuid/", "/ws/sessions/1/", "/ws/nothing-here/", "/ws/sessions/%00/"):
        communicator = WebsocketCommunicator(application, path, headers=[(b"host", b"127.0.0.1")])
        connected, code = await communicator.connect(timeout=10)
        assert (connected, code) == (False, 4404), path
        await communicator.wait(timeout=5)


async def test_a_deeply_nested_or_unreadable_socket_frame_gets_an_error_frame(tenant_a):
    from claw_platform.asgi import application

    session = await sync_to_async(do_create_session)(tenant_a.agent, title="frames")
    key = await sync_to_async(make_key)(tenant_a, "write")
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session.pk}/", headers=[(b"host", b"127.0.0.1")]
    )
    assert (await communicator.connect(timeout=10))[0]
    await communicator.send_json_to({"type": "auth", "key": key})
    assert (await communicator.receive_json_from(timeout=10))["type"] == "authenticated"
    for frame in (DEEP_ARRAY, DEEP_OBJECT, '{"type": "message", "text": "a\\u0000b"}', '"\\ud800"'):
        await communicator.send_to(text_data=frame)
        reply = await communicator.receive_json_from(timeout=10)
        assert reply["type"] == "error", (frame[:40], reply)
    await communicator.send_to(bytes_data=b"\xff\xfe")
    assert (await communicator.receive_json_from(timeout=10))["type"] == "error"
    # The socket still works after all that.
    await communicator.send_json_to({"type": "resume"})
    await communicator.send_json_to({"type": "nonsense"})
    assert "Unknown frame type" in (await communicator.receive_json_from(timeout=10))["payload"]["message"]
    assert not await sync_to_async(lambda: Run.objects.unscoped().filter(session_id=session.pk).exists())()
    await communicator.disconnect()


async def test_a_deep_first_frame_closes_an_unauthenticated_socket_with_4401(tenant_a):
    from claw_platform.asgi import application

    session = await sync_to_async(do_create_session)(tenant_a.agent, title="frames")
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session.pk}/", headers=[(b"host", b"127.0.0.1")]
    )
    assert (await communicator.connect(timeout=10))[0]
    await communicator.send_to(text_data=DEEP_ARRAY)
    assert await communicator.receive_output(timeout=10) == {"type": "websocket.close", "code": 4401}


def test_deep_json_typed_into_an_admin_json_field_is_a_form_error(tenant_a):
    from django.urls import reverse

    from tests.platform.test_admin_isolation import client_for as admin_client_for
    from tests.tools.test_extensions_admin import hook_post
    from tools_app.models import Hook

    client = admin_client_for(tenant_a.admin)
    response = client.post(reverse("admin:tools_app_hook_add"), hook_post(tenant_a, config=DEEP_OBJECT))
    assert response.status_code == 200
    assert "config" in response.context["adminform"].form.errors
    assert not Hook.objects.unscoped().filter(name="screen").exists()
