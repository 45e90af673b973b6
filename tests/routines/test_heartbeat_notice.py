"""A heartbeat's finding told where the user talks (C8): besides the user's Heartbeat
chat, each chat-platform account the user linked on the agent's channels gets it
(the agent's ``heartbeat_notify``: ``linked``, the default); ``session`` keeps it in
the chat; a platform's failure is noted on the run, which stays ok. Through the
fake Telegram (its Bot API wire)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from agents.actions.config import do_save_agent_file
from agents.models import Agent, Routine, Session
from agents.routines.heartbeat_notice import linked_targets
from channels_app.models import Channel, ChannelConversation
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_telegram import SECRET
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.routines.helpers import enable_heartbeat, runs_of, tick

pytestmark = pytest.mark.django_db(transaction=True)

START = datetime(2026, 5, 4, 10, 0, tzinfo=UTC)
FINDING = "The nightly export did not run."


@pytest.fixture(autouse=True)
def _inline_delivery(settings):
    settings.CLAW_ROUTINE_DELIVERY_INLINE = True


def enable(agent: Agent, **fields) -> Routine:
    return enable_heartbeat(agent, START, **fields)


def member_finds_something(live_agent, fake_llm) -> None:
    do_save_agent_file(
        live_agent.agent, "HEARTBEAT.md", "- check that the nightly export ran", user=live_agent.member
    )
    fake_llm.script(FakeTurn(text=FINDING))


def telegram(live_agent) -> Channel:
    return make_channel(live_agent, "telegram", bot_token="123:telegram-token", signing_secret=SECRET)


def test_a_finding_reaches_the_users_linked_telegram_and_the_heartbeat_chat(
    live_agent, fake_llm, fake_telegram
):
    channel = telegram(live_agent)
    link(channel, "4242", live_agent.member)
    link(channel, "777", live_agent.admin)  # another member: not told of this member's finding
    routine = enable(live_agent.agent)
    member_finds_something(live_agent, fake_llm)
    tick(START)
    [row] = runs_of(routine)
    assert (row.status, row.output) == ("ok", FINDING)
    assert row.delivery == "telegram bot: sent"
    [sent] = fake_telegram.calls_of("sendMessage")
    assert sent["chat_id"] in ("4242", 4242)
    assert sent["text"] == f"Heartbeat ({live_agent.agent.name}): {FINDING}"
    assert Session._base_manager.filter(agent=live_agent.agent, channel="heartbeat").count() == 1


def test_the_chat_the_user_last_wrote_from_is_used(live_agent, fake_llm, fake_telegram):
    channel = telegram(live_agent)
    link(channel, "4242", live_agent.member)
    session = Session._base_manager.create(
        tenant=live_agent.tenant, agent=live_agent.agent, user=live_agent.member, channel="telegram"
    )
    ChannelConversation._base_manager.create(
        tenant=live_agent.tenant, session=session, channel=channel, chat_id="9001", sender_id="4242"
    )
    [target] = linked_targets(live_agent.agent.pk, live_agent.member.pk)
    assert (target.chat_id, target.problem) == ("9001", "")
    routine = enable(live_agent.agent)
    member_finds_something(live_agent, fake_llm)
    tick(START)
    [sent] = fake_telegram.calls_of("sendMessage")
    assert str(sent["chat_id"]) == "9001"
    assert runs_of(routine)[0].delivery == "telegram bot: sent"


def test_session_only_sends_nothing_outside_the_chat(live_agent, fake_llm, fake_telegram):
    link(telegram(live_agent), "4242", live_agent.member)
    routine = enable(live_agent.agent, heartbeat_notify="session")
    member_finds_something(live_agent, fake_llm)
    tick(START)
    [row] = runs_of(routine)
    assert (row.status, row.output, row.delivery) == ("ok", FINDING, "")
    assert fake_telegram.calls_of("sendMessage") == []


def test_a_platform_failure_is_noted_and_the_heartbeat_stays_ok(live_agent, fake_llm, fake_telegram):
    disabled = telegram(live_agent)
    Channel._base_manager.filter(pk=disabled.pk).update(name="disabled bot", enabled=False)
    link(disabled, "4242", live_agent.member)
    link(telegram(live_agent), "4242", live_agent.member)
    fake_telegram.fail("sendMessage", 403)
    routine = enable(live_agent.agent)
    member_finds_something(live_agent, fake_llm)
    tick(START)
    [row] = runs_of(routine)
    assert row.status == "ok"
    assert row.delivery.startswith("telegram bot: failed: "), row.delivery
    assert "disabled bot" not in row.delivery  # a disabled channel is not used


def test_no_notice_when_nothing_was_found_or_the_user_left(live_agent, fake_llm, fake_telegram):
    from claw_platform.tenancy.models import Membership

    link(telegram(live_agent), "4242", live_agent.member)
    routine = enable(live_agent.agent)
    do_save_agent_file(live_agent.agent, "HEARTBEAT.md", "- look at the queue", user=live_agent.member)
    fake_llm.script(FakeTurn(text="HEARTBEAT_OK"))
    tick(START)
    assert [r.delivery for r in runs_of(routine)] == [""]
    assert fake_telegram.calls_of("sendMessage") == []
    Membership._base_manager.filter(tenant=live_agent.tenant, user=live_agent.member).delete()
    assert linked_targets(live_agent.agent.pk, live_agent.member.pk) == []


def test_the_setting_is_in_the_admin_and_the_api(live_agent):
    from tests.api.conftest import client_for as api_client
    from tests.api.conftest import make_key

    client = api_client(make_key(live_agent, "admin"))
    url = f"/api/v1/agents/{live_agent.agent.slug}/"
    assert client.get(url).json()["heartbeat_notify"] == "linked"
    response = client.patch(url, {"heartbeat_notify": "everywhere"}, format="json")
    assert response.status_code == 400
    assert "heartbeat_notify" in response.content.decode()
    assert client.patch(url, {"heartbeat_notify": "session"}, format="json").status_code == 200
    assert Agent._base_manager.get(pk=live_agent.agent.pk).heartbeat_notify == "session"


def test_linked_email_also_mails_the_users_address_through_the_agents_email_channel(
    live_agent, fake_llm, fake_mail
):
    from django.contrib.auth import get_user_model

    from tools_app.actions.extensions import do_allow_host

    get_user_model()._default_manager.filter(pk=live_agent.member.pk).update(email="member@example.test")
    routine = enable(live_agent.agent, heartbeat_notify="linked_email")
    member_finds_something(live_agent, fake_llm)
    tick(START)
    assert runs_of(routine)[0].delivery == "e-mail: skipped: the agent has no e-mail channel"

    do_allow_host(live_agent.tenant, "127.0.0.1", acting_user=live_agent.owner)
    make_channel(
        live_agent,
        "email",
        account_id="agent@claw.test",
        bot_token="mail-password",
        imap_url=f"imap://127.0.0.1:{fake_mail.imap_port}",
        smtp_url=f"smtp://127.0.0.1:{fake_mail.smtp_port}",
        receive_mode="polling",
    )
    fake_llm.script(FakeTurn(text=FINDING))
    tick(START + timedelta(minutes=30))
    assert runs_of(routine)[-1].delivery == "email bot: sent"
    [mail] = fake_mail.sent_mail()
    assert mail["To"] == "member@example.test"
    assert FINDING in mail.get_content()


def test_in_production_the_notice_is_sent_from_a_thread_of_its_own(
    live_agent, fake_llm, fake_telegram, settings
):
    settings.CLAW_ROUTINE_DELIVERY_INLINE = False  # as deployed: the scheduler never waits on a platform
    link(telegram(live_agent), "4242", live_agent.member)
    routine = enable(live_agent.agent)
    member_finds_something(live_agent, fake_llm)
    tick(START)
    [sent] = fake_telegram.wait_for(lambda fake: fake.calls_of("sendMessage"))
    assert sent["text"].endswith(FINDING)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not runs_of(routine)[0].delivery:
        time.sleep(0.05)
    assert runs_of(routine)[0].delivery == "telegram bot: sent"
