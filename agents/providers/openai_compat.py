"""OpenAI-compatible Chat Completions provider (P2). The only module that knows it.

``POST {base_url}/chat/completions`` with a Bearer key. Serves OpenAI, OpenRouter,
Ollama, vLLM, Groq, DeepSeek and other compatible servers, so it is tolerant: usage
may be missing, tool-call ids may be missing (generated), reasoning may come as
``reasoning_content`` (DeepSeek, vLLM) or ``reasoning`` (OpenRouter, Ollama).
A non-streamed response is turned into the same event sequence as a stream.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson
from httpx_sse import ServerSentEvent

from agents.engine.types import (
    IMAGE_PLACEHOLDER,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_REFUSAL,
    STOP_TOOL_USE,
    Completed,
    FinishPart,
    ImagePart,
    LLMRequest,
    Message,
    Part,
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
from agents.providers.base import HttpProvider, error_kind_for_status, merge_body, short_text
from agents.providers.repair import repair_messages

FINISH_REASONS = {
    "stop": STOP_END_TURN,
    "tool_calls": STOP_TOOL_USE,
    "function_call": STOP_TOOL_USE,
    "length": STOP_MAX_TOKENS,
    "content_filter": STOP_REFUSAL,
}
_REASONING_KEYS = ("reasoning_content", "reasoning")
# Error ``type``/``code`` strings seen in error chunks without a numeric code.
_ERROR_TYPES: dict[str, tuple[str, bool]] = {
    "rate_limit_exceeded": ("rate_limited", True),
    "server_error": ("server", True),
    "overloaded": ("overloaded", True),
    "invalid_request_error": ("bad_request", False),
    "authentication_error": ("auth", False),
}


def _new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


class OpenAICompatProvider(HttpProvider):
    """OpenAI Chat Completions and compatible servers."""

    kind: ClassVar[str] = "openai_compatible"

    def _url(self) -> str:
        return f"{self.base_url}/chat/completions"

    def _auth_headers(self) -> dict[str, str]:
        # Local servers (Ollama, vLLM) often run without a key.
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    # ----------------------------------------------------------------- request

    def _build_body(self, request: LLMRequest, *, stream: bool) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if request.system.strip():
            messages.append({"role": "system", "content": request.system})
        for message in repair_messages(request.messages):
            messages.extend(_wire_messages(message))
        body: dict[str, Any] = {
            "model": request.model,
            "messages": messages,
            "max_tokens": request.max_tokens,
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.input_schema,
                    },
                }
                for t in request.tools
            ]
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        # Reasoning knobs differ per server (reasoning_effort, thinking, enable_thinking),
        # so thinking_budget is not mapped here: set it in the per-model extra_body.
        return merge_body(body, request.extra_body)

    # ---------------------------------------------------------------- response

    async def _events_from_sse(self, events: AsyncIterator[ServerSentEvent]) -> AsyncIterator[ProviderEvent]:
        state = _StreamState()
        async for sse in events:
            data = sse.data.strip()
            if not data:
                continue
            if data == "[DONE]":
                for event in state.finish():
                    yield event
                return
            try:
                chunk = orjson.loads(data)
            except ValueError:
                raise ProviderError(
                    "stream", f"malformed JSON in the event stream: {short_text(data, 200)}"
                ) from None
            for event in state.handle(chunk):
                yield event
        if state.finish_reason is None:
            raise ProviderError(
                "stream",
                "the stream ended before a finish reason (connection cut?)",
                retryable=True,
            )
        # Some servers end after the finish chunk without "[DONE]": that is complete.
        for event in state.finish():
            yield event

    def _events_from_json(self, data: Any) -> Iterator[ProviderEvent]:
        if not isinstance(data, dict):
            raise ProviderError("stream", "the provider sent a response that is not an object")
        if data.get("error"):
            raise _error_chunk(data["error"])
        choices = data.get("choices") or []
        message = (choices[0].get("message") if choices else None) or {}
        for key in _REASONING_KEYS:
            if message.get(key):
                yield ThinkingDelta(message[key])
                break
        text = _content_text(message.get("content"))
        if text:
            yield TextDelta(text)
        tool_calls = message.get("tool_calls") or []
        for index, call in enumerate(tool_calls):
            function = call.get("function") or {}
            arguments = function.get("arguments")
            if not isinstance(arguments, str):  # some servers send an object
                arguments = json.dumps(arguments or {})
            yield ToolUseStart(index, call.get("id") or _new_call_id(), function.get("name", ""))
            yield ToolUseDelta(index, arguments)
            yield ToolUseStop(index)
        finish = choices[0].get("finish_reason") if choices else None
        yield Completed(
            _stop_reason(finish, bool(tool_calls)),
            _usage(data.get("usage")),
            data.get("model", ""),
        )


@dataclass(slots=True)
class _ToolStream:
    id: str
    name: str = ""
    started: bool = False
    pending_args: list[str] = field(default_factory=list)


class _StreamState:
    def __init__(self) -> None:
        self.tools: dict[int, _ToolStream] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model = ""
        self.stopped = False

    def handle(self, chunk: dict[str, Any]) -> Iterator[ProviderEvent]:
        if chunk.get("error"):
            # OpenRouter and others report failures mid-stream as an error chunk.
            raise _error_chunk(chunk["error"])
        self.model = chunk.get("model") or self.model
        if chunk.get("usage"):
            self.usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            for key in _REASONING_KEYS:
                if delta.get(key):
                    yield ThinkingDelta(delta[key])
                    break
            if delta.get("content"):
                yield TextDelta(_content_text(delta["content"]))
            for call in delta.get("tool_calls") or []:
                yield from self._tool_delta(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
                yield from self._stop_tools()

    def _tool_delta(self, call: dict[str, Any]) -> Iterator[ProviderEvent]:
        index = call.get("index")
        if not isinstance(index, int):
            # Some servers omit the index: a new id means a new call.
            known = next((i for i, t in self.tools.items() if t.id == call.get("id")), None)
            index = (
                known
                if known is not None
                else (len(self.tools) if call.get("id") or not self.tools else max(self.tools))
            )
        tool = self.tools.get(index)
        if tool is None:
            tool = self.tools[index] = _ToolStream(call.get("id") or _new_call_id())
        function = call.get("function") or {}
        if function.get("name") and not tool.started:
            tool.name = function["name"]
        arguments = function.get("arguments")
        if arguments:
            if not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            tool.pending_args.append(arguments)
        # Start only once the name is known; arguments seen before it are held.
        if not tool.started and tool.name:
            tool.started = True
            yield ToolUseStart(index, tool.id, tool.name)
        if tool.started and tool.pending_args:
            yield ToolUseDelta(index, "".join(tool.pending_args))
            tool.pending_args.clear()

    def _stop_tools(self) -> Iterator[ProviderEvent]:
        if self.stopped:
            return
        self.stopped = True
        for index, tool in self.tools.items():
            if not tool.started:
                raise ProviderError("stream", "the provider sent a tool call without a name")
            yield ToolUseStop(index)

    def finish(self) -> Iterator[ProviderEvent]:
        # Tool calls are closed even when the server never sent a finish reason.
        yield from self._stop_tools()
        yield Completed(_stop_reason(self.finish_reason, bool(self.tools)), self.usage or Usage(), self.model)


def _stop_reason(finish: str | None, has_tool_calls: bool) -> str:
    # Ollama and some vLLM versions answer "stop" even when they made tool calls; the
    # loop must still run the tools.
    if has_tool_calls and finish in (None, "stop"):
        return STOP_TOOL_USE
    if finish is None:
        return STOP_END_TURN
    return FINISH_REASONS.get(finish, finish)


def _usage(data: Any) -> Usage:
    """Normalise to Anthropic's meaning: ``input_tokens`` excludes cache reads.

    OpenAI counts cached tokens inside ``prompt_tokens`` (``prompt_tokens_details.
    cached_tokens``); DeepSeek reports ``prompt_cache_hit_tokens``. Cost (P5) prices
    cache reads separately, so they are split out.
    """
    if not isinstance(data, dict):
        return Usage()
    prompt = int(data.get("prompt_tokens") or 0)
    details = data.get("prompt_tokens_details") or {}
    cached = int(details.get("cached_tokens") or data.get("prompt_cache_hit_tokens") or 0)
    return Usage(
        input_tokens=max(0, prompt - cached),
        output_tokens=int(data.get("completion_tokens") or 0),
        cache_read_tokens=cached,
    )


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # a few servers answer with content parts
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") not in ("text", "output_text"):
                raise UnknownContentPart(f"unknown OpenAI content part: {short_text(str(part))}")
            texts.append(str(part.get("text", "")))
        return "".join(texts)
    raise UnknownContentPart(f"unknown OpenAI content: {short_text(str(content))}")


def _error_chunk(error: Any) -> ProviderError:
    if not isinstance(error, dict):
        return ProviderError("server", f"the provider sent an error: {short_text(str(error))}")
    code = error.get("code")
    status = code if isinstance(code, int) else None
    if status:
        kind, retryable = error_kind_for_status(status)
    else:
        kind, retryable = _ERROR_TYPES.get(str(error.get("type") or code), ("server", False))
    label = error.get("type") or code or "error"
    message = short_text(str(error.get("message") or "no message"))
    return ProviderError(
        kind, f"the provider sent an error ({label}): {message}", status=status, retryable=retryable
    )


def _wire_messages(message: Message) -> list[dict[str, Any]]:
    """One canonical message as one or more Chat Completions messages."""
    if message.role == "tool":
        out: list[dict[str, Any]] = []
        others: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolResultPart):
                result = f"Error: {part.content}" if part.is_error else part.content
                out.append({"role": "tool", "tool_call_id": part.tool_call_id, "content": result})
            else:
                others.append(part)
        if others:  # text or images next to results follow as a user message
            out.extend(_wire_messages(Message("user", others)))
        return out
    if message.role == "assistant":
        text = "".join(_part_text(p) for p in message.parts if not isinstance(p, ToolCallPart))
        # null content is only valid beside tool calls; some servers reject it otherwise.
        wire: dict[str, Any] = {"role": "assistant", "content": text or (None if message.tool_calls else "")}
        if message.tool_calls:
            wire["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
                }
                for call in message.tool_calls
            ]
        return [wire]
    parts = [p for p in message.parts if not isinstance(p, FinishPart)]
    if any(isinstance(p, ImagePart) and p.data is not None for p in parts):
        content: list[dict[str, Any]] = []
        for part in parts:
            if isinstance(part, ImagePart) and part.data is not None:
                url = f"data:{part.media_type};base64,{part.data}"
                content.append({"type": "image_url", "image_url": {"url": url}})
            else:
                content.append({"type": "text", "text": _part_text(part)})
        return [{"role": message.role, "content": content}]
    return [{"role": message.role, "content": "\n\n".join(_part_text(p) for p in parts)}]


def _part_text(part: Any) -> str:
    if isinstance(part, TextPart):
        return part.text
    if isinstance(part, ImagePart):
        return IMAGE_PLACEHOLDER
    if isinstance(part, ReasoningPart | FinishPart):
        # Reasoning is not sent back: most servers reject or ignore it.
        return ""
    raise UnknownContentPart(f"cannot send content part {part!r} as OpenAI text")
