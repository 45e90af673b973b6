"""T10: MCP servers over stdio and streamable HTTP, with the official SDK on both ends:
approved commands only, arguments that cannot smuggle code, namespaced tools, one
connection per run, per-server timeout, rate limit, concurrency cap and circuit breaker
with MicroClaw's error types, the SSRF guard on HTTP servers, and tenant isolation."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError

from agents.actions.config import do_create_agent
from agents.actions.conversation import do_create_session
from agents.engine.interfaces import RunContext
from agents.engine.types import ToolCallPart
from agents.runtime.chat import handle_message
from agents.runtime.llm import close_providers
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import ctx_for
from tests.tools.servers.mcp_http import McpHttpServer
from tools_app.actions.extensions import do_allow_host, do_create_mcp_server
from tools_app.mcp.commands import CommandRefused, check_arguments, check_environment
from tools_app.mcp.resilience import CircuitBreaker, RateLimiter
from tools_app.mcp.toolset import mcp_tool_name
from tools_app.models import AllowedHost, McpServer
from tools_app.registry import MCP_CIRCUIT_OPEN, MCP_ERROR, MCP_RATE_LIMITED, SSRF_BLOCKED, TIMEOUT
from tools_app.runtime.assembly import RunToolExecutor, run_extensions

SERVER = str(Path(__file__).parent / "servers" / "mcp_server.py")
db = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _approved_commands(settings):
    settings.CLAW_MCP_STDIO_COMMANDS = {
        "test-server": [sys.executable, SERVER],
        "crashing": [sys.executable, SERVER, "--crash"],
    }


@pytest.fixture
def http_server():
    server = McpHttpServer()
    try:
        yield server
    finally:
        server.stop()


async def open_run(tenant_set, agent=None):
    """A run's executor over the tenant's extensions, as registry_tools builds it."""
    agent = agent or tenant_set.agent
    extensions = await run_extensions(tenant_id=tenant_set.tenant.pk, agent_id=agent.pk)
    return RunToolExecutor(extensions.toolsets, role="member", extensions=extensions)


async def use(executor, name, args, ctx):
    return await executor.execute(ToolCallPart(f"call-{name}", name, args), ctx)


# ------------------------------------------------------------ approval and args


@db
def test_a_stdio_command_not_on_the_approved_list_is_refused(tenant_a, settings):
    with pytest.raises(ValidationError, match="not an approved MCP command"):
        do_create_mcp_server(tenant_a.tenant, name="evil", transport="stdio", command="/bin/sh")
    assert not McpServer.objects.unscoped().filter(name="evil").exists()
    # Approved when saved, withdrawn by the operator later: left out of every run.
    do_create_mcp_server(tenant_a.tenant, name="tmp", transport="stdio", command="test-server")
    settings.CLAW_MCP_STDIO_COMMANDS = {}
    executor = asyncio.run(open_run(tenant_a))
    assert executor.definitions() == []


SMUGGLING = [
    ["-c", "import os; os.system('id')"],
    ["-e", "require('child_process').exec('id')"],
    ["--eval=process.exit()"],
    ["--eval", "x"],
    ["-p", "1+1"],
    ["-ic", "x"],
    ["-m", "http.server"],
    ["-r", "./payload.js"],
    ["--require", "./payload.js"],
    ["--import=data:text/javascript,x"],
    ["--experimental-loader", "x"],
    ["-x"],
    ["--init-file", "/tmp/rc"],
    ["ok", "two\nlines"],
    ["nul\x00byte"],
    ["x" * 1001],
    ["--from", "evil-package"],
    "not a list",
    [1, 2],
]


@pytest.mark.parametrize("args", SMUGGLING, ids=[repr(a)[:40] for a in SMUGGLING])
def test_arguments_that_could_smuggle_code_are_refused(args):
    with pytest.raises(CommandRefused):
        check_arguments(args)


def test_ordinary_arguments_pass():
    assert check_arguments(["--toolsets", "repos,issues", "stdio", "--read-only", "--port=8080", "-v"]) == [
        "--toolsets",
        "repos,issues",
        "stdio",
        "--read-only",
        "--port=8080",
        "-v",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "LD_PRELOAD",
        "PYTHONPATH",
        "PYTHONSTARTUP",
        "NODE_OPTIONS",
        "PATH",
        "HOME",
        "BASH_ENV",
        "DYLD_INSERT_LIBRARIES",
    ],
)
def test_environment_variables_that_load_code_are_refused(name):
    with pytest.raises(CommandRefused):
        check_environment({name: "x"})
    assert check_environment({"GITHUB_TOKEN": "ghp_x"}) == {"GITHUB_TOKEN": "ghp_x"}


@db
def test_smuggling_is_refused_when_saving_a_row(tenant_a):
    with pytest.raises(ValidationError, match="run or load code"):
        do_create_mcp_server(
            tenant_a.tenant, name="x", transport="stdio", command="test-server", args=["-c", "1"]
        )
    with pytest.raises(ValidationError, match="LD_PRELOAD"):
        do_create_mcp_server(
            tenant_a.tenant, name="y", transport="stdio", command="test-server", env={"LD_PRELOAD": "/x.so"}
        )


def test_tool_names_are_namespaced_and_cleaned():
    assert mcp_tool_name("github", "create_issue") == "mcp_github_create_issue"
    assert mcp_tool_name("fs", "read.file/v2") == "mcp_fs_read_file_v2"
    assert len(mcp_tool_name("s" * 24, "t" * 80)) == 64


# -------------------------------------------------------------------------- stdio


@db
def test_a_stdio_server_is_used_over_one_connection_per_run(tenant_a, settings):
    server = do_create_mcp_server(
        tenant_a.tenant, name="test", transport="stdio", command="test-server", env={"SERVICE_TOKEN": "tok"}
    )

    async def go():
        executor = await open_run(tenant_a)
        ctx = ctx_for(tenant_a)
        try:
            names = [d.name for d in executor.definitions()]
            echo = await use(executor, "mcp_test_echo", {"text": "hi"}, ctx)
            pids = [await use(executor, "mcp_test_pid", {}, ctx) for _ in range(3)]
            env = await use(executor, "mcp_test_env_names", {}, ctx)
            broken = await use(executor, "mcp_test_broken", {"message": "bad"}, ctx)
            invalid = await use(executor, "mcp_test_add", {"a": "one"}, ctx)
            connection = executor.extensions.closers[0]
            return names, echo, pids, env, broken, invalid, connection.opened
        finally:
            await executor.aclose()

    names, echo, pids, env, broken, invalid, opened = asyncio.run(go())
    assert set(names) == {
        f"mcp_test_{t}" for t in ("echo", "add", "env_names", "env_value", "pid", "slow", "broken")
    }
    assert echo.content == "echo: hi"
    assert not echo.is_error
    assert len({p.content for p in pids}) == 1
    assert opened == 1
    variables = set(env.content.split(","))
    assert "SERVICE_TOKEN" in variables
    assert not variables & {
        "SECRET_KEY",
        "CLAW_SECRETS_KEY",
        "DATABASE_URL",
        "CLAW_VAR_DIR",
        "DJANGO_SETTINGS_MODULE",
    }
    assert broken.is_error
    assert broken.error_type == MCP_ERROR
    assert invalid.error_type == "invalid_arguments"  # checked against the server's schema first
    assert server.pk


@db
def test_a_server_that_cannot_start_is_left_out_and_counted(tenant_a):
    do_create_mcp_server(
        tenant_a.tenant, name="dead", transport="stdio", command="crashing", circuit_failure_threshold=1
    )
    do_create_mcp_server(tenant_a.tenant, name="test", transport="stdio", command="test-server")

    async def go():
        executor = await open_run(tenant_a)
        try:
            return [d.name for d in executor.definitions()]
        finally:
            await executor.aclose()

    names = asyncio.run(go())
    assert names
    assert all(n.startswith("mcp_test_") for n in names)


# --------------------------------------------------------------------------- http


@db
def test_a_streamable_http_server_is_reached_through_the_guard(tenant_a, tenant_b, http_server):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=http_server.port, acting_user=tenant_a.owner)
    do_create_mcp_server(
        tenant_a.tenant,
        name="remote",
        transport="http",
        url=http_server.url,
        headers={"Authorization": "Bearer t0k"},
    )

    async def go():
        executor = await open_run(tenant_a)
        try:
            return await use(executor, "mcp_remote_add", {"a": 2, "b": 40}, ctx_for(tenant_a))
        finally:
            await executor.aclose()

    result = asyncio.run(go())
    assert result.content == "42"
    assert not result.is_error
    # Tenant B has no MCP servers: nothing of A's appears in its runs.
    executor_b = asyncio.run(open_run(tenant_b))
    assert executor_b.definitions() == []


@db
def test_an_http_server_on_a_refused_address_is_blocked(tenant_a, http_server):
    do_create_mcp_server(tenant_a.tenant, name="remote", transport="http", url=http_server.url)
    assert asyncio.run(open_run(tenant_a)).definitions() == []  # not allow-listed: never listed
    allowed = do_allow_host(tenant_a.tenant, "127.0.0.1", port=http_server.port)
    executor = asyncio.run(open_run(tenant_a))  # listed now (and the list cached)
    asyncio.run(executor.aclose())
    AllowedHost.objects.unscoped().filter(pk=allowed.pk).delete()

    async def go():
        executor = await open_run(tenant_a)
        try:
            return await use(executor, "mcp_remote_echo", {"text": "x"}, ctx_for(tenant_a))
        finally:
            await executor.aclose()

    result = asyncio.run(go())
    assert result.error_type == SSRF_BLOCKED, result.content


@db
def test_timeouts_rate_limits_and_the_concurrency_cap(tenant_a, http_server):
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=http_server.port)
    do_create_mcp_server(
        tenant_a.tenant,
        name="remote",
        transport="http",
        url=http_server.url,
        timeout_seconds=1,
        rate_limit_per_minute=4,
        max_concurrency=1,
    )

    async def go():
        executor = await open_run(tenant_a)
        ctx = ctx_for(tenant_a)
        try:
            slow = await use(executor, "mcp_remote_slow", {"seconds": 3}, ctx)
            parallel = await asyncio.gather(
                use(executor, "mcp_remote_slow", {"seconds": 0.3}, ctx),
                use(executor, "mcp_remote_slow", {"seconds": 0.3}, ctx),
            )
            after = [await use(executor, "mcp_remote_echo", {"text": str(i)}, ctx) for i in range(3)]
            return slow, parallel, after
        finally:
            await executor.aclose()

    slow, parallel, after = asyncio.run(go())
    assert slow.error_type == TIMEOUT
    assert sorted(str(r.error_type) for r in parallel) == ["None", MCP_RATE_LIMITED]
    assert "calls in flight" in next(r.content for r in parallel if r.is_error)
    # 4 a minute: the slow call, the parallel call that ran and two echoes use them up
    # (the call refused by the concurrency cap never took one).
    assert [r.error_type for r in after] == [None, None, MCP_RATE_LIMITED]
    assert "rate limited" in after[2].content


@db
def test_the_circuit_opens_after_repeated_failures(tenant_a):
    server = McpHttpServer()
    try:
        do_allow_host(tenant_a.tenant, "127.0.0.1", port=server.port)
        do_create_mcp_server(
            tenant_a.tenant,
            name="flaky",
            transport="http",
            url=server.url,
            timeout_seconds=2,
            circuit_failure_threshold=2,
            circuit_cooldown_seconds=60,
        )
        asyncio.run(open_run(tenant_a)).definitions()  # list while it is up
    finally:
        server.stop()

    async def go():
        executor = await open_run(tenant_a)
        try:
            return [await use(executor, "mcp_flaky_echo", {"text": "x"}, ctx_for(tenant_a)) for _ in range(3)]
        finally:
            await executor.aclose()

    results = asyncio.run(go())
    assert [r.error_type for r in results] == [MCP_ERROR, MCP_ERROR, MCP_CIRCUIT_OPEN]
    assert "paused" in results[2].content


def test_circuit_breaker_half_opens_after_the_cooldown():
    now = [0.0]
    breaker = CircuitBreaker(2, 10, clock=lambda: now[0])
    breaker.record_failure()
    assert breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    assert not breaker.allow()
    now[0] = 11
    assert breaker.state == "half_open"
    assert breaker.allow()
    assert not breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    now[0] = 22
    assert breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed"
    assert breaker.allow()


def test_rate_limiter_refills_over_time():
    now = [0.0]
    limiter = RateLimiter(2, clock=lambda: now[0])
    assert limiter.try_acquire()
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    now[0] = 30  # half a minute: one call back
    assert limiter.try_acquire()
    assert not limiter.try_acquire()
    assert RateLimiter(0).try_acquire()


# -------------------------------------------------------------------- agents, runs


@db
def test_a_server_limited_to_some_agents_stays_out_of_the_others(tenant_a, http_server):
    other = do_create_agent(tenant_a.tenant, slug="other", name="Other", model=tenant_a.model)
    do_allow_host(tenant_a.tenant, "127.0.0.1", port=http_server.port)
    do_create_mcp_server(
        tenant_a.tenant, name="remote", transport="http", url=http_server.url, agents=[other]
    )
    assert asyncio.run(open_run(tenant_a)).definitions() == []
    executor = asyncio.run(open_run(tenant_a, agent=other))
    asyncio.run(executor.aclose())
    assert "mcp_remote_echo" in [d.name for d in executor.definitions()]


@db
def test_a_run_calls_an_mcp_tool_and_closes_the_connection(live_agent, fake_llm, http_server):
    do_allow_host(live_agent.tenant, "127.0.0.1", port=http_server.port)
    do_create_mcp_server(live_agent.tenant, name="remote", transport="http", url=http_server.url)
    session = do_create_session(live_agent.agent, user=live_agent.member, title="set")
    fake_llm.script(
        FakeTurn(tool_calls=[("mcp_remote_echo", {"text": "from the model"}, "call_1")]),
        FakeTurn(text="done"),
    )

    async def go():
        try:
            return await handle_message(session.pk, "use the tool")
        finally:
            await close_providers()

    reply = asyncio.run(go())
    assert reply.text == "done"
    second = [r for r in fake_llm.requests if r.json.get("messages")][1]
    assert "echo: from the model" in str(second.json["messages"])
    tools = [t["function"]["name"] for t in second.json["tools"]]
    assert "mcp_remote_echo" in tools


def test_ctx_is_not_needed_to_name_tools():
    assert RunContext().tenant_id == ""
