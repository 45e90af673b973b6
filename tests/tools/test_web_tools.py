"""T3: web_fetch (guarded, capped, HTML to text) and web_search (pluggable; SearXNG)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.tools.helpers import call, ctx_for
from tests.tools.servers.local_http import LocalServer
from tools_app.actions.extensions import do_allow_host
from tools_app.registry import SSRF_BLOCKED, TIMEOUT, TOOL_ERROR, builtin_registry
from tools_app.web import WEB_FETCH, WEB_SEARCH, fetch_tool
from tools_app.web.fetch_tool import html_to_text

PAGE = """<!doctype html><html><head><title>Release notes</title>
<style>p { color: red }</style><script>var secret = "do not show";</script></head>
<body><h1>Claw 1.2</h1><p>Faster <b>streaming</b> and <a href="/x">links</a>.</p>
<ul><li>hooks</li><li>skills</li></ul>
<table><tr><td>MCP</td><td>yes</td></tr></table></body></html>"""


@pytest.fixture
def site():
    with LocalServer() as srv:
        srv.route("GET", "/notes", 200, PAGE, content_type="text/html; charset=utf-8")
        srv.route("GET", "/data.json", 200, json.dumps({"ok": True}), content_type="application/json")
        srv.route("GET", "/image.png", 200, b"\x89PNG....", content_type="image/png")
        srv.route("GET", "/big", 200, "x" * 3_000_000, content_type="text/plain")
        srv.route("GET", "/gone", 404, "no such page", content_type="text/plain")
        yield srv


def fetch(tenant_set, url, **args):
    return asyncio.run(call(builtin_registry, "web_fetch", {"url": url, **args}, ctx_for(tenant_set)))


def test_web_tools_are_built_ins():
    assert builtin_registry.get("web_fetch") is WEB_FETCH
    assert builtin_registry.get("web_search") is WEB_SEARCH


def test_html_becomes_readable_text_without_scripts_or_styles():
    text = html_to_text(PAGE)
    assert "Claw 1.2" in text
    assert "Faster streaming and links." in text
    assert "* hooks" in text
    assert "* skills" in text
    assert "MCP" in text
    assert "yes" in text
    assert "do not show" not in text
    assert "color" not in text


@pytest.mark.django_db(transaction=True)
def test_web_fetch_reads_a_page_of_an_allowed_host(tenant_a, site):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=site.port, acting_user=tenant_a.owner)
    result = fetch(tenant_a, site.url("/notes"))
    assert not result.is_error, result.content
    assert "Status: 200" in result.content
    assert "Faster streaming" in result.content
    assert "<p>" not in result.content
    json_result = fetch(tenant_a, site.url("/data.json"))
    assert '{"ok": true}' in json_result.content


@pytest.mark.django_db(transaction=True)
def test_web_fetch_caps_size_and_text(tenant_a, site):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=site.port, acting_user=tenant_a.owner)
    result = fetch(tenant_a, site.url("/big"), max_chars=1000)
    assert not result.is_error
    assert "[download stopped at 2000000 bytes]" in result.content
    assert "[text cut at 1000 of 2000000 characters]" in result.content
    assert len(result.content) < 1500


@pytest.mark.django_db(transaction=True)
def test_web_fetch_refuses_binary_content_and_reports_http_errors(tenant_a, site):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=site.port, acting_user=tenant_a.owner)
    image = fetch(tenant_a, site.url("/image.png"))
    assert image.error_type == TOOL_ERROR
    assert "image/png" in image.content
    gone = fetch(tenant_a, site.url("/gone"))
    assert gone.error_type == TOOL_ERROR
    assert "HTTP 404" in gone.content


@pytest.mark.django_db(transaction=True)
def test_web_fetch_times_out(tenant_a, site, monkeypatch):
    monkeypatch.setattr(fetch_tool, "FETCH_TIMEOUT_SECONDS", 0.3)
    site.route("GET", "/slow", 200, "late", delay=1.0)
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=site.port, acting_user=tenant_a.owner)
    result = fetch(tenant_a, site.url("/slow"))
    assert result.error_type == TIMEOUT


@pytest.mark.django_db(transaction=True)
def test_one_tenants_allow_list_never_opens_a_host_for_another(tenant_a, tenant_b, site):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=site.port, acting_user=tenant_a.owner)
    assert not fetch(tenant_a, site.url("/notes")).is_error
    refused = fetch(tenant_b, site.url("/notes"))
    assert refused.error_type == SSRF_BLOCKED
    assert len(site.received) == 1


@pytest.mark.django_db(transaction=True)
def test_an_allow_list_change_applies_to_the_next_run(tenant_a, site):
    assert fetch(tenant_a, site.url("/notes")).error_type == SSRF_BLOCKED
    host = do_allow_host(tenant_a.tenant, "127.0.0.1", acting_user=tenant_a.owner)
    assert not fetch(tenant_a, site.url("/notes")).is_error
    host.delete()
    assert fetch(tenant_a, site.url("/notes")).error_type == SSRF_BLOCKED


# ---------------------------------------------------------------------- search


def searxng_answer(received):
    query = received.path.split("q=", 1)[1].split("&", 1)[0]
    body = {
        "query": query,
        "results": [
            {"title": "Claw Platform", "url": "https://claw.example/", "content": "Agents on  Django."},
            {"title": "Hooks", "url": "https://claw.example/hooks", "content": "H1 to H4"},
            {"url": "https://claw.example/untitled"},
            {"title": "no url"},
        ],
    }
    return 200, json.dumps(body).encode(), "application/json"


@pytest.fixture
def searxng(settings):
    with LocalServer() as srv:
        srv.route("GET", "/search", handler=searxng_answer)
        settings.CLAW_WEB_SEARCH_URL = srv.url("").rstrip("/")
        yield srv


def search(args):
    return asyncio.run(call(builtin_registry, "web_search", args, ctx_for()))


def test_web_search_asks_the_searxng_json_api(searxng):
    result = search({"query": "claw platform", "count": 2, "language": "en"})
    assert not result.is_error, result.content
    assert "1. Claw Platform\n   https://claw.example/\n   Agents on Django." in result.content
    assert "2. Hooks" in result.content
    assert "untitled" not in result.content  # count=2
    request = searxng.received[0]
    assert "format=json" in request.path
    assert "q=claw+platform" in request.path
    assert "language=en" in request.path


def test_web_search_skips_results_without_a_url(searxng):
    result = search({"query": "claw"})
    assert "https://claw.example/untitled" in result.content
    assert "no url" not in result.content


def test_web_search_reports_a_broken_backend(searxng):
    searxng.route("GET", "/search", 200, "<html>json format disabled</html>", content_type="text/html")
    result = search({"query": "claw"})
    assert result.error_type == TOOL_ERROR
    assert "JSON" in result.content


def test_web_search_without_a_backend_says_so(settings):
    settings.CLAW_WEB_SEARCH_URL = ""
    result = search({"query": "claw"})
    assert result.error_type == TOOL_ERROR
    assert "not configured" in result.content
