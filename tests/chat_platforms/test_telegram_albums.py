"""Telegram albums: the photos of one media group come as separate updates (one
``media_group_id``); each is stored before it is acknowledged, and the group is
answered as one message — one run, every photo, the caption — once no part has come
for the settle window. After a crash the recovery sweep gathers the stored parts the
same way, and however many gatherings race, the album is answered once."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest

from agents.models import Attachment, Run
from channels_app.adapters.base import InboundMessage
from channels_app.models import InboundStatus, InboundUpdate
from channels_app.receive import dispatch_group
from tests.chat_platforms import test_inbound_recovery, test_telegram
from tests.chat_platforms.test_inbound_recovery import crashed, sweep
from tests.chat_platforms.test_telegram import final_texts, post, update
from tests.chat_platforms.test_telegram_attachments import model_parts, photo_sizes
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png

pytestmark = pytest.mark.django_db(transaction=True)

telegram = test_telegram.telegram  # a private chat with linked sender 42
assert test_inbound_recovery.crashed is crashed
_groups = itertools.count(1)


@pytest.fixture
def settle(settings: Any) -> Any:
    settings.CLAW_INBOUND_GROUP_SETTLE_MS = 300
    return settings


def album(fake: Any, count: int, caption: str, **where: Any) -> list[dict[str, Any]]:
    """The updates of one album of ``count`` photos, the caption on the first (as
    Telegram sends them: one update per photo, the same ``media_group_id``)."""
    group = f"1337{next(_groups)}"
    updates = []
    for n in range(count):
        sizes = photo_sizes(fake, (png(n + 2, n + 2), 90, None))
        extra = {"caption": caption} if n == 0 and caption else {}
        updates.append(update("", photo=sizes, media_group_id=group, **extra, **where))
    return updates


def images(fake_llm: Any) -> int:
    return sum(1 for p in model_parts(fake_llm) if p["type"] == "image_url")


def words(fake_llm: Any) -> str:
    return " ".join(p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text")


def rows(*bodies: dict[str, Any]) -> list[InboundUpdate]:
    ids = [str(b["update_id"]) for b in bodies]
    return list(InboundUpdate.objects.unscoped().filter(platform_id__in=ids).order_by("pk"))


def test_an_album_is_answered_once_with_every_photo_and_its_caption(
    caps, settle, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Three small squares."))
    parts = album(fake_telegram, 3, "what are these?")
    for body in parts:
        assert post(telegram, body).status_code == 200
    fake_telegram.wait_for(lambda f: "Three small squares." in final_texts(f))

    assert len(fake_llm.requests) == 1
    assert images(fake_llm) == 3
    assert "what are these?" in words(fake_llm)
    assert Run.objects.unscoped().filter(session__channel="telegram").count() == 1
    assert Attachment.objects.unscoped().filter(session__channel="telegram", turn__isnull=False).count() == 3
    stored = rows(*parts)
    assert {r.status for r in stored} == {InboundStatus.ANSWERED}
    assert len({r.run_id for r in stored}) == 1
    assert stored[0].detail == "3 attached"
    assert stored[1].detail == f"one message with update {stored[0].platform_id}"
    assert len(fake_telegram.calls_of("sendMessage")) == 1


def test_an_album_over_the_per_message_cap_names_the_photos_left_out(
    caps, settle, telegram, fake_telegram, fake_llm, inline_runs
):
    caps.CLAW_CHAT_ATTACHMENTS_PER_MESSAGE = 2
    fake_llm.script(FakeTurn(text="Two of three."))
    for body in album(fake_telegram, 3, "all three"):
        post(telegram, body)
    fake_telegram.wait_for(lambda f: "Two of three." in final_texts(f))
    assert images(fake_llm) == 2
    notice = next(t for t in final_texts(fake_telegram) if t.startswith("Not attached"))
    assert notice == "Not attached: At most 2 attachments go with one message; not attached: photo-3.jpg."
    assert "not attached: photo-3.jpg" in words(fake_llm)
    assert sorted(a.name for a in Attachment.objects.unscoped().filter(session__channel="telegram")) == [
        "photo-1.jpg",
        "photo-2.jpg",
    ]


def test_in_a_group_an_album_mentioning_the_bot_once_is_answered_once(
    caps, settle, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Two pictures."), FakeTurn(text="And a question."))
    parts = album(fake_telegram, 2, "@claw_bot compare these", chat=-100, group=True)
    for body in parts:
        post(telegram, body)
    fake_telegram.wait_for(lambda f: "Two pictures." in final_texts(f))
    assert images(fake_llm) == 2
    assert "compare these" in words(fake_llm)
    assert {r.status for r in rows(*parts)} == {InboundStatus.ANSWERED}
    # A message after the album is its own.
    post(telegram, update("@claw_bot which is larger?", group=True))
    fake_telegram.wait_for(lambda f: "And a question." in final_texts(f))
    assert len(fake_llm.requests) == 2
    assert Run.objects.unscoped().filter(session__channel="telegram").count() == 2


def test_a_polled_album_is_one_message(caps, settle, live_agent, fake_telegram, fake_llm, inline_runs):
    from channels_app.polling import run_pollers
    from tests.chat_platforms.conftest import link, make_channel

    channel = make_channel(live_agent, "telegram", bot_token="123:telegram-token", receive_mode="polling")
    link(channel, "42", live_agent.member)
    fake_llm.script(FakeTurn(text="Polled album."))
    parts = album(fake_telegram, 3, "by polling")
    fake_telegram.updates.extend(parts)  # one getUpdates batch
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.2)), daemon=True
    )
    thread.start()
    try:
        fake_telegram.wait_for(lambda f: "Polled album." in final_texts(f))
    finally:
        stop.set()
        thread.join(timeout=40)
    assert len(fake_llm.requests) == 1
    assert images(fake_llm) == 3
    assert {r.status for r in rows(*parts)} == {InboundStatus.ANSWERED}


def test_a_crashed_album_is_gathered_by_the_sweep_once(caps, telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Recovered album."))
    parts = album(fake_telegram, 3, "after the crash")
    stored = [crashed(telegram, body) for body in parts]
    assert all(s.group_id == parts[0]["message"]["media_group_id"] for s in stored)
    assert sweep() == 1
    fake_telegram.wait_for(lambda f: "Recovered album." in final_texts(f))
    assert sweep() == 0
    assert len(fake_llm.requests) == 1
    assert images(fake_llm) == 3
    assert "after the crash" in words(fake_llm)
    assert {r.status for r in rows(*parts)} == {InboundStatus.ANSWERED}
    assert Run.objects.unscoped().filter(session__channel="telegram").count() == 1


def test_racing_gatherings_answer_an_album_once(caps, telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Only once."))
    parts = album(fake_telegram, 2, "race")
    stored = [crashed(telegram, body) for body in parts]

    async def both() -> list[Any]:
        return await asyncio.gather(
            dispatch_group(telegram, stored[0], newest_only=False),
            dispatch_group(telegram, stored[1], newest_only=False),
        )

    results = asyncio.run(both())
    assert sum(r is not None for r in results) == 1
    fake_telegram.wait_for(lambda f: "Only once." in final_texts(f))
    assert len(fake_llm.requests) == 1
    assert Run.objects.unscoped().filter(session__channel="telegram").count() == 1


def test_parts_combine_into_one_message_in_the_order_they_came(telegram):
    from channels_app.adapters import adapter_for

    adapter = adapter_for(telegram)
    first = InboundMessage("1", "-100", "42", "", is_private=False, raw={"update_id": 1}, group_id="g")
    second = InboundMessage(
        "2", "-100", "42", "look", is_private=False, addressed=True, raw={"update_id": 2}, group_id="g"
    )
    combined = adapter.combine([first, second])
    assert (combined.platform_id, combined.text, combined.addressed) == ("1", "look", True)
    assert [p["update_id"] for p in combined.raw["group"]] == [1, 2]


def test_an_album_whose_stored_parts_cannot_be_read_is_marked_failed_once(
    telegram, fake_telegram, fake_llm, inline_runs
):
    from datetime import timedelta

    from django.utils import timezone

    broken = [
        InboundUpdate.objects.unscoped().create(
            tenant_id=telegram.tenant_id,
            channel=telegram,
            platform_id=str(900 + n),
            chat_id="42",
            sender_id="42",
            group_id="lost-album",
            payload={"update_id": 900 + n},  # the message itself is missing
        )
        for n in range(2)
    ]
    InboundUpdate.objects.unscoped().update(received_at=timezone.now() - timedelta(minutes=5))
    assert sweep() == 0
    assert sweep() == 0
    found = InboundUpdate.objects.unscoped().filter(pk__in=[b.pk for b in broken])
    assert {(u.status, u.detail) for u in found} == {(InboundStatus.FAILED, "could not be restored")}
    assert not fake_llm.requests
