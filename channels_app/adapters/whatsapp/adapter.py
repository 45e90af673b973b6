"""WhatsApp over the Cloud API (``POST {base}/<phone number id>/messages``).

Subscription: Meta's ``GET ?hub.mode=subscribe&hub.verify_token=…&hub.challenge=…``
is answered with the challenge when the verify token matches. Updates are signed:
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256(app secret, body)>``. The message id
(``wamid…``) de-duplicates. Chats are one to one, always answered; the Cloud API
cannot edit a message, so a reply is sent when complete. Approvals: interactive
reply buttons (ids ``appr:<approval id>:y|n``) or a reply.
"""

from __future__ import annotations

import hashlib
import hmac
import mimetypes
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import httpx
from django.conf import settings

from channels_app.adapters.base import (
    AdapterError,
    ApprovalPrompt,
    ChannelAdapter,
    Immediate,
    InboundMessage,
    InboundRequest,
    Target,
    VerificationFailed,
    approval_text,
    header,
    labelled,
    media_label,
)

MAX_MESSAGE_CHARS = 4096
# Each media message is its own (the Cloud API has no album id: several photos sent
# together come as separate messages, each answered).
MEDIA_TYPES = frozenset({"image", "document", "audio", "video", "sticker"})
# What a user may send that the agent cannot take: told so, never left unanswered
# ("unsupported": a kind the Cloud API does not deliver, e.g. a poll or view-once media).
UNSUPPORTED_TYPES = {"location": "a location", "contacts": "a contact", "unsupported": "this kind of message"}
MEDIA_ORIGIN = "https://lookaside.fbsbx.com"  # where a media object's url points


def _label(kind: str, media: dict[str, Any]) -> str:
    """What a media message was, for the model (the Cloud API gives no duration):
    ``[voice note]`` (an audio recorded in the chat), ``[audio]``, ``[video]``,
    ``[sticker]`` (an image, read as one)."""
    if kind == "audio":
        return media_label("voice note" if media.get("voice") else "audio")
    if kind == "sticker":
        return media_label("animated sticker" if media.get("animated") else "sticker")
    return media_label(kind) if kind == "video" else ""


class WhatsAppError(AdapterError):
    platform = "whatsapp"


def whatsapp_signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class WhatsAppAdapter(ChannelAdapter):
    kind = "whatsapp"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = False
    has_buttons = True
    error_type = WhatsAppError

    def subscribe_challenge(self, request: InboundRequest) -> Immediate | None:
        query = request.query
        token = self.channel.verify_token
        sent = query.get("hub.verify_token", "")
        if query.get("hub.mode") != "subscribe" or not token or not hmac.compare_digest(sent, token):
            return Immediate(
                403, b'{"error": {"code": "bad_verify_token", "message": "Wrong verify token."}}'
            )
        return Immediate(200, query.get("hub.challenge", "")[:200].encode(), "text/plain")

    def verify(self, request: InboundRequest) -> None:
        secret = self.channel.signing_secret
        if not secret:
            raise VerificationFailed("The channel has no app secret; set one.", 403)
        signature = header(request.headers, "X-Hub-Signature-256")
        if not signature:
            raise VerificationFailed("X-Hub-Signature-256 is missing.", 401)
        if not hmac.compare_digest(whatsapp_signature(secret, request.body), signature.strip()):
            raise VerificationFailed("The signature does not match the body.", 403)

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        found: list[InboundMessage] = []
        if not isinstance(payload, dict):
            return found
        for entry in payload.get("entry") or []:
            for change in (entry or {}).get("changes") or [] if isinstance(entry, dict) else []:
                value = change.get("value") if isinstance(change, dict) else None
                if not isinstance(value, dict):
                    continue
                for message in value.get("messages") or []:
                    parsed = self._parse_message(message) if isinstance(message, dict) else None
                    if parsed is not None:
                        found.append(parsed)
        return found

    def _parse_message(self, message: dict[str, Any]) -> InboundMessage | None:
        sender, message_id = message.get("from"), message.get("id")
        if not isinstance(sender, str) or not isinstance(message_id, str) or not sender or not message_id:
            return None
        approval = None
        has_file = False
        unsupported = ""
        if message.get("type") == "text":
            text = str((message.get("text") or {}).get("body") or "")
        elif message.get("type") == "interactive":
            reply = (message.get("interactive") or {}).get("button_reply") or {}
            parts = str(reply.get("id", "")).split(":")
            if len(parts) != 3 or parts[0] != "appr" or parts[2] not in ("y", "n"):
                return None
            approval = (parts[1], parts[2] == "y")
            text = "/approve" if approval[1] else "/deny"
        elif message.get("type") in MEDIA_TYPES:
            media = message.get(str(message["type"])) or {}
            if not isinstance(media, dict) or not isinstance(media.get("id"), str):
                return None
            text, has_file = str(media.get("caption") or ""), True  # a file alone is answered too
            text = labelled(_label(str(message["type"]), media), text)
        elif message.get("type") in UNSUPPORTED_TYPES:
            text, unsupported = "", UNSUPPORTED_TYPES[str(message["type"])]
        else:
            return None  # reactions, system notices: nothing to answer
        if not text.strip() and not has_file and not unsupported:
            return None
        return InboundMessage(
            platform_id=message_id[:200],
            chat_id=sender,
            sender_id=sender,
            text=text,
            is_private=True,
            addressed=True,
            approval=approval,
            raw=message,
            unsupported=unsupported,
        )

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        return self._parse_message(dict(raw))

    def offers_files(self, message: InboundMessage) -> bool:
        return message.raw.get("type") in MEDIA_TYPES

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """The message with its image or document read: ``GET {base}/<media id>`` for
        its URL, then that URL with the token (only on Meta's media host), within the
        caps; the bytes checked against the ``sha256`` the media object gives."""
        from channels_app.attachments import PlatformFile, read_platform_files

        kind = str(message.raw.get("type"))
        media = message.raw.get(kind) or {}
        mime_type = str(media.get("mime_type") or "").split(";")[0].strip()
        stem = "voice-note" if kind == "audio" and media.get("voice") else kind
        name = str(media.get("filename") or "") or stem + (mimetypes.guess_extension(mime_type) or "")
        async with httpx.AsyncClient(timeout=30.0) as client:
            item = PlatformFile(name, self._media_reader(client, str(media["id"])), None, mime_type)
            files, refused = await read_platform_files([item])
        return replace(message, files=tuple(files), refused_files=tuple(refused))

    def _media_reader(self, client: httpx.AsyncClient, media_id: str) -> Any:
        from channels_app.attachments import Fetched, NotFetched, read_capped, same_origin

        headers = {"Authorization": f"Bearer {self.channel.bot_token}"}

        async def read(max_bytes: int) -> Fetched:
            base = settings.CLAW_WHATSAPP_API_URL.rstrip("/")
            response = await client.get(f"{base}/{quote(media_id, safe='')}", headers=headers)
            try:
                found = response.json()
            except ValueError:
                found = None
            if response.status_code != 200 or not isinstance(found, dict) or not found.get("url"):
                raise NotFetched(f"media lookup: HTTP {response.status_code}")
            url = str(found["url"])
            if not same_origin(url, [MEDIA_ORIGIN, base]):
                raise NotFetched("not on WhatsApp's media host")  # the token goes nowhere else
            size = str(found.get("file_size", ""))
            if size.isdigit() and int(size) >= max_bytes:
                return Fetched(200, b"", True)
            got = await read_capped(client, url, max_bytes, headers)
            checksum = str(found.get("sha256") or "")
            whole = got.status == 200 and not got.truncated
            if whole and checksum and hashlib.sha256(got.body).hexdigest() != checksum.lower():
                raise NotFetched("its checksum does not match")
            return got

        return read

    async def call(self, body: dict[str, Any]) -> dict[str, Any]:
        url = f"{settings.CLAW_WHATSAPP_API_URL.rstrip('/')}/{self.channel.account_id}/messages"
        headers = {"Authorization": f"Bearer {self.channel.bot_token}"}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(
                    url, json={"messaging_product": "whatsapp", **body}, headers=headers
                )
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, "messages") from None
        if response.status_code != 200:
            error = self.error_from_response(response, "messages")
            try:
                detail = (response.json().get("error") or {}).get("message", "")
            except (ValueError, AttributeError):
                detail = ""
            raise WhatsAppError(
                f"{error} {str(detail)[:200]}".strip(),
                retryable=error.retryable,
                retry_after=error.retry_after,
            )
        data = response.json()
        return data if isinstance(data, dict) else {}

    async def send_text(self, target: Target, text: str) -> str:
        data = await self.call({"to": target.chat_id, "type": "text", "text": {"body": text}})
        return str(((data.get("messages") or [{}])[0]).get("id", ""))

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        # No idempotency key on this platform: ``key`` is not sent.
        buttons = [
            {"type": "reply", "reply": {"id": f"appr:{prompt.approval_id}:y", "title": "Approve"}},
            {"type": "reply", "reply": {"id": f"appr:{prompt.approval_id}:n", "title": "Deny"}},
        ]
        data = await self.call(
            {
                "to": target.chat_id,
                "type": "interactive",
                "interactive": {
                    "type": "button",
                    "body": {"text": approval_text(prompt)[:1024]},
                    "action": {"buttons": buttons},
                },
            }
        )
        return str(((data.get("messages") or [{}])[0]).get("id", ""))
