"""Issue 21 (defect 1): the shell never reaches the product's own state.

The attack: on a host without bubblewrap, an approved ``bash`` call ran on the host
under Landlock, which does not stop a connection to PostgreSQL's Unix socket; a
client written into the workspace read another tenant's rows. Here that client is
``probe.py``: written into the workspace, run by the ``bash`` tool as an approved
call would be, it reports what it can see and reach, and leaves a ``reached`` file
behind if it ever connected to something it must not.

What these tests show, with the default settings:

- without a working sandbox the shell is refused (``CLAW_SHELL_HOST`` opts in to the
  host), and the probe never runs;
- in the sandbox, the var directory, keys, data directory and database socket are
  not visible, and connecting to the socket, to 127.0.0.1:5432 (this machine's
  PostgreSQL, when it has one), to the embedded server's port number on 127.0.0.1,
  or to a TCP server the test runs on the host's loopback, fails -- with network off
  and with network on;
- the product's state is hidden even where it lies inside a directory the sandbox
  binds (an install under /opt);
- a networked sandbox is a namespace of its own: it reaches a server in another
  network namespace (an "outside" address over a veth pair), but not the host's own
  addresses, the host's loopback through slirp's gateway, nor link-local addresses,
  and it cannot change its routes;
- the operator's settings cap what tenants chose, also for rows saved before.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings

from tests.tools.helpers import Run, configure, tool_setting
from tools_app.registry import EXECUTION_POLICY_BLOCKED
from tools_app.sandbox import network as sandbox_network
from tools_app.sandbox import shell as sandbox_shell

pytestmark = pytest.mark.django_db(transaction=True)

# Run inside the shell: reads targets.json, tries each target, prints a JSON report
# and leaves "reached" behind when any connection succeeded.
PROBE = r"""
import json, os, socket
targets = json.load(open("targets.json"))
report = {"visible": [], "connected": [], "errors": {}}
for path in targets["paths"]:
    if os.path.exists(path):
        report["visible"].append(path)
def attempt(label, family, address):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(3)
    try:
        s.connect(address)
        report["connected"].append(label)
    except OSError as exc:
        report["errors"][label] = type(exc).__name__
    finally:
        s.close()
for path in targets["sockets"]:
    attempt(path, socket.AF_UNIX, path)
for host, port in targets["tcp"]:
    attempt(f"{host}:{port}", socket.AF_INET, (host, port))
if report["connected"]:
    open("reached", "w").write("\n".join(report["connected"]))
print("REPORT " + json.dumps(report))
"""


def needs_sandbox() -> None:
    if not sandbox_shell.sandbox_available():
        pytest.skip("bubblewrap cannot run on this host")


def needs_sandbox_network() -> None:
    needs_sandbox()
    problem = sandbox_shell.sandbox_network_problem()
    if problem:
        pytest.skip(f"a sandbox cannot have its own network here: {problem}")


@pytest.fixture
def host_listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's loopback (as the product's ports and Redis are):
    its port and the connections it accepted."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    hits: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            hits.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1], hits
    server.close()
    thread.join(timeout=5)


def database_socket() -> Path:
    database = django_settings.DATABASES["default"]
    host = str(database.get("HOST") or "")
    if not host.startswith("/"):
        pytest.skip("the test database is not on a local Unix socket")
    return Path(host) / f".s.PGSQL.{database.get('PORT') or 5432}"


def probe_run(tenant_set: Any, targets: dict[str, Any], **config: Any) -> Run:
    """A run whose bash calls are approved (mode auto), with probe.py and its
    targets in the workspace, as write_file would have put them there."""
    configure(tenant_set.agent, **config)
    tool_setting(tenant_set.agent, "bash", approval_mode="auto")
    run = Run(tenant_set.agent, tenant_set.member)
    assert not run.call("write_file", path="probe.py", content=PROBE).is_error
    assert not run.call("write_file", path="targets.json", content=json.dumps(targets)).is_error
    return run


def report_of(output: str) -> dict[str, Any]:
    for line in output.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT ") :])
    raise AssertionError(f"the probe did not report:\n{output}")


def state_targets(listener_port: int) -> dict[str, Any]:
    socket_path = database_socket()
    port = int(django_settings.DATABASES["default"].get("PORT") or 5432)
    var_dir = Path(django_settings.VAR_DIR)
    return {
        "paths": [
            str(var_dir),
            str(var_dir / "secrets.key"),
            str(var_dir / "secret_key"),
            str(var_dir / "workspaces"),
            str(socket_path.parent),
            str(socket_path),
            str(Path(django_settings.BASE_DIR) / "manage.py"),
        ],
        "sockets": [str(socket_path)],
        "tcp": [["127.0.0.1", 5432], ["127.0.0.1", port], ["127.0.0.1", listener_port], ["10.0.2.2", 5432]],
    }


def test_without_a_sandbox_the_default_refuses_the_shell_and_the_database_stays_out_of_reach(
    tenant_a, monkeypatch, host_listener
):
    """The attack, replayed: no bubblewrap, default settings, an approved call."""
    port, hits = host_listener
    monkeypatch.setitem(sandbox_shell._bwrap_probe, "ok", False)  # a host without bubblewrap
    run = probe_run(tenant_a, state_targets(port))
    result = run.call("bash", command="python3 probe.py")
    assert result.error_type == EXECUTION_POLICY_BLOCKED, result.content
    assert "no working sandbox" in result.content
    assert "CLAW_SHELL_HOST" in result.content
    assert not (run.workspace / "reached").exists()
    assert hits == []


def test_the_host_shell_runs_only_where_the_operator_opted_in(tenant_a, monkeypatch, settings):
    monkeypatch.setitem(sandbox_shell._bwrap_probe, "ok", False)
    settings.CLAW_SHELL_HOST = "allow"
    configure(tenant_a.agent)
    tool_setting(tenant_a.agent, "bash", approval_mode="auto")
    run = Run(tenant_a.agent, tenant_a.member)
    result = run.call("bash", command="pwd")
    assert not result.is_error, result.content
    assert str(run.workspace) in result.content  # on the host: the real path


@pytest.mark.parametrize("network", [False, True], ids=["network-off", "network-on"])
def test_inside_the_sandbox_the_products_state_is_invisible_and_unreachable(
    tenant_a, settings, host_listener, network
):
    needs_sandbox_network() if network else needs_sandbox()
    if network:
        settings.CLAW_SHELL_NETWORK = "allow"
    port, hits = host_listener
    run = probe_run(tenant_a, state_targets(port), shell_network=network)
    assert run.executor.context is not None
    assert run.executor.context.shell_network is network
    result = run.call("bash", command="python3 probe.py")
    assert not result.is_error, result.content
    report = report_of(result.content)
    assert report["visible"] == []
    assert report["connected"] == []
    assert set(report["errors"]) == {
        database_socket().as_posix(),
        *(f"{h}:{p}" for h, p in state_targets(port)["tcp"]),
    }
    assert hits == []
    assert not (run.workspace / "reached").exists()
    if network:
        routes = run.call("bash", command="PATH=$PATH:/usr/sbin:/sbin ip -4 route")
        assert "default via 10.0.2.2" in routes.content, routes.content  # its own network, through slirp


def test_the_products_state_is_hidden_even_inside_a_directory_the_sandbox_binds(tenant_a, settings):
    """An operator installed the product under /opt, which the sandbox binds."""
    needs_sandbox()
    if os.geteuid() != 0 or not Path("/opt").is_dir() or Path("/opt").is_symlink():
        pytest.skip("needs root and a real /opt to plant a var directory in")
    planted = Path(tempfile.mkdtemp(prefix="claw-test-var-", dir="/opt"))
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        (planted / "secrets.key").write_text("planted-secret-key\n")
        socket_path = planted / "pgdata" / ".s.PGSQL.5432"
        socket_path.parent.mkdir()
        server.bind(str(socket_path))
        server.listen(4)
        planted.chmod(0o755)
        settings.VAR_DIR = planted
        run = probe_run(
            tenant_a,
            {
                "paths": [str(planted / "secrets.key"), str(socket_path)],
                "sockets": [str(socket_path)],
                "tcp": [],
            },
        )
        result = run.call("bash", command="python3 probe.py")
        assert not result.is_error, result.content
        report = report_of(result.content)
        assert report["visible"] == []
        assert report["connected"] == []
        # The rest of /opt is still there.
        assert run.call("bash", command="ls -d /opt").content.strip().endswith("/opt")
    finally:
        server.close()
        shutil.rmtree(planted, ignore_errors=True)


# ---------------------------------------------------------------- the network


class OutsideServer:
    """An HTTP server in a network namespace of its own, joined to the host by a
    veth pair: an address that is not the host's, as the internet would be."""

    def __init__(self) -> None:
        suffix = os.getpid() % 100_000
        self.host_end = f"cwh{suffix}"
        self.address = f"198.18.{suffix % 250}.2"
        self.gateway = f"198.18.{suffix % 250}.1"
        self.port = 8080
        code = (
            "import http.server, socketserver\n"
            "class H(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        body = b'hello from outside'\n"
            "        self.send_response(200); self.send_header('Content-Length', str(len(body)))\n"
            "        self.end_headers(); self.wfile.write(body)\n"
            "    def log_message(self, *a): pass\n"
            f"socketserver.TCPServer(('0.0.0.0', {self.port}), H).serve_forever()\n"
        )
        self.process = subprocess.Popen(
            ["unshare", "--net", "--", sys.executable, "-c", code],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        pid = str(self.process.pid)
        inside = ["nsenter", f"--target={pid}", "--net", "ip"]
        deadline = time.monotonic() + 10
        while os.readlink(f"/proc/{pid}/ns/net") == os.readlink("/proc/self/ns/net"):
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise OSError("unshare did not make a network namespace")
            time.sleep(0.02)
        for argv in (
            ["ip", "link", "add", self.host_end, "type", "veth", "peer", "name", "cwo0", "netns", pid],
            ["ip", "addr", "add", f"{self.gateway}/30", "dev", self.host_end],
            ["ip", "link", "set", self.host_end, "up"],
            [*inside, "addr", "add", f"{self.address}/30", "dev", "cwo0"],
            [*inside, "link", "set", "cwo0", "up"],
            [*inside, "link", "set", "lo", "up"],
            [*inside, "route", "add", "default", "via", self.gateway],
        ):
            subprocess.run(argv, check=True, capture_output=True, timeout=10)

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, 9)
        self.process.wait(timeout=10)
        subprocess.run(["ip", "link", "del", self.host_end], capture_output=True, check=False, timeout=10)


@pytest.fixture
def outside_server() -> Iterator[OutsideServer]:
    if os.geteuid() != 0 or not all(shutil.which(p) for p in ("ip", "unshare", "nsenter")):
        pytest.skip("an outside network namespace needs root, ip, unshare and nsenter")
    try:
        server = OutsideServer()
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"could not make an outside network namespace: {exc}")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def host_wide_listener() -> Iterator[tuple[str, int, list[str]]]:
    """A server on all the host's addresses (as a service behind the host's
    firewall may be): a non-loopback address of the host, its port, its hits."""
    addresses = [
        a.address
        for entries in sandbox_network.psutil.net_if_addrs().values()
        for a in entries
        if a.family == socket.AF_INET
        and not a.address.startswith("127.")
        and not a.address.startswith("198.18.")
    ]
    if not addresses:
        pytest.skip("this host has no non-loopback IPv4 address")
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", 0))
    server.listen(8)
    hits: list[str] = []

    def accept() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            hits.append(str(peer))
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield addresses[0], server.getsockname()[1], hits
    server.close()
    thread.join(timeout=5)


def test_a_networked_sandbox_reaches_outside_but_nothing_of_the_host(
    tenant_a, settings, outside_server, host_wide_listener, host_listener
):
    needs_sandbox_network()
    settings.CLAW_SHELL_NETWORK = "allow"
    host_address, wide_port, wide_hits = host_wide_listener
    loop_port, loop_hits = host_listener
    run = probe_run(
        tenant_a,
        {
            "paths": [],
            "sockets": [],
            "tcp": [
                [host_address, wide_port],
                ["127.0.0.1", loop_port],
                ["10.0.2.2", loop_port],  # slirp's gateway: the host's loopback, disabled
                ["169.254.169.254", 80],  # cloud metadata
            ],
        },
        shell_network=True,
    )
    fetch = f"import urllib.request\nprint(urllib.request.urlopen('http://{outside_server.address}:{outside_server.port}/', timeout=5).read().decode())\n"
    assert not run.call("write_file", path="fetch.py", content=fetch).is_error
    outside = run.call("bash", command="python3 fetch.py")
    assert not outside.is_error, outside.content
    assert "hello from outside" in outside.content
    result = run.call("bash", command="python3 probe.py")
    report = report_of(result.content)
    assert report["connected"] == [], report
    assert wide_hits == []
    assert loop_hits == []
    # The command has no capability to undo that.
    reroute = run.call("bash", command="PATH=$PATH:/usr/sbin:/sbin ip route del prohibit 169.254.0.0/16")
    assert reroute.is_error, reroute.content
    assert "not permitted" in reroute.content.lower(), reroute.content


# ---------------------------------------------------------------- the operator's cap


def test_the_operators_cap_applies_to_rows_saved_before(tenant_a, settings):
    """A tenant admin chose host execution and network before the operator's
    settings existed (rows saved without the admin's checks): neither applies."""
    needs_sandbox()
    configure(tenant_a.agent, shell_network=True)
    tool_setting(tenant_a.agent, "bash", approval_mode="auto", execution="host")
    run = Run(tenant_a.agent, tenant_a.member)
    assert run.executor.context is not None
    assert run.executor.context.shell_network is False
    where = run.call("bash", command="pwd; PATH=$PATH:/usr/sbin:/sbin ip -o link")
    assert not where.is_error, where.content
    assert where.content.splitlines()[1] == "/workspace"  # in the sandbox, not on the host
    assert "tap0" not in where.content  # and without network


def test_a_networked_shell_is_refused_where_it_cannot_have_its_own_network(
    tenant_a, settings, monkeypatch, request
):
    needs_sandbox()
    settings.CLAW_SHELL_NETWORK = "allow"
    which = shutil.which
    monkeypatch.setattr(
        sandbox_network.shutil,
        "which",
        lambda name, path=None: None if name == "slirp4netns" else which(name, path=path),
    )
    sandbox_network.network_tools.cache_clear()
    request.addfinalizer(sandbox_network.network_tools.cache_clear)  # found again, for real
    configure(tenant_a.agent, shell_network=True)
    tool_setting(tenant_a.agent, "bash", approval_mode="auto")
    run = Run(tenant_a.agent, tenant_a.member)
    result = run.call("bash", command="touch ran")
    assert result.error_type == EXECUTION_POLICY_BLOCKED, result.content
    assert "network of its own" in result.content
    assert "slirp4netns" in result.content
    assert not (run.workspace / "ran").exists()
    # On the host (where the operator allows it) a networked shell is refused too:
    # its network would be the host's.
    settings.CLAW_SHELL_HOST = "allow"
    tool_setting(tenant_a.agent, "b*", execution="host")
    from tools_app.models import ToolSetting

    ToolSetting.objects.unscoped().filter(agent=tenant_a.agent, tool="bash").update(execution="host")
    host_run = Run(tenant_a.agent, tenant_a.member)
    refused = host_run.call("bash", command="touch ran")
    assert refused.error_type == EXECUTION_POLICY_BLOCKED, refused.content
    assert "host's own services" in refused.content
    assert not (host_run.workspace / "ran").exists()


# ---------------------------------------------------------------- claw doctor


def test_doctor_names_the_sandbox_and_fails_where_the_shell_could_run_unconfined(monkeypatch, settings):
    from claw_platform.ops.checks import check_shell_sandbox

    monkeypatch.setitem(sandbox_shell._bwrap_probe, "ok", True)
    sandboxed = check_shell_sandbox()
    assert sandboxed.ok
    assert sandboxed.detail.startswith("bubblewrap; no network")
    settings.CLAW_SHELL_NETWORK = "allow"
    monkeypatch.setitem(sandbox_shell._network_probe, "problem", "missing: slirp4netns")
    unnetworked = check_shell_sandbox()
    assert not unnetworked.ok
    assert "networked shells are refused: missing: slirp4netns" in unnetworked.detail
    monkeypatch.setitem(sandbox_shell._network_probe, "problem", "")
    assert check_shell_sandbox().ok
    settings.CLAW_SHELL_HOST = "allow"
    opted_in = check_shell_sandbox()
    assert not opted_in.ok
    assert opted_in.detail.startswith("bubblewrap, but CLAW_SHELL_HOST=allow")

    monkeypatch.setitem(sandbox_shell._bwrap_probe, "ok", False)
    host = check_shell_sandbox()
    assert not host.ok
    assert host.detail.startswith("host shell (operator opt-in: weaker)")
    settings.CLAW_SHELL_HOST = "refuse"
    refused = check_shell_sandbox()
    assert refused.ok
    assert refused.detail.startswith("none: shell refused")


def test_claw_doctor_fails_on_a_host_shell(tmp_path):
    """As an operator runs it: no bubblewrap on the PATH, CLAW_SHELL_HOST=allow."""
    from tests.platform.test_cli_doctor import closed_port, line_for, run_doctor

    env = {
        "DATABASE_URL": f"postgresql://claw:x@127.0.0.1:{closed_port()}/claw",
        "CLAW_VAR_DIR": str(tmp_path / "var"),
        "PATH": str(tmp_path),  # no bwrap here
        "CLAW_SHELL_HOST": "allow",
    }
    result = run_doctor(env)
    assert result.returncode == 1
    line = line_for(result.stdout, "shell sandbox")
    assert line.startswith("✗"), result.stdout + result.stderr
    assert "host shell (operator opt-in: weaker)" in line
    refused = line_for(run_doctor({**env, "CLAW_SHELL_HOST": "refuse"}).stdout, "shell sandbox")
    assert refused.startswith("✓")
    assert "none: shell refused" in refused


def _slirp_children() -> list[Any]:
    import psutil

    return [p for p in psutil.Process().children(recursive=True) if p.name() == "slirp4netns"]


def test_a_networked_command_leaves_nothing_running_when_it_ends_or_is_cancelled(tenant_a, settings):
    import asyncio

    from agents.engine.types import ToolCallPart

    needs_sandbox_network()
    settings.CLAW_SHELL_NETWORK = "allow"
    configure(tenant_a.agent, shell_network=True, shell_timeout_seconds=30)
    tool_setting(tenant_a.agent, "bash", approval_mode="auto")
    run = Run(tenant_a.agent, tenant_a.member)
    assert not run.call("bash", command="true").is_error
    assert _slirp_children() == []

    async def cancelled() -> Any:
        task = asyncio.ensure_future(
            run.executor.execute(ToolCallPart("c", "bash", {"command": "sleep 20"}), run.ctx)
        )
        await asyncio.sleep(1)
        assert len(_slirp_children()) == 1  # the command's network, while it runs
        run.ctx.cancel.cancel("stop")
        return await asyncio.wait_for(task, 10)

    result = asyncio.run(cancelled())
    assert result.error_type == "cancelled"
    assert _slirp_children() == []
