"""Defect 11 (issue 21): a provider's extra headers refuse CR, LF and other control
characters when saved (admin form and API serializer, through the model's validation),
and a value stored before that check never reaches the wire (checked per request)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from agents.engine.types import LLMRequest, Message, ProviderError
from agents.models import LLMProvider
from agents.providers.base import HttpProvider
from agents.providers.headers import header_problem
from agents.providers.registry import build_provider
from claw_platform.ops.checks import check_providers
from tests.api.conftest import client_for as api_client_for
from tests.api.conftest import make_key
from tests.fakes.fake_llm import FakeLLM, Turn
from tests.fakes.fixtures import fake_llm  # noqa: F401
from tests.fakes.network import block_network  # noqa: F401
from tests.platform.test_admin_isolation import client_for
from tests.platform.test_audit import provider_post

INJECTIONS = [
    {"X-Title": "claw\r\nX-Injected: 1"},
    {"X-Title": "claw\nX-Injected: 1"},
    {"X-Title": "claw\rX"},
    {"X-Title": "a\x00b"},
    {"X-Title": "a\x1bb"},
    {"X-Title": "a\x7fb"},
    {"X-Title": "café"},
    {"X-Ti tle": "x"},
    {"X-Title:": "x"},
    {"X-Title\r\nX-Injected": "x"},
    {"Content-Length": "0"},
    {"Transfer-Encoding": "chunked"},
    {"Host": "other.example"},
]


@pytest.mark.parametrize("headers", INJECTIONS, ids=lambda h: repr(h)[:40])
def test_the_admin_refuses_extra_headers_that_cannot_be_sent_as_typed(tenant_a, headers):
    client = client_for(tenant_a.owner)
    response = client.post(
        reverse("admin:agents_llmprovider_add"), provider_post(extra_headers=json.dumps(headers))
    )
    assert response.status_code == 200
    assert "extra_headers" in response.context["adminform"].form.errors
    assert not LLMProvider.objects.unscoped().filter(name="ollama").exists()


def test_the_admin_keeps_ordinary_extra_headers(tenant_a):
    client = client_for(tenant_a.owner)
    headers = {"X-Title": "Claw\tPlatform", "HTTP-Referer": "https://claw.example/"}
    response = client.post(
        reverse("admin:agents_llmprovider_add"), provider_post(extra_headers=json.dumps(headers))
    )
    assert response.status_code == 302
    assert LLMProvider.objects.unscoped().get(name="ollama").extra_headers == headers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("headers", INJECTIONS[:4], ids=lambda h: repr(h)[:40])
def test_the_api_refuses_them_naming_the_field(tenant_a, headers):
    api = api_client_for(make_key(tenant_a, "admin"))
    url = reverse("v1:provider-detail", args=[tenant_a.provider.pk])
    response = api.patch(url, {"extra_headers": headers}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert any(name.split(".")[0] == "extra_headers" for name in error["fields"]), error
    assert LLMProvider.objects.unscoped().get(pk=tenant_a.provider.pk).extra_headers == {}


def test_header_problem_names_the_header():
    assert header_problem("X-Title", "ok value") is None
    assert "line break" in (header_problem("X-Title", "a\r\nb") or "")
    assert "not a valid header name" in (header_problem("X Title", "v") or "")


REQUEST = LLMRequest(model="m", messages=[Message.user("hi")])


@pytest.mark.parametrize("kind", ["anthropic", "openai_compatible"])
@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
async def test_a_stored_value_that_escaped_the_check_is_never_sent(
    kind,
    transport,
    fake_llm: FakeLLM,  # noqa: F811
    monkeypatch,
):
    from agents.providers import base

    monkeypatch.setattr(base, "DEFAULT_TRANSPORT", transport)
    url = fake_llm.url if kind == "anthropic" else fake_llm.openai_base_url
    provider = build_provider(
        kind, base_url=url, api_key="sk-x", extra_headers={"X-Title": "claw\r\nX-Injected: 1"}, timeout=5.0
    )
    assert isinstance(provider, HttpProvider)
    try:
        with pytest.raises(ProviderError) as stream_error:
            async for _event in provider.stream(REQUEST):
                pass
        assert stream_error.value.kind == "bad_request"
        assert "X-Title" in stream_error.value.message
        with pytest.raises(ProviderError) as complete_error:
            await provider.complete(REQUEST)
        assert complete_error.value.kind == "bad_request"
    finally:
        await provider.aclose()
    assert fake_llm.requests == []  # nothing reached the wire


async def test_good_extra_headers_are_sent(fake_llm: FakeLLM):  # noqa: F811
    fake_llm.script(Turn(text="hello"))
    provider = build_provider(
        "openai_compatible",
        base_url=fake_llm.openai_base_url,
        api_key="sk-x",
        extra_headers={"X-Title": "Claw"},
    )
    try:
        await provider.complete(REQUEST)
    finally:
        await provider.aclose()
    assert fake_llm.requests[0].headers.get("x-title") == "Claw"


def test_doctor_reports_stored_bad_headers_without_sending_them(tenant_a):
    LLMProvider.objects.unscoped().filter(pk=tenant_a.provider.pk).update(
        extra_headers={"X-Title": "claw\r\nX-Injected: 1"}
    )
    results = {r.name: r for r in check_providers(timeout=1.0)}
    mine = results[f"provider {tenant_a.provider.name} (tenant {tenant_a.tenant.pk})"]
    assert not mine.ok
    assert "extra headers cannot be sent" in mine.detail
