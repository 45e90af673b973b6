"""P2 — OpenAI-compatible Chat Completions provider, over real HTTP against the fake."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agents.engine.types import (
    Completed,
    ImagePart,
    LLMRequest,
    Message,
    ProviderError,
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
    Usage,
)
from agents.providers.accumulate import collect
from agents.providers.openai_compat import OpenAICompatProvider
from agents.providers.registry import build_provider
from tests.fakes.fake_llm import FakeLLM, StreamFault, Turn
from tests.fakes.fixtures import fake_llm  # noqa: F401
from tests.fakes.network import block_network  # noqa: F401

KEY = "sk-openai-test-key-456"


@pytest.fixture
async def provider(fake_llm: FakeLLM) -> AsyncIterator[OpenAICompatProvider]:  # noqa: F811
    p = build_provider("openai_compatible", base_url=fake_llm.openai_base_url, api_key=KEY, name="gpt")
    assert isinstance(p, OpenAICompatProvider)
    yield p
    await p.aclose()


def request(**kwargs: object) -> LLMRequest:
    defaults: dict[str, object] = {"model": "gpt-test", "messages": [Message.user("hi")]}
    defaults.update(kwargs)
    return LLMRequest(**defaults)  # type: ignore[arg-type]


async def test_p2_stream_normalises_every_event_kind(fake_llm, provider):  # noqa: F811
    """P2: reasoning_content, content, tool_calls deltas, finish reason, usage, [DONE]."""
    fake_llm.script(
        Turn(
            thinking="Considering.",
            text="Calling two tools.",
            tool_calls=[("bash", {"command": "ls"}), ("read_file", {"path": "x"})],
            usage=Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60),
            chunk_size=3,
        )
    )
    events = [e async for e in provider.stream(request())]

    assert "".join(e.text for e in events if isinstance(e, ThinkingDelta)) == "Considering."
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(texts) > 1
    assert "".join(texts) == "Calling two tools."
    starts = [e for e in events if isinstance(e, ToolUseStart)]
    assert [(s.index, s.id, s.name) for s in starts] == [
        (0, "call_fake_0", "bash"),
        (1, "call_fake_1", "read_file"),
    ]
    args = {
        i: "".join(e.partial_json for e in events if isinstance(e, ToolUseDelta) and e.index == i)
        for i in (0, 1)
    }
    assert args == {0: '{"command": "ls"}', 1: '{"path": "x"}'}
    assert [e.index for e in events if isinstance(e, ToolUseStop)] == [0, 1]
    # OpenAI counts cached tokens inside prompt_tokens; Usage splits them out.
    assert events[-1] == Completed(
        "tool_use", Usage(input_tokens=100, output_tokens=20, cache_read_tokens=60), "gpt-test"
    )


SCRIPTS = {
    "text": Turn(text="Hello, how can I help you today?"),
    "reasoning_and_tools": Turn(
        thinking="Two files needed.",
        text="Reading both.",
        tool_calls=[("read_file", {"path": "a.txt"}), ("read_file", {"path": "b.txt"})],
    ),
    "tool_only": Turn(tool_calls=[("get_current_time", {})]),
    "reasoning_key": Turn(thinking="OpenRouter style", text="hi", reasoning_key="reasoning"),
    "no_usage": Turn(text="Ollama-ish", omit_usage=True),
    "unicode": Turn(text="Grüße — 你好 🙂", tool_calls=[("echo", {"s": 'ñ\n"q"'})]),
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
async def test_p2_stream_and_complete_give_identical_messages(fake_llm, provider, name):  # noqa: F811
    """P2: the streamed and non-streamed call build the same message, stop and usage."""
    fake_llm.script(SCRIPTS[name], SCRIPTS[name])
    streamed = await collect(provider.stream(request()))
    completed = await provider.complete(request())
    assert streamed == completed


async def test_p2_message_parts_order(fake_llm, provider):  # noqa: F811
    """P2: reasoning, text, tool calls in order, arguments parsed."""
    fake_llm.script(SCRIPTS["reasoning_and_tools"])
    response = await collect(provider.stream(request()))
    assert response.message.parts == [
        ReasoningPart("Two files needed."),
        TextPart("Reading both."),
        ToolCallPart("call_fake_0", "read_file", {"path": "a.txt"}),
        ToolCallPart("call_fake_1", "read_file", {"path": "b.txt"}),
    ]


@pytest.mark.parametrize(
    ("canonical", "streamed"),
    [
        ("end_turn", True),
        ("max_tokens", True),
        ("refusal", True),
        ("end_turn", False),
        ("max_tokens", False),
        ("refusal", False),
    ],
)
async def test_p2_finish_reasons_are_mapped(fake_llm, provider, canonical, streamed):  # noqa: F811
    """P2: stop->end_turn, length->max_tokens, content_filter->refusal (tool_calls above)."""
    fake_llm.script(Turn(text="x", stop_reason=canonical))
    call = collect(provider.stream(request())) if streamed else provider.complete(request())
    assert (await call).stop_reason == canonical


async def test_p2_missing_usage_and_ids_are_tolerated(fake_llm, provider):  # noqa: F811
    """P2: no usage -> zeros; tool calls without ids get generated, distinct ids."""
    turn = Turn(tool_calls=[("a", {}), ("b", {"x": 1})], omit_usage=True, omit_tool_ids=True)
    fake_llm.script(turn, turn)
    for call in (collect(provider.stream(request())), provider.complete(request())):
        response = await call
        assert response.usage == Usage()
        ids = [c.id for c in response.message.tool_calls]
        assert all(i.startswith("call_") for i in ids)
        assert len(set(ids)) == 2
        assert [c.name for c in response.message.tool_calls] == ["a", "b"]


async def test_p2_request_wire_format(fake_llm, provider):  # noqa: F811
    """P2: Bearer key, system first, tools, tool results as role tool, image data URLs."""
    fake_llm.script(Turn(text="ok"))
    history = [
        Message("user", [TextPart("what is this?"), ImagePart("image/jpeg", "AAAA")]),
        Message(
            "assistant",
            [ReasoningPart("hm"), TextPart("Let me look."), ToolCallPart("c1", "look", {"zoom": 2})],
        ),
        Message(
            "tool",
            [
                ToolResultPart("c1", "look", "a cat"),
            ],
        ),
        Message.user("thanks"),
    ]
    req = request(
        messages=history,
        system="Be brief.",
        temperature=0.2,
        tools=[ToolDefinition("look", "Look", {"type": "object"})],
    )
    await collect(provider.stream(req))

    sent = fake_llm.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.json
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["temperature"] == 0.2
    assert body["tools"] == [
        {
            "type": "function",
            "function": {"name": "look", "description": "Look", "parameters": {"type": "object"}},
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"zoom": 2}'}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a cat"},
        {"role": "user", "content": "thanks"},
    ]


async def test_p2_extra_body_is_merged_last(fake_llm, provider):  # noqa: F811
    """P2: per-provider/model body overrides win; a None value removes a key."""
    fake_llm.script(Turn(text="ok"))
    req = request(
        max_tokens=100,
        extra_body={
            "max_tokens": None,
            "max_completion_tokens": 100,
            "temperature": 0,
            "provider": {"order": ["groq"]},
            "stream_options": {"include_usage": False},
        },
    )
    await provider.complete(req)
    body = fake_llm.requests[0].json
    assert "max_tokens" not in body
    assert body["max_completion_tokens"] == 100
    assert body["temperature"] == 0
    assert body["provider"] == {"order": ["groq"]}
    assert body["stream_options"] == {"include_usage": False}


async def test_p2_malformed_json_is_a_readable_stream_error(fake_llm, provider):  # noqa: F811
    """P2: a data line that is not JSON -> ProviderError(kind="stream")."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("malformed", after=2)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"
    assert "malformed JSON" in str(info.value)
    assert "Traceback" not in str(info.value)


async def test_p2_json_split_across_data_lines_parses(fake_llm, provider):  # noqa: F811
    """P2: one JSON chunk over several ``data:`` lines is one SSE event (httpx-sse)."""
    fake_llm.script(Turn(thinking="r", text="a\nb", tool_calls=[("f", {"k": "v"})], split_json=True))
    response = await collect(provider.stream(request()))
    assert response.message.text == "a\nb"
    assert response.message.tool_calls[0].arguments == {"k": "v"}


async def test_p2_error_chunk_mid_stream(fake_llm, provider):  # noqa: F811
    """P2: an error object after content -> ProviderError with the vendor's message."""
    fake_llm.script(
        Turn(
            text="Hello world",
            fault=StreamFault("error", after=3, error_type="server_error", message="upstream exploded"),
        )
    )
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "server"
    assert "upstream exploded" in str(info.value)
    assert len(fake_llm.requests) == 1


async def test_p2_stream_cut_is_a_stream_error(fake_llm, provider):  # noqa: F811
    """P2: the connection dropping after content -> ProviderError(kind="stream")."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("cut", after=3)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"


async def test_p2_stream_without_finish_is_a_stream_error(fake_llm, provider):  # noqa: F811
    """P2: a clean EOF with neither finish_reason nor [DONE] -> kind "stream"."""
    fake_llm.script(Turn(text="Hello world", fault=StreamFault("truncate", after=3)))
    with pytest.raises(ProviderError) as info:
        await collect(provider.stream(request()))
    assert info.value.kind == "stream"


async def test_p2_stop_with_tool_calls_means_tool_use(fake_llm, provider):  # noqa: F811
    """P2: servers (Ollama) that answer finish_reason "stop" with tool calls still run tools;
    a stream ending without [DONE] after a finish reason is complete."""

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"model": "llama", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    fake_llm.script(
        Turn(
            raw_events=[
                chunk({"role": "assistant", "content": None}),
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c7",
                                "type": "function",
                                "function": {"name": "ls", "arguments": '{"p": "/"}'},
                            }
                        ]
                    }
                ),
                chunk({}, "stop"),
            ]
        )
    )
    response = await collect(provider.stream(request()))
    assert response.stop_reason == "tool_use"
    assert response.message.tool_calls == [ToolCallPart("c7", "ls", {"p": "/"})]
    assert response.model == "llama"


async def test_p2_tool_call_arguments_before_name_are_held(fake_llm, provider):  # noqa: F811
    """P2: argument fragments that arrive before the function name are not lost."""

    def chunk(delta: dict, finish: str | None = None) -> dict:
        return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    fake_llm.script(
        Turn(
            raw_events=[
                chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"arguments": '{"a"'}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": ": 1}"}}]}),
                chunk({}, "tool_calls"),
                "[DONE]",
            ]
        )
    )
    response = await collect(provider.stream(request()))
    assert response.message.tool_calls == [ToolCallPart("c1", "f", {"a": 1})]


async def test_p2_works_against_ollama_style_path_without_v1(fake_llm):  # noqa: F811
    """P2: base_url is used as given: {base_url}/chat/completions."""
    provider = build_provider("ollama", base_url=fake_llm.url, api_key="")
    fake_llm.script(Turn(text="hi"))
    try:
        assert (await provider.complete(request())).message.text == "hi"
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert fake_llm.requests[0].path == "/chat/completions"
    assert "authorization" not in {k.lower() for k in fake_llm.requests[0].headers}


async def test_p2_streamed_calls_reuse_the_connection(fake_llm, provider):  # noqa: F811
    """P2: the stream is read past [DONE] so the connection goes back to the pool."""
    # chunk_delay: the end of the body comes after the final event, as over a real network.
    fake_llm.script(Turn(text="one", chunk_delay=0.02), Turn(text="two", chunk_delay=0.02))
    for _ in range(2):
        await collect(provider.stream(request()))
    first, second = fake_llm.requests
    assert first.peer == second.peer
