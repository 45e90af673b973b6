"""Telegram end to end: the fake Bot API sends updates to the inbound webhook (or is
long-polled), a worker loop runs the agent against the fake LLM, and the reply goes
back through the fake's sendMessage / editMessageText."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from django.test import Client

from agents.models import ApprovalRequest, Run, Session
from channels_app.models import ChannelConversation, InboundStatus, InboundUpdate
from tests.chat_platforms.conftest import inbound_url, link, make_channel
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "tg-webhook-secret"
_ids = itertools.count(1000)


def update(
    text: str, *, sender: int = 42, chat: int | None = None, group: bool = False, **extra: Any
) -> dict:
    chat_id = chat if chat is not None else (-100 if group else sender)
    return {
        "update_id": next(_ids),
        "message": {
            "message_id": next(_ids),
            "date": 1_700_000_000,
            "chat": {"id": chat_id, "type": "supergroup" if group else "private"},
            "from": {"id": sender, "is_bot": False, "first_name": "Ann", "username": "ann"},
            "text": text,
            **extra,
        },
    }


def post(channel: Any, body: dict, *, secret: str = SECRET) -> Any:
    return Client().post(
        inbound_url(channel),
        json.dumps(body),
        content_type="application/json",
        HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN=secret,
    )


@pytest.fixture
def telegram(live_agent: Any, fake_telegram: Any) -> Any:
    channel = make_channel(
        live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET, bot_username="claw_bot"
    )
    link(channel, "42", live_agent.member)
    return channel


def final_texts(fake: Any) -> list[str]:
    return [m["text"] for m in fake.messages()]


def test_a_private_message_is_answered_in_a_draft_edited_in_place(
    telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    reply = "Here is a long answer. " * 12
    fake_llm.script(FakeTurn(text=reply))
    response = post(telegram, update("hello there"))
    assert response.status_code == 200
    fake_telegram.wait_for(lambda f: reply.strip() in final_texts(f))
    sent = fake_telegram.calls_of("sendMessage")
    assert len(sent) == 1
    assert sent[0]["chat_id"] == "42"
    # The typing indicator went first; the one message was edited to the final text.
    assert fake_telegram.calls_of("sendChatAction")
    stored = InboundUpdate.objects.unscoped().get(channel=telegram)
    assert stored.status == InboundStatus.ANSWERED
    assert Session.objects.unscoped().get(pk=stored.session_id).user_id == live_agent.member.pk
    session = Session.objects.unscoped().get(pk=stored.session_id)
    assert session.channel == "telegram"
    assert not ChannelConversation.objects.unscoped().get(session=session).is_group


def test_the_draft_grows_in_place_while_the_reply_streams(telegram, fake_telegram, fake_llm, inline_runs):
    reply = " ".join(f"word{i}" for i in range(200))
    fake_llm.script(FakeTurn(text=reply, chunk_size=20, chunk_delay=0.03))
    post(telegram, update("tell me a lot"))
    fake_telegram.wait_for(lambda f: reply in final_texts(f))
    edits = fake_telegram.calls_of("editMessageText")
    assert len(edits) >= 2, "the draft was edited while it streamed, then finished"
    assert len(fake_telegram.calls_of("sendMessage")) == 1


def test_a_duplicate_update_is_stored_once_and_answered_once(telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Once."))
    body = update("only once")
    assert post(telegram, body).status_code == 200
    assert post(telegram, body).status_code == 200
    fake_telegram.wait_for(lambda f: "Once." in final_texts(f))
    assert InboundUpdate.objects.unscoped().filter(channel=telegram).count() == 1
    assert Run.objects.unscoped().filter(session__channel="telegram").count() == 1


def test_a_bad_or_missing_secret_token_is_refused_and_nothing_is_stored(telegram, fake_telegram):
    assert post(telegram, update("forged"), secret="wrong").status_code == 403
    response = Client().post(inbound_url(telegram), json.dumps(update("x")), content_type="application/json")
    assert response.status_code == 401
    assert not InboundUpdate.objects.unscoped().exists()
    assert fake_telegram.calls == []


def test_in_a_group_only_a_mention_or_a_reply_to_the_bot_is_answered(
    telegram, fake_telegram, fake_llm, inline_runs
):
    assert post(telegram, update("just chatting", group=True)).status_code == 200
    fake_llm.script(FakeTurn(text="Mentioned."), FakeTurn(text="Replied."))
    post(telegram, update("@claw_bot what time is it?", group=True))
    fake_telegram.wait_for(lambda f: "Mentioned." in final_texts(f))
    post(
        telegram,
        update(
            "and now?",
            group=True,
            reply_to_message={"message_id": 1, "from": {"id": 9, "username": "claw_bot"}},
        ),
    )
    fake_telegram.wait_for(lambda f: "Replied." in final_texts(f))
    statuses = list(InboundUpdate.objects.unscoped().order_by("received_at").values_list("status", flat=True))
    assert statuses == [InboundStatus.IGNORED, InboundStatus.ANSWERED, InboundStatus.ANSWERED]
    # The mention is taken out of the text; the group session leaves personal memory out.
    assert fake_llm.requests[0].json["messages"][-1]["content"] == "what time is it?"
    conversation = ChannelConversation.objects.unscoped().get()
    assert conversation.is_group
    assert conversation.chat_id == "-100"


def test_a_long_reply_is_split_within_telegrams_limit(telegram, fake_telegram, fake_llm, inline_runs):
    reply = ("x" * 90 + "\n") * 100  # 9,100 characters
    fake_llm.script(FakeTurn(text=reply))
    post(telegram, update("a long one"))
    fake_telegram.wait_for(lambda f: sum(len(t) for t in final_texts(f)) >= 9000 and len(final_texts(f)) >= 3)
    texts = final_texts(fake_telegram)
    assert all(len(t) <= 4096 for t in texts)
    assert "".join(t.replace("\n", "") for t in texts) == reply.replace("\n", "")


def test_an_unlinked_sender_is_refused_unless_the_channel_is_open(
    telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    post(telegram, update("who am I", sender=77))
    fake_telegram.wait_for(lambda f: any("linked members only" in t for t in final_texts(f)))
    assert InboundUpdate.objects.unscoped().get().status == InboundStatus.REFUSED
    assert not Run.objects.unscoped().filter(session__channel="telegram").exists()

    type(telegram).objects.unscoped().filter(pk=telegram.pk).update(open_to_everyone=True)
    fake_llm.script(FakeTurn(text="Hello guest."))
    post(telegram, update("hi", sender=77))
    fake_telegram.wait_for(lambda f: "Hello guest." in final_texts(f))
    session = Session.objects.unscoped().get(channel="telegram")
    assert session.user_id not in (live_agent.member.pk, live_agent.owner.pk)
    assert session.user.username.startswith("channel-guest-")
    assert not session.user.has_usable_password()


def test_an_approval_by_reply_and_by_button(telegram, fake_telegram, fake_llm, inline_runs, live_agent):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "ls"}, "call_ls")]))
    post(telegram, update("list the files"))
    asked = fake_telegram.wait_for(lambda f: [b for b in f.calls_of("sendMessage") if "reply_markup" in b])
    keyboard = asked[0]["reply_markup"]["inline_keyboard"][0]
    assert [b["text"] for b in keyboard] == ["Approve", "Deny"]
    fake_llm.script(FakeTurn(text="Listed."))
    post(telegram, update("yes"))
    fake_telegram.wait_for(lambda f: "Listed." in final_texts(f))
    assert ApprovalRequest.objects.unscoped().get().status == "approved"

    # A button press: the inline keyboard's callback query.
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "pwd"}, "call_pwd")]))
    post(telegram, update("where am I"))
    asked = fake_telegram.wait_for(
        lambda f: [b for b in f.calls_of("sendMessage") if "reply_markup" in b and "pwd" in b["text"]]
    )
    data = asked[0]["reply_markup"]["inline_keyboard"][0][1]["callback_data"]
    fake_llm.script(FakeTurn(text="Not run, as you wish."))
    callback = {
        "update_id": next(_ids),
        "callback_query": {
            "id": "cb-1",
            "from": {"id": 42, "username": "ann"},
            "data": data,
            "message": {"message_id": 5, "chat": {"id": 42, "type": "private"}},
        },
    }
    assert post(telegram, callback).status_code == 200
    fake_telegram.wait_for(lambda f: any("Not run, as you wish." in t for t in final_texts(f)))
    assert fake_telegram.calls_of("answerCallbackQuery")[0]["text"] == "Denied."
    assert ApprovalRequest.objects.unscoped().get(call_id="call_pwd").status == "denied"


def test_a_rate_limited_send_is_retried_after_the_wait_telegram_names(
    telegram, fake_telegram, fake_llm, inline_runs
):
    fake_telegram.fail("sendMessage", 429, times=1, retry_after=1)
    fake_llm.script(FakeTurn(text="Eventually."))
    post(telegram, update("hi"))
    fake_telegram.wait_for(lambda f: "Eventually." in final_texts(f))
    assert fake_telegram.calls_of("!sendMessage")


def test_a_refused_send_is_reported_not_retried(telegram, fake_telegram, fake_llm, inline_runs):
    fake_telegram.fail("sendMessage", 400, times=5)
    fake_llm.script(FakeTurn(text="Never seen."))
    post(telegram, update("hi"))
    stored = fake_telegram.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(detail__startswith="delivery failed").first()
    )
    assert "HTTP 400" in stored.detail
    assert len(fake_telegram.calls_of("!sendMessage")) == 1
