"""Undelivered replies: a reply the platform kept refusing (retryable) waits as an
outbound reply and a worker's sweep sends it later, once; only the parts that did
not arrive are sent again; two sweeps never claim the same reply."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from django.utils import timezone

from channels_app.adapters.base import Target
from channels_app.models import InboundUpdate, OutboundReply, OutboundStatus
from channels_app.outbox import claim_due, create_outbound, sweep_undelivered
from channels_app.polling import run_pollers
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_slack import BOT, SECRET, event, post_json, texts
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def slack(live_agent: Any, fake_slack: Any) -> Any:
    channel = make_channel(
        live_agent, "slack", bot_token="xoxb-slack-token", signing_secret=SECRET, bot_username=BOT
    )
    link(channel, "U42", live_agent.member)
    return channel


def make_due(row: OutboundReply) -> None:
    OutboundReply.objects.unscoped().filter(pk=row.pk).update(next_attempt_at=timezone.now())


def test_a_reply_the_platform_kept_refusing_is_sent_later_by_a_workers_sweep_once(
    slack, fake_slack, fake_llm, inline_runs
):
    fake_slack.fail("chat.postMessage", 503, times=4, retry_after=0)  # more than a delivery's retries
    fake_llm.script(FakeTurn(text="Delivered at last."))
    post_json(slack, event("hello"))
    row = fake_slack.wait_for(
        lambda f: OutboundReply.objects.unscoped().filter(attempts=1, status=OutboundStatus.PENDING).first()
    )
    assert row.next_attempt_at > timezone.now()
    assert row.claimed_until is None
    assert "Delivered at last." not in texts(fake_slack)
    fake_slack.wait_for(
        lambda f: InboundUpdate.objects.unscoped().filter(detail__startswith="delivery postponed").exists()
    )

    make_due(row)
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.1, sweep_seconds=0.1)),
        daemon=True,
    )
    thread.start()
    try:
        fake_slack.wait_for(lambda f: "Delivered at last." in texts(f))
        fake_slack.wait_for(
            lambda f: OutboundReply.objects.unscoped().get(pk=row.pk).status == OutboundStatus.SENT
        )
        make_due(row)  # a sent reply is never swept again
        assert asyncio.run(sweep_undelivered()) == 0
    finally:
        stop.set()
        thread.join(timeout=30)
    assert texts(fake_slack).count("Delivered at last.") == 1


def test_only_undelivered_parts_are_sent_again_a_claim_is_held_and_a_refusal_given_up(slack, fake_slack):
    row_id = create_outbound(slack, Target("D1"), ["part one", "part two", "part three"])
    OutboundReply.objects.unscoped().filter(pk=row_id).update(
        sent_parts=1, message_ids=["1.1"], claimed_until=None, next_attempt_at=timezone.now()
    )
    assert asyncio.run(sweep_undelivered()) == 1
    assert texts(fake_slack) == ["part two", "part three"]
    row = OutboundReply.objects.unscoped().get(pk=row_id)
    assert row.status == OutboundStatus.SENT
    assert row.sent_parts == 3
    assert len(row.message_ids) == 3

    # A claim is held: by the live delivery, then by the first sweep that takes it.
    lost = create_outbound(slack, Target("D1"), ["lost"])
    assert claim_due() == []
    OutboundReply.objects.unscoped().filter(pk=lost).update(claimed_until=None)
    assert claim_due() == [lost]
    assert claim_due() == []
    # A refusal no retry can help: given up.
    OutboundReply.objects.unscoped().filter(pk=lost).update(claimed_until=None)
    fake_slack.fail("chat.postMessage", 200)  # ok: false, channel_not_found
    assert asyncio.run(sweep_undelivered()) == 0
    given_up = OutboundReply.objects.unscoped().get(pk=lost)
    assert given_up.status == OutboundStatus.FAILED
    assert "channel_not_found" in given_up.last_error
