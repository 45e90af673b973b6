"""Fixtures for the chat-platform channels: local fakes of each platform (real HTTP),
channels of tenant A's live agent pointed at them, and runs executed by this
process's worker loop (``execute_run``, as a django-q2 worker does)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from channels_app.models import Channel, ChannelLink
from tests.api.conftest import _in_process_channel_layer, inline_runs  # noqa: F401  (fixtures)
from tests.fakes.chat_platforms import FakeCallback, FakeDiscord, FakeSlack, FakeTelegram, FakeWhatsApp

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake_telegram(settings: Any) -> Iterator[FakeTelegram]:
    fake = FakeTelegram(token="123:telegram-token").start()
    settings.CLAW_TELEGRAM_API_URL = fake.url
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake_slack(settings: Any) -> Iterator[FakeSlack]:
    fake = FakeSlack(token="xoxb-slack-token").start()
    settings.CLAW_SLACK_API_URL = fake.api_url
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake_callback() -> Iterator[FakeCallback]:
    fake = FakeCallback().start()
    try:
        yield fake
    finally:
        fake.stop()


def make_channel(tenant_set: Any, kind: str, **fields: Any) -> Channel:
    return Channel.objects.unscoped().create(
        tenant=tenant_set.tenant, agent=tenant_set.agent, name=f"{kind} bot", kind=kind, **fields
    )


def link(channel: Channel, platform_user_id: str, user: Any) -> ChannelLink:
    return ChannelLink.objects.unscoped().create(
        tenant_id=channel.tenant_id, channel=channel, platform_user_id=platform_user_id, user=user
    )


def inbound_url(channel: Channel) -> str:
    return f"/api/v1/channels/{channel.public_id}/inbound/"


@pytest.fixture
def fake_whatsapp(settings: Any) -> Iterator[FakeWhatsApp]:
    fake = FakeWhatsApp(token="wa-token", phone_id="1555000").start()
    settings.CLAW_WHATSAPP_API_URL = fake.url
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake_discord(settings: Any) -> Iterator[FakeDiscord]:
    fake = FakeDiscord(token="discord-token", bot_id="9000").start()
    settings.CLAW_DISCORD_API_URL = fake.api_url
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture
def fake_mail(settings: Any, monkeypatch: Any) -> Iterator[Any]:
    from channels_app.adapters.email import trust
    from tests.fakes.dkim_dns import FAKE_DKIM
    from tests.fakes.mail import FakeMailServer

    settings.CLAW_EMAIL_ALLOW_PLAINTEXT = True
    settings.CLAW_EMAIL_POLL_SECONDS = 0.2
    # DKIM keys come from the fake DNS (tests.fakes.dkim_dns), never a real one.
    monkeypatch.setattr(trust, "dns_lookup", FAKE_DKIM.lookup)
    fake = FakeMailServer(login="agent@claw.test", password="mail-password").start()
    try:
        yield fake
    finally:
        fake.stop()


@pytest.fixture(autouse=True)
def _deliveries_finished() -> Iterator[None]:
    """A test ends after the deliveries it started (notices, command answers: tasks on
    the background loop that write the outbox): one still writing while the test
    database is flushed deadlocks the flush's TRUNCATE."""
    yield
    import asyncio

    from channels_app import delivery
    from claw_platform.background_loop import submit

    async def settle() -> None:
        # Submitted after every spawn the test queued (the loop runs them in order).
        pending = list(delivery._tasks)
        if pending:
            await asyncio.wait(pending, timeout=15)

    with contextlib.suppress(TimeoutError):  # a delivery that waits for a long run: let it be
        submit(settle()).result(timeout=20)


@pytest.fixture
def caps(settings: Any, tmp_path: Any, live_agent: Any) -> Any:
    """Small caps on files read from a platform (2 kB images, 4 kB files) and a model
    that sees images; a test file may define its own."""
    from agents.models import ModelProfile

    settings.VAR_DIR = tmp_path
    settings.CLAW_CHAT_IMAGE_MAX_BYTES = 2048
    settings.CLAW_CHAT_FILE_MAX_BYTES = 4096
    ModelProfile.objects.unscoped().filter(pk=live_agent.model.pk).update(supports_vision=True)
    return settings
