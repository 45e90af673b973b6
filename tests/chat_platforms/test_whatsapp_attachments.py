"""WhatsApp attachments: an ``image`` / ``document`` message's media id looked up
(``GET {base}/<media id>`` for its URL) and read with the token after the webhook is
answered, within the cap on the bytes read and checked against its ``sha256``; an
image reaching a vision model as an image part, refusals said back, nothing lost."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest

from agents.models import Attachment
from channels_app.models import InboundStatus, InboundUpdate
from tests.chat_platforms import test_whatsapp
from tests.chat_platforms.test_whatsapp import bodies, notification, post
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png
from tools_app.workspace import OPEN, workspace_path

pytestmark = pytest.mark.django_db(transaction=True)

whatsapp = test_whatsapp.whatsapp  # linked sender 4915550001

PNG = png()
_ids = itertools.count(1)


def media_message(kind: str, media_id: str, *, sender: str = "4915550001", **fields: Any) -> dict[str, Any]:
    return {
        "from": sender,
        "id": f"wamid.media{next(_ids)}",
        "timestamp": "1700000000",
        "type": kind,
        kind: {"id": media_id, "sha256": "as-sent", **fields},
    }


def model_parts(fake_llm: Any) -> list[dict[str, Any]]:
    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    return content if isinstance(content, list) else [{"type": "text", "text": content}]


def test_an_image_reaches_a_vision_model_and_a_document_goes_to_the_workspace(
    caps, whatsapp, fake_whatsapp, fake_llm, inline_runs, live_agent
):
    fake_llm.script(FakeTurn(text="A red square."), FakeTurn(text="Got your notes."))
    image = fake_whatsapp.host_media(PNG, "image/png")
    assert (
        post(
            whatsapp,
            notification(media_message("image", image, caption="what is this?", mime_type="image/png")),
        ).status_code
        == 200
    )
    fake_whatsapp.wait_for(lambda f: "A red square." in bodies(f))
    parts = model_parts(fake_llm)
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in parts
    assert "what is this?" in " ".join(p.get("text", "") for p in parts if p["type"] == "text")
    # The media object, then its URL, each with the token.
    assert [c["id"] for c in fake_whatsapp.calls_of("media")] == [image]
    assert [c["authorization"] for c in fake_whatsapp.calls_of("download")] == ["Bearer wa-token"]

    notes = fake_whatsapp.host_media(b"a,b\n1,2\n", "text/csv")
    post(whatsapp, notification(media_message("document", notes, filename="notes.csv", mime_type="text/csv")))
    fake_whatsapp.wait_for(lambda f: "Got your notes." in bodies(f))
    assert "uploads/notes.csv" in " ".join(
        p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text"
    )
    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    assert (own / "uploads" / "notes.csv").read_bytes() == b"a,b\n1,2\n"
    kept = Attachment.objects.unscoped().filter(session__channel="whatsapp").order_by("pk")
    assert [(a.kind, a.name, a.turn_id is not None) for a in kept] == [
        ("image", "image.png", True),
        ("file", "notes.csv", True),
    ]
    stored = InboundUpdate.objects.unscoped().filter(channel=whatsapp).order_by("pk")
    assert [u.status for u in stored] == [InboundStatus.ANSWERED] * 2
    assert stored[0].payload["image"]["id"] == image


def test_over_the_cap_is_refused_with_a_clear_reply_and_nothing_else_lost(
    caps, whatsapp, fake_whatsapp, fake_llm, inline_runs
):
    fake_llm.script(FakeTurn(text="I only got your words."))
    # Says 100 bytes, holds 9,000: read up to the cap plus one byte, then refused.
    liar = fake_whatsapp.host_media(b"a,b\n" + b"1,2\n" * 2250, "text/csv", file_size=100)
    post(whatsapp, notification(media_message("document", liar, filename="big.csv", caption="see attached")))
    fake_whatsapp.wait_for(lambda f: "I only got your words." in bodies(f))
    assert "Not attached: big.csv is larger than that; an attachment may be at most 4 KB." in bodies(
        fake_whatsapp
    )
    text = " ".join(p.get("text", "") for p in model_parts(fake_llm) if p["type"] == "text")
    assert "see attached" in text
    assert "Not attached: big.csv" in text

    # 50 MB by its media object: refused without a download; only a file, so no run.
    huge = fake_whatsapp.host_media(PNG, "image/png", file_size=50 * 1024 * 1024)
    sent = media_message("image", huge, mime_type="image/png")
    post(whatsapp, notification(sent))
    fake_whatsapp.wait_for(lambda f: any("image.png is larger than that" in b for b in bodies(f)))
    # Bytes that do not match the media object's sha256: refused.
    forged = fake_whatsapp.host_media(PNG, "image/png", sha256="0" * 64)
    post(whatsapp, notification(media_message("image", forged, mime_type="image/png")))
    fake_whatsapp.wait_for(lambda f: any("checksum does not match" in b for b in bodies(f)))
    assert [c["id"] for c in fake_whatsapp.calls_of("download")] == [liar, forged]
    stored = InboundUpdate.objects.unscoped().get(platform_id=sent["id"])
    assert stored.status == InboundStatus.REFUSED
    assert stored.run_id is None
    assert stored.payload["image"]["id"] == huge
    assert not Attachment.objects.unscoped().filter(session__channel="whatsapp").exists()


def test_files_of_an_unlinked_sender_are_not_fetched(caps, whatsapp, fake_whatsapp):
    image = fake_whatsapp.host_media(PNG, "image/png")
    post(whatsapp, notification(media_message("image", image, sender="4915559999", mime_type="image/png")))
    fake_whatsapp.wait_for(lambda f: any("linked members only" in b for b in bodies(f)))
    assert not fake_whatsapp.calls_of("media")
    assert InboundUpdate.objects.unscoped().get(channel=whatsapp).status == InboundStatus.REFUSED
