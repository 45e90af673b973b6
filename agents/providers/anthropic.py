"""Anthropic Messages API provider (P1). The only module that knows its wire format.

``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``. Streams
are SSE: ``message_start``, ``content_block_start/delta/stop`` (``text_delta``,
``thinking_delta``, ``signature_delta``, ``input_json_delta``), ``message_delta``
(stop reason, usage), ``message_stop``, ``ping`` and ``error``. A non-streamed
response is turned into the same event sequence, block by block.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar

import orjson
from httpx_sse import ServerSentEvent

from agents.engine.types import (
    IMAGE_PLACEHOLDER,
    Completed,
    FinishPart,
    ImagePart,
    LLMRequest,
    ProviderError,
    ProviderEvent,
    ReasoningPart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallPart,
    ToolResultPart,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    UnknownContentPart,
    Usage,
)
from agents.providers.base import HttpProvider, merge_body, short_text
from agents.providers.repair import repair_messages

ANTHROPIC_VERSION = "2023-06-01"
# budget_tokens must be below max_tokens; leave at least this much room for the answer.
_MIN_ANSWER_TOKENS = 1024

# Anthropic's error ``type`` -> (ProviderError kind, retryable).
_ERROR_KINDS: dict[str, tuple[str, bool]] = {
    "overloaded_error": ("overloaded", True),
    "rate_limit_error": ("rate_limited", True),
    "api_error": ("server", True),
    "timeout_error": ("timeout", True),
    "authentication_error": ("auth", False),
    "permission_error": ("auth", False),
    "not_found_error": ("not_found", False),
    "invalid_request_error": ("bad_request", False),
    "request_too_large": ("bad_request", False),
}


class AnthropicProvider(HttpProvider):
    """Anthropic Messages API: text, thinking, tools, images, prompt-cache usage."""

    kind: ClassVar[str] = "anthropic"

    def _url(self) -> str:
        return f"{self.base_url}/v1/messages"

    def _auth_headers(self) -> dict[str, str]:
        return {"x-api-key": self._api_key, "anthropic-version": ANTHROPIC_VERSION}

    # ----------------------------------------------------------------- request

    def _build_body(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        system_texts = [request.system] if request.system.strip() else []
        messages: list[dict[str, Any]] = []
        for message in repair_messages(request.messages):
            if message.role == "system":
                # No system role in the messages array: fold into the system prompt.
                system_texts.append(message.text)
                continue
            role = "assistant" if message.role == "assistant" else "user"
            blocks = [_block(part) for part in message.parts]
            content = [b for b in blocks if b is not None]
            if not content:
                continue
            if messages and messages[-1]["role"] == role:
                # Tool results travel as a user message; a user text right after them
                # joins the same message (tool_result blocks first, as required).
                messages[-1]["content"].extend(content)
            else:
                messages.append({"role": role, "content": content})

        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens,
            "messages": messages,
        }
        if system_texts:
            body["system"] = "\n\n".join(system_texts)
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in request.tools
            ]
        if request.thinking_budget:
            body["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
            body["max_tokens"] = max(request.max_tokens, request.thinking_budget + _MIN_ANSWER_TOKENS)
            # Extended thinking rejects a custom temperature.
        elif request.temperature is not None:
            body["temperature"] = request.temperature
        if stream:
            body["stream"] = True
        return merge_body(body, request.extra_body)

    # ---------------------------------------------------------------- response

    async def _events_from_sse(self, events: AsyncIterator[ServerSentEvent]) -> AsyncIterator[ProviderEvent]:
        state = _StreamState()
        async for sse in events:
            if not sse.data:
                continue
            try:
                data = orjson.loads(sse.data)
            except ValueError:
                raise ProviderError(
                    "stream", f"malformed JSON in the event stream: {short_text(sse.data, 200)}"
                ) from None
            for event in state.handle(data):
                yield event
            if state.finished:
                return
        raise ProviderError(
            "stream", "the stream ended before message_stop (connection cut?)", retryable=True
        )

    def _events_from_json(self, data: Any) -> Iterator[ProviderEvent]:
        if not isinstance(data, dict) or data.get("type") == "error":
            raise _error_event(data if isinstance(data, dict) else {})
        for index, block in enumerate(data.get("content") or []):
            kind = block.get("type")
            if kind == "text":
                if block.get("text"):
                    yield TextDelta(block["text"])
            elif kind == "thinking":
                yield ThinkingDelta(block.get("thinking", ""))
                if block.get("signature"):
                    yield ThinkingDelta("", signature=block["signature"])
            elif kind == "tool_use":
                yield ToolUseStart(index, block["id"], block["name"])
                yield ToolUseDelta(index, json.dumps(block.get("input") or {}))
                yield ToolUseStop(index)
            else:
                raise UnknownContentPart(f"unknown Anthropic content block type: {kind!r}")
        yield Completed(
            stop_reason=data.get("stop_reason") or "end_turn",
            usage=_usage(data.get("usage") or {}),
            model=data.get("model", ""),
        )

    def _vendor_error(self, data: Any) -> str | None:
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            error = data["error"]
            return f"{error.get('type', 'error')}: {error.get('message', '')}".strip(": ")
        return super()._vendor_error(data)


class _StreamState:
    """Per-stream state: block types by index, usage, stop reason."""

    def __init__(self) -> None:
        self.blocks: dict[int, str] = {}
        self.usage = Usage()
        self.stop_reason: str | None = None
        self.model = ""
        self.finished = False

    def handle(self, data: dict[str, Any]) -> Iterator[ProviderEvent]:
        kind = data.get("type")
        if kind == "message_start":
            message = data.get("message") or {}
            self.model = message.get("model", "")
            self.usage = _usage(message.get("usage") or {})
        elif kind == "content_block_start":
            yield from self._block_start(data["index"], data.get("content_block") or {})
        elif kind == "content_block_delta":
            yield from self._block_delta(data["index"], data.get("delta") or {})
        elif kind == "content_block_stop":
            if self.blocks.get(data["index"]) == "tool_use":
                yield ToolUseStop(data["index"])
        elif kind == "message_delta":
            self.stop_reason = (data.get("delta") or {}).get("stop_reason") or self.stop_reason
            # message_delta usage is cumulative; fields it carries replace message_start's.
            self.usage = _usage(data.get("usage") or {}, self.usage)
        elif kind == "message_stop":
            self.finished = True
            yield Completed(self.stop_reason or "end_turn", self.usage, self.model)
        elif kind == "error":
            raise _error_event(data)
        # ping and event types added to the API later carry no content: ignored, as
        # Anthropic's versioning policy asks. Unknown *content* raises (below).

    def _block_start(self, index: int, block: dict[str, Any]) -> Iterator[ProviderEvent]:
        kind = block.get("type", "")
        self.blocks[index] = kind
        if kind == "text":
            if block.get("text"):
                yield TextDelta(block["text"])
        elif kind == "thinking":
            if block.get("thinking"):
                yield ThinkingDelta(block["thinking"])
        elif kind == "tool_use":
            yield ToolUseStart(index, block["id"], block["name"])
            if block.get("input"):
                yield ToolUseDelta(index, json.dumps(block["input"]))
        else:
            raise UnknownContentPart(f"unknown Anthropic content block type: {kind!r}")

    def _block_delta(self, index: int, delta: dict[str, Any]) -> Iterator[ProviderEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            yield TextDelta(delta.get("text", ""))
        elif kind == "thinking_delta":
            yield ThinkingDelta(delta.get("thinking", ""))
        elif kind == "signature_delta":
            yield ThinkingDelta("", signature=delta.get("signature", ""))
        elif kind == "input_json_delta":
            yield ToolUseDelta(index, delta.get("partial_json", ""))
        else:
            raise UnknownContentPart(f"unknown Anthropic content delta type: {kind!r}")


def _usage(data: dict[str, Any], base: Usage | None = None) -> Usage:
    base = base or Usage()

    def pick(key: str, current: int) -> int:
        value = data.get(key)
        return int(value) if isinstance(value, int) else current

    return Usage(
        input_tokens=pick("input_tokens", base.input_tokens),
        output_tokens=pick("output_tokens", base.output_tokens),
        cache_read_tokens=pick("cache_read_input_tokens", base.cache_read_tokens),
        cache_write_tokens=pick("cache_creation_input_tokens", base.cache_write_tokens),
    )


def _error_event(data: dict[str, Any]) -> ProviderError:
    error = data.get("error") or {}
    error_type = str(error.get("type") or "api_error")
    kind, retryable = _ERROR_KINDS.get(error_type, ("server", False))
    text = short_text(str(error.get("message") or "no message"))
    return ProviderError(kind, f"the provider sent an error ({error_type}): {text}", retryable=retryable)


def _block(part: Any) -> dict[str, Any] | None:
    """One canonical part as an Anthropic content block (None: not sent)."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ImagePart):
        if part.data is None:  # stored history keeps only a placeholder
            return {"type": "text", "text": IMAGE_PLACEHOLDER}
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": part.media_type, "data": part.data},
        }
    if isinstance(part, ReasoningPart):
        # Anthropic only accepts thinking it signed; reasoning from other vendors (or
        # unsigned) would be rejected, so it is not echoed back.
        if not part.signature:
            return None
        return {"type": "thinking", "thinking": part.text, "signature": part.signature}
    if isinstance(part, ToolCallPart):
        return {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
    if isinstance(part, ToolResultPart):
        block: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": part.tool_call_id,
            "content": part.content,
        }
        if part.is_error:
            block["is_error"] = True
        return block
    if isinstance(part, FinishPart):
        return None  # bookkeeping only, never sent
    raise UnknownContentPart(f"cannot send content part {part!r} to Anthropic")
