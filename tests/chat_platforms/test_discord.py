"""Discord end to end: messages pushed by the fake Gateway to a worker holding the
channel's lease, interactions (buttons, /ask) signed with Ed25519 to the inbound
route, the agent run by this process's worker loop, replies through the fake REST API."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from django.test import Client

from agents.models import ApprovalRequest, Run
from channels_app.models import Channel, InboundStatus, InboundUpdate
from channels_app.polling import run_pollers
from tests.chat_platforms.conftest import inbound_url, link, make_channel
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

BOT = "9000"
USER = "4242"
KEY = Ed25519PrivateKey.generate()
PUBLIC_HEX = KEY.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw).hex()
_ids = itertools.count(1_200_000_000_000_000_000)


def message(
    content: str, *, guild: str = "", channel: str = "555", mentions: tuple[str, ...] = (), **extra: Any
) -> dict:
    data: dict[str, Any] = {
        "id": str(next(_ids)),
        "type": 0,
        "channel_id": channel,
        "content": content,
        "author": {"id": USER, "username": "ada", "global_name": "Ada"},
        "mentions": [{"id": m, "username": "claw", "bot": True} for m in mentions],
        "timestamp": "2026-11-26T00:00:00.000000+00:00",
        **extra,
    }
    if guild:
        data["guild_id"] = guild
    return data


def interaction(payload: dict, *, key: Ed25519PrivateKey = KEY, timestamp: int | None = None) -> Any:
    body = json.dumps(payload).encode()
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    signature = key.sign(stamp.encode() + body).hex()
    return Client().post(
        inbound_url_of(payload),
        body,
        content_type="application/json",
        HTTP_X_SIGNATURE_ED25519=signature,
        HTTP_X_SIGNATURE_TIMESTAMP=stamp,
    )


_channel_for_interactions: dict[str, Channel] = {}


def inbound_url_of(_payload: dict) -> str:
    return inbound_url(_channel_for_interactions["current"])


def button(custom_id: str, *, user: str = USER) -> dict:
    return {
        "id": str(next(_ids)),
        "application_id": "7000",
        "type": 3,
        "token": f"interaction-token-{next(_ids)}",
        "version": 1,
        "channel_id": "555",
        "user": {"id": user, "username": "ada"},
        "message": {"id": "1", "channel_id": "555"},
        "data": {"custom_id": custom_id, "component_type": 2},
    }


@pytest.fixture
def discord(live_agent: Any, fake_discord: Any) -> Channel:
    channel = make_channel(
        live_agent,
        "discord",
        bot_token="discord-token",
        signing_secret=PUBLIC_HEX,
        bot_username=BOT,
        account_id="7000",
        receive_mode="polling",
    )
    link(channel, USER, live_agent.member)
    _channel_for_interactions["current"] = channel
    return channel


@pytest.fixture
def gateway(discord: Channel) -> Iterator[None]:
    """A worker's pollers, holding the Discord channel's Gateway connection."""
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


def texts(fake: Any) -> list[str]:
    return [m["content"] for m in fake.messages()]


def test_a_direct_message_is_answered_in_a_draft_edited_in_place_split_at_2000_characters_once(
    discord, gateway, fake_discord, fake_llm, inline_runs
):
    reply = ("z" * 99 + " ") * 50  # 5,000 characters
    fake_llm.script(FakeTurn(text=reply))
    hello = message("hello")
    fake_discord.push_message(hello)
    fake_discord.push_message(hello)  # the same message again (a resumed session replays it)
    fake_discord.wait_for(lambda f: len(texts(f)) >= 3 and sum(len(t) for t in texts(f)) >= 4900)
    assert all(len(t) <= 2000 for t in texts(fake_discord))
    assert "".join(texts(fake_discord)).replace(" ", "") == reply.replace(" ", "")
    assert fake_discord.calls_of("edit_message")  # the draft grew in place
    assert not fake_discord.calls_of("!create_message")
    assert not fake_discord.calls_of("!edit_message")
    identify = fake_discord.gateway_frames[0]
    assert identify["op"] == 2
    assert identify["d"]["token"] == "discord-token"
    assert identify["d"]["intents"] == (1 << 9) | (1 << 12)
    posted = fake_discord.calls_of("create_message")
    assert posted[0]["_channel"] == "555"
    assert posted[0]["allowed_mentions"] == {"parse": []}
    assert fake_discord.calls_of("typing")
    assert InboundUpdate.objects.unscoped().filter(channel=discord).count() == 1
    assert Run.objects.unscoped().filter(session__channel="discord").count() == 1
    # The worker holds the lease while connected; its heartbeats are acknowledged.
    fake_discord.wait_for(lambda f: any(frame.get("op") == 1 for frame in f.gateway_frames))
    assert Channel.objects.unscoped().get(pk=discord.pk).poll_owner == "worker-1"


def test_in_a_guild_only_a_mention_or_a_reply_is_answered(
    discord, gateway, fake_discord, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="At your service."), FakeTurn(text="Still here."))
    fake_discord.push_message(message("talking among ourselves", guild="1"))
    fake_discord.push_message(message(f"<@{BOT}> deploy status?", guild="1", mentions=(BOT,)))
    fake_discord.wait_for(lambda f: "At your service." in texts(f))
    replied = {"author": {"id": BOT, "username": "claw", "bot": True}, "id": "1", "content": "x"}
    fake_discord.push_message(message("and now?", guild="1", referenced_message=replied))
    fake_discord.wait_for(lambda f: "Still here." in texts(f))
    statuses = sorted(InboundUpdate.objects.unscoped().values_list("status", flat=True))
    assert statuses == [InboundStatus.ANSWERED, InboundStatus.ANSWERED, InboundStatus.IGNORED]
    assert fake_llm.requests[0].json["messages"][-1]["content"] == "deploy status?"


def test_approval_by_reply_and_by_button(discord, gateway, fake_discord, fake_llm, inline_runs, live_agent):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    fake_discord.push_message(message("list files"))
    asked = fake_discord.wait_for(lambda f: [b for b in f.calls_of("create_message") if b.get("components")])
    buttons = asked[0]["components"][0]["components"]
    assert [b["label"] for b in buttons] == ["Approve", "Deny"]
    fake_llm.script(FakeTurn(text="Listed."))
    fake_discord.push_message(message("yes"))
    fake_discord.wait_for(lambda f: "Listed." in texts(f))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_ls").status == "approved"

    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "pwd"}, "call_pwd")]))
    fake_discord.push_message(message("where"))
    asked = fake_discord.wait_for(
        lambda f: [b for b in f.calls_of("create_message") if b.get("components") and "pwd" in b["content"]]
    )
    approve = asked[0]["components"][0]["components"][0]
    fake_llm.script(FakeTurn(text="In /tmp."))
    pressed = button(approve["custom_id"])
    response = interaction(pressed)
    assert response.status_code == 200
    assert response.json() == {"type": 6}  # DEFERRED_UPDATE_MESSAGE
    fake_discord.wait_for(lambda f: any("In /tmp." in t for t in texts(f)))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_pwd").status == "approved"
    followup = fake_discord.wait_for(lambda f: f.calls_of("followup"))
    assert followup[0]["_token"] == pressed["token"]
    assert followup[0]["flags"] == 64
    # Pressed again (Discord retries an unanswered interaction with the same id): ignored.
    assert interaction(pressed).status_code == 200
    assert InboundUpdate.objects.unscoped().filter(platform_id=f"interaction:{pressed['id']}").count() == 1


def test_ping_is_answered_and_bad_signatures_are_refused(discord, fake_discord):
    ping = {"id": "1", "application_id": "7000", "type": 1, "token": "t", "version": 1}
    assert interaction(ping).json() == {"type": 1}
    assert interaction(ping, key=Ed25519PrivateKey.generate()).status_code == 401
    assert interaction(ping, timestamp=int(time.time()) - 301).status_code == 403
    unsigned = Client().post(inbound_url(discord), json.dumps(ping), content_type="application/json")
    assert unsigned.status_code == 401
    assert interaction(button("appr:1:y"), key=Ed25519PrivateKey.generate()).status_code == 401
    assert not InboundUpdate.objects.unscoped().exists()


def test_the_ask_command_is_answered_in_the_channel(discord, fake_discord, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Forty-two."))
    ask = {
        "id": str(next(_ids)),
        "application_id": "7000",
        "type": 2,
        "token": "tok",
        "version": 1,
        "channel_id": "556",
        "guild_id": "1",
        "member": {"user": {"id": USER, "username": "ada"}},
        "data": {
            "name": "ask",
            "type": 1,
            "options": [{"name": "prompt", "type": 3, "value": "the answer?"}],
        },
    }
    response = interaction(ask)
    assert response.json()["type"] == 4
    assert response.json()["data"]["content"] == "> the answer?"
    fake_discord.wait_for(lambda f: "Forty-two." in texts(f))
    assert fake_discord.calls_of("create_message")[0]["_channel"] == "556"


def test_a_rate_limit_is_retried_after_retry_after_and_a_refusal_reported(
    discord, gateway, fake_discord, fake_llm, inline_runs
):
    fake_discord.fail("create_message", 429, retry_after=0.3)
    fake_llm.script(FakeTurn(text="After the wait."))
    fake_discord.push_message(message("hi"))
    fake_discord.wait_for(lambda f: "After the wait." in texts(f))
    assert len(fake_discord.calls_of("!create_message")) == 1

    fake_discord.fail("create_message", 403, times=3)
    fake_llm.script(FakeTurn(text="Lost."))
    fake_discord.push_message(message("again"))
    failed = fake_discord.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(detail__contains="HTTP 403").first()
    )
    assert failed.detail.startswith("delivery failed")
    assert len(fake_discord.calls_of("!create_message")) == 2  # once each: a 403 is not retried
