"""Voice notes, audio, video, video messages, animations and stickers, on every
platform that has them (in each platform's wire format, against its fake): the file
read through the attachment path (caps on the bytes read, the allowed types) into
the sender's workspace, and a short text saying what it was — ``[voice note, 0:07]``
— so the model gets them; a sticker is its emoji (Telegram) or its name (Discord); a
file over the cap is named to the sender, never dropped in silence."""

from __future__ import annotations

from typing import Any

import pytest

from agents.models import Attachment
from channels_app.adapters.base import duration_text, media_label
from channels_app.models import InboundStatus, InboundUpdate
from tests.chat_platforms import test_discord, test_slack, test_telegram, test_whatsapp
from tests.chat_platforms.test_discord import message as discord_message
from tests.chat_platforms.test_discord import texts as discord_texts
from tests.chat_platforms.test_slack import event as slack_event
from tests.chat_platforms.test_slack import post_json
from tests.chat_platforms.test_slack import texts as slack_texts
from tests.chat_platforms.test_telegram import final_texts, post, update
from tests.chat_platforms.test_whatsapp import bodies, notification
from tests.chat_platforms.test_whatsapp import post as wa_post
from tests.chat_platforms.test_whatsapp_attachments import media_message
from tests.fakes.fake_llm import Turn as FakeTurn
from tools_app.actions.extensions import do_allow_host
from tools_app.workspace import OPEN, workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

telegram = test_telegram.telegram  # linked sender 42
whatsapp = test_whatsapp.whatsapp  # linked sender 4915550001
discord = test_discord.discord  # linked sender, and a worker holding its Gateway
gateway = test_discord.gateway
slack = test_slack.slack  # direct messages from linked user U42

OGG = b"OggS\x00\x02" + b"\x01" * 200  # a voice note's first bytes (Ogg/Opus)
MP4 = b"\x00\x00\x00\x18ftypmp42" + b"\x02" * 200
WEBP = b"RIFF\x24\x00\x00\x00WEBPVP8 " + b"\x03" * 28


def said(fake_llm: Any) -> str:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return str(content)


def images(fake_llm: Any) -> int:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    return sum(1 for p in content if p.get("type") == "image_url") if isinstance(content, list) else 0


def uploads(live_agent: Any) -> Any:
    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    return own / "uploads"


def test_labels_say_the_kind_and_length():
    assert media_label("voice note", 7) == "[voice note, 0:07]"
    assert media_label("audio", 205.4, "Nina - Song") == "[audio: Nina - Song, 3:25]"
    assert media_label("sticker", detail="👍") == "[sticker: 👍]"
    assert media_label("sticker", detail="[x]\n\x00") == "[sticker: x]"  # no label forged inside a label
    assert media_label("video", True) == "[video]"
    assert duration_text(3723) == "1:02:03"


# ------------------------------------------------------------------ Telegram


def test_a_telegram_voice_note_reaches_the_model_as_a_file_with_its_length(
    caps, telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="I have your voice note."))
    voice = {
        **fake_telegram.host_file(OGG, file_path="voice/file_1.oga"),
        "duration": 7,
        "mime_type": "audio/ogg",
    }
    assert post(telegram, update("", voice=voice)).status_code == 200
    fake_telegram.wait_for(lambda f: "I have your voice note." in final_texts(f))
    text = said(fake_llm)
    assert text.startswith("[voice note, 0:07]")
    assert "uploads/voice-note.ogg" in text
    assert (uploads(live_agent) / "voice-note.ogg").read_bytes() == OGG
    stored = InboundUpdate.objects.unscoped().get(channel=telegram)
    assert (stored.status, stored.detail, stored.text) == (
        InboundStatus.ANSWERED,
        "1 attached",
        "[voice note, 0:07]",
    )


def test_telegram_audio_video_message_and_animation_are_files_with_what_they_were(
    caps, telegram, fake_telegram, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="A song."), FakeTurn(text="A round video."), FakeTurn(text="A GIF."))
    audio = {
        **fake_telegram.host_file(MP4, file_path="music/file_2.m4a"),
        "duration": 205,
        "performer": "Nina",
        "title": "Song",
        "file_name": "song.m4a",
        "mime_type": "audio/mp4",
    }
    post(telegram, update("", audio=audio, caption="what is this song?"))
    fake_telegram.wait_for(lambda f: "A song." in final_texts(f))
    assert said(fake_llm).startswith("[audio: Nina - Song, 3:25]\nwhat is this song?")
    assert "uploads/song.m4a" in said(fake_llm)

    note = {**fake_telegram.host_file(MP4, file_path="video_notes/file_3.mp4"), "duration": 5, "length": 240}
    post(telegram, update("", video_note=note))
    fake_telegram.wait_for(lambda f: "A round video." in final_texts(f))
    assert said(fake_llm).startswith("[video message, 0:05]")
    assert "uploads/video-message.mp4" in said(fake_llm)

    # An animation comes with a document of the same file: read once.
    gif = {**fake_telegram.host_file(MP4, file_path="animations/file_4.mp4"), "duration": 3}
    gif["file_name"] = "dance.mp4"
    post(telegram, update("", animation=gif, document=dict(gif)))
    fake_telegram.wait_for(lambda f: "A GIF." in final_texts(f))
    assert said(fake_llm).startswith("[animation, 0:03]")
    assert [c["file_id"] for c in fake_telegram.calls_of("getFile")][-1:] == [gif["file_id"]]
    assert len(fake_telegram.calls_of("getFile")) == 3
    assert sorted(a.name for a in Attachment.objects.unscoped().filter(session__channel="telegram")) == [
        "dance.mp4",
        "song.m4a",
        "video-message.mp4",
    ]


def test_a_telegram_sticker_is_its_emoji(telegram, fake_telegram, fake_llm, inline_runs):
    fake_llm.script(FakeTurn(text="Thumbs up to you too."))
    sticker = {"file_id": "CAACsticker", "file_unique_id": "u1", "emoji": "👍", "is_animated": True}
    post(telegram, update("", sticker=sticker))
    fake_telegram.wait_for(lambda f: "Thumbs up to you too." in final_texts(f))
    assert said(fake_llm) == "[sticker: 👍]"
    assert not fake_telegram.calls_of("getFile")


def test_a_telegram_video_over_the_cap_is_named_to_the_sender_and_the_model(
    caps, telegram, fake_telegram, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I could not watch it."))
    video = {**fake_telegram.host_file(MP4 * 40, file_path="videos/file_5.mp4"), "duration": 12}
    post(telegram, update("", video=video, caption="look"))
    fake_telegram.wait_for(lambda f: "I could not watch it." in final_texts(f))
    notice = next(t for t in final_texts(fake_telegram) if t.startswith("Not attached"))
    assert "video.mp4 is 8.3 KB; an attachment may be at most 4 KB." in notice
    assert said(fake_llm).startswith("[video, 0:12]\nlook")
    assert "Not attached: video.mp4" in said(fake_llm)


# ------------------------------------------------------------------ WhatsApp


def test_a_whatsapp_voice_note_video_and_sticker_are_taken(
    caps, whatsapp, fake_whatsapp, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="Heard you."), FakeTurn(text="Saw it."), FakeTurn(text="Nice sticker."))
    voice = fake_whatsapp.host_media(OGG, "audio/ogg")
    wa_post(
        whatsapp, notification(media_message("audio", voice, mime_type="audio/ogg; codecs=opus", voice=True))
    )
    fake_whatsapp.wait_for(lambda f: "Heard you." in bodies(f))
    assert said(fake_llm).startswith("[voice note]")
    assert "uploads/voice-note.oga" in said(fake_llm)
    assert (uploads(live_agent) / "voice-note.oga").read_bytes() == OGG

    video = fake_whatsapp.host_media(MP4, "video/mp4")
    wa_post(whatsapp, notification(media_message("video", video, mime_type="video/mp4", caption="see")))
    fake_whatsapp.wait_for(lambda f: "Saw it." in bodies(f))
    assert said(fake_llm).startswith("[video]\nsee")
    assert "uploads/video.mp4" in said(fake_llm)

    sticker = fake_whatsapp.host_media(WEBP, "image/webp")
    wa_post(whatsapp, notification(media_message("sticker", sticker, mime_type="image/webp", animated=False)))
    fake_whatsapp.wait_for(lambda f: "Nice sticker." in bodies(f))
    assert said(fake_llm).startswith("[sticker]")
    assert images(fake_llm) == 1  # a sticker is an image the model sees


# ------------------------------------------------------------------ Discord


@pytest.fixture
def cdn_allowed(live_agent: Any) -> None:
    # The fake CDN is on 127.0.0.1: only the tenant's allow-list lets the guard reach it.
    do_allow_host(live_agent.tenant, "127.0.0.1", acting_user=live_agent.owner)


def test_a_discord_voice_message_and_a_sticker_say_what_they_were(
    caps, cdn_allowed, discord, gateway, fake_discord, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="Voice received."), FakeTurn(text="Waving back."))
    clip = fake_discord.host_file("voice-message.ogg", OGG, content_type="audio/ogg")
    clip["duration_secs"] = 3.4
    fake_discord.push_message(discord_message("", attachments=[clip], flags=1 << 13))
    fake_discord.wait_for(lambda f: "Voice received." in discord_texts(f))
    assert said(fake_llm).startswith("[voice note, 0:03]")
    assert "uploads/voice-message.ogg" in said(fake_llm)

    fake_discord.push_message(
        discord_message("", sticker_items=[{"id": "1", "name": "Wave", "format_type": 1}])
    )
    fake_discord.wait_for(lambda f: "Waving back." in discord_texts(f))
    assert said(fake_llm) == "[sticker: Wave]"

    poll = {"question": {"text": "Lunch?"}, "answers": [{"answer_id": 1, "poll_media": {"text": "yes"}}]}
    fake_discord.push_message(discord_message("", poll=poll))
    fake_discord.wait_for(lambda f: any("cannot take a poll" in t for t in discord_texts(f)))
    assert len(fake_llm.requests) == 2


# ------------------------------------------------------------------ Slack


def test_a_slack_voice_clip_says_what_it_was(caps, slack, fake_slack, fake_llm, inline_runs, live_agent):
    fake_llm.script(FakeTurn(text="Clip received."))
    clip = fake_slack.host_file("audio_message.m4a", MP4, mimetype="audio/mp4")
    clip.update(
        subtype="slack_audio",
        duration_ms=5200,
        transcription={"status": "complete", "preview": {"content": "call me back", "has_more": False}},
    )
    body = slack_event("")
    body["event"].update(subtype="file_share", files=[clip], upload=True)
    assert post_json(slack, body).status_code == 200
    fake_slack.wait_for(lambda f: "Clip received." in slack_texts(f))
    assert said(fake_llm).startswith("[voice note, 0:05] (Slack's transcript: call me back)")
    assert "uploads/audio_message.m4a" in said(fake_llm)


# ------------------------------------------------------------------ what cannot be taken


def test_a_kind_the_agent_cannot_take_is_answered_with_a_clear_reply(
    telegram, fake_telegram, whatsapp, fake_whatsapp, fake_llm, inline_runs
):
    post(telegram, update("", location={"latitude": 52.52, "longitude": 13.405}))
    fake_telegram.wait_for(lambda f: any("cannot take a location" in t for t in final_texts(f)))
    stored = InboundUpdate.objects.unscoped().get(channel=telegram)
    assert (stored.status, stored.detail) == (InboundStatus.REFUSED, "not supported: a location")

    poll = {"from": "4915550001", "id": "wamid.poll1", "timestamp": "1700000000", "type": "unsupported"}
    wa_post(whatsapp, notification(poll))
    fake_whatsapp.wait_for(lambda f: any("cannot take this kind of message" in b for b in bodies(f)))

    # In a group, one not addressed to the bot stays unanswered, as any message does;
    # a service message (someone joined) is nothing to answer.
    post(telegram, update("", group=True, location={"latitude": 1.0, "longitude": 2.0}))
    post(telegram, update("", group=True, new_chat_members=[{"id": 7, "is_bot": False, "first_name": "Bo"}]))
    group = InboundUpdate.objects.unscoped().filter(channel=telegram, chat_id="-100")
    assert [u.status for u in group] == [InboundStatus.IGNORED]
    assert len([t for t in final_texts(fake_telegram) if "cannot take" in t]) == 1
    assert not fake_llm.requests
