"""Slack: the Events API in, the Web API out (``{base}/chat.postMessage`` …).

Inbound requests are signed: ``X-Slack-Signature: v0=<hex HMAC-SHA256(signing
secret, "v0:<timestamp>:<body>")>`` with ``X-Slack-Request-Timestamp`` within five
minutes (a replay outside the window is refused). ``url_verification`` is answered
with its challenge. A message is de-duplicated by (channel, ts), so Slack's retries
and the ``app_mention`` + ``message`` pair of one message start one run. In channels
the agent answers only when mentioned (``<@bot user id>``), in a thread under the
message; direct messages (``im``) always. Approvals: block-action buttons
(interactivity, a form-encoded ``payload``) or a reply.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

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
    within_window,
)

logger = logging.getLogger("claw.channels.slack")

REPLAY_WINDOW_SECONDS = 300
# The metadata event type a reply's part carries (its key in the payload).
PART_EVENT = "claw_reply_part"
MAX_MESSAGE_CHARS = 4000
PRIVATE_TYPES = frozenset({"im"})
FILES_ORIGIN = "https://files.slack.com"  # url_private_download's host


def event_files(event: dict[str, Any]) -> list[dict[str, Any]]:
    """A message event's ``files`` (shared files; deleted ones come as tombstones)."""
    found = event.get("files")
    return [f for f in found if isinstance(f, dict)] if isinstance(found, list) else []


# Clips recorded in Slack itself (a file's ``subtype``), told apart from uploaded files.
CLIP_KINDS = {"slack_audio": "voice note", "slack_video": "video clip"}


def clip_labels(files: list[dict[str, Any]]) -> str:
    """``[voice note, 0:07]`` for each clip among a message's files (its file is read
    like any other), with the transcript Slack made of it when it has one."""
    labels = []
    for item in files:
        kind = CLIP_KINDS.get(str(item.get("subtype") or ""))
        if kind:
            duration = item.get("duration_ms")
            seconds = (
                duration / 1000 if isinstance(duration, int) and not isinstance(duration, bool) else None
            )
            labels.append(media_label(kind, seconds) + _transcript(item))
    return "\n".join(labels)


def _transcript(item: dict[str, Any]) -> str:
    """`` (Slack's transcript: …)`` of a clip Slack transcribed, else ""."""
    transcription = item.get("transcription")
    if not isinstance(transcription, dict) or transcription.get("status") != "complete":
        return ""
    preview = transcription.get("preview")
    if not isinstance(preview, dict) or not isinstance(preview.get("content"), str):
        return ""
    content = " ".join(preview["content"].split())[:2000]
    if not content:
        return ""
    more = " …" if preview.get("has_more") else ""
    return f" (Slack's transcript: {content}{more})"


class SlackError(AdapterError):
    platform = "slack"


def slack_signature(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


class SlackAdapter(ChannelAdapter):
    kind = "slack"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = True
    has_buttons = True
    error_type = SlackError

    # -------------------------------------------------------------- inbound

    def verify(self, request: InboundRequest) -> None:
        secret = self.channel.signing_secret
        if not secret:
            raise VerificationFailed("The channel has no signing secret; set one.", 403)
        timestamp = header(request.headers, "X-Slack-Request-Timestamp")
        signature = header(request.headers, "X-Slack-Signature")
        if not timestamp or not signature:
            raise VerificationFailed("X-Slack-Request-Timestamp and X-Slack-Signature are required.", 401)
        if not within_window(timestamp, REPLAY_WINDOW_SECONDS):
            raise VerificationFailed("The request timestamp is outside the five-minute window.", 403)
        if not hmac.compare_digest(slack_signature(secret, timestamp, request.body), signature.strip()):
            raise VerificationFailed("The signature does not match the body.", 403)

    def decode(self, request: InboundRequest) -> Any:
        """Events come as JSON, interactivity as a form with one ``payload`` field."""
        if header(request.headers, "content-type").startswith("application/x-www-form-urlencoded"):
            form = parse_qs(request.body.decode("utf-8", "replace"))
            return {"interactive": (form.get("payload") or ["null"])[0]}
        return None

    def immediate_answer(self, request: InboundRequest, payload: Any) -> Immediate | None:
        if isinstance(payload, dict) and payload.get("type") == "url_verification":
            challenge = str(payload.get("challenge", ""))[:200]
            return Immediate(200, json.dumps({"challenge": challenge}).encode())
        return None

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        if not isinstance(payload, dict):
            return []
        if payload.get("type") == "block_actions":
            action = self._parse_action(payload)
            return [action] if action else []
        if payload.get("type") != "event_callback":
            return []
        event = payload.get("event")
        if not isinstance(event, dict) or event.get("type") not in ("message", "app_mention"):
            return []
        if event.get("bot_id") or event.get("subtype") not in (None, "file_share"):
            return []  # the bot's own messages, edits, joins: nothing to answer
        values = [event.get(k) for k in ("text", "channel", "user", "ts")]
        if not isinstance(values[0], str) or not all(isinstance(v, str) and v for v in values[1:]):
            return []
        if not values[0] and not event_files(event):
            return []
        text, channel, user, ts = (str(v) for v in values)
        private = event.get("channel_type") in PRIVATE_TYPES
        mention = f"<@{self.channel.bot_username}>" if self.channel.bot_username else ""
        addressed = private or event.get("type") == "app_mention" or bool(mention and mention in text)
        if mention:
            text = text.replace(mention, "").strip()
        text = re.sub(r"\s+", " ", text) if "\n" not in text else text
        text = labelled(clip_labels(event_files(event)), text)
        thread = str(event.get("thread_ts") or ("" if private else ts))
        return [
            InboundMessage(
                platform_id=f"{channel}:{ts}",
                chat_id=str(channel),
                sender_id=str(user),
                text=str(text),
                thread_id=thread,
                is_private=private,
                addressed=addressed,
                raw=payload,
            )
        ]

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        # A message event is stored whole; a button press is not (never restored).
        if raw.get("type") != "event_callback":
            return None
        found = self.parse(InboundRequest(b"", {}), dict(raw))
        return found[0] if found else None

    def offers_files(self, message: InboundMessage) -> bool:
        return bool(event_files(message.raw.get("event") or {}))

    async def fetch_files(self, message: InboundMessage) -> InboundMessage:
        """The message with its ``files`` read from ``url_private_download`` (the bot
        token as a bearer, sent only to Slack's file host), within the caps."""
        from channels_app.attachments import PlatformFile, read_platform_files

        refused: list[str] = []
        items: list[PlatformFile] = []
        async with httpx.AsyncClient(timeout=30.0) as client:
            for item in event_files(message.raw.get("event") or {}):
                name = str(item.get("name") or item.get("title") or "file")
                url = item.get("url_private_download") or item.get("url_private")
                if not isinstance(url, str) or not url:
                    refused.append(f"{name} is not available to the bot.")
                    continue
                size = item.get("size")
                items.append(
                    PlatformFile(
                        name,
                        self._file_reader(client, url),
                        size if isinstance(size, int) else None,
                        str(item.get("mimetype") or ""),
                    )
                )
            files, not_read = await read_platform_files(items)
        return replace(message, files=tuple(files), refused_files=(*refused, *not_read))

    def _file_reader(self, client: httpx.AsyncClient, url: str) -> Any:
        from channels_app.attachments import Fetched, NotFetched, read_capped, same_origin

        async def read(max_bytes: int) -> Fetched:
            if not same_origin(url, [FILES_ORIGIN, settings.CLAW_SLACK_API_URL]):
                raise NotFetched("not on Slack's file host")  # the token goes nowhere else
            headers = {"Authorization": f"Bearer {self.channel.bot_token}"}
            return await read_capped(client, url, max_bytes, headers)

        return read

    def _parse_action(self, payload: dict[str, Any]) -> InboundMessage | None:
        actions = payload.get("actions") or []
        action = actions[0] if actions and isinstance(actions[0], dict) else {}
        user = (payload.get("user") or {}).get("id")
        channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get(
            "channel_id"
        )
        message = payload.get("message") or {}
        if action.get("action_id") not in ("approve", "deny") or not user or not channel:
            return None
        approved = action["action_id"] == "approve"
        return InboundMessage(
            platform_id=f"action:{action.get('action_ts') or payload.get('trigger_id')}:{user}",
            chat_id=str(channel),
            sender_id=str(user),
            text="/approve" if approved else "/deny",
            thread_id=str(message.get("thread_ts") or ""),
            is_private=(payload.get("channel") or {}).get("name") == "directmessage",
            addressed=True,
            approval=(str(action.get("value", "")), approved),
            raw={"type": "block_actions"},
        )

    # -------------------------------------------------------------- outbound

    async def call(self, method: str, body: dict[str, Any], *, form: bool = False) -> dict[str, Any]:
        """A Web API method; ``form``: its arguments form-encoded (the read methods,
        such as ``conversations.history``, take no JSON body)."""
        url = f"{settings.CLAW_SLACK_API_URL.rstrip('/')}/{method}"
        headers = {"Authorization": f"Bearer {self.channel.bot_token}"}
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                if form:
                    response = await client.post(
                        url, data={k: str(v) for k, v in body.items()}, headers=headers
                    )
                else:
                    response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, method) from None
        if response.status_code != 200:
            raise self.error_from_response(response, method)
        try:
            data = response.json()
        except ValueError:
            raise SlackError(f"slack {method}: not JSON", retryable=True) from None
        if not isinstance(data, dict) or not data.get("ok"):
            error = str((data or {}).get("error", "unknown_error"))[:100] if isinstance(data, dict) else "?"
            retryable = error in ("ratelimited", "internal_error", "fatal_error", "service_unavailable")
            raise SlackError(f"slack {method}: {error}", retryable=retryable)
        return data

    def _target(self, target: Target) -> dict[str, Any]:
        body: dict[str, Any] = {"channel": target.chat_id}
        if target.thread_id:
            body["thread_ts"] = target.thread_id
        return body

    async def send_text(self, target: Target, text: str) -> str:
        data = await self.call("chat.postMessage", {**self._target(target), "text": text})
        return str(data.get("ts", ""))

    async def send_keyed(self, target: Target, text: str, key: str) -> str:
        metadata = {"event_type": PART_EVENT, "event_payload": {"key": key}}
        data = await self.call(
            "chat.postMessage", {**self._target(target), "text": text, "metadata": metadata}
        )
        return str(data.get("ts", ""))

    async def find_sent(self, target: Target, key: str, since: float) -> str:
        """The part's message if the channel (or thread) holds it: ``chat.postMessage``
        has no idempotency key, so its metadata is looked for. A bot without the
        history scope cannot look ("": sent again)."""
        body: dict[str, Any] = {
            "channel": target.chat_id,
            "oldest": f"{since:.6f}",
            "include_all_metadata": "true",
            "limit": 200,
        }
        method = "conversations.history"
        if target.thread_id:
            method, body["ts"] = "conversations.replies", target.thread_id
        try:
            data = await self.call(method, body, form=True)
        except SlackError as exc:
            if exc.retryable:
                raise
            logger.warning("slack: cannot look for an earlier try of %s: %s", key, exc)
            return ""
        for message in data.get("messages") or []:
            metadata = message.get("metadata") if isinstance(message, dict) else None
            if (
                isinstance(metadata, dict)
                and metadata.get("event_type") == PART_EVENT
                and (metadata.get("event_payload") or {}).get("key") == key
            ):
                return str(message.get("ts", ""))
        return ""

    async def edit_text(self, target: Target, message_id: str, text: str) -> None:
        await self.call("chat.update", {"channel": target.chat_id, "ts": message_id, "text": text})

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        text = approval_text(prompt)
        blocks = [
            {"type": "section", "text": {"type": "plain_text", "text": text[:2900]}},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "approve",
                        "style": "primary",
                        "text": {"type": "plain_text", "text": "Approve"},
                        "value": prompt.approval_id,
                    },
                    {
                        "type": "button",
                        "action_id": "deny",
                        "style": "danger",
                        "text": {"type": "plain_text", "text": "Deny"},
                        "value": prompt.approval_id,
                    },
                ],
            },
        ]
        body: dict[str, Any] = {**self._target(target), "text": text, "blocks": blocks}
        if key:
            body["metadata"] = {"event_type": PART_EVENT, "event_payload": {"key": key}}
        data = await self.call("chat.postMessage", body)
        return str(data.get("ts", ""))
