"""No part sent twice, nothing lost: a process cut off between the platform's
acceptance of a part and our commit of it (simulated: the commit raises), then a
worker's sweep sends the rest. Discord's ``nonce`` + ``enforce_nonce`` and Slack's
metadata looked up in ``conversations.history`` keep the part single; a mail
repeats with the same Message-ID; Telegram has nothing (at most one duplicate).
Notices and routine output (``deliver_text``) go through the same outbound replies."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from django.utils import timezone

from agents.routines.delivery import to_channel
from channels_app import outbox
from channels_app.adapters import adapter_for
from channels_app.adapters.base import AdapterError, Target
from channels_app.delivery import deliver_to_channel
from channels_app.models import Channel, OutboundReply, OutboundStatus
from tests.chat_platforms.conftest import make_channel
from tests.chat_platforms.test_email import mailbox  # noqa: F401  (a fixture)
from tests.chat_platforms.test_slack import texts as slack_texts

pytestmark = pytest.mark.django_db(transaction=True)


class Crash(BaseException):
    """The process dying: not an error any code path handles."""


def send_then_crash(monkeypatch: Any, row_id: int) -> None:
    """Deliver ``row_id``; the first part reaches the platform, then the process
    "dies" before the part is recorded."""
    real = outbox._advance

    def crashing(row: int, index: int, message_id: str) -> None:
        raise Crash

    monkeypatch.setattr(outbox, "_advance", crashing)
    with pytest.raises(Crash):
        asyncio.run(outbox.send_outbound(row_id))
    monkeypatch.setattr(outbox, "_advance", real)
    row = OutboundReply.objects.unscoped().get(pk=row_id)
    assert row.sent_parts == 0
    assert row.in_flight_since is not None, "the part was marked in flight before it went out"
    # The live claim lapses; a worker's sweep takes the row over.
    OutboundReply.objects.unscoped().filter(pk=row_id).update(
        claimed_until=None, next_attempt_at=timezone.now()
    )
    assert asyncio.run(outbox.sweep_undelivered()) == 1
    row = OutboundReply.objects.unscoped().get(pk=row_id)
    assert row.status == OutboundStatus.SENT
    assert row.in_flight_since is None
    assert row.sent_parts == 2


@pytest.fixture
def discord(live_agent: Any, fake_discord: Any) -> Channel:
    return make_channel(
        live_agent, "discord", bot_token="discord-token", bot_username="9000", account_id="7000"
    )


@pytest.fixture
def slack(live_agent: Any, fake_slack: Any) -> Channel:
    return make_channel(
        live_agent, "slack", bot_token="xoxb-slack-token", signing_secret="s", bot_username="UB"
    )


def test_discord_answers_the_message_it_made_for_a_nonce_seen_before(discord, fake_discord, monkeypatch):
    row_id = outbox.create_outbound(discord, Target("555"), ["first part", "second part"])
    send_then_crash(monkeypatch, row_id)
    assert [m["content"] for m in fake_discord.messages()] == ["first part", "second part"]
    creates = fake_discord.calls_of("create_message")
    assert {c["nonce"] for c in creates} == {f"claw-r{row_id}-p0", f"claw-r{row_id}-p1"}
    assert all(c["enforce_nonce"] is True for c in creates)
    assert fake_discord.calls_of("nonce_hit") == [{"nonce": f"claw-r{row_id}-p0", "_id": creates[0]["_id"]}]
    row = OutboundReply.objects.unscoped().get(pk=row_id)
    assert row.message_ids == [c["_id"] for c in creates]


def test_slack_looks_for_the_part_in_the_history_before_sending_it_again(slack, fake_slack, monkeypatch):
    row_id = outbox.create_outbound(slack, Target("C1", "1700000000.000001"), ["first part", "second part"])
    send_then_crash(monkeypatch, row_id)
    assert slack_texts(fake_slack) == ["first part", "second part"]
    (lookup,) = fake_slack.calls_of("conversations.replies")
    assert lookup["channel"] == "C1"
    assert lookup["ts"] == "1700000000.000001"
    assert lookup["include_all_metadata"] == "true"
    posted = fake_slack.calls_of("chat.postMessage")
    assert posted[0]["metadata"] == {
        "event_type": "claw_reply_part",
        "event_payload": {"key": f"claw-r{row_id}-p0"},
    }
    assert OutboundReply.objects.unscoped().get(pk=row_id).message_ids == [p["_ts"] for p in posted]

    # A bot without the history scope cannot look: the part is sent again (the
    # documented window), never lost.
    again = outbox.create_outbound(slack, Target("D1"), ["once more", "and the rest"])
    fake_slack.fail("conversations.history", 403)  # ok: false, missing_scope
    send_then_crash(monkeypatch, again)
    assert slack_texts(fake_slack)[2:] == ["once more", "once more", "and the rest"]


def test_a_retry_after_a_dropped_answer_asks_the_platform_first(slack, fake_slack, discord, fake_discord):
    """Within one delivery: the platform took the part but the answer was lost."""
    for channel, shown in ((slack, lambda: slack_texts(fake_slack)), (discord, fake_discord.messages)):
        adapter = adapter_for(channel)
        real = adapter.send_keyed
        dropped: list[str] = []

        async def send_and_drop(
            target: Target,
            text: str,
            key: str,
            real: Any = real,
            dropped: list[str] = dropped,
            adapter: Any = adapter,
        ) -> str:
            message_id = await real(target, text, key)
            if not dropped:
                dropped.append(message_id)
                raise adapter.error_type(
                    "connection reset while reading the answer", retryable=True, retry_after=0
                )
            return message_id

        adapter.send_keyed = send_and_drop  # type: ignore[method-assign]
        row_id = outbox.create_outbound(channel, Target("555"), ["only once"])
        assert asyncio.run(outbox.send_outbound(row_id, adapter)) == dropped
        assert len(shown()) == 1


def test_a_mail_repeated_after_a_cut_off_keeps_its_message_id(mailbox, fake_mail, monkeypatch):  # noqa: F811
    row_id = outbox.create_outbound(mailbox, Target("ada@example.test"), ["first part", "second part"])
    send_then_crash(monkeypatch, row_id)
    sent = fake_mail.sent_mail()
    assert [m.get_content().strip() for m in sent] == ["first part", "first part", "second part"]
    assert (
        sent[0]["Message-ID"]
        == sent[1]["Message-ID"]
        == f"<claw-r{row_id}-p0.{mailbox.public_id.hex}@claw.test>"
    )
    assert sent[2]["Message-ID"] != sent[0]["Message-ID"]


def test_telegram_has_no_idempotency_at_most_one_duplicate(live_agent, fake_telegram, monkeypatch):
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret="s")
    row_id = outbox.create_outbound(channel, Target("42"), ["first part", "second part"])
    send_then_crash(monkeypatch, row_id)
    assert [m["text"] for m in fake_telegram.messages()] == ["first part", "first part", "second part"]


def test_routine_output_in_an_outage_is_kept_and_sent_once_by_the_sweep(live_agent, fake_telegram):
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret="s")
    fake_telegram.fail("sendMessage", 503, times=4, retry_after=0)  # more than one delivery's retries
    with pytest.raises(AdapterError) as postponed:
        deliver_to_channel(channel, "-100", "Nightly report: all green.")
    assert postponed.value.sweep_retries is True  # type: ignore[attr-defined]
    row = OutboundReply.objects.unscoped().get(channel=channel)
    assert (row.status, row.attempts, row.sent_parts) == (OutboundStatus.PENDING, 1, 0)
    assert "503" in row.last_error
    assert fake_telegram.messages() == []

    OutboundReply.objects.unscoped().filter(pk=row.pk).update(next_attempt_at=timezone.now())
    assert asyncio.run(outbox.sweep_undelivered()) == 1
    assert asyncio.run(outbox.sweep_undelivered()) == 0
    assert [m["text"] for m in fake_telegram.messages()] == ["Nightly report: all green."]


def test_a_routine_run_says_postponed_not_failed_when_the_sweep_will_send_it(live_agent, fake_slack):
    from agents.models import Routine, RoutineRun
    from tests.routines.helpers import make_routine

    channel = make_channel(live_agent, "slack", bot_token="xoxb-slack-token", signing_secret="s")
    routine = make_routine(live_agent, next_run_at=timezone.now(), name="nightly")
    Routine._base_manager.filter(pk=routine.pk).update(deliver_channel=channel, deliver_target="C9")
    run = RoutineRun.objects.unscoped().create(
        tenant=live_agent.tenant, routine=Routine._base_manager.get(pk=routine.pk), status="ok", output="ok"
    )
    fake_slack.fail("chat.postMessage", 503, times=4, retry_after=0)
    assert to_channel(run).startswith("channel: postponed: ")
    fake_slack.fail("chat.postMessage", 200)  # channel_not_found: no retry helps
    assert to_channel(run) == "channel: failed: slack chat.postMessage: channel_not_found"
    assert OutboundReply.objects.unscoped().filter(channel=channel, status=OutboundStatus.FAILED).count() == 1


def pending_approval(live_agent: Any) -> tuple[Any, Any, dict[str, Any]]:
    """A run waiting for an approval; the approval and its outbound part."""
    from django.db import transaction

    from agents.actions.conversation import do_create_session
    from agents.actions.runs import do_send_message
    from agents.models import ApprovalRequest, Run, RunStatus

    session = do_create_session(live_agent.agent, user=live_agent.member, title="approvals")
    with transaction.atomic():
        run = do_send_message(session, "list the files", acting_user=live_agent.member)
        assert run is not None
        Run.objects.unscoped().filter(pk=run.pk).update(status=RunStatus.AWAITING_APPROVAL)
    approval = ApprovalRequest.objects.unscoped().create(
        tenant=live_agent.tenant, run=run, call_id="call_ls", tool_name="bash", arguments={"command": "ls"}
    )
    part = {"approval": {"approval_id": str(approval.pk), "tool": "bash", "summary": '{"command": "ls"}'}}
    return run, approval, part


def test_an_approval_prompt_in_an_outage_waits_for_the_sweep_and_a_decided_one_is_not_sent(
    live_agent, fake_telegram
):
    from agents.models import ApprovalRequest, ApprovalStatus

    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret="s")
    run, approval, part = pending_approval(live_agent)
    fake_telegram.fail("sendMessage", 503, times=4, retry_after=0)
    row_id = outbox.create_outbound(channel, Target("42"), [part], run_id=run.pk)
    with pytest.raises(AdapterError):
        asyncio.run(outbox.send_outbound(row_id))
    OutboundReply.objects.unscoped().filter(pk=row_id).update(next_attempt_at=timezone.now())
    assert asyncio.run(outbox.sweep_undelivered()) == 1
    [prompt] = fake_telegram.messages()
    assert prompt["text"].startswith("Approval needed: bash")
    buttons = prompt["reply_markup"]["inline_keyboard"][0]
    assert [b["text"] for b in buttons] == ["Approve", "Deny"]

    # A prompt the sweep reaches after the call was decided is not sent.
    late = outbox.create_outbound(channel, Target("42"), [part], run_id=run.pk)
    ApprovalRequest.objects.unscoped().filter(pk=approval.pk).update(status=ApprovalStatus.APPROVED)
    OutboundReply.objects.unscoped().filter(pk=late).update(claimed_until=None)
    assert asyncio.run(outbox.sweep_undelivered()) == 1
    assert len(fake_telegram.messages()) == 1
    assert OutboundReply.objects.unscoped().get(pk=late).status == OutboundStatus.SENT


def test_whatsapp_a_refused_send_is_reported_once_and_a_busy_one_kept(live_agent, fake_whatsapp):
    from channels_app.delivery import deliver_text

    channel = make_channel(
        live_agent, "whatsapp", bot_token="wa-token", signing_secret="wa-app-secret", account_id="1555000"
    )
    fake_whatsapp.fail("messages", 400)  # e.g. a recipient outside the 24-hour window
    with pytest.raises(AdapterError) as refused:
        asyncio.run(deliver_text(channel.pk, Target("4915550001"), "not deliverable"))
    assert refused.value.retryable is False
    assert refused.value.sweep_retries is False  # type: ignore[attr-defined]
    assert len(fake_whatsapp.calls_of("!messages")) == 1  # not retried
    assert OutboundReply.objects.unscoped().get(channel=channel).status == OutboundStatus.FAILED

    fake_whatsapp.fail("messages", 500, times=4, retry_after=0)
    with pytest.raises(AdapterError):
        asyncio.run(deliver_text(channel.pk, Target("4915550001"), "later"))
    kept = OutboundReply.objects.unscoped().get(channel=channel, status=OutboundStatus.PENDING)
    OutboundReply.objects.unscoped().filter(pk=kept.pk).update(next_attempt_at=timezone.now())
    assert asyncio.run(outbox.sweep_undelivered()) == 1
    assert [b["text"]["body"] for b in fake_whatsapp.calls_of("messages")] == ["later"]


def test_the_generic_webhook_repeats_a_part_with_the_same_message_id(live_agent, fake_callback, monkeypatch):
    channel = make_channel(
        live_agent, "webhook_channel", signing_secret="s", callback_url=fake_callback.hook_url
    )
    row_id = outbox.create_outbound(channel, Target("ext-7"), ["first part", "second part"])
    send_then_crash(monkeypatch, row_id)
    posted = fake_callback.calls_of("message")
    assert [p["text"] for p in posted] == ["first part", "first part", "second part"]
    assert (
        posted[0]["message_id"]
        == posted[1]["message_id"]
        == f"claw-r{row_id}-p0-{channel.public_id.hex[:12]}"
    )
    # A receiver that de-duplicates by message_id shows each part once.
    assert len({p["message_id"] for p in posted}) == 2


def test_a_discord_approval_prompt_cut_off_mid_send_is_not_repeated(
    live_agent, discord, fake_discord, monkeypatch
):
    run, _approval, part = pending_approval(live_agent)
    row_id = outbox.create_outbound(discord, Target("555"), [part, "and a note"], run_id=run.pk)
    send_then_crash(monkeypatch, row_id)
    shown = fake_discord.messages()
    assert [m["content"][:22] for m in shown] == ["Approval needed: bash\n", "and a note"]
    assert shown[0]["components"][0]["components"][0]["label"] == "Approve"
    assert len(fake_discord.calls_of("nonce_hit")) == 1
