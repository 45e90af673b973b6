"""The chat's scheduling tools offer what the API offers (T6, C1, C2, C6): event
triggers (a message pattern, a failed run, an approval waiting N minutes), interval,
cron in a time zone, one-shot, a full or light run, where the output goes (this
chat, a session of its own, a channel of the agent, a webhook) and the policies;
update and history too. A bad argument is an error naming the field, with nothing
stored. Through the configured tool executor, as a run calls them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agents.models import Routine, RoutineFire, RoutineRun
from channels_app.models import Channel, ChannelLink
from tests.tools.helpers import Run

pytestmark = pytest.mark.django_db(transaction=True)


def routine_id(text: str) -> int:
    return int(text.split("#", 1)[1].split()[0])


def stored(result) -> Routine:
    assert not result.is_error, result.content
    return Routine.objects.unscoped().get(pk=routine_id(result.content))


def channel_of(tenant_set, name: str = "team telegram") -> Channel:
    return Channel.objects.unscoped().create(
        tenant=tenant_set.tenant, agent=tenant_set.agent, name=name, kind="telegram", bot_token="1:x"
    )


def test_event_triggers_light_runs_policies_and_a_session_of_its_own(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    message = stored(
        run.call("schedule_task", prompt="File the invoice", event="message", event_pattern=r"invoice #\d+")
    )
    assert (message.trigger, message.event_kind, message.event_pattern) == (
        "event",
        "message",
        r"invoice #\d+",
    )
    assert str(message.session_id) == str(run.session.pk)  # delivered to this chat by default
    failed = stored(
        run.call(
            "schedule_task",
            prompt="Tell me what broke",
            event="run_failed",
            action="light",
            deliver_to="own_session",
        )
    )
    assert (failed.event_kind, failed.action, failed.session_id) == ("run_failed", "light", None)
    waiting = stored(
        run.call(
            "schedule_task",
            prompt="Remind the approvers",
            event="approval_waiting",
            event_wait_minutes=30,
            overlap_policy="queue_one",
            missed_policy="skip",
            max_retries=0,
            jitter_seconds=30,
            max_runs_per_hour=4,
        )
    )
    assert (waiting.event_kind, waiting.event_wait_minutes) == ("approval_waiting", 30)
    assert (waiting.overlap_policy, waiting.missed_policy, waiting.max_retries) == ("queue_one", "skip", 0)
    assert (waiting.jitter_seconds, waiting.max_runs_per_hour) == (30, 4)
    listed = run.call("list_scheduled_tasks").content
    assert r"on event message matching /invoice #\d+/" in listed
    assert "on event approval_waiting after 30 min" in listed
    assert "action light" in listed


def test_delivery_to_a_channel_defaults_to_the_users_linked_account_and_a_webhook(tenant_a):
    channel = channel_of(tenant_a)
    run = Run(tenant_a.agent, tenant_a.member)
    refused = run.call("schedule_task", prompt="x", interval_seconds=600, deliver_channel="team telegram")
    assert refused.is_error
    assert refused.content.startswith("deliver_target:"), refused.content  # not linked: name the chat
    ChannelLink.objects.unscoped().create(
        tenant=tenant_a.tenant, channel=channel, platform_user_id="4242", user=tenant_a.member
    )
    routine = stored(
        run.call(
            "schedule_task",
            prompt="Daily digest",
            cron="0 8 * * *",
            timezone="Asia/Tokyo",
            deliver_channel="Team Telegram",
            webhook_url="https://hooks.example.com/digest",
        )
    )
    assert (routine.deliver_channel_id, routine.deliver_target) == (channel.pk, "4242")
    assert routine.webhook_url == "https://hooks.example.com/digest"
    assert routine.next_run_at.astimezone(UTC).hour == 23  # 08:00 in Tokyo
    # A group the member never wrote from: not theirs to post to through the bot.
    group = {
        "prompt": "y",
        "interval_seconds": 600,
        "deliver_channel": str(channel.pk),
        "deliver_target": "-100",
    }
    refused = run.call("schedule_task", **group)
    assert refused.is_error
    assert refused.content.startswith("deliver_target: a member may send"), refused.content
    explicit = stored(Run(tenant_a.agent, tenant_a.admin).call("schedule_task", **group))
    assert explicit.deliver_target == "-100"  # an admin may name any chat of the agent's bots


BAD_ARGUMENTS = [
    ({"cron": "every day"}, "cron"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"interval_seconds": 5}, "interval_seconds"),
    ({"run_at": "2001-01-01T00:00:00+00:00"}, "run_at"),
    ({"run_at": "tomorrow"}, "run_at"),
    ({"event": "message"}, "event_pattern"),
    ({"event": "message", "event_pattern": "(unclosed"}, "event_pattern"),
    ({"event": "approval_waiting"}, "event_wait_minutes"),
    ({"event": "run_failed", "event_pattern": "x"}, "event_pattern"),
    ({"event": "run_failed", "interval_seconds": 600}, "interval_seconds and event"),
    ({}, "when"),
    ({"interval_seconds": 600, "deliver_channel": "nope"}, "deliver_channel"),
    ({"interval_seconds": 600, "deliver_target": "-100"}, "deliver_target"),
    ({"interval_seconds": 600, "webhook_url": "ftp://x"}, "webhook_url"),
    ({"interval_seconds": 600, "action": "shell"}, "action"),
    ({"interval_seconds": 600, "overlap_policy": "sometimes"}, "overlap_policy"),
]


def test_a_bad_argument_names_its_field_and_stores_nothing(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    for arguments, field in BAD_ARGUMENTS:
        result = run.call("schedule_task", prompt="x", **arguments)
        assert result.is_error, arguments
        schema = field in ("action", "overlap_policy")  # refused by the tool's input schema
        named = field in result.content if schema else result.content.startswith(f"{field}: ")
        assert named, (arguments, result.content)
    assert not Routine.objects.unscoped().exists()


def test_update_changes_only_what_is_given_and_names_a_bad_field(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    routine = stored(run.call("schedule_task", prompt="Standup", cron="0 9 * * 1-5"))
    moved = run.call("update_scheduled_task", id=routine.pk, timezone="America/New_York", max_retries=5)
    assert moved.content.startswith("Updated: "), moved.content
    after = Routine.objects.unscoped().get(pk=routine.pk)
    assert (after.cron, after.timezone, after.max_retries) == ("0 9 * * 1-5", "America/New_York", 5)
    assert after.next_run_at.astimezone(UTC).hour in (13, 14)  # 09:00 in New York
    bad = run.call("update_scheduled_task", id=routine.pk, cron="61 * * * *")
    assert bad.is_error
    assert bad.content.startswith("cron:"), bad.content
    assert Routine.objects.unscoped().get(pk=routine.pk).cron == "0 9 * * 1-5"  # unchanged
    event = run.call("update_scheduled_task", id=routine.pk, event="message", event_pattern="deploy")
    assert not event.is_error, event.content
    changed = Routine.objects.unscoped().get(pk=routine.pk)
    assert (changed.trigger, changed.cron, changed.event_pattern) == ("event", "", "deploy")
    assert changed.event_cursor is not None
    pattern = run.call("update_scheduled_task", id=routine.pk, event_pattern="release")
    assert not pattern.is_error, pattern.content
    assert Routine.objects.unscoped().get(pk=routine.pk).event_pattern == "release"
    other = Run(tenant_a.agent, tenant_a.admin)  # another user's task is not theirs
    assert other.call("update_scheduled_task", id=routine.pk, max_retries=1).content.startswith("id:")
    run.call("cancel_scheduled_task", id=routine.pk)
    assert run.call("update_scheduled_task", id=routine.pk, max_retries=1).is_error


def test_history_and_run_now_through_the_chat(tenant_a):
    run = Run(tenant_a.agent, tenant_a.member)
    at = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    routine = stored(run.call("schedule_task", prompt="Dentist", run_at=at))
    assert run.call("scheduled_task_runs", id=routine.pk).content == f"Task #{routine.pk} has not run yet."
    started = run.call("run_scheduled_task", id=routine.pk)
    assert started.content.startswith("Started now: ")
    assert RoutineFire.objects.unscoped().filter(routine=routine, reason="manual").count() == 1
    now = datetime.now(UTC)
    for minutes, status, why in ((2, "ok", ""), (1, "skipped", "the previous run is still going")):
        RoutineRun.objects.unscoped().create(
            tenant=tenant_a.tenant,
            routine=routine,
            status=status,
            reason=why,
            output="Booked for 10:00" if status == "ok" else "",
            started_at=now - timedelta(minutes=minutes),
        )
    lines = run.call("scheduled_task_runs", id=routine.pk).content.splitlines()
    assert len(lines) == 2
    assert "skipped; why: the previous run is still going" in lines[0]  # newest first
    assert "ok; output: Booked for 10:00" in lines[1]
    assert run.call("scheduled_task_runs", id=routine.pk, limit=1).content.count("\n") == 0
    stranger = Run(tenant_a.agent, tenant_a.admin)
    assert stranger.call("scheduled_task_runs", id=routine.pk).is_error


def test_scheduled_from_a_chat_platform_the_output_goes_back_to_that_chat(tenant_a):
    from agents.actions.conversation import do_create_session
    from channels_app.models import ChannelConversation

    channel = channel_of(tenant_a)
    session = do_create_session(tenant_a.agent, user=tenant_a.member, title="telegram chat")
    ChannelConversation.objects.unscoped().create(
        tenant=tenant_a.tenant, session=session, channel=channel, chat_id="4242", sender_id="4242"
    )
    run = Run(tenant_a.agent, tenant_a.member, session=session)
    back = stored(run.call("schedule_task", prompt="Ping me", interval_seconds=600))
    assert (str(back.session_id), back.deliver_channel_id, back.deliver_target) == (
        str(session.pk),
        channel.pk,
        "4242",
    )
    own = stored(run.call("schedule_task", prompt="Quietly", interval_seconds=600, deliver_to="own_session"))
    assert (own.session_id, own.deliver_channel_id) == (None, None)
    web = Run(tenant_a.agent, tenant_a.member)  # a web chat: nothing but the session
    assert stored(web.call("schedule_task", prompt="Web", interval_seconds=600)).deliver_channel_id is None
