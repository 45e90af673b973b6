"""A mail's attachments, in and out.

In: every leaf part of the MIME tree that is not the chosen text body — files of a
``multipart/mixed``, inline images of a ``multipart/related`` (by ``Content-ID``),
the parts of a forwarded ``message/rfc822`` (whose text also goes to the model,
marked as forwarded) — named by their decoded filename (RFC 2231 and RFC 2047, as
the ``email`` package's default policy reads them), measured on their *decoded*
bytes against the per-file cap, and all of one mail together against
``CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES``. Parts left out are named (``refused``),
so the sender is told; every part's name, type and size stays in the stored update.

Out: a reply carries a file as a ``multipart/mixed`` mail (``add_attachment``), its
text kept whole as the body however long.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from django.conf import settings
from inscriptis import get_text

from agents.actions.attachments import image_type, safe_name
from channels_app.adapters.base import InboundFile
from channels_app.attachments import attachment_cap, per_message, size_text, too_big

MAX_DEPTH = 3  # forwarded mail within forwarded mail …
MAX_PARTS = 100  # parts looked at in one mail (a bomb of empty parts stops here)
FORWARDED_TEXT_CHARS = 8000
SKIPPED_TYPES = frozenset(
    {"application/pgp-signature", "application/pkcs7-signature", "application/pgp-keys"}
)
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # never stored (jsonb refuses NUL)
_SUFFIX = {"image/png": ".png", "image/jpeg": ".jpg", "image/gif": ".gif", "image/webp": ".webp"}


def storable(text: str, *, keep_lines: bool = False) -> str:
    """``text`` without control characters (jsonb refuses NUL) and without the lone
    surrogates undecodable header bytes become (a database driver refuses them)."""
    text = text.encode("utf-8", "replace").decode("utf-8")
    if keep_lines:
        return text.replace("\x00", "")
    return _CONTROL.sub("", text)


def total_cap() -> int:
    return int(settings.CLAW_EMAIL_ATTACHMENTS_TOTAL_BYTES)


@dataclass
class MailFiles:
    files: list[InboundFile] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    meta: list[dict[str, Any]] = field(default_factory=list)  # kept in the stored update
    forwarded: str = ""  # the text of forwarded mail, for the model
    total: int = 0
    seen: int = 0


def mail_files(mail: EmailMessage, body: Any) -> MailFiles:
    """The attachments of ``mail``, whose text body (left out) is ``body``."""
    found = MailFiles()
    _walk(mail, body, found, 0)
    return found


def _walk(part: EmailMessage, body: Any, found: MailFiles, depth: int) -> None:
    found.seen += 1
    if part is body or found.seen > MAX_PARTS:
        return
    content_type = part.get_content_type()
    if content_type == "message/rfc822":
        nested = _nested(part)
        if nested is not None and depth < MAX_DEPTH:
            _forwarded(nested, found, depth + 1)
        return
    if part.is_multipart():
        for sub in part.iter_parts():
            if isinstance(sub, EmailMessage):
                _walk(sub, body, found, depth)
        return
    filename = part.get_filename()
    disposition = part.get_content_disposition()
    if content_type in SKIPPED_TYPES:
        return
    if content_type.startswith("text/") and not filename and disposition != "attachment":
        return  # another rendering of the text (the html of an alternative), not a file
    _take(part, filename, content_type, found)


def _nested(part: EmailMessage) -> EmailMessage | None:
    payload = part.get_payload()
    nested = payload[0] if isinstance(payload, list) and payload else None
    return nested if isinstance(nested, EmailMessage) else None


def _forwarded(nested: EmailMessage, found: MailFiles, depth: int) -> None:
    text_part = nested.get_body(preferencelist=("plain", "html"))
    text = ""
    if isinstance(text_part, EmailMessage):
        try:
            content = str(text_part.get_content())
        except (LookupError, ValueError):
            content = ""
        text = content if text_part.get_content_subtype() == "plain" else get_text(content)
    sender = re.sub(r"[\x00\r\n]+", " ", str(nested.get("From", "")))[:200]
    subject = re.sub(r"[\x00\r\n]+", " ", str(nested.get("Subject", "")))[:300]
    room = FORWARDED_TEXT_CHARS - len(found.forwarded)
    if room > 200:
        block = f"\n\n---------- Forwarded message ----------\nFrom: {sender}\nSubject: {subject}\n\n"
        block += text.strip()
        found.forwarded += storable(block[:room], keep_lines=True)
    _walk(nested, text_part, found, depth)


def _take(part: EmailMessage, filename: str | None, content_type: str, found: MailFiles) -> None:
    try:
        content = part.get_payload(decode=True)
    except (LookupError, ValueError):
        content = None
    data = content if isinstance(content, bytes) else b""
    n = len(found.meta) + 1
    name = (filename or "").replace("\x00", "").strip()
    if not name:
        kind = image_type(data)
        if kind:
            name = f"image-{n}{_SUFFIX[kind]}"
        else:
            name = f"attachment-{n}{mimetypes.guess_extension(content_type) or ''}"
    content_type = storable(content_type)[:100]
    name = storable(name)[:255] or f"attachment-{n}"
    found.meta.append({"filename": name, "content_type": content_type, "size": len(data)})
    shown = safe_name(name)
    cap = attachment_cap()
    if not data:
        found.refused.append(f"{shown} is empty.")
    elif len(data) > cap:
        found.refused.append(too_big(shown, len(data), cap))
    elif found.total + len(data) > total_cap():
        found.refused.append(
            f"{shown} was left out: the attachments of one mail may be at most {size_text(total_cap())} together."
        )
    elif len(found.files) >= per_message():
        found.refused.append(
            f"At most {per_message()} attachments go with one message; {shown} was left out."
        )
    else:
        found.total += len(data)
        found.files.append(InboundFile(name, data, content_type))


def add_file(mail: EmailMessage, name: str, content: bytes) -> None:
    """``content`` attached to ``mail`` (made ``multipart/mixed``; the text stays the body)."""
    filename = safe_name(name)
    media_type = image_type(content) or mimetypes.guess_type(filename)[0] or "application/octet-stream"
    maintype, _, subtype = media_type.partition("/")
    mail.add_attachment(content, maintype=maintype, subtype=subtype, filename=filename)
