"""Email attachments: the MIME tree of an inbound mail read part by part (files of a
``multipart/mixed``, inline images, a forwarded ``message/rfc822``; RFC 2231 and
RFC 2047 file names; caps on decoded bytes, each and together), an image reaching a
vision model through the worker, refusals answered by mail; and a reply carrying a
file as ``multipart/mixed`` with its long text kept whole as the body."""

from __future__ import annotations

import asyncio
import base64
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from typing import Any

import pytest

from agents.models import Attachment, ModelProfile
from channels_app.adapters.base import Target
from channels_app.adapters.email.adapter import EmailAdapter, EmailError
from channels_app.models import Channel, InboundUpdate
from tests.chat_platforms import test_email
from tests.chat_platforms.test_email import BOT, USER, bodies, mail
from tests.fakes.fake_llm import Turn as FakeTurn
from tests.ui.test_pickers_and_attachments import png

pytestmark = pytest.mark.django_db(transaction=True)

PNG = png()
mailbox = test_email.mailbox  # the channel (linked sender, the fake's servers allowed)
worker = test_email.worker  # a worker's pollers, holding the mailbox


@pytest.fixture
def caps(settings: Any, tmp_path: Any) -> Any:
    settings.VAR_DIR = tmp_path
    settings.CLAW_CHAT_IMAGE_MAX_BYTES = 2048
    settings.CLAW_CHAT_FILE_MAX_BYTES = 4096
    settings.CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES = 6000
    return settings


def b64(data: bytes) -> str:
    return base64.encodebytes(data).decode()


# A mail as a client sends it, byte for byte: a text/html alternative, an inline
# image by Content-ID, a file named per RFC 2231 and one per RFC 2047, a forwarded
# mail with a file of its own, a part over the cap, a signature.
RAW = f"""From: Ada <{USER}>
To: {BOT}
Subject: Files for you
Message-ID: <files-1@example.test>
MIME-Version: 1.0
Content-Type: multipart/mixed; boundary="outer"

--outer
Content-Type: multipart/related; boundary="rel"

--rel
Content-Type: multipart/alternative; boundary="alt"

--alt
Content-Type: text/plain; charset=utf-8

Please look at these.
--alt
Content-Type: text/html; charset=utf-8

<p>Please look at these. <img src="cid:logo@x"></p>
--alt--
--rel
Content-Type: image/png
Content-Transfer-Encoding: base64
Content-ID: <logo@x>
Content-Disposition: inline

{b64(PNG)}--rel--
--outer
Content-Type: application/pdf
Content-Transfer-Encoding: base64
Content-Disposition: attachment; filename*=UTF-8''R%C3%A9sum%C3%A9%202026.pdf

{b64(b"%PDF-1.4 tiny")}
--outer
Content-Type: text/csv; name="=?UTF-8?B?w6l0w6kgcmF0ZXMuY3N2?="
Content-Disposition: attachment; filename="=?UTF-8?B?w6l0w6kgcmF0ZXMuY3N2?="

a,b
1,2
--outer
Content-Type: message/rfc822
Content-Disposition: attachment

From: Grace <grace@example.test>
Subject: The numbers
Content-Type: multipart/mixed; boundary="fwd"

--fwd
Content-Type: text/plain

The forwarded words.
--fwd
Content-Type: text/plain
Content-Disposition: attachment; filename="notes.txt"

forwarded notes
--fwd--

--outer
Content-Type: application/octet-stream
Content-Transfer-Encoding: base64
Content-Disposition: attachment; filename="big.log"

{b64(b"x" * 5000)}
--outer
Content-Type: application/pgp-signature; name="signature.asc"

-----BEGIN PGP SIGNATURE-----
--outer--
""".replace("\n", "\r\n").encode()


def test_the_mime_tree_is_read_part_by_part_with_decoded_names_and_caps(caps, live_agent):
    channel = Channel(tenant_id=live_agent.tenant.pk, account_id=BOT, name="mail")
    message = EmailAdapter(channel).parse_mail(7, RAW)
    assert message is not None
    assert message.text.startswith("Please look at these.")
    assert "Forwarded message" in message.text
    assert "From: Grace <grace@example.test>" in message.text
    assert "The forwarded words." in message.text
    assert [(f.name, f.media_type) for f in message.files] == [
        ("image-1.png", "image/png"),
        ("Résumé 2026.pdf", "application/pdf"),
        ("été rates.csv", "text/csv"),
        ("notes.txt", "text/plain"),
    ]
    assert message.files[0].content == PNG
    assert message.files[2].content == b"a,b\r\n1,2"  # the line break before a boundary is its own
    # Each cap holds on the decoded bytes: 5,000 bytes over the 4 KB cap.
    assert message.refused_files == ("big.log is 4.9 KB; an attachment may be at most 4 KB.",)
    meta = message.raw["attachments"]
    assert [m["filename"] for m in meta] == [
        "image-1.png",
        "Résumé 2026.pdf",
        "été rates.csv",
        "notes.txt",
        "big.log",
    ]
    assert meta[-1]["size"] == 5000

    # All of a mail's files together: at most CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES.
    caps.CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES = 3000
    two = mail("two files")
    two.add_attachment(b"1" * 2000, maintype="text", subtype="plain", filename="one.txt")
    two.add_attachment(b"2" * 2000, maintype="text", subtype="plain", filename="two.txt")
    parsed = EmailAdapter(channel).parse_mail(8, two.as_bytes())
    assert parsed is not None
    assert [f.name for f in parsed.files] == ["one.txt"]
    assert parsed.refused_files == (
        "two.txt was left out: the attachments of one mail may be at most 2.9 KB together.",
    )


def test_undecodable_and_control_characters_in_a_name_are_made_storable(caps, live_agent):
    raw = (
        f"From: {USER}\r\nTo: {BOT}\r\nSubject: x\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/mixed; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n'
        "--b\r\nContent-Type: text/plain\r\n"
    ).encode() + (b'Content-Disposition: attachment; filename="r\xe9sum\xe9\x00.txt"\r\n\r\nabc\r\n--b--\r\n')
    channel = Channel(tenant_id=live_agent.tenant.pk, account_id=BOT, name="mail")
    message = EmailAdapter(channel).parse_mail(9, raw)
    assert message is not None
    [meta] = message.raw["attachments"]
    assert meta["filename"] == "r\ufffdsum\ufffd.txt"  # no NUL, no lone surrogate: jsonb takes it
    meta["filename"].encode("utf-8")
    assert [f.content for f in message.files] == [b"abc"]


def test_an_image_reaches_the_model_through_the_worker_and_a_refusal_is_answered(
    caps, mailbox, worker, fake_mail, fake_llm, inline_runs, live_agent
):
    ModelProfile.objects.unscoped().filter(pk=live_agent.model.pk).update(supports_vision=True)
    fake_llm.script(FakeTurn(text="A red square."))
    sent = mail("What is in the picture?")
    sent.add_attachment(PNG, maintype="image", subtype="png", filename="square.png")
    sent.add_attachment(b"z" * 5000, maintype="text", subtype="plain", filename="huge.txt")
    fake_mail.deliver(sent)
    fake_mail.wait_for(lambda f: len(f.sent_mail()) >= 2)
    replies = bodies(fake_mail)
    assert "Not attached: huge.txt is 4.9 KB; an attachment may be at most 4 KB." in replies
    assert "A red square." in replies
    assert all(m["In-Reply-To"] == sent["Message-ID"] for m in fake_mail.sent_mail())

    content = fake_llm.requests[-1].json["messages"][-1]["content"]
    url = "data:image/png;base64," + base64.b64encode(PNG).decode()
    assert {"type": "image_url", "image_url": {"url": url}} in content
    words = " ".join(p.get("text", "") for p in content if p["type"] == "text")
    assert "What is in the picture?" in words
    assert "Not attached: huge.txt" in words
    kept = Attachment.objects.unscoped().get(session__channel="email")
    assert (kept.name, kept.kind, kept.turn_id is not None) == ("square.png", "image", True)
    update = InboundUpdate.objects.unscoped().get(channel=mailbox)
    assert [a["filename"] for a in update.payload["attachments"]] == ["square.png", "huge.txt"]


def test_a_reply_carries_a_file_and_keeps_its_long_text_as_the_body(mailbox, fake_mail):
    adapter = EmailAdapter(Channel.objects.unscoped().select_related("agent").get(pk=mailbox.pk))
    target = Target(USER, "<thread-1@example.test>")
    caption = "\n\n".join(f"Paragraph {n}: " + "words " * 40 for n in range(60))  # ~15,000 characters
    message_id = asyncio.run(adapter.send_attachment(target, "report.csv", b"a,b\n1,2\n", caption))
    [sent] = fake_mail.sent_mail()
    raw = sent.as_bytes()
    again = BytesParser(policy=policy.default).parsebytes(raw)
    assert isinstance(again, EmailMessage)
    assert again.get_content_type() == "multipart/mixed"
    assert again["Message-ID"] == message_id
    assert again["In-Reply-To"] == "<thread-1@example.test>"
    assert again["To"] == USER
    text = again.get_body(preferencelist=("plain",))
    assert text is not None
    assert text.get_content().strip() == caption.strip()
    [file] = list(again.iter_attachments())
    assert file.get_filename() == "report.csv"
    assert file.get_content_type() == "text/csv"
    assert file.get_payload(decode=True) == b"a,b\n1,2\n"

    with pytest.raises(EmailError) as too_big:
        asyncio.run(adapter.send_attachment(target, "big.bin", b"\0" * (20 * 1024 * 1024 + 1)))
    assert too_big.value.retryable is False
    fake_mail.fail_next("452 4.3.1 Insufficient system storage")
    with pytest.raises(EmailError) as busy:
        asyncio.run(adapter.send_attachment(target, "photo.png", PNG))
    assert busy.value.retryable is True


def test_the_agent_mails_a_workspace_file_in_the_thread_through_the_worker(
    caps, mailbox, worker, fake_mail, fake_llm, inline_runs, live_agent
):
    from tools_app.workspace import OPEN, workspace_path

    own = workspace_path(
        tenant_id=live_agent.tenant.pk,
        agent_id=live_agent.agent.pk,
        agent_type=OPEN,
        user_id=live_agent.member.pk,
    )
    own.mkdir(parents=True, exist_ok=True)
    (own / "summary.md").write_text("# Summary\n\nAll good.\n")
    fake_llm.script(
        FakeTurn(tool_calls=[("send_file", {"path": "summary.md", "caption": "Attached."}, "call_mail")]),
        FakeTurn(text="I mailed you the summary."),
    )
    asked = mail("Could you send the summary?", subject="Summary please")
    fake_mail.deliver(asked)
    fake_mail.wait_for(lambda f: len(f.sent_mail()) >= 2)
    with_file, answer = fake_mail.sent_mail()
    assert with_file.get_content_type() == "multipart/mixed"
    assert with_file["Subject"] == "Re: Summary please"
    assert with_file["In-Reply-To"] == asked["Message-ID"]
    body = with_file.get_body(preferencelist=("plain",))
    assert body is not None
    assert body.get_content().strip() == "Attached."
    [file] = list(with_file.iter_attachments())
    assert file.get_filename() == "summary.md"
    assert file.get_payload(decode=True) == b"# Summary\n\nAll good.\n"
    assert answer.get_content().strip() == "I mailed you the summary."
