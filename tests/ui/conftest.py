"""The browser tests' stack: a real Daphne (HTTP + WebSocket) and a real task worker
on the test database, the fake LLM behind the agent, and Debian's Chromium driven by
Playwright. The processes live for the module; each test gets fresh data."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.test import Client

from claw_platform.cli.up import web_server_command
from tests.platform.test_cli_chat import database_url_for_tests

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("CLAW_TEST_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **env, "PYTHONPATH": str(ROOT)},
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # a group of its own: stopping it stops its children
    )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)


@dataclass
class Stack:
    url: str
    web: subprocess.Popen[bytes]
    worker: subprocess.Popen[bytes]
    env: dict[str, str]
    logs: Path

    def restart_worker(self) -> None:
        stop(self.worker)
        self.worker = start_worker(self.env, self.logs)


def start_worker(env: dict[str, str], logs: Path) -> subprocess.Popen[bytes]:
    return start([sys.executable, "manage.py", "claw_worker"], env, logs / "worker.log")


@pytest.fixture(scope="module")
def stack(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    logs = tmp_path_factory.mktemp("ui-logs")
    port = free_port()
    env = {
        "DATABASE_URL": database_url_for_tests(),
        "CHANNEL_LAYER_URL": "postgres",
        "CLAW_SERVE_STATIC": "1",
        "CLAW_RUN_TOOLS_FACTORY": "tests.ui.tools.ui_tools",
        "CLAW_RUN_LEASE_SECONDS": "6",
        "CLAW_RUN_SWEEP_SECONDS": "2",
        "LOG_LEVEL": "INFO",
    }
    web = start(
        web_server_command("127.0.0.1", port),
        env,
        logs / "web.log",
    )
    worker = start_worker(env, logs)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or web.poll() is not None:
            stop(web)
            stop(worker)
            pytest.fail("the web server did not start:\n" + (logs / "web.log").read_text()[-3000:])
        time.sleep(0.2)
    live = Stack(url, web, worker, env, logs)
    try:
        yield live
    finally:
        stop(live.web)
        stop(live.worker)
        # A worker that had to be killed leaves its heartbeat row behind (and a
        # database restart drill may have left this thread a dead connection).
        from django.db import connections

        from claw_platform.ops.models import WorkerHeartbeat

        connections.close_all()
        with django_db_blocker.unblock():
            WorkerHeartbeat.objects.all().delete()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; Django refuses ORM
    # calls while one exists unless told the calls are plain sync code (they are).
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


def signed_in_page(browser: Any, stack: Stack, user: Any) -> Any:
    """A page in a fresh browser context, signed in as ``user`` (session cookie)."""
    client = Client()
    client.force_login(user)
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": stack.url}])
    page = context.new_page()
    page.set_default_timeout(15_000)
    return page


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "stack" in getattr(item, "fixturenames", ()):
        # What the web server and the worker said: a failure seen only in CI is
        # otherwise a guess.
        live = item.funcargs.get("stack")  # type: ignore[attr-defined]
        if isinstance(live, Stack):
            for name in ("web.log", "worker.log"):
                path = live.logs / name
                if path.exists():
                    tail = path.read_text(errors="replace")[-6000:]
                    report.sections.append((f"{name} (last 6,000 characters)", tail))
