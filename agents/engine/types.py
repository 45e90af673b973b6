"""Value types shared by the engine, the providers and the stores.

Plain dataclasses, no Django. A conversation is a list of :class:`Message`, each
holding typed content parts. Providers speak :class:`LLMRequest` in and a stream of
:data:`ProviderEvent` out; :class:`StreamAccumulator` (in ``accumulate.py``) turns
either a stream or a non-streamed response (which providers normalise into the same
events) into one assistant :class:`Message`, so both paths store identical history.

Parts serialise to JSON dicts with a ``type`` key (``to_dict`` / ``part_from_dict``);
an unknown ``type`` raises :class:`UnknownContentPart` instead of being dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Role = Literal["system", "user", "assistant", "tool"]

# Normalised stop reasons. Providers map vendor values onto these; anything else is
# passed through as-is and treated by the loop as "end with the text we have".
STOP_END_TURN = "end_turn"
STOP_TOOL_USE = "tool_use"
STOP_MAX_TOKENS = "max_tokens"
STOP_STOP_SEQUENCE = "stop_sequence"
STOP_REFUSAL = "refusal"

IMAGE_PLACEHOLDER = "[image]"


class UnknownContentPart(ValueError):
    """A content part of a type this code does not know. Never silently dropped."""


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ReasoningPart:
    """Model thinking. ``signature`` is Anthropic's opaque signature, echoed back."""

    text: str
    signature: str | None = None
    type: Literal["reasoning"] = "reasoning"


@dataclass(frozen=True, slots=True)
class ToolCallPart:
    id: str
    name: str
    arguments: dict[str, Any]
    type: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class ToolResultPart:
    """Result of one tool call. ``error_type`` is one of ``ToolErrorType`` when failed."""

    tool_call_id: str
    name: str
    content: str
    is_error: bool = False
    error_type: str | None = None
    duration_ms: int | None = None
    type: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class ImagePart:
    """An image. ``data`` is base64; it is ``None`` once stored (placeholder only)."""

    media_type: str
    data: str | None = None
    type: Literal["image"] = "image"


@dataclass(frozen=True, slots=True)
class FinishPart:
    reason: str
    type: Literal["finish"] = "finish"


Part = TextPart | ReasoningPart | ToolCallPart | ToolResultPart | ImagePart | FinishPart

_PART_TYPES: dict[str, type] = {
    "text": TextPart,
    "reasoning": ReasoningPart,
    "tool_call": ToolCallPart,
    "tool_result": ToolResultPart,
    "image": ImagePart,
    "finish": FinishPart,
}


def part_to_dict(part: Part) -> dict[str, Any]:
    out: dict[str, Any] = {"type": part.type}
    for name in part.__dataclass_fields__:
        if name == "type":
            continue
        value = getattr(part, name)
        if value is not None:
            out[name] = value
    return out


def part_from_dict(data: dict[str, Any]) -> Part:
    kind = data.get("type")
    cls = _PART_TYPES.get(kind or "")
    if cls is None:
        raise UnknownContentPart(f"unknown content part type: {kind!r}")
    kwargs = {k: v for k, v in data.items() if k != "type"}
    try:
        return cls(**kwargs)  # type: ignore[no-any-return]
    except TypeError as exc:
        raise UnknownContentPart(f"malformed {kind} part: {exc}") from exc


# ------------------------------------------------------------------------- message


@dataclass(slots=True)
class Message:
    role: Role
    parts: list[Part] = field(default_factory=list)

    @classmethod
    def user(cls, text: str) -> Message:
        return cls("user", [TextPart(text)])

    @classmethod
    def assistant(cls, text: str) -> Message:
        return cls("assistant", [TextPart(text)])

    @property
    def text(self) -> str:
        """Concatenated visible text (no reasoning, no tool blocks)."""
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role, "parts": [part_to_dict(p) for p in self.parts]}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Message:
        return cls(data["role"], [part_from_dict(p) for p in data.get("parts", [])])


# ---------------------------------------------------------------- provider contract


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    name: str
    description: str
    input_schema: dict[str, Any]


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(slots=True)
class LLMRequest:
    model: str
    messages: list[Message]
    system: str = ""
    tools: list[ToolDefinition] = field(default_factory=list)
    max_tokens: int = 4096
    temperature: float | None = None
    thinking_budget: int | None = None
    # Provider/model body overrides (P2), merged last into the wire body.
    extra_body: dict[str, Any] = field(default_factory=dict)
    # What the call is for: agent_loop, compaction, title, summary, flush, sub_agent.
    purpose: str = "agent_loop"


# Provider events. A stream is: any number of deltas, then exactly one Completed.
# Errors are raised from the iterator as ProviderError (see errors below).


@dataclass(frozen=True, slots=True)
class TextDelta:
    text: str
    type: Literal["text_delta"] = "text_delta"


@dataclass(frozen=True, slots=True)
class ThinkingDelta:
    text: str
    signature: str | None = None
    type: Literal["thinking_delta"] = "thinking_delta"


@dataclass(frozen=True, slots=True)
class ToolUseStart:
    index: int
    id: str
    name: str
    type: Literal["tool_use_start"] = "tool_use_start"


@dataclass(frozen=True, slots=True)
class ToolUseDelta:
    index: int
    partial_json: str
    type: Literal["tool_use_delta"] = "tool_use_delta"


@dataclass(frozen=True, slots=True)
class ToolUseStop:
    index: int
    type: Literal["tool_use_stop"] = "tool_use_stop"


@dataclass(frozen=True, slots=True)
class Completed:
    stop_reason: str
    usage: Usage
    model: str = ""
    type: Literal["completed"] = "completed"


ProviderEvent = TextDelta | ThinkingDelta | ToolUseStart | ToolUseDelta | ToolUseStop | Completed


@dataclass(slots=True)
class LLMResponse:
    message: Message  # role "assistant"
    stop_reason: str
    usage: Usage
    model: str = ""


# ------------------------------------------------------------------------- errors


class ProviderError(Exception):
    """A provider call failed. ``message`` is safe to show a user (no keys, no traces).

    ``kind`` is one of: rate_limited, overloaded, server, connection, timeout, auth,
    bad_request, not_found, stream (cut or malformed stream), cancelled.
    """

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        retry_after: float | None = None,
        provider: str = "",
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.status = status
        self.retryable = retryable
        self.retry_after = retry_after
        self.provider = provider

    def __str__(self) -> str:
        prefix = f"{self.provider}: " if self.provider else ""
        status = f" (HTTP {self.status})" if self.status else ""
        return f"{prefix}{self.message}{status}"


class RunCancelled(Exception):
    """Raised inside the loop when its cancellation token fires."""
