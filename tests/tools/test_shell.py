"""T15: bash in a bubblewrap sandbox, confined on the host only where the operator
allows it (CLAW_SHELL_HOST); never with the product's secrets; the workspace the only
writable place; no network unless allowed; timeouts, output caps and exit codes as
typed errors. What the sandbox hides and its network: test_shell_confinement.py."""

from __future__ import annotations

import base64
import socket
import threading
from collections.abc import Iterator

import pytest
from django.conf import settings

from tests.tools.helpers import Run, configure, tool_setting
from tools_app.registry import EXECUTION_POLICY_BLOCKED, PATH_POLICY_BLOCKED, PROCESS_EXIT, TIMEOUT
from tools_app.sandbox import shell as sandbox_shell
from tools_app.sandbox.landlock import landlock_abi

pytestmark = pytest.mark.django_db(transaction=True)

SECRETS = {
    "SECRET_KEY": "django-secret-value-123",
    "DATABASE_URL": "postgresql://claw:dbpass-456@db/claw",
    "CLAW_SECRETS_KEY": "fernet-key-789",
    "OPENAI_API_KEY": "sk-openai-abc",
    "ANTHROPIC_API_KEY": "sk-ant-def",
    "GITHUB_TOKEN": "ghp_tokenvalue",
    "SMTP_PASSWORD": "mailpass",
}

MODES = []
if sandbox_shell.sandbox_available():
    MODES.append("sandbox")
MODES.append("host")


def hide(path: str) -> str:
    """A shell spelling of ``path`` the text check cannot see (the kernel must stop it)."""
    return f'"$(echo {base64.b64encode(path.encode()).decode()} | base64 -d)"'


def needs_sandbox() -> None:
    if not sandbox_shell.sandbox_available():
        pytest.skip("bubblewrap cannot run on this host")


@pytest.fixture
def secrets_in_env(monkeypatch) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def _host_mode_allowed(request, settings) -> None:
    """Tests of the host mode run as an operator who opted in to it."""
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("mode") == "host":
        settings.CLAW_SHELL_HOST = "allow"


def shell_run(tenant_set, mode: str, **config) -> Run:
    configure(tenant_set.agent, **config)
    tool_setting(tenant_set.agent, "bash", execution=mode, approval_mode="auto")
    return Run(tenant_set.agent, tenant_set.member)


@pytest.fixture
def listener() -> Iterator[int]:
    """A local TCP server: the place a command must not reach without network."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    hits: list[int] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            hits.append(1)
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    server.close()
    thread.join(timeout=5)


@pytest.mark.parametrize("mode", MODES)
def test_the_shell_never_sees_the_products_secrets(tenant_a, secrets_in_env, mode):
    run = shell_run(tenant_a, mode)
    env_dump = run.call("bash", command="env")
    assert not env_dump.is_error, env_dump.content
    for name, value in SECRETS.items():
        assert name not in env_dump.content
        assert value not in env_dump.content
    # Nor through the parent's /proc entry or the product's own files.
    proc = run.execute("bash", command="cat /proc/$PPID/environ /proc/1/environ 2>&1; cat /proc/self/environ")
    for value in SECRETS.values():
        assert value not in proc.content
    key_file = settings.VAR_DIR / "secrets.key"
    escaped = run.execute("bash", command=f"cat {hide(str(key_file))} 2>&1 || true")
    if key_file.exists():
        assert key_file.read_text().strip() not in escaped.content


@pytest.mark.parametrize("mode", MODES)
def test_the_workspace_is_the_only_writable_place(tenant_a, mode):
    if mode == "host" and not landlock_abi():
        pytest.skip("host confinement of writes needs Landlock")
    run = shell_run(tenant_a, mode)
    # In the product's own directory (outside /tmp, which the sandbox makes private).
    outside = settings.BASE_DIR / "var-planted-by-test.txt"
    outside.unlink(missing_ok=True)
    ok = run.call("bash", command="touch inside.txt")
    assert not ok.is_error, ok.content
    assert (run.workspace / "inside.txt").exists()
    # The path check refuses the plain spelling; the kernel refuses a hidden one.
    assert run.call("bash", command=f"touch {outside}").error_type == PATH_POLICY_BLOCKED
    hidden = run.execute("bash", command=f"touch {hide(str(outside))}")
    assert hidden.error_type == PROCESS_EXIT
    assert not outside.exists()
    project = settings.BASE_DIR / "tools_app" / "models" / "config.py"
    before = project.read_bytes()
    run.execute("bash", command=f"echo hacked >> {hide(str(project))}")
    assert project.read_bytes() == before


@pytest.mark.parametrize("mode", MODES)
def test_no_network_unless_the_agent_allows_it(tenant_a, listener, mode):
    if mode == "host" and landlock_abi() < 4:
        pytest.skip("host network confinement needs Landlock ABI 4")
    run = shell_run(tenant_a, mode)
    result = run.execute("bash", command=f"echo hi > /dev/tcp/127.0.0.1/{listener}")
    assert result.error_type == PROCESS_EXIT, result.content


def test_sandbox_only_is_refused_where_the_sandbox_cannot_run(tenant_a, monkeypatch, settings):
    monkeypatch.setitem(sandbox_shell._bwrap_probe, "ok", False)
    settings.CLAW_SHELL_HOST = "allow"
    run = shell_run(tenant_a, "sandbox")
    result = run.call("bash", command="echo hi")
    assert result.error_type == EXECUTION_POLICY_BLOCKED
    assert "only in a sandbox" in result.content
    either = Run(tenant_a.agent, tenant_a.admin)
    tool_setting(tenant_a.agent, "b*", execution="either")
    assert sandbox_shell.choose_mode("either") == "host"
    assert sandbox_shell.choose_mode("host") == "host"
    assert either.executor.context is not None


def test_sandboxed_commands_run_in_the_sandbox(tenant_a):
    needs_sandbox()
    run = shell_run(tenant_a, "sandbox")
    result = run.call("bash", command="pwd")
    assert result.content.strip().endswith("/workspace"), result.content
    assert run.call("bash", command="hostname").content.strip().endswith("sandbox")


@pytest.mark.parametrize("mode", MODES)
def test_timeouts_exit_codes_and_output_caps(tenant_a, mode):
    run = shell_run(tenant_a, mode, shell_timeout_seconds=1)
    slow = run.call("bash", command="sleep 20")
    assert slow.error_type == TIMEOUT
    assert slow.duration_ms < 10_000
    failed = run.call("bash", command="ls does-not-exist")
    assert failed.error_type == PROCESS_EXIT
    assert failed.content.startswith("exit code: 2")
    big = run.call("bash", command="seq 1 200000")
    assert "[output truncated" in big.content


def test_cancelling_the_run_stops_a_running_command(tenant_a):
    import asyncio

    from agents.engine.types import ToolCallPart

    run = shell_run(tenant_a, "host", shell_timeout_seconds=30)

    async def go() -> object:
        task = asyncio.ensure_future(
            run.executor.execute(ToolCallPart("c", "bash", {"command": "sleep 20"}), run.ctx)
        )
        await asyncio.sleep(0.5)
        run.ctx.cancel.cancel("stop")
        return await asyncio.wait_for(task, 10)

    result = asyncio.run(go())
    assert result.is_error
    assert result.error_type == "cancelled"
