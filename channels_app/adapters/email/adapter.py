"""Email: IMAP in (polled by a worker under the channel's lease, aioimaplib) and SMTP
out (aiosmtplib).

The mailbox is the channel's ``account_id`` (the address, also the login) with the
``bot_token`` as its password; ``imap_url`` and ``smtp_url`` say where its servers
are: ``imaps://host:993`` (TLS), ``smtps://host:465`` (TLS) or ``smtp://host:587``
(STARTTLS, required). Plain-text ``imap://`` and an SMTP session without TLS are
refused unless the operator allows them (``CLAW_EMAIL_ALLOW_PLAINTEXT``, for local
test servers). Hosts go through the SSRF guard with the tenant's allow-list.

Inbound mail is fetched by UID above the last one seen (``poll_offset``, kept with the
mailbox's UIDVALIDITY: when that changes the mailbox is read again from its start),
de-duplicated by ``Message-ID`` (a mail without one: by a hash of its bytes), and
threaded: the thread is the first id of ``References`` (else
``In-Reply-To``, else the message's own id), so a reply continues its session.
Mail is always private (one sender); automatic mail (``Auto-Submitted``, bulk or
list ``Precedence``), the mailbox's own mail and mail over ``MAX_MAIL_BYTES`` are
never answered (no loops with auto-responders). The quoted part of a reply is
dropped, so "yes" above a quoted approval request approves it. Replies are sent
whole (mail has no draft to edit) with ``In-Reply-To`` and ``References`` set.
Attachments, in (MIME parts, caps on decoded bytes) and out (``multipart/mixed``):
:mod:`.attachments`.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from dataclasses import replace
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formataddr, getaddresses, make_msgid, parseaddr
from typing import Any
from urllib.parse import urlsplit

import aioimaplib
import aiosmtplib
from django.conf import settings
from inscriptis import get_text

from agents.actions.attachments import safe_name
from channels_app.adapters.base import (
    AdapterError,
    ChannelAdapter,
    InboundMessage,
    InboundRequest,
    Target,
    VerificationFailed,
    split_message,
)
from channels_app.adapters.email.attachments import add_file, mail_files, storable
from channels_app.adapters.email.trust import UNVERIFIED_PREFIX
from claw_platform.db import db_async

MAX_MESSAGE_CHARS = 20_000
# Mail with attachments (base64: 4/3 of their size) up to the total cap is read.
MAX_MAIL_BYTES = 24 * 1024 * 1024
MAX_ATTACHMENT_BYTES = 20 * 1024 * 1024  # what a reply may carry (common servers take 25 MB)
MAX_FETCH = 50
TIMEOUT_SECONDS = 30.0
_MESSAGE_ID = re.compile(r"<[^<>\s]{1,250}>")
_QUOTE_HEADER = re.compile(r"^(On .{0,300} wrote:|-----Original Message-----)\s*$", re.IGNORECASE)
_FETCH_UID = re.compile(rb"UID (\d+)")
_UIDVALIDITY = re.compile(rb"\[UIDVALIDITY (\d+)\]", re.IGNORECASE)
logger = logging.getLogger("claw.channels.email")


class EmailError(AdapterError):
    platform = "email"


def _message_ids(value: str) -> list[str]:
    return _MESSAGE_ID.findall(value or "")


def strip_quoted(text: str) -> str:
    """The new part of a reply: the lines above "On … wrote:" and without "> " quotes."""
    kept: list[str] = []
    for line in text.splitlines():
        if _QUOTE_HEADER.match(line.strip()):
            break
        if not line.lstrip().startswith(">"):
            kept.append(line)
    return "\n".join(kept).strip()


class EmailAdapter(ChannelAdapter):
    kind = "email"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = False
    has_buttons = False
    error_type = EmailError
    timeout = TIMEOUT_SECONDS
    uidvalidity = 0  # the server's, as of the last fetch_new

    @property
    def address(self) -> str:
        return self.channel.account_id.strip().lower()

    # -------------------------------------------------------------- inbound

    def verify(self, request: InboundRequest) -> None:
        raise VerificationFailed("An email channel receives mail over IMAP, not here.", 403)

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        return []

    def parse_mail(self, uid: int, raw: bytes, uidvalidity: int = 0) -> InboundMessage | None:
        """One fetched mail, normalised (None: not for the agent). Its stored form
        (``raw``) keeps what :meth:`restore` needs to give it back whole: the text as
        the model gets it (without NUL bytes or lone surrogates, so storable), the
        sender, the thread, and where its attachments are (UID, UIDVALIDITY and a hash
        of the mail's bytes: read again from the mailbox, never stored here); the
        sender's proof is added by :func:`~channels_app.adapters.email.trust.apply`."""
        if len(raw) > MAX_MAIL_BYTES:
            return None
        mail = BytesParser(policy=policy.default).parsebytes(raw)
        sender = parseaddr(str(mail.get("From", "")))[1].strip().lower()
        if not sender or "@" not in sender or sender == self.address:
            return None
        if str(mail.get("Auto-Submitted", "no")).strip().lower() != "no":
            return None
        if str(mail.get("Precedence", "")).strip().lower() in ("bulk", "list", "junk"):
            return None
        # Without a Message-ID, the mail's own bytes name it (a UID changes when the
        # mailbox is rebuilt: the same mail must stay a duplicate).
        own_id = (
            _message_ids(str(mail.get("Message-ID", "")))
            or [f"<sha256-{hashlib.sha256(raw).hexdigest()[:40]}@{self.channel.public_id}>"]
        )[0]
        references = _message_ids(str(mail.get("References", ""))) or _message_ids(
            str(mail.get("In-Reply-To", ""))
        )
        thread = references[0] if references else own_id
        body = mail.get_body(preferencelist=("plain", "html"))
        text = ""
        if isinstance(body, EmailMessage):
            content = body.get_content()
            text = str(content) if body.get_content_subtype() == "plain" else get_text(str(content))
        text = strip_quoted(text.replace("\x00", ""))
        subject = re.sub(r"[\x00\r\n]+", " ", str(mail.get("Subject", "")))[:300]
        attached = mail_files(mail, body)
        text += attached.forwarded
        if not text:
            text = subject
        text = storable(text, keep_lines=True)
        name = storable(str(getaddresses([str(mail.get("From", ""))])[0][0]))[:100]
        return InboundMessage(
            platform_id=own_id[:200],
            chat_id=sender[:200],
            sender_id=sender[:200],
            sender_name=name,
            text=text,
            thread_id=thread[:200],
            is_private=True,
            addressed=True,
            raw={
                "uid": uid,
                "uidvalidity": uidvalidity,
                "sha256": hashlib.sha256(raw).hexdigest(),
                "message_id": own_id,
                "subject": subject,
                "references": references[-20:],
                "from": sender[:200],
                "from_name": name,
                "thread": thread[:200],
                "text": text,
                **({"attachments": attached.meta[:50]} if attached.meta else {}),
            },
            files=tuple(attached.files),
            refused_files=tuple(attached.refused),
        )

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        """The stored mail again, its sender proven or not as decided when it came
        (never checked again: a DNS key may have changed since). Its attachments are
        read again from the mailbox (:meth:`fetch_files`). None for a mail stored
        before its text and verdict were kept."""
        text, sender, proven = raw.get("text"), raw.get("from"), raw.get("sender_proven")
        if not isinstance(text, str) or not isinstance(sender, str) or not isinstance(proven, bool):
            return None
        if not sender or not isinstance(raw.get("message_id"), str):
            return None
        why = str(raw.get("sender_check") or "not proven")
        return InboundMessage(
            platform_id=str(raw["message_id"])[:200],
            chat_id=sender,
            sender_id=sender if proven else f"{UNVERIFIED_PREFIX}{sender}"[:200],
            sender_name=str(raw.get("from_name") or ""),
            text=text,
            thread_id=str(raw.get("thread") or raw["message_id"])[:200],
            is_private=True,
            addressed=True,
            unverified="" if proven else why,
            raw=raw,
        )

    def offers_files(self, message: InboundMessage) -> bool:
        # A fetched mail's parts are read with it; a restored one's are still to be read.
        return bool(message.raw.get("attachments")) and not message.files and not message.refused_files

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """A restored mail with its attachments read again from the mailbox: the same
        mail (same UIDVALIDITY and UID, the same bytes by hash), its parts within the
        caps as when it came. A mail no longer there: its files named as not read."""
        raw = message.raw
        uid, uidvalidity = raw.get("uid"), raw.get("uidvalidity")
        mail_bytes = None
        if isinstance(uid, int) and isinstance(uidvalidity, int):
            mail_bytes = await self.fetch_one(uid, uidvalidity)
        if mail_bytes is None or hashlib.sha256(mail_bytes).hexdigest() != raw.get("sha256"):
            names = ", ".join(safe_name(str(m.get("filename", ""))) for m in raw.get("attachments") or [])
            return replace(
                message,
                refused_files=(f"{names}: no longer in the mailbox, so not read; please send again.",),
            )
        mail = BytesParser(policy=policy.default).parsebytes(mail_bytes)
        attached = mail_files(mail, mail.get_body(preferencelist=("plain", "html")))
        return replace(message, files=tuple(attached.files), refused_files=tuple(attached.refused))

    # -------------------------------------------------------------- servers

    async def _checked(self, url: str, schemes: dict[str, int]) -> tuple[str, str, int]:
        from tools_app.guards.ssrf import BlockedDestination, UnresolvableHost
        from tools_app.runtime.network import guard_for_tenant

        parts = urlsplit(url.strip())
        scheme = parts.scheme.lower()
        if scheme not in schemes or not parts.hostname:
            raise EmailError(f"email: {url[:80]!r} is not one of {', '.join(schemes)}", retryable=False)
        host, port = parts.hostname, parts.port or schemes[scheme]
        guard = await db_async(guard_for_tenant)(self.channel.tenant_id)
        try:
            await guard.resolve_checked(host, port)
        except (BlockedDestination, UnresolvableHost) as exc:
            raise EmailError(f"email: {host} refused ({exc})", retryable=False) from None
        return scheme, host, port

    @contextlib.asynccontextmanager
    async def _inbox(self) -> AsyncIterator[aioimaplib.IMAP4]:
        """A logged-in IMAP session with INBOX selected (its UIDVALIDITY left in
        :attr:`uidvalidity`); a network failure is a retryable :class:`EmailError`."""
        scheme, host, port = await self._checked(self.channel.imap_url, {"imaps": 993, "imap": 143})
        if scheme == "imap" and not settings.CLAW_EMAIL_ALLOW_PLAINTEXT:
            raise EmailError("email: imap:// sends the password in clear; use imaps://", retryable=False)
        client: aioimaplib.IMAP4
        if scheme == "imaps":
            client = aioimaplib.IMAP4_SSL(host=host, port=port, timeout=self.timeout)
        else:
            client = aioimaplib.IMAP4(host=host, port=port, timeout=self.timeout)
        try:
            await client.wait_hello_from_server()
            login = await client.login(self.address, self.channel.bot_token)
            if login.result != "OK":
                raise EmailError("email: the IMAP login was refused", retryable=False)
            selected = await client.select("INBOX")
            if selected.result != "OK":
                raise EmailError("email: INBOX could not be selected", retryable=True)
            self.uidvalidity = _uidvalidity(selected.lines)
            yield client
        except (OSError, TimeoutError, aioimaplib.Abort, aioimaplib.CommandTimeout, ssl.SSLError) as exc:
            raise EmailError(f"email IMAP: {type(exc).__name__}", retryable=True) from None
        finally:
            with contextlib.suppress(Exception):  # the session is over either way
                await client.logout()

    async def fetch_new(self, after_uid: int, uidvalidity: int = 0) -> list[tuple[int, bytes]]:
        """Mail in INBOX with a UID above ``after_uid`` (at most ``MAX_FETCH``), oldest
        first. ``uidvalidity``: the mailbox's UIDVALIDITY when ``after_uid`` was taken;
        when the server says another (the mailbox was rebuilt, its UIDs renumbered),
        ``after_uid`` means nothing and the mailbox is read from its first UID (mail
        seen before is a duplicate by Message-ID). The server's is left in
        :attr:`uidvalidity`."""
        async with self._inbox() as client:
            if uidvalidity and self.uidvalidity and self.uidvalidity != uidvalidity:
                logger.warning(
                    "email %s: UIDVALIDITY %s, was %s: reading the mailbox again",
                    self.address,
                    self.uidvalidity,
                    uidvalidity,
                )
                after_uid = 0
            fetched = await client.uid("fetch", f"{after_uid + 1}:*", "(UID BODY.PEEK[])")
            if fetched.result != "OK":
                raise EmailError("email: FETCH failed", retryable=True)
            return sorted(m for m in _fetched_mails(fetched.lines) if m[0] > after_uid)[:MAX_FETCH]

    async def fetch_one(self, uid: int, uidvalidity: int) -> bytes | None:
        """The mail with ``uid`` as the mailbox holds it now; None when the mailbox was
        rebuilt since (another UIDVALIDITY) or the mail is gone (deleted, moved)."""
        async with self._inbox() as client:
            if not uidvalidity or self.uidvalidity != uidvalidity:
                return None
            fetched = await client.uid("fetch", f"{uid}:{uid}", "(UID BODY.PEEK[])")
            if fetched.result != "OK":
                raise EmailError("email: FETCH failed", retryable=True)
            found = [raw for got, raw in _fetched_mails(fetched.lines) if got == uid]
            return found[0] if found else None

    # -------------------------------------------------------------- outbound

    async def send_keyed(self, target: Target, text: str, key: str) -> str:
        # The same Message-ID on every try: a repeat is one message to the recipient's
        # client (threaded and de-duplicated by it).
        domain = self.address.rpartition("@")[2] or "localhost"
        return await self.send_text(target, text, message_id=f"<{key}.{self.channel.public_id.hex}@{domain}>")

    async def send_text(self, target: Target, text: str, *, message_id: str = "") -> str:
        mail, message_id = await self._reply_mail(target, text, message_id=message_id)
        await self._send(mail)
        return message_id

    async def send_attachment(self, target: Target, name: str, content: bytes, caption: str = "") -> str:
        """A reply in the thread with ``content`` attached; ``caption`` is its body, whole."""
        if len(content) > MAX_ATTACHMENT_BYTES:
            raise EmailError(
                f"email: {name[:60]} is over {MAX_ATTACHMENT_BYTES // (1024 * 1024)} MB", retryable=False
            )
        text = split_message(caption, MAX_MESSAGE_CHARS)[0] if caption else ""
        mail, message_id = await self._reply_mail(target, text or f"(attached: {name[:200]})")
        add_file(mail, name, content)
        await self._send(mail)
        return message_id

    async def _reply_mail(
        self, target: Target, text: str, *, message_id: str = ""
    ) -> tuple[EmailMessage, str]:
        subject = await db_async(_thread_subject)(self.channel.pk, target.thread_id)
        mail = EmailMessage()
        domain = self.address.rpartition("@")[2] or "localhost"
        message_id = message_id or make_msgid(domain=domain)
        mail["From"] = formataddr((self.channel.agent.name[:60], self.address))
        mail["To"] = target.chat_id
        mail["Subject"] = (
            subject if subject.lower().startswith("re:") else f"Re: {subject or self.channel.name}"
        )
        mail["Message-ID"] = message_id
        mail["Auto-Submitted"] = "auto-replied"
        if target.thread_id:
            mail["In-Reply-To"] = target.thread_id
            mail["References"] = target.thread_id
        mail.set_content(text)
        return mail, message_id

    async def _send(self, mail: EmailMessage) -> None:
        scheme, host, port = await self._checked(self.channel.smtp_url, {"smtps": 465, "smtp": 587})
        plaintext_ok = bool(settings.CLAW_EMAIL_ALLOW_PLAINTEXT)
        try:
            await aiosmtplib.send(
                mail,
                hostname=host,
                port=port,
                username=self.address,
                password=self.channel.bot_token,
                use_tls=scheme == "smtps",
                start_tls=None if plaintext_ok and scheme == "smtp" else scheme == "smtp",
                timeout=self.timeout,
            )
        except aiosmtplib.SMTPResponseException as exc:
            # 4xx: a temporary refusal (greylisting, a full queue): try again; 5xx: no.
            raise EmailError(
                f"email SMTP: {exc.code} {exc.message[:150]}", retryable=400 <= exc.code < 500
            ) from None
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            raise EmailError(f"email SMTP: {type(exc).__name__}", retryable=True) from None


def _uidvalidity(lines: list[Any]) -> int:
    """The ``[UIDVALIDITY n]`` of a SELECT response (0: the server sent none)."""
    for line in lines:
        if isinstance(line, bytes | bytearray):
            found = _UIDVALIDITY.search(bytes(line))
            if found:
                return int(found.group(1))
    return 0


def _fetched_mails(lines: list[Any]) -> list[tuple[int, bytes]]:
    """``(uid, raw mail)`` pairs from a UID FETCH response: a line ``n FETCH (UID u
    BODY[] {size}`` followed by the literal."""
    mails: list[tuple[int, bytes]] = []
    for index, line in enumerate(lines[:-1]):
        if (
            not isinstance(line, bytes | bytearray)
            or b"FETCH" not in line
            or not line.rstrip().endswith(b"}")
        ):
            continue
        uid = _FETCH_UID.search(bytes(line))
        following = lines[index + 1]
        if uid and isinstance(following, bytes | bytearray):
            mails.append((int(uid.group(1)), bytes(following)))
    return mails


def _thread_subject(channel_id: int, thread_id: str) -> str:
    from channels_app.models import InboundUpdate

    if not thread_id:
        return ""
    row = (
        InboundUpdate.objects.unscoped()
        .filter(channel_id=channel_id, payload__message_id=thread_id)
        .values_list("payload", flat=True)
        .first()
    )
    if row is None:
        row = (
            InboundUpdate.objects.unscoped()
            .filter(channel_id=channel_id, payload__references__contains=[thread_id])
            .order_by("received_at")
            .values_list("payload", flat=True)
            .first()
        )
    return str((row or {}).get("subject", ""))[:300]
