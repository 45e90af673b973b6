"""Issue 21, defect 5, end to end: a real Daphne process serves the sockets over TCP,
and this process (like an admin's web process, a `claw` command or psql) revokes a
key and deactivates a user in the database. Daphne hears it through PostgreSQL's
NOTIFY alone and closes the sockets those credentials opened."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
from asgiref.sync import sync_to_async
from django.test import Client

from claw_platform.cli.up import web_server_command
from tests.api.conftest import make_person_key
from tests.channels.test_socket_access import from_elsewhere
from tests.platform.test_cli_chat import database_url_for_tests
from tests.ui.conftest import free_port, start, stop

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def served(django_db_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    logs = tmp_path_factory.mktemp("daphne")
    port = free_port()
    env = {"DATABASE_URL": database_url_for_tests(), "CHANNEL_LAYER_URL": "postgres", "LOG_LEVEL": "INFO"}
    web = start(web_server_command("127.0.0.1", port), env, logs / "web.log")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or web.poll() is not None:
                pytest.fail("Daphne did not start:\n" + (logs / "web.log").read_text()[-3000:])
            time.sleep(0.2)
        yield url
    finally:
        stop(web)


def login_cookie(user: Any) -> str:
    client = Client()
    client.force_login(user)
    return str(client.cookies["sessionid"].value)


async def closed_with(socket: aiohttp.ClientWebSocketResponse, wait: float = 15) -> int | None:
    """The close code the server sends (frames before it are skipped)."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        message = await socket.receive(timeout=deadline - time.monotonic())
        if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            return socket.close_code
    return None


async def test_another_process_revoking_a_key_or_deactivating_a_user_closes_their_sockets(
    served: str, member_chats: Any
) -> None:
    chat = member_chats.session.pk
    key = await sync_to_async(make_person_key)(member_chats.tenant_set, member_chats.m1, "write")
    cookie = await sync_to_async(login_cookie)(member_chats.m1)
    ws_url = served.replace("http://", "ws://") + f"/ws/sessions/{chat}/"
    async with aiohttp.ClientSession() as http:
        by_key = await http.ws_connect(ws_url, heartbeat=None)
        await by_key.send_json({"type": "auth", "key": key})
        assert (await by_key.receive_json(timeout=15))["type"] == "authenticated"
        by_login = await http.ws_connect(
            ws_url, headers={"Origin": served, "Cookie": f"sessionid={cookie}"}, heartbeat=None
        )
        await by_login.send_json({"type": "resume"})  # answered: the socket is open
        await by_login.receive(timeout=15)

        prefix = key.split("_")[1]
        await sync_to_async(from_elsewhere)(
            "UPDATE api_apikey SET revoked_at = now() WHERE prefix = %s", [prefix]
        )
        assert await closed_with(by_key) == 4401
        assert not by_login.closed

        await sync_to_async(from_elsewhere)(
            "UPDATE auth_user SET is_active = false WHERE id = %s", [member_chats.m1.pk]
        )
        assert await closed_with(by_login) == 4401
