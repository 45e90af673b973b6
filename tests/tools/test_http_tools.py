"""T11: HTTP tools defined in the admin, exercised over a real local server."""

from __future__ import annotations

import asyncio
import json

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from agents.engine.types import ToolCallPart
from claw_platform.audit.models import AuditEvent
from tests.tools.helpers import ctx_for
from tests.tools.servers.local_http import LocalServer
from tools_app.actions.extensions import do_allow_host, do_create_http_tool
from tools_app.http_tools.templates import TemplateError, check_url_template, expand_url_template
from tools_app.models import HttpTool
from tools_app.registry import INVALID_ARGUMENTS, SSRF_BLOCKED, TOOL_ERROR
from tools_app.runtime.assembly import RunToolExecutor, run_extensions

pytestmark = pytest.mark.django_db(transaction=True)

TICKET_SCHEMA = {
    "type": "object",
    "properties": {
        "ticket_id": {"type": "string"},
        "fields": {"type": "string"},
        "verbose": {"type": "boolean"},
    },
    "required": ["ticket_id"],
    "additionalProperties": False,
}


@pytest.fixture
def api():
    with LocalServer() as srv:
        yield srv


def echo_request(received):
    payload = {
        "method": received.method,
        "path": received.path,
        "auth": received.headers.get("authorization"),
        "key": received.headers.get("x-api-key"),
        "body": received.body.decode() or None,
    }
    return 200, json.dumps(payload).encode(), "application/json"


def make_tool(tenant_set, api, **fields):
    defaults = {
        "name": "get_ticket",
        "description": "Read a ticket.",
        "input_schema": TICKET_SCHEMA,
        "method": "GET",
        "url_template": api.url("/tickets/{ticket_id}?fields={fields}"),
        "headers": {"Authorization": "Bearer api-secret-123", "X-Api-Key": "k-456"},
    }
    return do_create_http_tool(tenant_set.tenant, acting_user=tenant_set.owner, **{**defaults, **fields})


def call(tenant_set, name, args):
    async def go():
        extensions = await run_extensions(tenant_id=tenant_set.tenant.pk, agent_id=tenant_set.agent.pk)
        executor = RunToolExecutor(extensions.toolsets, role="member", extensions=extensions)
        try:
            return executor, await executor.execute(ToolCallPart("c1", name, args), ctx_for(tenant_set))
        finally:
            await executor.aclose()

    return asyncio.run(go())


def test_a_get_tool_fills_the_template_and_sends_its_headers(tenant_a, api):
    api.route("GET", "/tickets/T%2F1%3F", handler=echo_request)
    api.route("GET", "/tickets/42", handler=echo_request)
    make_tool(tenant_a, api)
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=api.port)
    executor, result = call(
        tenant_a, "get_ticket", {"ticket_id": "42", "fields": "title,state", "verbose": True}
    )
    assert not result.is_error, result.content
    assert result.content.startswith("HTTP 200\n")
    echoed = json.loads(result.content.split("\n", 1)[1])
    assert echoed["path"] == "/tickets/42?fields=title%2Cstate&verbose=true"
    assert echoed["auth"] == "Bearer api-secret-123"
    assert echoed["key"] == "k-456"
    assert [d.name for d in executor.definitions()] == ["get_ticket"]
    assert executor.traits("get_ticket").read_only
    # A value cannot add path segments or parameters.
    _, result = call(tenant_a, "get_ticket", {"ticket_id": "T/1?", "fields": "a&admin=1"})
    assert json.loads(result.content.split("\n", 1)[1])["path"] == "/tickets/T%2F1%3F?fields=a%26admin%3D1"


def test_a_post_tool_sends_the_other_arguments_as_json(tenant_a, api):
    api.route("POST", "/tickets/7/comments", handler=echo_request)
    schema = {
        "type": "object",
        "properties": {"ticket_id": {"type": "integer"}, "text": {"type": "string"}},
        "required": ["ticket_id", "text"],
    }
    make_tool(
        tenant_a,
        api,
        name="comment",
        method="POST",
        input_schema=schema,
        url_template=api.url("/tickets/{ticket_id}/comments"),
    )
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=api.port)
    executor, result = call(tenant_a, "comment", {"ticket_id": 7, "text": "looks good"})
    echoed = json.loads(result.content.split("\n", 1)[1])
    assert echoed["method"] == "POST"
    assert json.loads(echoed["body"]) == {"text": "looks good"}
    assert executor.traits("comment").side_effects
    assert executor.traits("comment").risk == "medium"


def test_arguments_are_validated_against_the_schema(tenant_a, api):
    make_tool(tenant_a, api)
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=api.port)
    _, result = call(tenant_a, "get_ticket", {"ticket": "42"})
    assert result.error_type == INVALID_ARGUMENTS
    assert not api.received


def test_secret_headers_never_follow_a_redirect_to_another_origin(tenant_a, api):
    with LocalServer() as elsewhere:
        elsewhere.route("GET", "/landing", handler=echo_request)
        api.redirect("/tickets/1", elsewhere.url("/landing"))
        make_tool(tenant_a, api)
        do_allow_host(tenant_a.tenant, "127.0.0.1")
        _, result = call(tenant_a, "get_ticket", {"ticket_id": "1"})
        echoed = json.loads(result.content.split("\n", 1)[1])
        assert echoed["path"] == "/landing"
        assert echoed["auth"] is None
        assert echoed["key"] is None
        assert api.received[0].headers["authorization"] == "Bearer api-secret-123"


def test_the_response_is_capped_and_errors_are_reported(tenant_a, api):
    api.route("GET", "/tickets/big", 200, "y" * 5000)
    api.route("GET", "/tickets/missing", 404, '{"error": "no such ticket"}', content_type="application/json")
    make_tool(tenant_a, api, max_response_bytes=1000)
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=api.port)
    _, big = call(tenant_a, "get_ticket", {"ticket_id": "big"})
    assert big.content.split("\n")[1:] == ["y" * 1000, "[response cut at 1000 bytes]"]
    _, missing = call(tenant_a, "get_ticket", {"ticket_id": "missing"})
    assert missing.error_type == TOOL_ERROR
    assert "HTTP 404" in missing.content
    assert "no such ticket" in missing.content


def test_http_tools_go_through_the_ssrf_guard(tenant_a, api):
    api.route("GET", "/tickets/1", handler=echo_request)
    make_tool(tenant_a, api)  # 127.0.0.1 is not on tenant A's allow-list
    _, result = call(tenant_a, "get_ticket", {"ticket_id": "1"})
    assert result.error_type == SSRF_BLOCKED
    assert not api.received


def test_another_tenants_http_tools_never_appear(tenant_a, tenant_b, api):
    make_tool(tenant_a, api)
    executor, result = call(tenant_b, "get_ticket", {"ticket_id": "1"})
    assert executor.definitions() == []
    assert result.error_type == "unknown_tool"


def test_headers_are_encrypted_at_rest_and_masked_in_the_audit(tenant_a, api):
    tool = make_tool(tenant_a, api)
    with connection.cursor() as cursor:
        cursor.execute("SELECT headers FROM tools_app_httptool WHERE id = %s", [tool.pk])
        raw = cursor.fetchone()[0]
    assert raw.startswith("fernet:")
    assert "api-secret-123" not in raw
    assert (
        HttpTool.objects.unscoped().get(pk=tool.pk).header_map()["Authorization"] == "Bearer api-secret-123"
    )
    audit = AuditEvent.objects.unscoped().get(action="httptool.created", object_id=str(tool.pk))
    assert "api-secret-123" not in json.dumps(audit.diff)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": "web_fetch"}, "built-in"),
        ({"name": "mcp_github_x"}, "MCP namespace"),
        ({"input_schema": {"type": "array"}}, "type"),
        (
            {"input_schema": {"type": "object", "properties": {"x": {"type": "nonsense"}}}},
            "Invalid JSON Schema",
        ),
        ({"url_template": "https://{host}/x"}, "host must be written out"),
        ({"url_template": "https://api.example/{unknown}"}, "missing from the schema"),
        ({"url_template": "ftp://api.example/"}, "http"),
        ({"url_template": "https://user:pw@api.example/"}, "credentials"),
        ({"headers": {"Bad Header": "x"}}, "not a valid header name"),
    ],
)
def test_definitions_are_validated(tenant_a, api, fields, problem):
    with pytest.raises(ValidationError, match=problem):
        make_tool(tenant_a, api, **fields)
    assert not HttpTool.objects.unscoped().filter(name=fields.get("name", "get_ticket")).exists()


def test_templates_are_expanded_safely():
    assert check_url_template("https://a.example/x/{id}?q={q}") == ["id", "q"]
    assert (
        expand_url_template("https://a.example/x/{id}", {"id": "../../admin"})
        == "https://a.example/x/..%2F..%2Fadmin"
    )
    with pytest.raises(TemplateError, match="required"):
        expand_url_template("https://a.example/x/{id}", {})
    assert (
        expand_url_template("https://a.example/x?a={a}&b={b}&c=1", {"b": 2}) == "https://a.example/x?b=2&c=1"
    )
    assert expand_url_template("https://a.example/x?a={a}", {}) == "https://a.example/x"
    with pytest.raises(TemplateError, match="string or number"):
        expand_url_template("https://a.example/x/{id}", {"id": {"a": 1}})
