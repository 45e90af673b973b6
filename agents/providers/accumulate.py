"""Build one assistant :class:`Message` from a stream of :data:`ProviderEvent`.

Providers normalise both streamed and non-streamed responses into events, and this
one accumulator turns either into history, so the two paths store identical messages.
The engine loop imports it (``collect`` for a whole call, ``StreamAccumulator`` to
forward deltas live while building the message).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Any

from agents.engine.types import (
    Completed,
    LLMResponse,
    Message,
    Part,
    ProviderError,
    ProviderEvent,
    ReasoningPart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallPart,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)

# Tool-call arguments that were not valid JSON are kept verbatim under this key, so the
# loop can answer the call with a tool error ("your arguments were not valid JSON")
# instead of executing it or losing what the model wrote.
RAW_ARGUMENTS_KEY = "_raw"


def has_invalid_arguments(call: ToolCallPart) -> bool:
    """True when ``call.arguments`` holds unparseable JSON rather than real arguments."""
    return set(call.arguments) == {RAW_ARGUMENTS_KEY}


@dataclass(slots=True)
class _ToolSlot:
    id: str
    name: str
    chunks: list[str] = field(default_factory=list)


class StreamAccumulator:
    """Feed events with :meth:`add`; read :attr:`message`, :attr:`stop_reason`,
    :attr:`usage` once :attr:`completed`.

    The message's parts come in a fixed order: reasoning (one part per signed thinking
    block), text (all text deltas joined), tool calls (in the order they started).
    """

    def __init__(self) -> None:
        self._reasoning: list[ReasoningPart] = []
        self._thinking: list[str] = []
        self._text: list[str] = []
        self._tools: dict[int, _ToolSlot] = {}
        self.stop_reason: str | None = None
        self.usage = Usage()
        self.model = ""
        #: Ids of tool calls whose arguments were invalid JSON -> the parse error.
        self.invalid_tool_calls: dict[str, str] = {}

    @property
    def completed(self) -> bool:
        return self.stop_reason is not None

    def add(self, event: ProviderEvent) -> None:
        """Take one event. Deltas after ``Completed`` are a provider bug and raise."""
        if self.completed:
            raise ProviderError("stream", f"event after the end of the response: {event.type}")
        if isinstance(event, TextDelta):
            self._text.append(event.text)
        elif isinstance(event, ThinkingDelta):
            self._thinking.append(event.text)
            if event.signature is not None:
                # Anthropic signs each thinking block at its end; the signature must be
                # echoed with exactly that block, so a signature closes the part.
                self._close_thinking(event.signature)
        elif isinstance(event, ToolUseStart):
            self._tools[event.index] = _ToolSlot(event.id, event.name)
        elif isinstance(event, ToolUseDelta):
            slot = self._tools.get(event.index)
            if slot is None:
                raise ProviderError("stream", f"tool input for unknown block {event.index}")
            slot.chunks.append(event.partial_json)
        elif isinstance(event, ToolUseStop):
            if event.index not in self._tools:
                raise ProviderError("stream", f"end of unknown tool block {event.index}")
        elif isinstance(event, Completed):
            self.stop_reason = event.stop_reason
            self.usage = event.usage
            self.model = event.model
        else:  # pragma: no cover - the union is closed
            raise ProviderError("stream", f"unknown provider event {event!r}")

    feed = add

    @property
    def message(self) -> Message:
        """The assistant message built so far (complete once :attr:`completed`)."""
        parts: list[Part] = list(self._reasoning)
        if self._thinking and "".join(self._thinking):
            parts.append(ReasoningPart("".join(self._thinking)))
        text = "".join(self._text)
        if text:
            parts.append(TextPart(text))
        self.invalid_tool_calls = {}
        for slot in self._tools.values():
            parts.append(ToolCallPart(slot.id, slot.name, self._arguments(slot)))
        return Message("assistant", parts)

    def response(self) -> LLMResponse:
        """The whole call as an :class:`LLMResponse`; raises if it never completed."""
        if self.stop_reason is None:
            raise ProviderError("stream", "the response ended before it was complete")
        return LLMResponse(self.message, self.stop_reason, self.usage, self.model)

    def _close_thinking(self, signature: str) -> None:
        self._reasoning.append(ReasoningPart("".join(self._thinking), signature))
        self._thinking = []

    def _arguments(self, slot: _ToolSlot) -> dict[str, Any]:
        raw = "".join(slot.chunks)
        if not raw.strip():
            return {}  # tools without parameters often stream no input at all
        try:
            value = json.loads(raw)
        except ValueError as exc:
            self.invalid_tool_calls[slot.id] = str(exc)
            return {RAW_ARGUMENTS_KEY: raw}
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.invalid_tool_calls[slot.id] = "arguments are not a JSON object"
            return {RAW_ARGUMENTS_KEY: raw}
        return value


async def collect(stream: AsyncIterable[ProviderEvent]) -> LLMResponse:
    """Drain a provider stream into an :class:`LLMResponse`."""
    accumulator = StreamAccumulator()
    async for event in stream:
        accumulator.add(event)
    return accumulator.response()
