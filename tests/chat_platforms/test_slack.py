"""Slack end to end: signed Events API requests (and interactivity payloads) to the
inbound route, a worker loop running the agent, replies through the fake Web API's
chat.postMessage / chat.update."""

from __future__ import annotations

import itertools
import json
import time
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client

from agents.models import ApprovalRequest, Run
from channels_app.adapters.slack.adapter import slack_signature
from channels_app.models import InboundStatus, InboundUpdate
from tests.chat_platforms.conftest import inbound_url, link, make_channel
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "slack-signing-secret"
BOT = "UBOT1"
_ts = itertools.count(1)


def event(
    text: str, *, kind: str = "message", channel_type: str = "im", channel: str = "D1", ts: str = ""
) -> dict:
    return {
        "type": "event_callback",
        "event_id": f"Ev{next(_ts)}",
        "event": {
            "type": kind,
            "user": "U42",
            "text": text,
            "channel": channel,
            "channel_type": channel_type,
            "ts": ts or f"1700000000.{next(_ts):06d}",
        },
    }


def post(
    channel: Any,
    body: bytes,
    *,
    content_type: str = "application/json",
    secret: str = SECRET,
    timestamp: int | None = None,
) -> Any:
    stamp = str(timestamp if timestamp is not None else int(time.time()))
    return Client().post(
        inbound_url(channel),
        body,
        content_type=content_type,
        HTTP_X_SLACK_REQUEST_TIMESTAMP=stamp,
        HTTP_X_SLACK_SIGNATURE=slack_signature(secret, stamp, body),
    )


def post_json(channel: Any, payload: dict, **kw: Any) -> Any:
    return post(channel, json.dumps(payload).encode(), **kw)


@pytest.fixture
def slack(live_agent: Any, fake_slack: Any) -> Any:
    channel = make_channel(
        live_agent, "slack", bot_token="xoxb-slack-token", signing_secret=SECRET, bot_username=BOT
    )
    link(channel, "U42", live_agent.member)
    return channel


def texts(fake: Any) -> list[str]:
    return [m["text"] for m in fake.messages()]


def test_the_url_verification_challenge_is_answered(slack):
    response = post_json(slack, {"type": "url_verification", "challenge": "abc123"})
    assert response.status_code == 200
    assert response.json() == {"challenge": "abc123"}


def test_a_direct_message_is_answered_with_a_draft_edited_in_place(slack, fake_slack, fake_llm, inline_runs):
    reply = "Slack answer number one. " * 10
    fake_llm.script(FakeTurn(text=reply))
    assert post_json(slack, event("hello")).status_code == 200
    fake_slack.wait_for(lambda f: reply.strip() in texts(f))
    posted = fake_slack.calls_of("chat.postMessage")
    assert len(posted) == 1
    assert posted[0]["channel"] == "D1"
    assert "thread_ts" not in posted[0]
    assert fake_slack.calls_of("chat.update")


def test_in_a_channel_only_a_mention_is_answered_once_in_a_thread(slack, fake_slack, fake_llm, inline_runs):
    assert (
        post_json(slack, event("talking among ourselves", channel_type="channel", channel="C1")).status_code
        == 200
    )
    fake_llm.script(FakeTurn(text="At your service."))
    ts = "1700000099.000100"
    # Slack sends both a message and an app_mention event for one mention: one run.
    post_json(slack, event(f"<@{BOT}> deploy status?", channel_type="channel", channel="C1", ts=ts))
    post_json(
        slack,
        event(f"<@{BOT}> deploy status?", kind="app_mention", channel_type="channel", channel="C1", ts=ts),
    )
    fake_slack.wait_for(lambda f: "At your service." in texts(f))
    posted = fake_slack.calls_of("chat.postMessage")
    assert posted[0]["thread_ts"] == ts
    assert Run.objects.unscoped().filter(session__channel="slack").count() == 1
    statuses = sorted(InboundUpdate.objects.unscoped().values_list("status", flat=True))
    assert statuses == [InboundStatus.ANSWERED, InboundStatus.IGNORED]
    assert fake_llm.requests[0].json["messages"][-1]["content"] == "deploy status?"


def test_forged_and_replayed_requests_are_refused(slack, fake_slack):
    body = json.dumps(event("forged")).encode()
    assert post(slack, body, secret="not-the-secret").status_code == 403
    assert post(slack, body, timestamp=int(time.time()) - 301).status_code == 403
    assert Client().post(inbound_url(slack), body, content_type="application/json").status_code == 401
    assert not InboundUpdate.objects.unscoped().exists()


def test_a_long_reply_is_split_within_the_limit(slack, fake_slack, fake_llm, inline_runs):
    reply = ("y" * 99 + " ") * 90  # 9,000 characters
    fake_llm.script(FakeTurn(text=reply))
    post_json(slack, event("long please"))
    fake_slack.wait_for(lambda f: len(texts(f)) >= 3 and sum(len(t) for t in texts(f)) >= 8900)
    assert all(len(t) <= 4000 for t in texts(fake_slack))


def test_approval_by_reply_and_by_block_action_button(slack, fake_slack, fake_llm, inline_runs, live_agent):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    post_json(slack, event("list files"))
    asked = fake_slack.wait_for(lambda f: [b for b in f.calls_of("chat.postMessage") if "blocks" in b])
    buttons = asked[0]["blocks"][1]["elements"]
    assert [b["action_id"] for b in buttons] == ["approve", "deny"]
    fake_llm.script(FakeTurn(text="Listed."))
    post_json(slack, event("/approve"))
    fake_slack.wait_for(lambda f: "Listed." in texts(f))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_ls").status == "approved"

    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "pwd"}, "call_pwd")]))
    post_json(slack, event("where"))
    asked = fake_slack.wait_for(
        lambda f: [b for b in f.calls_of("chat.postMessage") if "blocks" in b and "pwd" in b["text"]]
    )
    approve = asked[0]["blocks"][1]["elements"][0]
    fake_llm.script(FakeTurn(text="In /tmp."))
    payload = {
        "type": "block_actions",
        "user": {"id": "U42"},
        "channel": {"id": "D1", "name": "directmessage"},
        "trigger_id": "t1",
        "message": {"ts": "1"},
        "actions": [
            {"action_id": approve["action_id"], "value": approve["value"], "action_ts": "1700000500.1"}
        ],
    }
    form = urlencode({"payload": json.dumps(payload)}).encode()
    assert post(slack, form, content_type="application/x-www-form-urlencoded").status_code == 200
    fake_slack.wait_for(lambda f: any("In /tmp." in t for t in texts(f)))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_pwd").status == "approved"


def test_a_rate_limited_post_is_retried_and_a_refused_one_reported(slack, fake_slack, fake_llm, inline_runs):
    fake_slack.fail("chat.postMessage", 429, retry_after=1)
    fake_llm.script(FakeTurn(text="After the wait."))
    post_json(slack, event("hi"))
    fake_slack.wait_for(lambda f: "After the wait." in texts(f))
    assert fake_slack.calls_of("!chat.postMessage")

    fake_slack.fail("chat.postMessage", 200, times=3)  # ok: false, channel_not_found
    fake_llm.script(FakeTurn(text="Lost."))
    post_json(slack, event("again"))
    failed = fake_slack.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(detail__contains="channel_not_found").first()
    )
    assert failed.detail.startswith("delivery failed")
    assert len(fake_slack.calls_of("!chat.postMessage")) == 2  # once each: not retried
