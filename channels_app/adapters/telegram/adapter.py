"""Telegram over the Bot API's JSON wire format (``{base}/bot<token>/<method>``).

Inbound: webhook updates carrying ``X-Telegram-Bot-Api-Secret-Token`` (the channel's
signing secret, compared in constant time), or long polling (``getUpdates``) from a
worker (``channels_app.polling``) so an install behind NAT needs no public URL. The
update id de-duplicates. Groups are answered only when the bot is @mentioned or
replied to. An album (several updates with one ``media_group_id``) is one message:
its parts are stored as they come and gathered once none has come for
``CLAW_INBOUND_GROUP_SETTLE_MS`` (``channels_app.receive``). Approvals: an inline keyboard whose callback data is
``appr:<approval id>:y|n``, or a reply.
"""

from __future__ import annotations

import hmac
import json
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
    InboundMessage,
    InboundRequest,
    Target,
    VerificationFailed,
    approval_text,
    header,
    labelled,
    media_label,
)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
MAX_MESSAGE_CHARS = 4096
MAX_ATTACHMENT_BYTES = 50 * 1024 * 1024


class TelegramError(AdapterError):
    platform = "telegram"


class TelegramAdapter(ChannelAdapter):
    kind = "telegram"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = True
    has_buttons = True
    error_type = TelegramError

    @property
    def base(self) -> str:
        return f"{settings.CLAW_TELEGRAM_API_URL.rstrip('/')}/bot{self.channel.bot_token}"

    # -------------------------------------------------------------- inbound

    def verify(self, request: InboundRequest) -> None:
        secret = self.channel.signing_secret
        if not secret:
            raise VerificationFailed("The channel has no webhook secret token; set one.", 403)
        sent = header(request.headers, SECRET_HEADER)
        if not sent:
            raise VerificationFailed(f"{SECRET_HEADER} is missing.", 401)
        if not hmac.compare_digest(sent.encode(), secret.encode()):
            raise VerificationFailed(f"{SECRET_HEADER} does not match.", 403)

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        return [m for m in [self.parse_update(payload)] if m is not None]

    def parse_update(self, update: Any) -> InboundMessage | None:
        if not isinstance(update, dict) or not isinstance(update.get("update_id"), int):
            return None
        update_id = str(update["update_id"])
        callback = update.get("callback_query")
        if isinstance(callback, dict):
            return self._parse_callback(update_id, callback)
        message = update.get("message")
        if not isinstance(message, dict):
            return None  # edits, channel posts, member changes: nothing to answer
        text = message.get("text") or message.get("caption") or ""
        chat = message.get("chat") or {}
        sender = message.get("from") or {}
        if not isinstance(text, str) or not chat.get("id") or not sender.get("id"):
            return None
        unsupported = ""
        if not text.strip() and not message_files(message) and not message_label(message):
            unsupported = next((what for field, what in UNSUPPORTED_FIELDS if message.get(field)), "")
            if not unsupported:
                return None  # service messages (joins, pins …): nothing to answer
        private = chat.get("type") == "private"
        addressed, text = self._addressed(message, text)
        text = labelled(message_label(message), text)
        thread = str(message["message_thread_id"]) if message.get("is_topic_message") else ""
        return InboundMessage(
            platform_id=update_id,
            chat_id=str(chat["id"]),
            sender_id=str(sender["id"]),
            sender_name=str(sender.get("username") or sender.get("first_name") or ""),
            text=text,
            thread_id=thread,
            is_private=private,
            addressed=private or addressed,
            raw=update,
            group_id=str(message.get("media_group_id") or "")[:200],
            unsupported=unsupported,
        )

    def _addressed(self, message: dict[str, Any], text: str) -> tuple[bool, str]:
        username = self.channel.bot_username.lstrip("@")
        reply_to = message.get("reply_to_message") or {}
        replied = (
            bool(username) and (reply_to.get("from") or {}).get("username", "").lower() == username.lower()
        )
        mention = f"@{username}"
        mentioned = bool(username) and mention.lower() in text.lower()
        if mentioned:
            start = text.lower().index(mention.lower())
            text = (text[:start] + text[start + len(mention) :]).strip()
        return replied or mentioned, text

    def _parse_callback(self, update_id: str, callback: dict[str, Any]) -> InboundMessage | None:
        data = callback.get("data") or ""
        message = callback.get("message") or {}
        chat = message.get("chat") or {}
        sender = callback.get("from") or {}
        parts = data.split(":") if isinstance(data, str) else []
        if len(parts) != 3 or parts[0] != "appr" or parts[2] not in ("y", "n") or not sender.get("id"):
            return None
        return InboundMessage(
            platform_id=update_id,
            chat_id=str(chat.get("id", "")),
            sender_id=str(sender["id"]),
            sender_name=str(sender.get("username") or ""),
            text="/approve" if parts[2] == "y" else "/deny",
            thread_id=str(message["message_thread_id"]) if message.get("is_topic_message") else "",
            is_private=chat.get("type") == "private",
            addressed=True,
            approval=(parts[1], parts[2] == "y"),
            callback_id=str(callback.get("id", "")),
            # The whole callback: a stored press that was never dispatched is restored from it.
            raw={"update_id": int(update_id), "callback_query": callback},
        )

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        return self.parse_update(dict(raw))

    def offers_files(self, message: InboundMessage) -> bool:
        return any(message_files(m) for m in _messages(message))

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """The message with its photo (the largest size within the image cap) and
        document read: ``getFile`` for the path, then ``{base}/file/bot<token>/<path>``."""
        from channels_app.attachments import PlatformFile, read_platform_files

        async with httpx.AsyncClient(timeout=30.0) as client:
            parts = _messages(message)
            items = [
                PlatformFile(
                    _numbered(name, n, len(parts)), self._file_reader(client, file_id), size, media_type
                )
                for n, part in enumerate(parts, start=1)
                for name, file_id, size, media_type in message_files(part)
            ]
            files, refused = await read_platform_files(items)
        return replace(message, files=tuple(files), refused_files=tuple(refused))

    def _file_reader(self, client: httpx.AsyncClient, file_id: str) -> Any:
        from channels_app.attachments import Fetched, NotFetched, read_capped

        async def read(max_bytes: int) -> Fetched:
            response = await client.post(f"{self.base}/getFile", json={"file_id": file_id})
            try:
                data = response.json()
            except ValueError:
                data = {}
            result = data.get("result") if isinstance(data, dict) and data.get("ok") else None
            if not isinstance(result, dict) or not isinstance(result.get("file_path"), str):
                description = str((data or {}).get("description", "")) if isinstance(data, dict) else ""
                raise NotFetched(description[:120] or f"HTTP {response.status_code}")
            size = result.get("file_size")
            if isinstance(size, int) and size >= max_bytes:
                return Fetched(200, b"", True)
            root = settings.CLAW_TELEGRAM_API_URL.rstrip("/")
            path = quote(result["file_path"].lstrip("/"))
            return await read_capped(client, f"{root}/file/bot{self.channel.bot_token}/{path}", max_bytes)

        return read

    # -------------------------------------------------------------- outbound

    async def call(self, method: str, body: dict[str, Any], *, wait_seconds: float | None = None) -> Any:
        try:
            async with httpx.AsyncClient(timeout=wait_seconds or self.timeout) as client:
                response = await client.post(f"{self.base}/{method}", json=body)
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, method) from None
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code == 200 and isinstance(data, dict) and data.get("ok"):
            return data.get("result")
        retry_after = None
        if isinstance(data, dict):
            retry_after = (data.get("parameters") or {}).get("retry_after")
            description = str(data.get("description", ""))[:200]
        else:
            description = ""
        status = response.status_code
        if "message is not modified" in description:
            return None  # an edit to the same text: nothing to do
        raise TelegramError(
            f"telegram {method}: HTTP {status} {description}".strip(),
            retryable=status == 429 or status >= 500,
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
        )

    def _target(self, target: Target) -> dict[str, Any]:
        body: dict[str, Any] = {"chat_id": target.chat_id}
        if target.thread_id:
            body["message_thread_id"] = int(target.thread_id)
        return body

    async def send_text(self, target: Target, text: str) -> str:
        result = await self.call("sendMessage", {**self._target(target), "text": text})
        return str((result or {}).get("message_id", ""))

    async def edit_text(self, target: Target, message_id: str, text: str) -> None:
        await self.call(
            "editMessageText", {"chat_id": target.chat_id, "message_id": int(message_id), "text": text}
        )

    async def send_typing(self, target: Target) -> None:
        await self.call("sendChatAction", {**self._target(target), "action": "typing"})

    async def send_attachment(self, target: Target, name: str, content: bytes, caption: str = "") -> str:
        if len(content) > MAX_ATTACHMENT_BYTES:
            raise TelegramError(f"telegram sendDocument: {name} is over 50 MB", retryable=False)
        data = {"chat_id": target.chat_id, "caption": caption[:1024]}
        if target.thread_id:
            data["message_thread_id"] = target.thread_id
        try:
            async with httpx.AsyncClient(timeout=60) as client:
                response = await client.post(
                    f"{self.base}/sendDocument", data=data, files={"document": (name, content)}
                )
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, "sendDocument") from None
        if response.status_code != 200:
            raise self.error_from_response(response, "sendDocument")
        return str(response.json().get("result", {}).get("message_id", ""))

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        # No idempotency key on this platform: ``key`` is not sent.
        keyboard = {
            "inline_keyboard": [
                [
                    {"text": "Approve", "callback_data": f"appr:{prompt.approval_id}:y"},
                    {"text": "Deny", "callback_data": f"appr:{prompt.approval_id}:n"},
                ]
            ]
        }
        result = await self.call(
            "sendMessage",
            {**self._target(target), "text": approval_text(prompt), "reply_markup": keyboard},
        )
        return str((result or {}).get("message_id", ""))

    async def acknowledge_button(self, message: InboundMessage, text: str) -> None:
        if message.callback_id:
            await self.call(
                "answerCallbackQuery", {"callback_query_id": message.callback_id, "text": text[:190]}
            )

    async def get_updates(self, offset: int, poll_seconds: int = 25) -> list[dict[str, Any]]:
        """Long polling: the updates after ``offset`` (waits up to ``poll_seconds``)."""
        result = await self.call(
            "getUpdates",
            {"offset": offset, "timeout": poll_seconds, "allowed_updates": ["message", "callback_query"]},
            wait_seconds=poll_seconds + 10,
        )
        return [u for u in (result or []) if isinstance(u, dict)]


def _numbered(name: str, n: int, count: int) -> str:
    """An album's ``photo.jpg`` as ``photo-2.jpg``: its files told apart by place."""
    if count < 2:
        return name
    stem, dot, suffix = name.rpartition(".")
    return f"{stem}-{n}.{suffix}" if dot and stem else f"{name}-{n}"


def _messages(message: InboundMessage) -> list[dict[str, Any]]:
    """The Bot API messages an inbound message is made of: one, or an album's parts."""
    updates = message.raw.get("group") or [message.raw]
    return [u["message"] for u in updates if isinstance(u, dict) and isinstance(u.get("message"), dict)]


# Media a message may carry besides a photo or a document: (field, the name a file
# without one gets, its type when none is said, what the label calls it).
MEDIA_FIELDS = (
    ("voice", "voice-note.ogg", "audio/ogg", "voice note"),
    ("audio", "audio.mp3", "audio/mpeg", "audio"),
    ("video", "video.mp4", "video/mp4", "video"),
    ("video_note", "video-message.mp4", "video/mp4", "video message"),
    ("animation", "animation.mp4", "video/mp4", "animation"),
)


# What a user may send that the agent cannot take: told so, never left unanswered.
UNSUPPORTED_FIELDS = (
    ("location", "a location"),
    ("venue", "a place"),
    ("contact", "a contact"),
    ("poll", "a poll"),
    ("dice", "a dice roll"),
    ("game", "a game"),
    ("story", "a story"),
)


def _media(message: dict[str, Any], field: str) -> dict[str, Any] | None:
    found = message.get(field)
    return found if isinstance(found, dict) and isinstance(found.get("file_id"), str) else None


def message_label(message: dict[str, Any]) -> str:
    """What the message carried besides words, for the model: ``[voice note, 0:07]``,
    ``[audio: Artist - Title, 3:25]``, ``[sticker: 👍]`` (a sticker is its emoji:
    no file is read)."""
    sticker = message.get("sticker")
    if isinstance(sticker, dict):
        return media_label("sticker", detail=sticker.get("emoji") or "")
    for field, _name, _type, kind in MEDIA_FIELDS:
        media = _media(message, field)
        if media is not None:
            detail = ""
            if field == "audio":
                detail = " - ".join(str(media[k]) for k in ("performer", "title") if media.get(k))
            return media_label(kind, media.get("duration"), detail)
    return ""


def message_files(message: dict[str, Any]) -> list[tuple[str, str, int | None, str]]:
    """A message's files as ``(name, file_id, declared size, type)``: of ``photo`` (the
    sizes of one picture) the largest whose ``file_size`` is within the image cap
    (none: the smallest, to be refused by its size); a voice note, audio, video,
    video message or animation; ``document`` as sent (not again for an animation,
    which Telegram also sends as its document)."""
    found: list[tuple[str, str, int | None, str]] = []
    for field, default_name, default_type, _kind in MEDIA_FIELDS:
        media = _media(message, field)
        if media is not None:
            size = media.get("file_size")
            found.append(
                (
                    str(media.get("file_name") or default_name),
                    media["file_id"],
                    size if isinstance(size, int) else None,
                    str(media.get("mime_type") or default_type),
                )
            )
    sizes = [
        p for p in message.get("photo") or [] if isinstance(p, dict) and isinstance(p.get("file_id"), str)
    ]
    if sizes:
        cap = int(settings.CLAW_CHAT_IMAGE_MAX_BYTES)

        def declared(p: dict[str, Any]) -> int | None:
            return p["file_size"] if isinstance(p.get("file_size"), int) else None

        def area(p: dict[str, Any]) -> int:
            return int(p.get("width") or 0) * int(p.get("height") or 0)

        fitting = [p for p in sizes if (declared(p) or 0) <= cap]
        photo = max(fitting, key=area) if fitting else min(sizes, key=lambda p: declared(p) or 0)
        found.append(("photo.jpg", photo["file_id"], declared(photo), "image/jpeg"))
    document = message.get("document")
    if _media(message, "animation") is not None:
        document = None
    if isinstance(document, dict) and isinstance(document.get("file_id"), str):
        size = document.get("file_size")
        found.append(
            (
                str(document.get("file_name") or "document"),
                document["file_id"],
                size if isinstance(size, int) else None,
                str(document.get("mime_type") or ""),
            )
        )
    return found


def dumps(update: dict[str, Any]) -> bytes:
    return json.dumps(update).encode()
