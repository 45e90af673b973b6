"""The Redis scale-out, end to end on real processes: two Daphne processes and two
workers share the test database and the machine's Redis as their channel layer
(``CHANNEL_LAYER_URL=redis://…``); streams opened on both Daphne processes at once
receive every live frame of their runs, in order. Skipped where no Redis answers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from asgiref.sync import sync_to_async

from agents.actions.conversation import do_create_session
from agents.models import RunEvent
from claw_platform.cli.up import web_server_command
from claw_platform.ops.models import WorkerHeartbeat
from tests.channels.test_redis_scale_out import REDIS, _redis_up
from tests.channels.test_socket_access_served import login_cookie
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.platform.test_cli_chat import database_url_for_tests
from tests.ui.conftest import free_port, start, stop

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    # Four processes start on a machine that may be busy (and, run alone, the test
    # database is made first): more than the default 120 s can pass before the call.
    pytest.mark.timeout(300),
    pytest.mark.skipif(not _redis_up(), reason="no Redis on 127.0.0.1:6379"),
]

STREAMS = 10
REPLY = " ".join(f"word{n}" for n in range(150))


def wait_until(predicate: Any, timeout: float, what: str, logs: Path) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {log.name}\n{log.read_text()[-2000:]}" for log in logs.glob("*.log"))
            pytest.fail(f"no {what} within {timeout:.0f} s\n{tails}")
        time.sleep(0.2)


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture
def scaled_out(tmp_path: Path) -> Iterator[list[str]]:
    """Two Daphne processes (their URLs) and two workers on the Redis layer."""
    env = {"DATABASE_URL": database_url_for_tests(), "CHANNEL_LAYER_URL": REDIS, "LOG_LEVEL": "WARNING"}
    ports = [free_port(), free_port()]
    processes = [
        start(web_server_command("127.0.0.1", port), env, tmp_path / f"web-{n}.log")
        for n, port in enumerate(ports)
    ]
    processes += [
        start([sys.executable, "manage.py", "claw_worker"], env, tmp_path / f"worker-{n}.log")
        for n in range(2)
    ]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    try:
        wait_until(
            lambda: all(healthy(url) for url in urls), 90, "answer from both Daphne processes", tmp_path
        )
        wait_until(lambda: WorkerHeartbeat.objects.count() >= 2, 90, "heartbeat of both workers", tmp_path)
        yield urls
    finally:
        for process in processes:  # all told at once: they stop side by side
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            stop(process)


async def stream(http: aiohttp.ClientSession, url: str, session_id: Any, cookie: str) -> list[dict[str, Any]]:
    """The frames one socket receives for one message, up to its run's end."""
    socket = await http.ws_connect(
        url.replace("http://", "ws://") + f"/ws/sessions/{session_id}/",
        headers={"Origin": url, "Cookie": f"sessionid={cookie}"},
        heartbeat=None,
    )
    await socket.send_json({"type": "message", "text": "go"})
    frames: list[dict[str, Any]] = []
    while not frames or frames[-1]["type"] not in ("run.completed", "run.failed", "error"):
        frames.append(await socket.receive_json(timeout=60))
    await socket.close()
    return frames


async def test_two_daphne_and_two_workers_on_redis_deliver_every_frame_in_order(
    scaled_out: list[str], live_agent: Any, fake_llm: Any
) -> None:
    fake_llm.default_reply = FakeTurn(text=REPLY, chunk_size=5, chunk_delay=0.005)
    sessions = [
        await sync_to_async(do_create_session)(live_agent.agent, user=live_agent.member, title=f"s{n}")
        for n in range(STREAMS)
    ]
    cookie = await sync_to_async(login_cookie)(live_agent.member)
    async with aiohttp.ClientSession() as http:
        received = await asyncio.gather(
            *(stream(http, scaled_out[n % 2], session.pk, cookie) for n, session in enumerate(sessions))
        )
    for frames in received:
        assert frames[-1]["type"] == "run.completed", frames[-1]
        assert not [f for f in frames if f["type"] in ("resync", "error")]
        # Every text delta, in order: each starts where the one before ended.
        text = ""
        for frame in frames:
            if frame["type"] == "chunk":
                assert frame["payload"]["offset"] == len(text)
                text += frame["payload"]["text"]
        assert text == REPLY
        # Every stored event of the run, each once, in order.
        run_id = frames[-1]["run"]
        stored = await sync_to_async(
            lambda run_id=run_id: list(
                RunEvent._base_manager.filter(run_id=run_id).order_by("seq").values_list("seq", flat=True)
            )
        )()
        relayed = [
            f["seq"] for f in frames if f["type"] not in ("chunk", "thinking") and f.get("run") == run_id
        ]
        assert relayed == stored
