"""Telegram long polling from the workers: updates fetched with getUpdates, answered
like webhook updates, the offset advanced, and one poller per bot by a lease."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from channels_app.models import Channel, InboundUpdate
from channels_app.polling import claim_lease, release_lease, run_pollers
from tests.chat_platforms.conftest import link, make_channel
from tests.chat_platforms.test_telegram import update
from tests.fakes.fake_llm import Turn as FakeTurn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def polled(live_agent: Any, fake_telegram: Any) -> Channel:
    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", receive_mode="polling")
    link(channel, "42", live_agent.member)
    return channel


def test_a_polled_update_is_answered_and_the_offset_advances(polled, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Polled and answered."))
    first = update("are you there?")
    fake_telegram.updates.append(first)
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.2)), daemon=True
    )
    thread.start()
    try:
        fake_telegram.wait_for(lambda f: any(m["text"] == "Polled and answered." for m in f.messages()))
        fake_telegram.wait_for(
            lambda f: Channel.objects.unscoped().get(pk=polled.pk).poll_offset == first["update_id"] + 1
        )
        fake_telegram.wait_for(
            lambda f: any(p["offset"] == first["update_id"] + 1 for p in f.calls_of("getUpdates"))
        )
        assert fake_telegram.calls_of("getUpdates")[0]["offset"] == 0
        assert InboundUpdate.objects.unscoped().filter(channel=polled).count() == 1
        # While worker-1 holds the lease, nobody else polls this bot.
        assert not claim_lease(polled.pk, "worker-2")
    finally:
        stop.set()
        thread.join(timeout=40)
    assert Channel.objects.unscoped().get(pk=polled.pk).poll_lease_until is None


def test_a_lapsed_lease_is_taken_over(polled):
    assert claim_lease(polled.pk, "worker-1", lease_seconds=0.2)
    assert not claim_lease(polled.pk, "worker-2")
    time.sleep(0.4)
    assert claim_lease(polled.pk, "worker-2")
    release_lease(polled.pk, "worker-1")  # not its lease any more: changes nothing
    assert Channel.objects.unscoped().get(pk=polled.pk).poll_owner == "worker-2"
    assert not claim_lease(polled.pk, "worker-1")
