"""Discord attachments: files of a ``MESSAGE_CREATE`` read from the fake CDN through
the tenant's SSRF guard within the caps on the bytes read (a declared size is not
trusted), an image reaching a vision model as an image part, a file put into the
sender's workspace, refusals said back; and files sent as ``multipart/form-data``
(``payload_json`` + ``files[0]``) with 429s retried after ``retry_after``."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest

from agents.models import Attachment, ModelProfile
from channels_app.adapters.base import Target
from channels_app.adapters.discord.adapter import MAX_UPLOAD_BYTES, DiscordAdapter, DiscordError
from channels_app.delivery import with_retries
from channels_app.models import Channel, InboundStatus, InboundUpdate
from tests.chat_platforms import test_discord
from tests.chat_platforms.test_discord import message, texts
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png
from tools_app.actions.extensions import do_allow_host
from tools_app.workspace import OPEN, workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

PNG = png()
discord = test_discord.discord  # the channel (linked sender, bot id) and a worker holding its Gateway
gateway = test_discord.gateway


@pytest.fixture
def caps(settings: Any, tmp_path: Any, live_agent: Any) -> Any:
    settings.VAR_DIR = tmp_path
    settings.CLAW_CHAT_IMAGE_MAX_BYTES = 2048
    settings.CLAW_CHAT_FILE_MAX_BYTES = 4096
    # The fake CDN is on 127.0.0.1: only the tenant's allow-list lets the guard reach it.
    do_allow_host(live_agent.tenant, "127.0.0.1", acting_user=live_agent.owner)
    ModelProfile.objects.unscoped().filter(pk=live_agent.model.pk).update(supports_vision=True)
    return settings


def model_parts(fake_llm: Any) -> list[dict[str, Any]]:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_an_image_reaches_a_vision_model_and_a_file_goes_to_the_workspace(
    caps, discord, gateway, fake_discord, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="A red square, and your notes."))
    image = fake_discord.host_file("photo.png", PNG, content_type="image/png")
    notes = fake_discord.host_file("notes.csv", b"a,b\n1,2\n", content_type="text/csv")
    fake_discord.push_message(message("what is this?", attachments=[image, notes]))
    fake_discord.wait_for(lambda f: "A red square, and your notes." in texts(f))

    parts = model_parts(fake_llm)
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in parts
    text = " ".join(p.get("text", "") for p in parts if p["type"] == "text")
    assert "what is this?" in text
    assert "uploads/notes.csv" in text  # the model is told where the file is
    kept = Attachment.objects.unscoped().filter(session__channel="discord").order_by("pk")
    assert [(a.kind, a.name, a.turn_id is not None) for a in kept] == [
        ("image", "photo.png", True),
        ("file", "notes.csv", True),
    ]
    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    assert (own / "uploads" / "notes.csv").read_bytes() == b"a,b\n1,2\n"
    # The bot token never travels to the CDN.
    assert [c["authorization"] for c in fake_discord.calls_of("cdn")] == ["", ""]
    update = InboundUpdate.objects.unscoped().get(channel=discord)
    assert [a["filename"] for a in update.payload["attachments"]] == ["photo.png", "notes.csv"]
    assert update.status == InboundStatus.ANSWERED


def test_over_the_cap_is_refused_with_a_clear_reply_on_the_bytes_read(
    caps, discord, gateway, fake_discord, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I only got your words."))
    # Declares 100 bytes, holds 9,000: read up to the cap plus one byte, then refused.
    liar = fake_discord.host_file(
        "small.png", PNG + b"\0" * 9000, content_type="image/png", declared_size=100
    )
    # Declares 50 MB: refused without a download.
    huge = fake_discord.host_file("huge.pdf", b"%PDF-1.4", declared_size=50 * 1024 * 1024)
    fake_discord.push_message(message("see attached", attachments=[liar, huge]))
    fake_discord.wait_for(lambda f: "I only got your words." in texts(f))
    notice = next(t for t in texts(fake_discord) if t.startswith("Not attached"))
    assert "small.png is larger than that; an attachment may be at most 4 KB." in notice
    assert "huge.pdf is 50 MB; an attachment may be at most 4 KB." in notice
    assert [c["id"] for c in fake_discord.calls_of("cdn")] == [liar["id"]]
    # The model hears what was left out, so it can say so.
    text = " ".join(p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text")
    assert "Not attached: small.png" in text
    assert not Attachment.objects.unscoped().filter(session__channel="discord").exists()

    # Only a refused file and no words: the notice, no run; the update keeps its metadata.
    only = fake_discord.host_file("setup.exe", b"MZ\x90\x00", content_type="application/octet-stream")
    sent = message("", attachments=[only])
    fake_discord.push_message(sent)
    fake_discord.wait_for(lambda f: any("setup.exe" in t for t in texts(f)))
    assert any("this type of file cannot be attached" in t for t in texts(fake_discord))
    update = InboundUpdate.objects.unscoped().get(platform_id=sent["id"])
    assert update.status == InboundStatus.REFUSED
    assert update.payload["attachments"][0]["filename"] == "setup.exe"
    assert update.run_id is None


def test_files_of_an_unlinked_sender_are_not_downloaded(caps, discord, gateway, fake_discord):
    stranger = message("hi", attachments=[fake_discord.host_file("a.png", PNG)])
    stranger["author"] = {"id": "777", "username": "eve"}
    fake_discord.push_message(stranger)
    fake_discord.wait_for(lambda f: any("linked members only" in t for t in texts(f)))
    assert not fake_discord.calls_of("cdn")
    assert InboundUpdate.objects.unscoped().get(platform_id=stranger["id"]).status == InboundStatus.REFUSED


def test_an_address_outside_the_allow_list_is_not_fetched(discord, fake_discord, settings, tmp_path):
    settings.VAR_DIR = tmp_path
    adapter = DiscordAdapter(Channel.objects.unscoped().get(pk=discord.pk))
    parsed = adapter.parse_message(message("hi", attachments=[fake_discord.host_file("a.png", PNG)]))
    assert parsed is not None
    fetched = asyncio.run(adapter.fetch_files(parsed))
    assert fetched.files == ()
    assert fetched.refused_files == ("a.png could not be fetched (its address is not allowed).",)
    assert not fake_discord.calls_of("cdn")


def test_a_slow_download_is_cut_at_the_messages_deadline(caps, discord, fake_discord, monkeypatch):
    # The Gateway reads its next frame only after the message is stored: the files of
    # one message get one deadline, then the rest are refused.
    monkeypatch.setattr("channels_app.attachments.DOWNLOAD_DEADLINE_SECONDS", 0.5)
    adapter = DiscordAdapter(Channel.objects.unscoped().get(pk=discord.pk))
    slow = fake_discord.host_file("slow.png", PNG, delay=3.0)
    later = fake_discord.host_file("later.png", PNG)
    parsed = adapter.parse_message(message("", attachments=[slow, later]))
    assert parsed is not None
    fetched = asyncio.run(adapter.fetch_files(parsed))
    assert fetched.files == ()
    assert fetched.refused_files == (
        "slow.png could not be fetched in time.",
        "later.png could not be fetched in time.",
    )


def test_a_file_is_sent_as_multipart_and_a_rate_limit_retried(discord, fake_discord):
    adapter = DiscordAdapter(Channel.objects.unscoped().get(pk=discord.pk))
    target = Target("555")
    fake_discord.fail("create_message", 429, retry_after=0.2)
    message_id = asyncio.run(
        with_retries(lambda: adapter.send_attachment(target, "report.csv", b"a,b\n1,2\n", "Your report"))
    )
    refused, sent = fake_discord.calls_of("!create_message"), fake_discord.calls_of("create_message")
    assert len(refused) == 1
    assert len(sent) == 1
    body = sent[0]
    assert message_id == body["_id"]
    assert body["content"] == "Your report"
    assert body["attachments"] == [{"id": 0, "filename": "report.csv"}]
    assert body["allowed_mentions"] == {"parse": []}
    assert body["_files"] == [
        {"field": "files[0]", "filename": "report.csv", "content_type": "text/csv", "content": b"a,b\n1,2\n"}
    ]

    # A caption longer than a message goes first, as text, split at 2,000 characters.
    caption = ("word " * 900).strip()
    asyncio.run(adapter.send_attachment(target, "photo.png", PNG, caption))
    after = fake_discord.calls_of("create_message")[1:]
    assert [len(b["content"]) <= 2000 for b in after] == [True, True, True, True]
    assert after[-1]["content"] == ""
    assert after[-1]["_files"][0]["content"] == PNG
    assert " ".join(b["content"] for b in after[:-1]) == caption

    with pytest.raises(DiscordError) as too_big:
        asyncio.run(adapter.send_attachment(target, "big.bin", b"\0" * (MAX_UPLOAD_BYTES + 1)))
    assert too_big.value.retryable is False
    fake_discord.fail("create_message", 403)
    with pytest.raises(DiscordError) as forbidden:
        asyncio.run(adapter.send_attachment(target, "a.txt", b"x"))
    assert forbidden.value.retryable is False
    assert json.dumps(fake_discord.calls_of("!create_message")[-1]["attachments"]) == json.dumps(
        [{"id": 0, "filename": "a.txt"}]
    )


def test_the_agent_sends_a_workspace_file_back_through_the_worker(
    caps, discord, gateway, fake_discord, fake_llm, inline_runs, live_agent
):
    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    own.mkdir(parents=True, exist_ok=True)
    (own / "report.csv").write_bytes(b"month,total\nnov,42\n")
    fake_llm.script(
        FakeTurn(tool_calls=[("send_file", {"path": "report.csv", "caption": "The report."}, "call_send")]),
        FakeTurn(text="Sent you the report."),
    )
    fake_discord.push_message(message("send me the report"))
    fake_discord.wait_for(lambda f: "Sent you the report." in texts(f))
    [upload] = [b for b in fake_discord.calls_of("create_message") if b.get("_files")]
    assert upload["content"] == "The report."
    assert upload["_files"][0]["filename"] == "report.csv"
    assert upload["_files"][0]["content"] == b"month,total\nnov,42\n"
    result = [m for m in fake_llm.requests[-1].json["messages"] if m.get("role") == "tool"][-1]
    assert result["content"] == "Sent report.csv (19 bytes) to the chat."


def test_send_file_in_a_web_chat_is_refused_with_a_reason(caps, live_agent):
    from tests.tools.helpers import Run as ToolRun

    run = ToolRun(live_agent.agent, live_agent.member)
    (run.workspace / "a.txt").write_text("x")
    web = run.call("send_file", path="a.txt")
    assert web.is_error
    assert "not on a chat platform" in web.content
