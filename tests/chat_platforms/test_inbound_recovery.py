"""No inbound message lost after a crash (issue 29): an update stored but never
dispatched (the process died after the platform was told "got it") is dispatched by
the workers' sweep through the same path as the first time, exactly once, with its
files read again; one too old is marked failed instead of answered late; one the
stored payload cannot give back asks a proven sender to resend."""

from __future__ import annotations

import asyncio
import contextvars
import json
import threading
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from agents.models import ApprovalRequest, Attachment, Run
from channels_app.actions.inbound import claim_received, record_update
from channels_app.adapters import adapter_for
from channels_app.adapters.base import InboundRequest
from channels_app.models import Channel, ChannelLink, InboundStatus, InboundUpdate
from channels_app.receive import _dispatch
from channels_app.recovery import GIVEN_UP_DETAIL, sweep_unanswered
from tests.chat_platforms import test_discord, test_telegram, test_webhook_channel
from tests.chat_platforms.conftest import make_channel
from tests.chat_platforms.test_telegram import final_texts, post, update
from tests.chat_platforms.test_telegram_attachments import model_parts, photo_sizes
from tests.chat_platforms.test_webhook_channel import message as hook_message
from tests.chat_platforms.test_webhook_channel import shown
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.tools.helpers import tool_setting

pytestmark = pytest.mark.django_db(transaction=True)

telegram = test_telegram.telegram  # a private chat with linked sender 42
hook_channel = test_webhook_channel.hook_channel  # the generic webhook, linked sender ext-7
discord = test_discord.discord  # a Discord bot, linked sender test_discord.USER


def crashed(channel: Channel, body: dict, *, age: timedelta = timedelta(minutes=4)) -> InboundUpdate:
    """The update stored as the webhook (the Discord Gateway) stores it, then the
    process died: never dispatched. ``age``: how long ago it came."""
    adapter = adapter_for(channel)
    if channel.kind == "discord":
        [message] = [m for m in [adapter.parse_message(body)] if m is not None]  # type: ignore[attr-defined]
    else:
        [message] = adapter.parse(InboundRequest(b"", {}), body)
    stored = record_update(channel, message)
    assert stored is not None
    InboundUpdate.objects.unscoped().filter(pk=stored.pk).update(received_at=timezone.now() - age)
    return stored


def sweep() -> int:
    return asyncio.run(sweep_unanswered())


def chat_runs() -> int:
    return (
        Run.objects.unscoped().filter(session__channel__in=["telegram", "webhook_channel", "discord"]).count()
    )


def status(stored: InboundUpdate) -> tuple[str, str]:
    row = InboundUpdate.objects.unscoped().get(pk=stored.pk)
    return row.status, row.detail


def test_a_crashed_update_is_answered_once_by_the_sweep(telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Recovered answer."))
    stored = crashed(telegram, update("are you there?"))
    young = crashed(telegram, update("just now"), age=timedelta(seconds=5))
    assert sweep() == 1
    fake_telegram.wait_for(lambda f: "Recovered answer." in final_texts(f))
    assert sweep() == 0, "dispatched once: the second sweep finds nothing"

    assert len(fake_llm.requests) == 1
    assert "are you there?" in str(fake_llm.requests[0].json["messages"][-1]["content"])
    assert len(fake_telegram.calls_of("sendMessage")) == 1
    assert chat_runs() == 1
    assert status(stored)[0] == InboundStatus.ANSWERED
    # One still within the grace period (its first dispatch may be reading files) waits.
    assert status(young)[0] == InboundStatus.RECEIVED

    # A first dispatch that comes after the sweep's does nothing.
    message = adapter_for(telegram).restore(stored.payload)
    assert message is not None
    assert _dispatch(telegram, InboundUpdate.objects.unscoped().get(pk=stored.pk), message) is None
    assert chat_runs() == 1


def test_two_sweeps_at_once_dispatch_one_update_once(telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Only one of us."))
    crashed(telegram, update("hello twice?"))
    barrier = threading.Barrier(2)
    results: list[int] = []

    def worker() -> None:
        barrier.wait()
        results.append(sweep())

    threads = [threading.Thread(target=contextvars.copy_context().run, args=(worker,)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(results) == [0, 1]
    fake_telegram.wait_for(lambda f: "Only one of us." in final_texts(f))
    assert chat_runs() == 1
    assert len(fake_llm.requests) == 1
    assert len(fake_telegram.calls_of("sendMessage")) == 1


def test_a_slow_first_dispatch_holds_the_update_and_a_crash_in_it_leaves_it_to_the_sweep(
    telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="After the crash."))
    stored = crashed(telegram, update("slow one"))
    held, release = threading.Event(), threading.Event()

    def first_dispatch() -> None:
        try:
            with transaction.atomic():
                assert claim_received(stored)
                held.set()
                release.wait(20)
                raise RuntimeError("the process dies mid-dispatch")
        except RuntimeError:
            pass

    thread = threading.Thread(target=contextvars.copy_context().run, args=(first_dispatch,))
    thread.start()
    assert held.wait(20)
    assert sweep() == 0, "the first dispatch holds it: the sweep skips it"
    assert chat_runs() == 0
    release.set()
    thread.join(20)
    assert status(stored)[0] == InboundStatus.RECEIVED  # rolled back with the crash
    assert sweep() == 1
    fake_telegram.wait_for(lambda f: "After the crash." in final_texts(f))
    assert chat_runs() == 1


def test_a_crashed_photo_is_recovered_with_its_file_read_again(
    caps, telegram, fake_telegram, fake_llm, inline_runs
):
    from tests.ui.test_pickers_and_attachments import png

    fake_llm.script(FakeTurn(text="A small picture."))
    picture = png(4, 4)
    sizes = photo_sizes(fake_telegram, (picture, 90, None))
    stored = crashed(telegram, update("", caption="what is it?", photo=sizes))
    assert sweep() == 1
    fake_telegram.wait_for(lambda f: "A small picture." in final_texts(f))
    assert [c["file_id"] for c in fake_telegram.calls_of("getFile")] == [sizes[0]["file_id"]]
    kept = Attachment.objects.unscoped().get(session__channel="telegram")
    assert (kept.kind, kept.turn_id is not None) == ("image", True)
    assert any(p["type"] == "image_url" for p in model_parts(fake_llm))
    assert status(stored) == (InboundStatus.ANSWERED, "1 attached")


def test_a_crashed_button_press_decides_its_approval(
    telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    tool_setting(live_agent.agent, "bash", execution="host")
    fake_llm.script(FakeTurn(tool_calls=[("bash", {"command": "pwd"}, "call_pwd")]))
    post(telegram, update("where am I"))
    asked = fake_telegram.wait_for(lambda f: [b for b in f.calls_of("sendMessage") if "reply_markup" in b])
    data = asked[0]["reply_markup"]["inline_keyboard"][0][1]["callback_data"]
    fake_llm.script(FakeTurn(text="Not run after all."))
    press = {
        "update_id": 990_001,
        "callback_query": {
            "id": "cb-9",
            "from": {"id": 42, "username": "ann"},
            "data": data,
            "message": {"message_id": 5, "chat": {"id": 42, "type": "private"}},
        },
    }
    stored = crashed(telegram, press)
    assert sweep() == 1
    fake_telegram.wait_for(lambda f: any("Not run after all." in t for t in final_texts(f)))
    assert ApprovalRequest.objects.unscoped().get(call_id="call_pwd").status == "denied"
    assert status(stored) == (InboundStatus.DECIDED, "denied")


def test_a_crashed_link_command_links_and_its_code_leaves_the_payload(
    telegram, fake_telegram, live_agent, inline_runs
):
    from tests.chat_platforms.test_linking import new_code

    code = new_code(live_agent.admin)
    stored = crashed(telegram, update(f"/link {code}", sender=77))
    assert code in json.dumps(InboundUpdate.objects.unscoped().get(pk=stored.pk).payload)  # until dispatched
    assert sweep() == 1
    fake_telegram.wait_for(
        lambda f: any(t.startswith("Linked: you talk to this bot as") for t in final_texts(f))
    )
    assert (
        ChannelLink.objects.unscoped().get(channel=telegram, platform_user_id="77").user == live_agent.admin
    )
    assert status(stored) == (InboundStatus.ANSWERED, "linked")
    payload = InboundUpdate.objects.unscoped().get(pk=stored.pk).payload
    assert code not in json.dumps(payload)
    assert payload["message"]["text"] == "/link [code]"


def test_a_crashed_webhook_message_is_answered_once(hook_channel, fake_callback, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Webhook recovered."))
    stored = crashed(hook_channel, hook_message("lost?"))
    assert sweep() == 1
    assert sweep() == 0
    fake_callback.wait_for(lambda f: "Webhook recovered." in shown(f))
    assert chat_runs() == 1
    assert len(fake_llm.requests) == 1
    assert status(stored)[0] == InboundStatus.ANSWERED


def test_a_crashed_discord_message_keeps_whether_it_was_addressed(
    discord, fake_discord, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Discord recovered."))
    mentioned = crashed(discord, test_discord.message("hi bot", guild="1", mentions=(test_discord.BOT,)))
    chatter = crashed(discord, test_discord.message("just chatting", guild="1"))
    assert sweep() == 2
    fake_discord.wait_for(lambda f: "Discord recovered." in test_discord.texts(f))
    assert status(mentioned)[0] == InboundStatus.ANSWERED
    assert status(chatter)[0] == InboundStatus.IGNORED  # not for the bot, as the first time
    assert chat_runs() == 1
    assert len(fake_llm.requests) == 1


def test_one_too_old_is_marked_failed_not_answered_late(telegram, fake_telegram, fake_llm, inline_runs):
    stored = crashed(telegram, update("from the day before yesterday"), age=timedelta(days=2))
    assert sweep() == 0
    assert status(stored) == (InboundStatus.FAILED, GIVEN_UP_DETAIL)
    assert not fake_telegram.calls_of("sendMessage")
    assert not fake_llm.requests
    assert not chat_runs()


def test_one_the_payload_cannot_give_back_asks_a_proven_sender_to_resend(
    telegram, fake_telegram, fake_mail, live_agent, fake_llm, inline_runs
):
    # A button press stored before presses were kept whole: its data is gone.
    old = InboundUpdate.objects.unscoped().create(
        tenant_id=telegram.tenant_id,
        channel=telegram,
        platform_id="777",
        chat_id="42",
        sender_id="42",
        text="/approve",
        payload={"update_id": 777},
    )
    # A mail whose body and sender proof were never stored, from an unproven sender:
    # marked failed, and nothing is sent to a From that may be someone else's.
    mail = make_channel(
        live_agent,
        "email",
        account_id="agent@claw.test",
        bot_token="mail-password",
        imap_url=f"imap://127.0.0.1:{fake_mail.imap_port}",
        smtp_url=f"smtp://127.0.0.1:{fake_mail.smtp_port}",
    )
    forged = InboundUpdate.objects.unscoped().create(
        tenant_id=mail.tenant_id,
        channel=mail,
        platform_id="<m1@x.test>",
        chat_id="eve@x.test",
        sender_id="unverified:eve@x.test",
        text="hi",
        payload={"uid": 1, "message_id": "<m1@x.test>", "sender_check": "no DKIM signature"},
    )
    past = timezone.now() - timedelta(minutes=5)
    InboundUpdate.objects.unscoped().update(received_at=past)
    assert sweep() == 0
    fake_telegram.wait_for(lambda f: any("send it again" in t for t in final_texts(f)))
    assert status(old)[0] == InboundStatus.FAILED
    assert status(forged)[0] == InboundStatus.FAILED
    assert [m["chat_id"] for m in fake_telegram.messages()] == ["42"]
    assert not fake_mail.sent_mail()
    assert not chat_runs()
