"""Z5: per-user credentials. An MCP server (streamable HTTP and stdio) or an HTTP tool
that needs each user's own token sends the token of the run's user and nobody else's;
a user who has not connected gets an error the model can pass on; the tokens are
entered, replaced and removed by their owner on the chat's Connected accounts page and
never shown back."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse

from agents.actions.conversation import do_create_session
from agents.engine.types import ToolCallPart
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from claw_platform.audit.models import AuditEvent
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.fixtures.tenants import PASSWORD
from tests.tools.helpers import ctx_for
from tests.tools.servers.local_http import LocalServer
from tests.tools.servers.mcp_http import McpHttpServer
from tools_app.actions.extensions import do_allow_host, do_create_http_tool, do_create_mcp_server
from tools_app.actions.user_tokens import AccountError, do_connect_account, do_disconnect_account
from tools_app.models import HttpTool, McpServer, UserToken
from tools_app.registry import ACCOUNT_NOT_CONNECTED
from tools_app.runtime.assembly import RunToolExecutor, run_extensions

SERVER = str(Path(__file__).parent / "servers" / "mcp_server.py")
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _approved_commands(settings):
    settings.CLAW_MCP_STDIO_COMMANDS = {"test-server": [sys.executable, SERVER]}


@pytest.fixture
def api():
    with LocalServer() as srv:
        yield srv


@pytest.fixture
def mcp_http():
    server = McpHttpServer()
    try:
        yield server
    finally:
        server.stop()


def echo_auth(received):
    return 200, json.dumps({"auth": received.headers.get("authorization")}).encode(), "application/json"


def call(tenant_set, user, name, args):
    """One tool call in a run of tenant_set's agent for ``user``, as registry_tools builds it."""

    async def go():
        extensions = await run_extensions(
            tenant_id=tenant_set.tenant.pk, agent_id=tenant_set.agent.pk, user_id=user.pk if user else None
        )
        executor = RunToolExecutor(extensions.toolsets, role="member", extensions=extensions)
        try:
            names = [d.name for d in executor.definitions()]
            return names, await executor.execute(ToolCallPart("c1", name, args), ctx_for(tenant_set))
        finally:
            await executor.aclose()

    return asyncio.run(go())


def per_user_http_tool(tenant_set, api):
    do_allow_host(tenant_set.tenant, "127.0.0.1", port=api.port, acting_user=tenant_set.owner)
    return do_create_http_tool(
        tenant_set.tenant,
        acting_user=tenant_set.owner,
        name="my_tickets",
        description="The user's own tickets.",
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
        method="GET",
        url_template=api.url("/mine"),
        headers={"Authorization": "Bearer shared-team-token", "X-Team": "t"},
        per_user_token=True,
        user_token_hint="a ticket-system token",
    )


def test_an_http_tool_sends_the_run_users_own_token_and_no_one_elses(tenant_a, api):
    api.route("GET", "/mine", handler=echo_auth)
    tool = per_user_http_tool(tenant_a, api)
    do_connect_account(tenant_a.member, tool, "tok-member-111")
    do_connect_account(tenant_a.admin, tool, "tok-admin-222")

    _, mine = call(tenant_a, tenant_a.member, "my_tickets", {})
    assert not mine.is_error, mine.content
    assert '"auth": "Bearer tok-member-111"' in mine.content
    _, theirs = call(tenant_a, tenant_a.admin, "my_tickets", {})
    assert '"auth": "Bearer tok-admin-222"' in theirs.content
    # The shared header the user's token replaces is never sent with it; other headers are.
    sent = [r.headers for r in api.received]
    assert [h["authorization"] for h in sent] == ["Bearer tok-member-111", "Bearer tok-admin-222"]
    assert all(h["x-team"] == "t" for h in sent)


def test_a_user_without_a_token_gets_an_error_the_model_can_pass_on(tenant_a, api):
    api.route("GET", "/mine", handler=echo_auth)
    tool = per_user_http_tool(tenant_a, api)
    do_connect_account(tenant_a.member, tool, "tok-member-111")
    names, result = call(tenant_a, tenant_a.viewer, "my_tickets", {})
    assert "my_tickets" in names
    assert result.is_error
    assert result.error_type == ACCOUNT_NOT_CONNECTED
    assert "must connect their account" in result.content
    assert "/chat/accounts/" in result.content
    assert "a ticket-system token" in result.content
    # A run with no user (an operator key's webhook) has nobody's token either.
    _, nobody = call(tenant_a, None, "my_tickets", {})
    assert nobody.error_type == ACCOUNT_NOT_CONNECTED
    assert api.received == []  # nothing was sent without a token, not even the shared one


def test_a_streamable_http_mcp_server_gets_each_users_token(tenant_a, mcp_http):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=mcp_http.port, acting_user=tenant_a.owner)
    server = do_create_mcp_server(
        tenant_a.tenant,
        name="github",
        transport="http",
        url=mcp_http.url,
        per_user_token=True,
        user_token_template="token {token}",
    )
    do_connect_account(tenant_a.member, server, "gh-member")
    names, result = call(tenant_a, tenant_a.member, "mcp_github_add", {"a": 40, "b": 2})
    assert result.content == "42", result.content
    assert set(mcp_http.authorizations) == {"token gh-member"}
    mcp_http.authorizations.clear()

    do_connect_account(tenant_a.admin, server, "gh-admin")
    call(tenant_a, tenant_a.admin, "mcp_github_add", {"a": 1, "b": 1})
    assert set(mcp_http.authorizations) == {"token gh-admin"}
    mcp_http.authorizations.clear()

    # Without an account the server is not even contacted: one tool says what to do.
    names, result = call(tenant_a, tenant_a.viewer, "mcp_github_connect_account", {})
    assert names == ["mcp_github_connect_account"]
    assert result.error_type == ACCOUNT_NOT_CONNECTED
    assert mcp_http.authorizations == []


def test_a_stdio_mcp_server_gets_the_users_token_in_its_environment(tenant_a):
    server = do_create_mcp_server(
        tenant_a.tenant,
        name="local",
        transport="stdio",
        command="test-server",
        env={"SHARED": "team"},
        per_user_token=True,
        user_token_into="PERSONAL_TOKEN",
    )
    do_connect_account(tenant_a.member, server, "env-member")
    do_connect_account(tenant_a.admin, server, "env-admin")
    _, result = call(tenant_a, tenant_a.member, "mcp_local_env_value", {"name": "PERSONAL_TOKEN"})
    assert result.content == "env-member"
    _, result = call(tenant_a, tenant_a.admin, "mcp_local_env_value", {"name": "PERSONAL_TOKEN"})
    assert result.content == "env-admin"
    _, result = call(tenant_a, tenant_a.admin, "mcp_local_env_value", {"name": "SHARED"})
    assert result.content == "team"


def test_the_admin_must_say_where_a_stdio_token_goes_and_in_what_format(tenant_a, api):
    with pytest.raises(ValidationError, match="environment variable"):
        do_create_mcp_server(
            tenant_a.tenant, name="noenv", transport="stdio", command="test-server", per_user_token=True
        )
    with pytest.raises(ValidationError, match="may not be set"):
        do_create_mcp_server(
            tenant_a.tenant,
            name="preload",
            transport="stdio",
            command="test-server",
            per_user_token=True,
            user_token_into="LD_PRELOAD",
        )
    with pytest.raises(ValidationError, match=r"\{token\}"):
        do_create_mcp_server(
            tenant_a.tenant,
            name="fmt",
            transport="http",
            url="https://mcp.example.com/mcp",
            per_user_token=True,
            user_token_template="Bearer",
        )
    assert not McpServer.objects.unscoped().filter(name__in=["noenv", "preload", "fmt"]).exists()


def test_tokens_are_checked_replaced_and_removed_by_their_owner_only(tenant_a, tenant_b, api):
    tool = per_user_http_tool(tenant_a, api)
    with pytest.raises(AccountError, match="line breaks"):
        do_connect_account(tenant_a.member, tool, "a\r\nX-Evil: 1")
    with pytest.raises(AccountError, match="ASCII"):
        do_connect_account(tenant_a.member, tool, "tökén")
    do_connect_account(tenant_a.member, tool, "first")
    do_connect_account(tenant_a.member, tool, "zq-second-token")
    row = UserToken.objects.unscoped().get(user=tenant_a.member)
    assert row.token == "zq-second-token"
    assert UserToken.objects.unscoped().count() == 1
    assert not do_disconnect_account(tenant_a.admin, tool)  # the admin has none: nothing of the member's goes
    assert UserToken.objects.unscoped().count() == 1
    assert do_disconnect_account(tenant_a.member, tool)
    assert not UserToken.objects.unscoped().exists()
    actions = list(
        AuditEvent.objects.unscoped().filter(tenant_id=tenant_a.tenant.pk).values_list("action", flat=True)
    )
    assert {"account.connected", "account.token_replaced", "account.disconnected"} <= set(actions)
    assert "zq-second-token" not in json.dumps(list(AuditEvent.objects.unscoped().values()), default=str)


def login(user) -> Client:
    client = Client()
    assert client.login(username=user.get_username(), password=PASSWORD)
    return client


def test_the_connected_accounts_page_never_shows_a_token(tenant_a, tenant_b, api):
    tool = per_user_http_tool(tenant_a, api)
    other = per_user_http_tool(tenant_b, api)
    member = login(tenant_a.member)
    page = member.get(reverse("chat:accounts"))
    assert page.status_code == 200
    assert b"my_tickets" in page.content
    assert b"Not connected" in page.content
    assert page["Content-Security-Policy"]

    answer = member.post(
        reverse("chat:connect_account", args=["http", tool.pk]), {"token": "zq-member-token"}
    )
    assert answer.status_code == 302
    page = member.get(reverse("chat:accounts"))
    assert b"Connected since" in page.content
    assert b"zq-member-token" not in page.content
    assert UserToken.objects.unscoped().get(user=tenant_a.member).token == "zq-member-token"

    # Another member sees the tool as not connected for them, and cannot touch the member's.
    admin = login(tenant_a.admin)
    theirs = admin.get(reverse("chat:accounts"))
    assert b"Not connected" in theirs.content
    assert b"zq-member-token" not in theirs.content
    admin.post(reverse("chat:disconnect_account", args=["http", tool.pk]))
    assert UserToken.objects.unscoped().filter(user=tenant_a.member).exists()

    # Another tenant's tool is a 404, and an unknown kind too.
    assert (
        member.post(reverse("chat:connect_account", args=["http", other.pk]), {"token": "x"}).status_code
        == 404
    )
    assert (
        member.post(reverse("chat:connect_account", args=["nope", tool.pk]), {"token": "x"}).status_code
        == 404
    )
    assert not UserToken.objects.unscoped().filter(http_tool=other).exists()

    # The owner's admin page of the tool says how many connected, never the token.
    owner = login(tenant_a.owner)
    change = owner.get(reverse("admin:tools_app_httptool_change", args=[tool.pk]))
    assert change.status_code == 200
    assert b"1 user " in change.content
    assert b"zq-member-token" not in change.content

    # Another tenant's owner cannot remove it either (their tenant has no such tool: 404).
    outsider = login(tenant_b.owner)
    assert outsider.post(reverse("chat:disconnect_account", args=["http", tool.pk])).status_code == 404
    assert UserToken.objects.unscoped().filter(user=tenant_a.member).exists()

    member.post(reverse("chat:disconnect_account", args=["http", tool.pk]))
    assert not UserToken.objects.unscoped().filter(http_tool=tool).exists()

    # A viewer runs nothing, so connects nothing; a token kept from before stays removable.
    viewer = login(tenant_a.viewer)
    assert (
        viewer.post(reverse("chat:connect_account", args=["http", tool.pk]), {"token": "v"}).status_code
        == 403
    )
    do_connect_account(tenant_a.viewer, tool, "from-when-a-member")
    assert viewer.post(reverse("chat:disconnect_account", args=["http", tool.pk])).status_code == 302
    assert not UserToken.objects.unscoped().filter(http_tool=tool).exists()
    assert HttpTool.objects.unscoped().filter(name="my_tickets").count() == 2


def test_a_run_in_a_members_chat_uses_that_members_token(live_agent, fake_llm, api):
    api.route("GET", "/mine", handler=echo_auth)
    tool = per_user_http_tool(live_agent, api)
    do_connect_account(live_agent.member, tool, "tok-chat-member")
    do_connect_account(live_agent.admin, tool, "tok-chat-admin")
    session = do_create_session(live_agent.agent, user=live_agent.member, title="mine")
    fake_llm.script(FakeTurn(tool_calls=[("my_tickets", {}, "call_1")]), FakeTurn(text="done"))

    async def go():
        try:
            return await handle_message(session.pk, "my tickets please")
        finally:
            await close_providers()

    assert asyncio.run(go()).text == "done"
    assert [r.headers["authorization"] for r in api.received] == ["Bearer tok-chat-member"]


def test_a_routine_uses_the_token_of_the_user_it_acts_for(live_agent, fake_llm, api):
    from datetime import timedelta

    from django.utils import timezone

    from agents.runtime.worker import execute_run
    from tests.routines.helpers import make_routine, runs_of, tick

    api.route("GET", "/mine", handler=echo_auth)
    tool = per_user_http_tool(live_agent, api)
    do_connect_account(live_agent.member, tool, "tok-routine-member")
    do_connect_account(live_agent.admin, tool, "tok-routine-admin")
    now = timezone.now()
    routine = make_routine(live_agent, next_run_at=now - timedelta(seconds=1), user=live_agent.admin)
    fake_llm.script(FakeTurn(tool_calls=[("my_tickets", {}, "call_1")]), FakeTurn(text="done"))
    tick(now)
    (row,) = runs_of(routine)
    assert row.run_id is not None
    assert execute_run(row.run_id, wait=True) == "completed", fake_llm.problems()
    assert [r.headers["authorization"] for r in api.received] == ["Bearer tok-routine-admin"]
