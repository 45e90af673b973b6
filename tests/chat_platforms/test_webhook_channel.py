"""The generic webhook channel end to end: signed JSON in, signed callbacks out
(message, edit, approval), de-duplicated by the sender's id."""

from __future__ import annotations

import hmac
import itertools
import json
import time
from typing import Any

import pytest
from django.test import Client

from agents.models import Run
from channels_app.adapters.webhook.adapter import webhook_signature
from channels_app.models import InboundStatus, InboundUpdate
from tests.chat_platforms.conftest import inbound_url, link, make_channel
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "hook-channel-secret"
_ids = itertools.count(1)


def message(text: str, **extra: Any) -> dict:
    return {"id": f"m{next(_ids)}", "chat": "room-1", "sender": "ext-7", "text": text, **extra}


def post(channel: Any, payload: Any, *, secret: str = SECRET, timestamp: int | None = None) -> Any:
    body = json.dumps(payload).encode()
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    return Client().post(
        inbound_url(channel),
        body,
        content_type="application/json",
        HTTP_X_CLAW_TIMESTAMP=stamp,
        HTTP_X_CLAW_SIGNATURE=webhook_signature(secret, stamp, body),
    )


@pytest.fixture
def hook_channel(live_agent: Any, fake_callback: Any) -> Any:
    channel = make_channel(
        live_agent, "webhook_channel", signing_secret=SECRET, callback_url=fake_callback.hook_url
    )
    link(channel, "ext-7", live_agent.member)
    return channel


def shown(fake: Any) -> list[str]:
    texts: dict[str, str] = {}
    for kind, body in list(fake.calls):
        if kind in ("message", "edit"):
            texts[body["message_id"]] = body["text"]
    return list(texts.values())


def test_a_message_is_answered_by_a_signed_callback(hook_channel, fake_callback, fake_llm, inline_runs):
    reply = "Callback reply. " * 12
    fake_llm.script(FakeTurn(text=reply))
    assert post(hook_channel, message("hello")).status_code == 200
    fake_callback.wait_for(lambda f: reply.strip() in shown(f))
    first = fake_callback.calls_of("message")[0]
    headers = first["_headers"]
    expected = webhook_signature(SECRET, headers["x-claw-timestamp"], first["_raw"].encode())
    assert hmac.compare_digest(headers["x-claw-signature"], expected)
    assert (first["chat"], first["thread"]) == ("room-1", "")
    assert fake_callback.calls_of("edit"), "the draft was edited in place"


def test_duplicates_bad_signatures_and_malformed_bodies(hook_channel, fake_callback, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Once only."))
    body = message("once")
    assert post(hook_channel, body).status_code == 200
    assert post(hook_channel, body).status_code == 200
    fake_callback.wait_for(lambda f: "Once only." in shown(f))
    assert Run.objects.unscoped().filter(session__channel="webhook_channel").count() == 1
    assert post(hook_channel, message("x"), secret="wrong").status_code == 403
    assert post(hook_channel, message("x"), timestamp=int(time.time()) - 600).status_code == 403
    bad = post(hook_channel, {"id": "z", "chat": "room-1", "sender": "ext-7"})
    assert bad.status_code == 400
    assert "text" in bad.json()["error"]["message"]
    assert InboundUpdate.objects.unscoped().count() == 1


def test_a_group_message_needs_a_mention_and_approval_works_by_reply(
    hook_channel, fake_callback, fake_llm, inline_runs, live_agent
):
    assert post(hook_channel, message("chatter", private=False)).status_code == 200
    assert InboundUpdate.objects.unscoped().get().status == InboundStatus.IGNORED
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    post(hook_channel, message("list", private=False, mentioned=True))
    asked = fake_callback.wait_for(lambda f: f.calls_of("approval"))
    assert asked[0]["approval"]
    fake_llm.script(FakeTurn(text="Denied, fine."))
    post(hook_channel, message("no", private=False, mentioned=True))
    fake_callback.wait_for(lambda f: any("Denied, fine." in t for t in shown(f)))


def test_a_failing_callback_is_retried_while_it_answers_5xx(
    hook_channel, fake_callback, fake_llm, inline_runs
):
    fake_callback.fail("callback", 503, times=2)
    fake_llm.script(FakeTurn(text="Made it."))
    post(hook_channel, message("hi"))
    fake_callback.wait_for(lambda f: "Made it." in shown(f), timeout=30)
