"""P1 — Anthropic Messages API provider, over real HTTP against the fake LLM."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agents.engine.types import (
    Completed,
    ImagePart,
    LLMRequest,
    Message,
    ProviderError,
    ProviderEvent,
    ReasoningPart,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    UnknownContentPart,
    Usage,
)
from agents.providers.accumulate import StreamAccumulator, collect
from agents.providers.anthropic import AnthropicProvider
from agents.providers.registry import build_provider
from tests.fakes.fake_llm import FakeLLM, StreamFault, Turn
from tests.fakes.fixtures import fake_llm  # noqa: F401
from tests.fakes.network import block_network  # noqa: F401


async def drain(stream: AsyncIterator[ProviderEvent], seen: list[ProviderEvent]) -> None:
    """Consume a stream, keeping what arrived before any error."""
    async for event in stream:
        seen.append(event)


KEY = "sk-ant-test-key-123"


@pytest.fixture
async def provider(fake_llm: FakeLLM) -> AsyncIterator[AnthropicProvider]:  # noqa: F811
    p = build_provider("anthropic", base_url=fake_llm.url, api_key=KEY, name="claude")
    assert isinstance(p, AnthropicProvider)
    yield p
    await p.aclose()


def request(**kwargs: object) -> LLMRequest:
    defaults: dict[str, object] = {"model": "claude-test", "messages": [Message.user("hi")]}
    defaults.update(kwargs)
    return LLMRequest(**defaults)  # type: ignore[arg-type]


async def test_p1_stream_normalises_every_event_kind(fake_llm, provider):  # noqa: F811
    """P1: thinking, signature, text, tool_use + input_json_delta, stop reason, usage."""
    fake_llm.script(
        Turn(
            thinking="Let me think.",
            text="Running it now.",
            tool_calls=[("bash", {"command": "ls -la"})],
            usage=Usage(input_tokens=11, output_tokens=22, cache_read_tokens=33, cache_write_tokens=44),
            chunk_size=5,
        )
    )
    events = [e async for e in provider.stream(request())]

    thinking = [e for e in events if isinstance(e, ThinkingDelta)]
    assert "".join(e.text for e in thinking) == "Let me think."
    assert thinking[-1].signature == "fake-signature"
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1  # streamed in several deltas
    assert "".join(texts) == "Running it now."
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [(s.id, s.name) for s in starts] == [("toolu_fake_0", "bash")]
    deltas = [e.partial_json for e in events if isinstance(e, ToolUseDelta)]
    assert len(deltas) > 1
    assert "".join(deltas) == '{"command": "ls -la"}'
    assert [e.index for e in events if isinstance(e, ToolUseStop)] == [starts[0].index]
    assert events[-1] == Completed(
        "tool_use", Usage(11, 22, cache_read_tokens=33, cache_write_tokens=44), "claude-test"
    )
    assert sum(isinstance(e, Completed) for e in events) == 1


SCRIPTS = {
    "text": Turn(text="Hello, how can I help you today?"),
    "thinking_and_tools": Turn(
        thinking="The user wants two files.",
        text="Reading both.",
        tool_calls=[("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})],
    ),
    "tool_only": Turn(tool_calls=[("get_current_time", {})]),
    "max_tokens": Turn(text="Cut sho", stop_reason="max_tokens"),
    "unicode": Turn(text="Grüße — 你好 🙂", tool_calls=[("echo", {"s": 'ñ\n"q"'})]),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_p1_stream_and_complete_give_identical_messages(fake_llm, provider, name):  # noqa: F811
    """P1: the streamed and the non-streamed call build the same message and usage."""
    fake_llm.script(SCRIPTS[name], SCRIPTS[name])
    streamed = await collect(provider.stream(request()))
    completed = await provider.complete(request())
    assert streamed == completed
    assert streamed.message.role == "assistant"
    assert [r.json.get("stream", False) for r in fake_llm.requests] == [
        True,
        False,
    ]


async def test_p1_message_parts_order_reasoning_text_tools(fake_llm, provider):  # noqa: F811
    """P1: the assistant message holds reasoning (signed), text, then tool calls."""
    fake_llm.script(SCRIPTS["thinking_and_tools"])
    response = await collect(provider.stream(request()))
    assert response.message.parts == [
        ReasoningPart("The user wants two files.", signature="fake-signature"),
        TextPart("Reading both."),
        ToolCallPart("toolu_fake_0", "read_file", {"path": "a.txt"}),
        ToolCallPart("toolu_fake_1", "read_file", {"path": "b.txt"}),
    ]
    assert response.stop_reason == "tool_use"


async def test_p1_request_wire_format(fake_llm, provider):  # noqa: F811
    """P1: headers, system, tools, thinking, images, tool results, extra_body merged last."""
    fake_llm.script(Turn(text="ok"))
    history = [
        Message("user", [TextPart("what is this?"), ImagePart("image/png", "aGVsbG8=")]),
        Message(
            "assistant",
            [
                ReasoningPart("hmm", signature="sig-1"),
                ToolCallPart("t1", "look", {"x": 1}),
            ],
        ),
        Message("tool", [ToolResultPart("t1", "look", "a cat", is_error=False)]),
        Message.user("and now?"),
    ]
    req = request(
        messages=history,
        system="You are terse.",
        thinking_budget=2000,
        max_tokens=500,
        temperature=0.3,
        tools=[ToolDefinition("look", "Look at it", {"type": "object", "properties": {}})],
        extra_body={"metadata": {"user_id": "u1"}, "top_k": 5},
    )
    await collect(provider.stream(req))

    sent = fake_llm.requests[0]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01"
    body = sent.json
    assert body["system"] == "You are terse."
    assert body["stream"] is True
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert body["max_tokens"] > 2000  # must exceed the thinking budget
    assert "temperature" not in body  # not allowed with extended thinking
    assert body["tools"] == [
        {"name": "look", "description": "Look at it", "input_schema": {"type": "object", "properties": {}}}
    ]
    assert body["metadata"] == {"user_id": "u1"}
    assert body["top_k"] == 5
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {
                    "type": "image",
                    "source": {"type": "base64", "media_type": "image/png", "data": "aGVsbG8="},
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig-1"},
                {"type": "tool_use", "id": "t1", "name": "look", "input": {"x": 1}},
            ],
        },
        # The tool result and the next user text share one user message.
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "a cat"},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]


async def test_p1_request_is_repaired_before_sending(fake_llm, provider):  # noqa: F811
    """P4 via P1: an orphaned tool result is not sent; an unanswered call gets an error."""
    fake_llm.script(Turn(text="ok"))
    history = [
        Message("tool", [ToolResultPart("ghost", "x", "orphan")]),
        Message.user("hi"),
        Message("assistant", [ToolCallPart("t1", "slow", {})]),
        Message.user("still there?"),
    ]
    await provider.complete(request(messages=history))
    messages = fake_llm.requests[0].json["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    result = messages[2]["content"][0]
    assert result["type"] == "tool_result"
    assert result["tool_use_id"] == "t1"
    assert result["is_error"] is True
    assert "ghost" not in str(messages)


async def test_p1_usage_counts_cache_read_and_write(fake_llm, provider):  # noqa: F811
    """P1: cache_read_input_tokens / cache_creation_input_tokens reach Usage."""
    usage = Usage(input_tokens=5, output_tokens=6, cache_read_tokens=700, cache_write_tokens=80)
    fake_llm.script(Turn(text="a", usage=usage), Turn(text="a", usage=usage))
    assert (await collect(provider.stream(request()))).usage == usage
    assert (await provider.complete(request())).usage == usage


async def test_p1_unknown_content_block_raises_when_streamed(fake_llm, provider):  # noqa: F811
    """P1: an unknown content block type raises UnknownContentPart, never dropped."""
    fake_llm.script(
        Turn(
            raw_events=[
                {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "hologram", "data": "?"},
                },
                {"type": "content_block_stop", "index": 0},
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
                {"type": "message_stop"},
            ]
        )
    )
    with pytest.raises(UnknownContentPart, match="hologram"):
        await collect(provider.stream(request()))


async def test_p1_unknown_content_block_raises_when_not_streamed(fake_llm, provider):  # noqa: F811
    """P1: the same holds for a non-streamed response."""
    fake_llm.script(
        Turn(
            raw_body={
                "type": "message",
                "role": "assistant",
                "model": "m",
                "stop_reason": "end_turn",
                "content": [{"type": "text", "text": "hi"}, {"type": "hologram"}],
                "usage": {},
            }
        )
    )
    with pytest.raises(UnknownContentPart, match="hologram"):
        await provider.complete(request())


async def test_p1_error_event_mid_stream_raises_with_kind(fake_llm, provider):  # noqa: F811
    """P1: an ``error`` event after text was yielded -> ProviderError(kind from type)."""
    # message_start, ping, block start, 2 text deltas, then the error.
    fake_llm.script(
        Turn(
            text="Hello world, long enough",
            fault=StreamFault(
                "error", after=5, error_type="overloaded_error", message="Overloaded right now"
            ),
        )
    )
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as info:
        await drain(provider.stream(request()), seen)
    assert seen
    assert isinstance(seen[0], TextDelta)
    assert info.value.kind == "overloaded"
    assert "Overloaded right now" in str(info.value)
    assert len(fake_llm.requests) == 1  # nothing is retried once the caller saw text


async def test_p1_error_event_type_maps_to_kind(fake_llm, provider):  # noqa: F811
    """P1: invalid_request_error in the stream is a bad_request, not retried."""
    fake_llm.script(
        Turn(
            text="x",
            fault=StreamFault(
                "error", after=1, error_type="invalid_request_error", message="prompt is too long"
            ),
        )
    )
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "bad_request"
    assert "prompt is too long" in info.value.message


async def test_p1_stream_ending_without_message_stop_is_a_stream_error(fake_llm, provider):  # noqa: F811
    """P1: a clean EOF before message_stop -> ProviderError(kind="stream")."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("truncate", after=5)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"
    assert "message_stop" in info.value.message


async def test_p1_stream_cut_after_text_is_a_stream_error(fake_llm, provider):  # noqa: F811
    """P1: the connection dropping mid-body after text -> ProviderError(kind="stream")."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("cut", after=5)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"
    assert "cut" in info.value.message


async def test_p1_malformed_json_is_a_readable_stream_error(fake_llm, provider):  # noqa: F811
    """P1: a data line that is not JSON -> ProviderError(kind="stream"), no traceback."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("malformed", after=4)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"
    assert "malformed JSON" in info.value.message
    assert "Traceback" not in str(info.value)


async def test_p1_json_split_across_data_lines_parses(fake_llm, provider):  # noqa: F811
    """P1: SSE multi-line ``data:`` is joined before JSON parsing."""
    turn = Turn(thinking="t", text="Split\nacross lines", tool_calls=[("f", {"a": [1, 2]})], split_json=True)
    fake_llm.script(turn)
    response = await collect(provider.stream(request()))
    assert response.message.text == "Split\nacross lines"
    assert response.message.tool_calls[0].arguments == {"a": [1, 2]}


async def test_p1_invalid_tool_json_is_kept_raw(fake_llm, provider):  # noqa: F811
    """P1: tool input that is not valid JSON becomes {"_raw": ...} and is flagged."""
    fake_llm.script(
        Turn(
            raw_events=[
                {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t9", "name": "bash", "input": {}},
                },
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": '{"command": "ls'},
                },
                {"type": "content_block_stop", "index": 0},
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 3},
                },
                {"type": "message_stop"},
            ]
        )
    )
    accumulator = StreamAccumulator()
    async for event in provider.stream(request()):
        accumulator.add(event)
    assert accumulator.message.tool_calls == [ToolCallPart("t9", "bash", {"_raw": '{"command": "ls'})]
    assert "t9" in accumulator.invalid_tool_calls


async def test_p1_streamed_calls_reuse_the_connection(fake_llm, provider):  # noqa: F811
    """P1: the body is read to its end after message_stop, so the kept-alive connection
    serves the next call (no new TCP/TLS handshake per call)."""
    # chunk_delay: the end of the body comes after the final event, as over a real network.
    fake_llm.script(Turn(text="one", chunk_delay=0.02), Turn(text="two", chunk_delay=0.02))
    assert (await collect(provider.stream(request()))).message.text == "one"
    assert (await collect(provider.stream(request()))).message.text == "two"
    first, second = fake_llm.requests
    assert first.peer == second.peer
