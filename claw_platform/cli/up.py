"""`claw up`: the whole product on one machine, in one command.

Order: database (DATABASE_URL, else the embedded server under var/pgdata), then a
preparation child (migrations if pending, first-run bootstrap), then Daphne and the
worker as supervised children, then a banner once /readyz answers 200. Ctrl+C or
SIGTERM stops the children, then the embedded database if this process started it.
This process never imports Django: it only supervises, so its memory stays small.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from claw_platform.cli.supervisor import ChildSpec, Supervisor

NAME = "up"
HELP = "run the product: database, migrations, web server and worker"
READY_TIMEOUT_SECONDS = 120.0
# Children get this long after SIGTERM; with the database's fast stop it keeps the
# whole shutdown under 10 s.
CHILD_GRACE_SECONDS = 6.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(NAME, help=HELP, description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="address Daphne binds (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP/WebSocket port (default 8000)")
    parser.set_defaults(func=run)


class _StopRequested:
    """SIGINT/SIGTERM/SIGHUP set an event the main loop waits on; nothing is torn down
    inside the handler itself."""

    def __init__(self) -> None:
        self.event = threading.Event()
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.event.set()

    def __bool__(self) -> bool:
        return self.event.is_set()


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    from claw_platform.config import var_dir

    state_dir = var_dir()
    state_dir.mkdir(parents=True, exist_ok=True)
    problem = _port_problem(args.host, args.port)
    if problem:
        print(f"claw: {problem}", file=sys.stderr)
        return 1
    lock = state_dir / "claw-up.pid"
    holder = _live_holder(lock)
    if holder:
        print(f"claw: `claw up` is already running for {state_dir} (pid {holder})", file=sys.stderr)
        return 1
    # A lock left by a `claw up` that was killed: the database it started may still run.
    stale = lock.exists()
    lock.write_text(f"{os.getpid()}\n")
    stop = _StopRequested()
    database = None
    supervisor: Supervisor | None = None
    try:
        from claw_platform.embedded_db import ensure_database_url

        started = time.monotonic()
        database = ensure_database_url(state_dir)
        if database is not None and not database.started_here and stale:
            # Left running by that killed `claw up`: adopt it, so it stops with us.
            database.started_here = True
        if stop:
            return 0
        report = _prepare(stop)
        if report is None:
            return 0 if stop else 1
        _clear_metrics_files()
        supervisor = Supervisor(_children(args.host, args.port))
        supervisor.start()
        base = f"http://{_client_host(args.host)}:{args.port}"
        if _wait_until_ready(base, supervisor, stop):
            _print_banner(base, report, time.monotonic() - started)
        while not stop:
            supervisor.poll()
            stop.event.wait(0.2)
        print("claw: stopping…", file=sys.stderr, flush=True)
        return 0
    finally:
        if supervisor is not None:
            supervisor.stop(grace=CHILD_GRACE_SECONDS)
        if database is not None and database.started_here:
            database.stop()
        lock.unlink(missing_ok=True)


def _clear_metrics_files() -> None:
    """Counters start at zero with the processes (prometheus-client's multiprocess
    files of earlier processes would add up forever)."""
    from claw_platform import config

    directory = Path(os.environ.get("PROMETHEUS_MULTIPROC_DIR") or config.var_dir() / "metrics")
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)


def _prepare(stop: _StopRequested) -> dict[str, Any] | None:
    """Run migrations (if pending) and the bootstrap in a child; None if it failed."""
    process = subprocess.Popen(
        [sys.executable, "-m", "claw_platform.cli.bootstrap"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    while process.poll() is None:
        if stop.event.wait(0.1):
            process.terminate()
            process.wait(timeout=10)
            return None
    assert process.stdout is not None
    output = process.stdout.read().decode()
    if process.returncode != 0:
        print(f"claw: preparing the database failed (exit code {process.returncode})", file=sys.stderr)
        return None
    report: dict[str, Any] = json.loads(output.strip().splitlines()[-1])
    return report


def web_server_command(host: str, port: int) -> list[str]:
    """The web process: Daphne serving the ASGI application (HTTP and WebSockets).
    `claw up`, the benchmarks and the browser tests all start it with this."""
    return [sys.executable, "-m", "daphne", "-b", host, "-p", str(port), "claw_platform.asgi:application"]


def _children(host: str, port: int) -> list[ChildSpec]:
    env = dict(os.environ)
    # Daphne serves no files; in `claw up` Django serves the static files itself
    # (ASGIStaticFilesHandler in claw_platform.asgi) so the admin is styled.
    env.setdefault("CLAW_SERVE_STATIC", "1")
    python = sys.executable
    return [
        ChildSpec("daphne", web_server_command(host, port), env),
        # `python -m django` is manage.py without needing the source tree; DATABASE_URL
        # is inherited, so the child never starts a database of its own.
        ChildSpec("worker", [python, "-m", "django", "claw_worker"], env),
    ]


def _wait_until_ready(base: str, supervisor: Supervisor, stop: _StopRequested) -> bool:
    """Poll /readyz until it answers 200, restarting children that die meanwhile."""
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    last = "no answer yet"
    # /healthz first: each 503 from /readyz is logged as an error, so ask it only once
    # the web server answers at all.
    path = "/healthz"
    while not stop and time.monotonic() < deadline:
        supervisor.poll()
        try:
            with urllib.request.urlopen(f"{base}{path}", timeout=5) as response:  # noqa: S310
                if response.status == 200 and path == "/readyz":
                    return True
                path = "/readyz"
                continue
        except urllib.error.HTTPError as exc:
            last = _failing_checks(exc)
        except (OSError, ValueError) as exc:
            last = str(exc)
        stop.event.wait(0.3)
    if not stop:
        print(
            f"claw: not ready after {READY_TIMEOUT_SECONDS:.0f} s ({last}); still trying — see `claw doctor`",
            file=sys.stderr,
            flush=True,
        )
    return False


def _failing_checks(error: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(error.read().decode())
        failing = [f"{name}: {c['detail']}" for name, c in body.get("checks", {}).items() if not c["ok"]]
        return "; ".join(failing) or f"HTTP {error.code}"
    except (ValueError, KeyError, AttributeError):
        return f"HTTP {error.code}"


def _print_banner(base: str, report: dict[str, Any], elapsed: float) -> None:
    lines = [
        "",
        f"Claw Platform is ready ({elapsed:.1f} s)",
        f"  admin:     {base}/admin/",
        f"  readiness: {base}/readyz",
        "  chat:      claw chat (in another terminal)",
    ]
    if report.get("default_agent"):
        lines.append(
            f"  agent:     {report['default_agent']!r}, from the provider credentials in the environment"
        )
    if report.get("password"):
        lines += [
            "",
            "  First run: an admin account was created. The password is shown only now:",
            f"    username: {report['username']}",
            f"    password: {report['password']}",
        ]
    else:
        lines.append(
            f"  admin user {report['username']!r} exists (reset its password with "
            f"`claw manage changepassword {report['username']}`)"
        )
    lines += ["", "Press Ctrl+C to stop.", ""]
    print("\n".join(lines), flush=True)


def _client_host(host: str) -> str:
    if host in {"0.0.0.0", ""}:  # noqa: S104 - the address the operator chose to bind
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _port_problem(host: str, port: int) -> str | None:
    """A clear message now beats Daphne failing to bind and restarting with backoff."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"port {port} on {host} is already in use (choose another with --port)"
            return f"cannot bind {host}:{port}: {exc.strerror}"
    return None


def _live_holder(lock: Path) -> int | None:
    """The pid of a running `claw up` on this var dir, if any."""
    try:
        pid = int(lock.read_text().strip())
    except (OSError, ValueError):
        return None
    import psutil

    if pid != os.getpid() and psutil.pid_exists(pid):
        try:
            if "claw" in " ".join(psutil.Process(pid).cmdline()):
                return pid
        except psutil.Error:
            return None
    return None
