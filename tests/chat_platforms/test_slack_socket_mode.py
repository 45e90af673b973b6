"""Slack Socket Mode from a worker (no public URL): slack-sdk's SocketModeClient
against the fake's apps.connections.open and WebSocket; envelopes stored before they
are acknowledged, answered through the Web API, redeliveries ignored, buttons decide."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from agents.models import ApprovalRequest, Run
from channels_app.models import Channel, InboundUpdate
from channels_app.polling import run_pollers
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_slack import BOT, event, texts
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def socket_slack(live_agent: Any, fake_slack: Any) -> Channel:
    channel = make_channel(
        live_agent,
        "slack",
        bot_token="xoxb-slack-token",
        app_token="xapp-test",
        bot_username=BOT,
        receive_mode="polling",
    )
    link(channel, "U42", live_agent.member)
    return channel


@pytest.fixture
def worker(socket_slack: Channel) -> Iterator[None]:
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.2)), daemon=True
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def test_an_envelope_is_stored_acknowledged_and_answered_once(
    socket_slack, worker, fake_slack, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Over the socket."))
    payload = event("hello from behind NAT")
    first = fake_slack.push_envelope("events_api", payload)
    fake_slack.wait_for(lambda f: "Over the socket." in texts(f))
    assert first in fake_slack.acks
    assert fake_slack.sockets_opened == 1
    # Slack sends the same event again (a retry): acknowledged, not answered again.
    again = fake_slack.push_envelope("events_api", payload)
    fake_slack.wait_for(lambda f: again in f.acks)
    assert InboundUpdate.objects.unscoped().filter(channel=socket_slack).count() == 1
    assert Run.objects.unscoped().filter(session__channel="slack").count() == 1
    assert Channel.objects.unscoped().get(pk=socket_slack.pk).poll_owner == "worker-1"


def test_a_button_over_socket_mode_decides_the_approval(
    socket_slack, worker, fake_slack, fake_llm, inline_runs, live_agent
):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    fake_slack.push_envelope("events_api", event("list files"))
    asked = fake_slack.wait_for(lambda f: [b for b in f.calls_of("chat.postMessage") if "blocks" in b])
    approve = asked[0]["blocks"][1]["elements"][0]
    fake_llm.script(FakeTurn(text="Listed over the socket."))
    fake_slack.push_envelope(
        "interactive",
        {
            "type": "block_actions",
            "user": {"id": "U42"},
            "channel": {"id": "D1", "name": "directmessage"},
            "trigger_id": "t-socket",
            "message": {"ts": "1"},
            "actions": [{"action_id": "approve", "value": approve["value"], "action_ts": "1700000600.1"}],
        },
    )
    fake_slack.wait_for(lambda f: "Listed over the socket." in texts(f))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_ls").status == "approved"
