"""WhatsApp Cloud API end to end: the subscription challenge, signed updates
(X-Hub-Signature-256) to the inbound route, replies through the fake's /messages
(sent whole: the Cloud API cannot edit), approvals by reply button or text."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.test import Client

from agents.models import ApprovalRequest, Run
from channels_app.adapters.whatsapp.adapter import whatsapp_signature
from channels_app.models import InboundUpdate
from tests.chat_platforms.conftest import inbound_url, link, make_channel
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

APP_SECRET = "wa-app-secret"
_ids = itertools.count(1)


def notification(message: dict) -> dict:
    return {
        "object": "whatsapp_business_account",
        "entry": [
            {
                "id": "WABA1",
                "changes": [
                    {
                        "field": "messages",
                        "value": {
                            "messaging_product": "whatsapp",
                            "metadata": {"phone_number_id": "1555000"},
                            "messages": [message],
                        },
                    }
                ],
            }
        ],
    }


def text(body: str) -> dict:
    return {"from": "4915550001", "id": f"wamid.in{next(_ids)}", "type": "text", "text": {"body": body}}


def post(channel: Any, payload: dict, *, secret: str = APP_SECRET) -> Any:
    raw = json.dumps(payload).encode()
    return Client().post(
        inbound_url(channel),
        raw,
        content_type="application/json",
        HTTP_X_HUB_SIGNATURE_256=whatsapp_signature(secret, raw),
    )


@pytest.fixture
def whatsapp(live_agent: Any, fake_whatsapp: Any) -> Any:
    channel = make_channel(
        live_agent,
        "whatsapp",
        bot_token="wa-token",
        signing_secret=APP_SECRET,
        verify_token="verify-me",
        account_id="1555000",
    )
    link(channel, "4915550001", live_agent.member)
    return channel


def bodies(fake: Any) -> list[str]:
    return [m.get("text", {}).get("body", "") for m in fake.calls_of("messages")]


def test_the_subscription_challenge_needs_the_verify_token(whatsapp):
    url = inbound_url(whatsapp)
    ok = Client().get(
        url, {"hub.mode": "subscribe", "hub.verify_token": "verify-me", "hub.challenge": "1158201444"}
    )
    assert (ok.status_code, ok.content) == (200, b"1158201444")
    bad = Client().get(url, {"hub.mode": "subscribe", "hub.verify_token": "guess", "hub.challenge": "1"})
    assert bad.status_code == 403


def test_a_message_is_answered_whole_split_and_once(whatsapp, fake_whatsapp, fake_llm, inline_runs):
    reply = ("Long WhatsApp answer line.\n" * 200).strip()  # 5,399 characters
    fake_llm.script(FakeTurn(text=reply))
    message = text("hello")
    assert post(whatsapp, notification(message)).status_code == 200
    assert post(whatsapp, notification(message)).status_code == 200  # Meta's retry
    fake_whatsapp.wait_for(lambda f: len(f.calls_of("messages")) >= 2)
    sent = bodies(fake_whatsapp)
    assert all(len(b) <= 4096 for b in sent)
    assert "\n".join(sent) == reply
    assert Run.objects.unscoped().filter(session__channel="whatsapp").count() == 1
    assert fake_whatsapp.calls_of("messages")[0]["to"] == "4915550001"


def test_a_bad_signature_is_refused(whatsapp, fake_whatsapp):
    assert post(whatsapp, notification(text("forged")), secret="wrong").status_code == 403
    raw = json.dumps(notification(text("unsigned"))).encode()
    assert Client().post(inbound_url(whatsapp), raw, content_type="application/json").status_code == 401
    assert not InboundUpdate.objects.unscoped().exists()


def test_approval_by_reply_button_and_a_rate_limited_send_retried(
    whatsapp, fake_whatsapp, fake_llm, inline_runs, live_agent
):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    post(whatsapp, notification(text("list files")))
    asked = fake_whatsapp.wait_for(
        lambda f: [b for b in f.calls_of("messages") if b["type"] == "interactive"]
    )
    approve = asked[0]["interactive"]["action"]["buttons"][0]["reply"]
    fake_whatsapp.fail("messages", 429, retry_after=1)
    fake_llm.script(FakeTurn(text="Listed."))
    press = {
        "from": "4915550001",
        "id": f"wamid.in{next(_ids)}",
        "type": "interactive",
        "interactive": {"type": "button_reply", "button_reply": approve},
    }
    post(whatsapp, notification(press))
    fake_whatsapp.wait_for(lambda f: "Listed." in bodies(f), timeout=30)
    assert ApprovalRequest.objects.unscoped().get().status == "approved"
    assert fake_whatsapp.calls_of("!messages")
