"""Discord: REST v10 out (``{base}/channels/<id>/messages``, ``Authorization: Bot
<token>``), messages in from the Gateway (:mod:`.gateway`, run by a worker under the
channel's lease), buttons and slash commands in from the interactions endpoint.

discord.py has no base-URL option, so the REST calls and the interactions endpoint
speak Discord's wire format through httpx (the issue's permitted alternative).
Interactions are signed: ``X-Signature-Ed25519`` (hex) over ``X-Signature-Timestamp
+ body`` with the application's public key (the channel's *signing secret* field
holds it, hex); a request without them is a 401, a wrong one a 401 too (Discord's
own probe expects that), a timestamp outside five minutes a 403. ``PING`` is
answered with ``PONG``; a button press with ``DEFERRED_UPDATE_MESSAGE`` (its outcome
follows as an ephemeral follow-up); ``/ask`` with the question quoted, the
answer following in the channel.

A message id (snowflake) de-duplicates; a direct message (no ``guild_id``) is always
answered, a guild message only when it mentions the bot (``bot_username`` holds the
bot's user id) or replies to it. Replies are split at 2,000 characters and grow in
place (``PATCH``). 429s carry ``retry_after`` in the JSON body (seconds, a float).

A message's ``attachments`` (url, size, content_type, filename) are kept in the
update and read by :meth:`DiscordAdapter.fetch_files` before it is stored
(:mod:`channels_app.attachments`: SSRF guard, caps on the bytes read). Files go out
as ``multipart/form-data``: the message as ``payload_json``, the file as ``files[0]``.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import httpx
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
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
    within_window,
)

MAX_MESSAGE_CHARS = 2000
REPLAY_WINDOW_SECONDS = 300
# Interaction and response types (discord.com/developers/docs/interactions/receiving-and-responding)
PING, APPLICATION_COMMAND, MESSAGE_COMPONENT = 1, 2, 3
PONG, CHANNEL_MESSAGE, DEFERRED_UPDATE_MESSAGE = 1, 4, 6
EPHEMERAL = 1 << 6
BUTTON, ACTION_ROW = 2, 1
SUCCESS_STYLE, DANGER_STYLE = 3, 4
# A model's text never pings @everyone, roles or users.
NO_PINGS: dict[str, Any] = {"allowed_mentions": {"parse": []}}
_SNOWFLAKE = re.compile(r"^\d{1,25}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# A bot may upload 10 MB per message unless its server is boosted (the default tier).
MAX_UPLOAD_BYTES = 10 * 1024 * 1024
MAX_ATTACHMENT_REFS = 10  # Discord's own limit per message
VOICE_MESSAGE_FLAG = 1 << 13  # IS_VOICE_MESSAGE: one audio attachment, recorded in the chat


def attachment_refs(value: Any) -> list[dict[str, Any]]:
    """The downloadable part of a message's ``attachments`` array: ``url``,
    ``filename``, ``size`` (declared, not trusted), ``content_type``."""
    refs: list[dict[str, Any]] = []
    for item in value if isinstance(value, list) else []:
        if not isinstance(item, dict):
            continue
        url, name, size = item.get("url"), item.get("filename"), item.get("size")
        if (
            not isinstance(url, str)
            or not url.startswith(("https://", "http://"))
            or len(url) > 2000
            or _CONTROL.search(url)
        ):
            continue
        duration = item.get("duration_secs")  # a voice message's
        refs.append(
            {
                **({"duration_secs": duration} if isinstance(duration, int | float) else {}),
                "id": _CONTROL.sub("", str(item.get("id", "")))[:30],
                "url": url,
                "filename": _CONTROL.sub("", str(name or ""))[:255] or "attachment",
                "size": size if isinstance(size, int) and not isinstance(size, bool) and size >= 0 else None,
                "content_type": _CONTROL.sub("", str(item.get("content_type") or ""))[:100],
            }
        )
    return refs[:MAX_ATTACHMENT_REFS]


def sticker_names(value: Any) -> list[str]:
    """The names of a message's stickers (``sticker_items``: Discord gives no file a
    model could read, nor an emoji; the name says what it was)."""
    names = [
        _CONTROL.sub("", str(item.get("name") or "")).strip()[:60]
        for item in (value if isinstance(value, list) else [])[:3]
        if isinstance(item, dict)
    ]
    return [name or "sticker" for name in names]


class DiscordError(AdapterError):
    platform = "discord"


def public_key_of(hex_key: str) -> Ed25519PublicKey | None:
    try:
        return Ed25519PublicKey.from_public_bytes(bytes.fromhex(hex_key.strip()))
    except ValueError:
        return None


class DiscordAdapter(ChannelAdapter):
    kind = "discord"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = True
    has_buttons = True
    error_type = DiscordError

    @property
    def base(self) -> str:
        return str(settings.CLAW_DISCORD_API_URL).rstrip("/")

    # -------------------------------------------------------------- inbound

    def verify(self, request: InboundRequest) -> None:
        key = public_key_of(self.channel.signing_secret)
        if key is None:
            raise VerificationFailed("The channel has no valid application public key; set one.", 403)
        signature = header(request.headers, "X-Signature-Ed25519")
        timestamp = header(request.headers, "X-Signature-Timestamp")
        if not signature or not timestamp:
            raise VerificationFailed("X-Signature-Ed25519 and X-Signature-Timestamp are required.", 401)
        try:
            key.verify(bytes.fromhex(signature), timestamp.encode() + request.body)
        except (ValueError, InvalidSignature):
            raise VerificationFailed("The signature does not match the body.", 401) from None
        if not within_window(timestamp, REPLAY_WINDOW_SECONDS):
            raise VerificationFailed("The request timestamp is outside the five-minute window.", 403)

    def immediate_answer(self, request: InboundRequest, payload: Any) -> Immediate | None:
        if isinstance(payload, dict) and payload.get("type") == PING:
            return Immediate(200, json.dumps({"type": PONG}).encode())
        return None

    def acknowledgement(self, payload: Any) -> Immediate | None:
        """The interaction's response, sent once the interaction is stored."""
        kind = payload.get("type") if isinstance(payload, dict) else None
        if kind == MESSAGE_COMPONENT:
            return Immediate(200, json.dumps({"type": DEFERRED_UPDATE_MESSAGE}).encode())
        if kind == APPLICATION_COMMAND:
            message = self._parse_command(payload)
            asked = f"> {message.text[:1800]}" if message else "(nothing asked)"
            answer = {"type": CHANNEL_MESSAGE, "data": {"content": asked, "allowed_mentions": {"parse": []}}}
            return Immediate(200, json.dumps(answer).encode())
        return None

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        if not isinstance(payload, dict):
            return []
        kind = payload.get("type")
        if kind == MESSAGE_COMPONENT:
            return [m for m in [self._parse_component(payload)] if m is not None]
        if kind == APPLICATION_COMMAND:
            return [m for m in [self._parse_command(payload)] if m is not None]
        return []

    def parse_message(self, message: Any) -> InboundMessage | None:
        """A Gateway ``MESSAGE_CREATE``'s data, normalised (None: nothing to answer)."""
        if not isinstance(message, dict):
            return None
        author = message.get("author") or {}
        content = message.get("content")
        values = [message.get("id"), message.get("channel_id"), author.get("id")]
        if author.get("bot") or not all(isinstance(v, str) and v for v in values):
            return None
        files = attachment_refs(message.get("attachments"))
        if not isinstance(content, str) or message.get("type", 0) not in (0, 19):
            return None  # joins, pins, the bot's own and other bots' messages
        stickers = sticker_names(message.get("sticker_items"))
        unsupported = ""
        if not content.strip() and not files and not stickers:
            if not message.get("poll"):
                return None
            unsupported = "a poll"  # told so, never left unanswered
        bot = self.channel.bot_username.strip()
        private = not message.get("guild_id")
        mentioned = bool(bot) and any(
            isinstance(m, dict) and m.get("id") == bot for m in message.get("mentions") or []
        )
        replied = (
            bool(bot) and ((message.get("referenced_message") or {}).get("author") or {}).get("id") == bot
        )
        text = re.sub(rf"<@!?{re.escape(bot)}>", "", content).strip() if bot else content.strip()
        voice = isinstance(message.get("flags"), int) and message["flags"] & VOICE_MESSAGE_FLAG
        if voice and files:
            text = labelled(media_label("voice note", files[0].get("duration_secs")), text)
        text = labelled(" ".join(media_label("sticker", detail=name) for name in stickers), text)
        return InboundMessage(
            platform_id=str(message["id"]),
            chat_id=str(message["channel_id"]),
            sender_id=str(author["id"]),
            sender_name=str(author.get("global_name") or author.get("username") or ""),
            text=text,
            is_private=private,
            addressed=private or mentioned or replied,
            unsupported=unsupported,
            raw={
                "id": message["id"],
                "channel_id": message["channel_id"],
                "guild_id": message.get("guild_id"),
                **({"attachments": files} if files else {}),
                # What parse_message reads besides those: a stored message never
                # dispatched is restored from it (:meth:`restore`).
                "source": {
                    "type": message.get("type", 0),
                    "content": content,
                    "flags": message.get("flags") if isinstance(message.get("flags"), int) else 0,
                    "sticker_items": [{"name": name} for name in stickers],
                    "poll": bool(message.get("poll")),
                    "author": {k: author.get(k) for k in ("id", "bot", "global_name", "username")},
                    "mentions": [
                        {"id": m.get("id")} for m in message.get("mentions") or [] if isinstance(m, dict)
                    ],
                    "referenced_message": {
                        "author": {
                            "id": ((message.get("referenced_message") or {}).get("author") or {}).get("id")
                        }
                    },
                },
            },
        )

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        # A Gateway message (an interaction, stored without its token, is not restored).
        source = raw.get("source")
        if not isinstance(source, dict):
            return None
        data = {k: raw.get(k) for k in ("id", "channel_id", "guild_id")}
        return self.parse_message({**source, **data, "attachments": raw.get("attachments") or []})

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """The message with its attachments read from Discord's CDN (through the
        tenant's SSRF guard, within the caps on the bytes read)."""
        from channels_app.attachments import RemoteFile, download_files

        refs = message.raw.get("attachments") or []
        if not refs:
            return message
        remote = [RemoteFile(r["url"], r["filename"], r.get("size"), r.get("content_type", "")) for r in refs]
        files, refused = await download_files(self.channel.tenant_id, remote)
        return replace(message, files=tuple(files), refused_files=tuple(refused))

    @staticmethod
    def _interaction_user(payload: dict[str, Any]) -> dict[str, Any]:
        user = (payload.get("member") or {}).get("user") or payload.get("user") or {}
        return user if isinstance(user, dict) else {}

    def _parse_component(self, payload: dict[str, Any]) -> InboundMessage | None:
        custom_id = str((payload.get("data") or {}).get("custom_id", ""))
        parts = custom_id.split(":")
        user = self._interaction_user(payload)
        if len(parts) != 3 or parts[0] != "appr" or parts[2] not in ("y", "n") or not user.get("id"):
            return None
        approved = parts[2] == "y"
        return InboundMessage(
            platform_id=f"interaction:{payload.get('id')}",
            chat_id=str(payload.get("channel_id", "")),
            sender_id=str(user["id"]),
            sender_name=str(user.get("username") or ""),
            text="/approve" if approved else "/deny",
            is_private=not payload.get("guild_id"),
            addressed=True,
            approval=(parts[1], approved),
            callback_id=str(payload.get("token", "")),
            raw={"type": MESSAGE_COMPONENT, "id": payload.get("id")},
        )

    def _parse_command(self, payload: dict[str, Any]) -> InboundMessage | None:
        """``/ask prompt:<text>``: a message to the agent, addressed wherever it is sent."""
        data = payload.get("data") or {}
        options = {o.get("name"): o.get("value") for o in data.get("options") or [] if isinstance(o, dict)}
        text = options.get("prompt") or options.get("text")
        user = self._interaction_user(payload)
        if not isinstance(text, str) or not text.strip() or not user.get("id"):
            return None
        return InboundMessage(
            platform_id=f"interaction:{payload.get('id')}",
            chat_id=str(payload.get("channel_id", "")),
            sender_id=str(user["id"]),
            sender_name=str(user.get("username") or ""),
            text=text.strip(),
            is_private=not payload.get("guild_id"),
            addressed=True,
            callback_id=str(payload.get("token", "")),
            raw={"type": APPLICATION_COMMAND, "id": payload.get("id")},
        )

    # -------------------------------------------------------------- outbound

    async def call(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        files: list[tuple[str, bytes]] | None = None,
    ) -> Any:
        """One REST call; with ``files``, a ``multipart/form-data`` body: the JSON as
        ``payload_json`` and each file as ``files[n]``."""
        headers = {"Authorization": f"Bot {self.channel.bot_token}", "User-Agent": "ClawPlatform (claw, 1)"}
        what = f"{method} {path.split('/')[1] if '/' in path else path}"
        request: dict[str, Any] = {"json": body}
        if files:
            request = {
                "data": {"payload_json": json.dumps(body or {})},
                "files": [
                    (f"files[{n}]", (name, content, _media_type(name)))
                    for n, (name, content) in enumerate(files)
                ],
            }
        try:
            async with httpx.AsyncClient(timeout=self.timeout if not files else 120.0) as client:
                response = await client.request(method, f"{self.base}{path}", headers=headers, **request)
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, what) from None
        if response.status_code == 204:
            return None
        try:
            data = response.json()
        except ValueError:
            data = None
        if 200 <= response.status_code < 300:
            return data
        status = response.status_code
        retry_after = data.get("retry_after") if isinstance(data, dict) else None
        message = str(data.get("message", ""))[:200] if isinstance(data, dict) else ""
        raise DiscordError(
            f"discord {what}: HTTP {status} {message}".strip(),
            retryable=status == 429 or status >= 500,
            retry_after=float(retry_after) if isinstance(retry_after, int | float) else None,
        )

    @staticmethod
    def _channel_path(target: Target) -> str:
        chat = target.thread_id or target.chat_id
        if not _SNOWFLAKE.match(chat):
            raise DiscordError(f"discord: {chat[:40]!r} is not a channel id", retryable=False)
        return f"/channels/{chat}"

    async def send_text(self, target: Target, text: str) -> str:
        data = await self.call(
            "POST", f"{self._channel_path(target)}/messages", {"content": text, **NO_PINGS}
        )
        return str((data or {}).get("id", ""))

    async def send_keyed(self, target: Target, text: str, key: str) -> str:
        # enforce_nonce: a second create with the same nonce (within a few minutes)
        # answers the message made by the first instead of making another.
        data = await self.call(
            "POST",
            f"{self._channel_path(target)}/messages",
            {"content": text, "nonce": key[:25], "enforce_nonce": True, **NO_PINGS},
        )
        return str((data or {}).get("id", ""))

    async def send_attachment(self, target: Target, name: str, content: bytes, caption: str = "") -> str:
        """A file as ``files[0]`` of a multipart message (``payload_json`` names it in
        ``attachments``); a caption over 2,000 characters goes first as text."""
        from agents.actions.attachments import safe_name

        if len(content) > MAX_UPLOAD_BYTES:
            raise DiscordError(
                f"discord POST channels: {name[:60]} is over {MAX_UPLOAD_BYTES // (1024 * 1024)} MB",
                retryable=False,
            )
        filename = safe_name(name)
        path = f"{self._channel_path(target)}/messages"
        if len(caption) > MAX_MESSAGE_CHARS:
            await self.send_reply(target, caption)
            caption = ""
        body = {"content": caption, "attachments": [{"id": 0, "filename": filename}], **NO_PINGS}
        data = await self.call("POST", path, body, files=[(filename, content)])
        return str((data or {}).get("id", ""))

    async def edit_text(self, target: Target, message_id: str, text: str) -> None:
        if not _SNOWFLAKE.match(message_id):
            raise DiscordError("discord: not a message id", retryable=False)
        await self.call(
            "PATCH", f"{self._channel_path(target)}/messages/{message_id}", {"content": text, **NO_PINGS}
        )

    async def send_typing(self, target: Target) -> None:
        await self.call("POST", f"{self._channel_path(target)}/typing")

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        buttons = [
            {
                "type": BUTTON,
                "style": SUCCESS_STYLE,
                "label": "Approve",
                "custom_id": f"appr:{prompt.approval_id}:y",
            },
            {
                "type": BUTTON,
                "style": DANGER_STYLE,
                "label": "Deny",
                "custom_id": f"appr:{prompt.approval_id}:n",
            },
        ]
        body = {
            "content": approval_text(prompt)[:MAX_MESSAGE_CHARS],
            "components": [{"type": ACTION_ROW, "components": buttons}],
            **NO_PINGS,
        }
        if key:
            body |= {"nonce": key[:25], "enforce_nonce": True}
        data = await self.call("POST", f"{self._channel_path(target)}/messages", body)
        return str((data or {}).get("id", ""))

    async def acknowledge_button(self, message: InboundMessage, text: str) -> None:
        """The outcome of a button press, as an ephemeral follow-up to its interaction."""
        application = self.channel.account_id.strip()
        if message.callback_id and _SNOWFLAKE.match(application) and text:
            await self.call(
                "POST",
                f"/webhooks/{application}/{message.callback_id}",
                {"content": text[:MAX_MESSAGE_CHARS], "flags": EPHEMERAL},
            )

    async def gateway_url(self) -> str:
        """Where the Gateway is (``GET /gateway/bot``)."""
        data = await self.call("GET", "/gateway/bot")
        url = (data or {}).get("url") if isinstance(data, dict) else None
        if not isinstance(url, str) or not url.startswith(("wss://", "ws://")):
            raise DiscordError("discord GET gateway: no gateway URL", retryable=True)
        return url


def _media_type(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "application/octet-stream"
