"""Telegram attachments: a ``message.photo`` (the largest size within the image cap)
and a ``message.document`` read after the webhook is answered — ``getFile`` for the
path, then ``{base}/file/bot<token>/<path>`` within the cap on the bytes read — an
image reaching a vision model as an image part, refusals said back, nothing lost."""

from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import pytest

from agents.models import Attachment
from channels_app.models import InboundStatus, InboundUpdate
from channels_app.polling import run_pollers
from tests.chat_platforms import test_telegram, test_telegram_polling
from tests.chat_platforms.test_telegram import final_texts, post, update
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png

pytestmark = pytest.mark.django_db(transaction=True)

telegram = test_telegram.telegram  # a private chat with linked sender 42
polled = test_telegram_polling.polled  # the same by long polling from a worker


def model_parts(fake_llm: Any) -> list[dict[str, Any]]:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def photo_sizes(fake: Any, *pictures: tuple[bytes, int, int | None]) -> list[dict[str, Any]]:
    """``message.photo``: one ``PhotoSize`` per (content, width, declared size)."""
    return [
        {
            **fake.host_file(content, file_path=f"photos/file_{width}.jpg", file_size=size),
            "width": width,
            "height": width,
        }
        for content, width, size in pictures
    ]


def test_the_largest_photo_within_the_cap_reaches_a_vision_model(
    caps, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="A red square."))
    medium = png(8, 8)
    sizes = photo_sizes(fake_telegram, (png(1, 1), 90, None), (medium, 320, None), (b"x" * 10, 1280, 9000))
    response = post(telegram, update("", caption="what is this?", photo=sizes))
    assert response.status_code == 200
    fake_telegram.wait_for(lambda f: "A red square." in final_texts(f))

    parts = model_parts(fake_llm)
    url = "data:image/png;base64," + base64.b64encode(medium).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in parts
    assert "what is this?" in " ".join(p.get("text", "") for p in parts if p["type"] == "text")
    # Only the chosen size was asked for and read, with the bot token in the path.
    assert [c["file_id"] for c in fake_telegram.calls_of("getFile")] == [sizes[1]["file_id"]]
    assert [c["path"] for c in fake_telegram.calls_of("file")] == ["photos/file_320.jpg"]
    kept = Attachment.objects.unscoped().get(session__channel="telegram")
    assert (kept.kind, kept.name, kept.turn_id is not None) == ("image", "photo.jpg", True)
    stored = InboundUpdate.objects.unscoped().get(channel=telegram)
    assert stored.status == InboundStatus.ANSWERED
    assert [p["file_id"] for p in stored.payload["message"]["photo"]] == [s["file_id"] for s in sizes]


def test_an_over_cap_document_is_refused_with_a_clear_reply_and_nothing_else_lost(
    caps, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I read your notes."))
    # Declares 100 bytes, holds 9,000: read up to the cap plus one byte, then refused.
    liar = fake_telegram.host_file(
        b"a,b\n" + b"1,2\n" * 2250, file_path="documents/file_1.csv", file_size=100
    )
    post(
        telegram,
        update(
            "", caption="see attached", document={**liar, "file_name": "big.csv", "mime_type": "text/csv"}
        ),
    )
    fake_telegram.wait_for(lambda f: "I read your notes." in final_texts(f))
    notice = next(t for t in final_texts(fake_telegram) if t.startswith("Not attached"))
    assert notice == "Not attached: big.csv is larger than that; an attachment may be at most 4 KB."
    text = " ".join(p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text")
    assert "see attached" in text
    assert "Not attached: big.csv" in text  # the model hears it, so it can say so

    # A document declaring 50 MB: refused without getFile; only a file, so no run.
    huge = fake_telegram.host_file(b"%PDF-1.4", file_path="documents/file_2.pdf", file_size=50 * 1024 * 1024)
    sent = update("", document={**huge, "file_name": "huge.pdf", "mime_type": "application/pdf"})
    post(telegram, sent)
    fake_telegram.wait_for(lambda f: any("huge.pdf is 50 MB" in t for t in final_texts(f)))
    assert [c["file_id"] for c in fake_telegram.calls_of("getFile")] == [liar["file_id"]]
    stored = InboundUpdate.objects.unscoped().get(platform_id=str(sent["update_id"]))
    assert stored.status == InboundStatus.REFUSED
    assert stored.run_id is None
    assert stored.payload["message"]["document"]["file_name"] == "huge.pdf"
    assert not Attachment.objects.unscoped().filter(session__channel="telegram").exists()


def test_files_of_an_unlinked_sender_are_not_fetched(caps, telegram, fake_telegram):
    sizes = photo_sizes(fake_telegram, (png(), 90, None))
    post(telegram, update("", sender=777, photo=sizes))
    fake_telegram.wait_for(lambda f: any("linked members only" in t for t in final_texts(f)))
    assert not fake_telegram.calls_of("getFile")
    assert InboundUpdate.objects.unscoped().get(channel=telegram).status == InboundStatus.REFUSED


def test_the_webhook_is_answered_before_the_files_are_read(
    caps, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Seen it."))
    sizes = photo_sizes(fake_telegram, (png(), 90, None))
    fake_telegram.files_open.clear()
    safety = threading.Timer(15, fake_telegram.files_open.set)  # a blocking ack would hang, not pass
    safety.start()
    try:
        response = post(telegram, update("", photo=sizes))
        # Answered and stored while the download still waits on the file host.
        assert response.status_code == 200
        assert not fake_telegram.files_open.is_set()
        stored = InboundUpdate.objects.unscoped().get(channel=telegram)
        assert stored.status == InboundStatus.RECEIVED
        assert not fake_telegram.calls_of("file")
        fake_telegram.files_open.set()
        fake_telegram.wait_for(lambda f: "Seen it." in final_texts(f))
    finally:
        safety.cancel()
        fake_telegram.files_open.set()
    stored.refresh_from_db()
    assert stored.status == InboundStatus.ANSWERED
    assert Attachment.objects.unscoped().filter(session__channel="telegram", kind="image").count() == 1


def test_a_polled_photo_is_read_by_the_worker(caps, polled, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Polled and seen."))
    fake_telegram.updates.append(update("", photo=photo_sizes(fake_telegram, (png(), 90, None))))
    stop = threading.Event()
    thread = threading.Thread(
        target=lambda: asyncio.run(run_pollers(stop, "worker-1", scan_seconds=0.2)), daemon=True
    )
    thread.start()
    try:
        fake_telegram.wait_for(lambda f: "Polled and seen." in final_texts(f))
    finally:
        stop.set()
        thread.join(timeout=40)
    url = "data:image/png;base64," + base64.b64encode(png()).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in model_parts(fake_llm)
    assert InboundUpdate.objects.unscoped().get(channel=polled).status == InboundStatus.ANSWERED
