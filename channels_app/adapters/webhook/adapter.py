"""The generic webhook channel (CH2): any system that can sign an HTTP request.

Inbound: ``POST {"id", "chat", "sender", "text", "thread"?, "private"?,
"mentioned"?}`` with ``X-Claw-Timestamp`` and ``X-Claw-Signature:
sha256=<hex HMAC-SHA256(signing secret, "<timestamp>.<body>")>`` within five minutes;
``id`` de-duplicates. Outbound: the reply is POSTed to the channel's callback URL,
signed the same way, as ``{"type": "message" | "edit" | "approval", "chat",
"thread", "text", "message_id"?, "approval"?}``; the callback may answer
``{"message_id": …}`` so later edits name it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

import httpx

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
    within_window,
)

REPLAY_WINDOW_SECONDS = 300
MAX_MESSAGE_CHARS = 20_000


class WebhookChannelError(AdapterError):
    platform = "webhook"


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


class WebhookAdapter(ChannelAdapter):
    kind = "webhook_channel"
    max_message_chars = MAX_MESSAGE_CHARS
    can_edit = True
    error_type = WebhookChannelError

    def verify(self, request: InboundRequest) -> None:
        secret = self.channel.signing_secret
        if not secret:
            raise VerificationFailed("The channel has no signing secret; set one.", 403)
        timestamp = header(request.headers, "X-Claw-Timestamp")
        signature = header(request.headers, "X-Claw-Signature")
        if not timestamp or not signature:
            raise VerificationFailed("X-Claw-Timestamp and X-Claw-Signature are required.", 401)
        if not within_window(timestamp, REPLAY_WINDOW_SECONDS):
            raise VerificationFailed("The signed timestamp is outside the five-minute window.", 403)
        if not hmac.compare_digest(webhook_signature(secret, timestamp, request.body), signature.strip()):
            raise VerificationFailed("The signature does not match the body.", 403)

    def parse(self, request: InboundRequest, payload: Any) -> list[InboundMessage]:
        if not isinstance(payload, dict):
            raise ValueError("The body must be a JSON object.")
        for name in ("id", "chat", "sender", "text"):
            value = payload.get(name)
            if not isinstance(value, str | int) or isinstance(value, bool) or str(value).strip() == "":
                raise ValueError(f"{name}: required, a non-empty string.")
        for name in ("id", "chat", "sender", "thread"):
            if len(str(payload.get(name, ""))) > 200:
                raise ValueError(f"{name}: at most 200 characters.")
        private = payload.get("private", True)
        mentioned = payload.get("mentioned", False)
        if not isinstance(private, bool) or not isinstance(mentioned, bool):
            raise ValueError("private, mentioned: true or false.")
        return [
            InboundMessage(
                platform_id=str(payload["id"]),
                chat_id=str(payload["chat"]),
                sender_id=str(payload["sender"]),
                text=str(payload["text"]),
                thread_id=str(payload.get("thread") or ""),
                is_private=private,
                addressed=private or mentioned,
                raw=payload,
            )
        ]

    def restore(self, raw: Mapping[str, Any]) -> InboundMessage | None:
        try:
            found = self.parse(InboundRequest(b"", {}), dict(raw))
        except ValueError:
            return None
        return found[0] if found else None

    async def post(self, body: dict[str, Any]) -> dict[str, Any]:
        url = self.channel.callback_url
        if not url:
            raise WebhookChannelError("webhook: the channel has no callback URL", retryable=False)
        raw = json.dumps(body).encode()
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "X-Claw-Timestamp": timestamp,
            "X-Claw-Signature": webhook_signature(self.channel.signing_secret, timestamp, raw),
        }
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as client:
                response = await client.post(url, content=raw, headers=headers)
        except httpx.HTTPError as exc:
            raise self.error_from_transport(exc, "callback") from None
        if response.status_code >= 300:
            raise self.error_from_response(response, "callback")
        try:
            data = response.json()
        except ValueError:
            return {}
        return data if isinstance(data, dict) else {}

    async def send_text(self, target: Target, text: str) -> str:
        return await self._send(target, text, uuid.uuid4().hex)

    async def send_keyed(self, target: Target, text: str, key: str) -> str:
        # The same message_id on every try of a part: the receiver de-duplicates by it.
        return await self._send(target, text, f"{key}-{self.channel.public_id.hex[:12]}")

    async def _send(self, target: Target, text: str, message_id: str) -> str:
        data = await self.post(
            {
                "type": "message",
                "chat": target.chat_id,
                "thread": target.thread_id,
                "text": text,
                "message_id": message_id,
            }
        )
        return str(data.get("message_id") or message_id)[:200]

    async def edit_text(self, target: Target, message_id: str, text: str) -> None:
        await self.post(
            {
                "type": "edit",
                "chat": target.chat_id,
                "thread": target.thread_id,
                "text": text,
                "message_id": message_id,
            }
        )

    async def send_approval(self, target: Target, prompt: ApprovalPrompt, key: str = "") -> str:
        message_id = f"{key}-{self.channel.public_id.hex[:12]}" if key else uuid.uuid4().hex
        await self.post(
            {
                "type": "approval",
                "chat": target.chat_id,
                "thread": target.thread_id,
                "text": approval_text(prompt),
                "approval": prompt.approval_id,
                "message_id": message_id,
            }
        )
        return message_id
