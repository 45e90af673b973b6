"""Slack attachments: a ``message`` event's ``files`` (subtype ``file_share``) read
from ``url_private_download`` with the bot token as a bearer after the event is
acknowledged, within the cap on the bytes read (a declared ``size`` is not trusted),
an image reaching a vision model as an image part, refusals said back, nothing lost."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from agents.models import Attachment
from channels_app.models import InboundStatus, InboundUpdate
from tests.chat_platforms import test_slack, test_slack_socket_mode
from tests.chat_platforms.test_slack import event, post_json, texts
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png
from tools_app.workspace import OPEN, workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

slack = test_slack.slack  # direct messages from linked user U42
socket_slack = test_slack_socket_mode.socket_slack  # the same over Socket Mode, from a worker
worker = test_slack_socket_mode.worker

PNG = png()


def shared(text: str, files: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    body = event(text, **kw)
    body["event"].update(subtype="file_share", files=files, upload=True)
    return body


def model_parts(fake_llm: Any) -> list[dict[str, Any]]:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_an_image_reaches_a_vision_model_and_a_file_goes_to_the_workspace(
    caps, slack, fake_slack, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="A red square, and your notes."))
    image = fake_slack.host_file("photo.png", PNG, mimetype="image/png")
    notes = fake_slack.host_file("notes.csv", b"a,b\n1,2\n", mimetype="text/csv")
    assert post_json(slack, shared("what is this?", [image, notes])).status_code == 200
    fake_slack.wait_for(lambda f: "A red square, and your notes." in texts(f))

    parts = model_parts(fake_llm)
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in parts
    text = " ".join(p.get("text", "") for p in parts if p["type"] == "text")
    assert "what is this?" in text
    assert "uploads/notes.csv" in text
    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    assert (own / "uploads" / "notes.csv").read_bytes() == b"a,b\n1,2\n"
    # Read with the bot token as a bearer, from url_private_download.
    assert [c["authorization"] for c in fake_slack.calls_of("file")] == ["Bearer xoxb-slack-token"] * 2
    assert all("/download/" in c["path"] for c in fake_slack.calls_of("file"))
    stored = InboundUpdate.objects.unscoped().get(channel=slack)
    assert stored.status == InboundStatus.ANSWERED
    assert [f["name"] for f in stored.payload["event"]["files"]] == ["photo.png", "notes.csv"]
    kept = Attachment.objects.unscoped().filter(session__channel="slack").order_by("pk")
    assert [(a.kind, a.name, a.turn_id is not None) for a in kept] == [
        ("image", "photo.png", True),
        ("file", "notes.csv", True),
    ]


def test_over_the_cap_is_refused_with_a_clear_reply_and_nothing_else_lost(
    caps, slack, fake_slack, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I only got your words."))
    liar = fake_slack.host_file("small.png", PNG + b"\0" * 9000, mimetype="image/png", size=100)
    huge = fake_slack.host_file("huge.pdf", b"%PDF-1.4", mimetype="application/pdf", size=50 * 1024 * 1024)
    # A file URL elsewhere than Slack's file host: the token is not sent there.
    elsewhere = {**fake_slack.host_file("x.png", PNG), "url_private_download": "http://127.0.0.2:9/x.png"}
    post_json(slack, shared("see attached", [liar, huge, elsewhere]))
    fake_slack.wait_for(lambda f: "I only got your words." in texts(f))
    notice = next(t for t in texts(fake_slack) if t.startswith("Not attached"))
    assert notice == (
        "Not attached: small.png is larger than that; an attachment may be at most 4 KB. "
        "huge.pdf is 50 MB; an attachment may be at most 4 KB. "
        "x.png could not be fetched (not on Slack's file host)."
    )
    assert [c["path"].rsplit("/", 1)[-1] for c in fake_slack.calls_of("file")] == ["small.png"]
    text = " ".join(p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text")
    assert "see attached" in text
    assert "Not attached: small.png" in text
    assert not Attachment.objects.unscoped().filter(session__channel="slack").exists()

    # Only a refused file and no words: the notice, no run; the update keeps its metadata.
    only = fake_slack.host_file("setup.exe", b"MZ\x90\x00")
    sent = shared("", [only])
    post_json(slack, sent)
    fake_slack.wait_for(lambda f: any("setup.exe" in t for t in texts(f)))
    stored = InboundUpdate.objects.unscoped().get(platform_id=f"D1:{sent['event']['ts']}")
    assert stored.status == InboundStatus.REFUSED
    assert stored.run_id is None
    assert stored.payload["event"]["files"][0]["name"] == "setup.exe"


def test_files_of_a_message_the_bot_does_not_answer_are_not_fetched(caps, slack, fake_slack):
    image = fake_slack.host_file("a.png", PNG)
    # In a channel without a mention: stored and ignored.
    post_json(slack, shared("among ourselves", [image], channel_type="channel", channel="C1"))
    stranger = shared("hi", [image])
    stranger["event"]["user"] = "U777"
    post_json(slack, stranger)
    fake_slack.wait_for(lambda f: any("linked members only" in t for t in texts(f)))
    assert not fake_slack.calls_of("file")
    statuses = sorted(InboundUpdate.objects.unscoped().filter(channel=slack).values_list("status", flat=True))
    assert statuses == [InboundStatus.IGNORED, InboundStatus.REFUSED]


def test_files_over_socket_mode_are_read_after_the_envelope_is_acknowledged(
    caps, socket_slack, worker, fake_slack, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="Seen over the socket."))
    image = fake_slack.host_file("photo.png", PNG, mimetype="image/png")
    envelope = fake_slack.push_envelope("events_api", shared("and this?", [image]))
    fake_slack.wait_for(lambda f: "Seen over the socket." in texts(f))
    assert envelope in fake_slack.acks
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in model_parts(fake_llm)
    assert [c["authorization"] for c in fake_slack.calls_of("file")] == ["Bearer xoxb-slack-token"]
