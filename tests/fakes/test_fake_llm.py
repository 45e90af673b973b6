"""The fake LLM server itself (used by P1-P4 tests) and the network blocker."""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import httpx
import pytest

from tests.fakes.fake_llm import FakeLLM, StreamFault, Turn, iter_sse_payloads
from tests.fakes.fixtures import fake_llm  # noqa: F401
from tests.fakes.network import NetworkBlocked, block_network  # noqa: F401

ANTHROPIC_BODY = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
OPENAI_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_fake_serves_scripted_turns_in_order_from_sync_code(fake_llm):  # noqa: F811
    """Fake LLM: usable from a sync test; each request takes the next turn."""
    fake_llm.script(Turn(text="first"), Turn(text="second"))
    with httpx.Client() as client:
        one = client.post(f"{fake_llm.url}/v1/messages", json=ANTHROPIC_BODY).json()
        two = client.post(
            f"{fake_llm.openai_base_url}/chat/completions",
            json=OPENAI_BODY,
            headers={"authorization": "Bearer k"},
        ).json()
    assert one["content"] == [{"type": "text", "text": "first"}]
    assert two["choices"][0]["message"]["content"] == "second"
    assert [r.path for r in fake_llm.requests] == ["/v1/messages", "/v1/chat/completions"]
    assert fake_llm.requests[1].headers["authorization"] == "Bearer k"
    assert fake_llm.requests[0].json == ANTHROPIC_BODY


async def test_fake_streams_text_in_several_deltas_from_async_code(fake_llm):  # noqa: F811
    """Fake LLM: usable from an async test; text arrives chunked."""
    fake_llm.script(Turn(text="abcdefghij", chunk_size=3))
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{fake_llm.url}/v1/messages", json={**ANTHROPIC_BODY, "stream": True})
    assert response.headers["content-type"].startswith("text/event-stream")
    payloads = [json.loads(p) for p in iter_sse_payloads(response.content)]
    deltas = [p["delta"]["text"] for p in payloads if p["type"] == "content_block_delta"]
    assert deltas == ["abc", "def", "ghi", "j"]
    assert payloads[-1]["type"] == "message_stop"


def test_fake_openai_stream_ends_with_usage_and_done(fake_llm):  # noqa: F811
    """Fake LLM: OpenAI streams send a usage chunk when asked, then [DONE]."""
    fake_llm.script(Turn(text="hi"))
    body = {**OPENAI_BODY, "stream": True, "stream_options": {"include_usage": True}}
    raw = httpx.post(f"{fake_llm.openai_base_url}/chat/completions", json=body).content
    payloads = list(iter_sse_payloads(raw))
    assert payloads[-1] == "[DONE]"
    assert json.loads(payloads[-2])["usage"]["completion_tokens"] == 5


def test_fake_lists_models(fake_llm):  # noqa: F811
    """Fake LLM: GET /v1/models answers without consuming a turn."""
    data = httpx.get(f"{fake_llm.openai_base_url}/models").json()
    assert [m["id"] for m in data["data"]] == ["fake-model"]


def test_fake_error_turn_sends_status_and_retry_after(fake_llm):  # noqa: F811
    """Fake LLM: HTTP error turns carry the status, Retry-After and a vendor body."""
    fake_llm.script(Turn.http_error(429, retry_after=3, message="slow down"))
    response = httpx.post(f"{fake_llm.url}/v1/messages", json=ANTHROPIC_BODY)
    assert response.status_code == 429
    assert response.headers["retry-after"] == "3"
    assert response.json()["error"] == {"type": "rate_limit_error", "message": "slow down"}


def test_fake_split_json_spreads_one_event_over_lines(fake_llm):  # noqa: F811
    """Fake LLM: split_json sends each JSON over several data: lines."""
    fake_llm.script(Turn(text="hi", split_json=True))
    raw = httpx.post(f"{fake_llm.url}/v1/messages", json={**ANTHROPIC_BODY, "stream": True}).content.decode()
    first_event = raw.split("\n\n")[0]
    assert first_event.count("data: ") > 3
    assert json.loads(next(iter_sse_payloads(raw.encode())))["type"] == "message_start"


def test_fake_cut_fault_drops_the_connection(fake_llm):  # noqa: F811
    """Fake LLM: a cut stream gives the client an incomplete body after HTTP 200."""
    fake_llm.script(Turn(text="hello", fault=StreamFault("cut", after=2)))
    body = {**ANTHROPIC_BODY, "stream": True}
    with httpx.stream("POST", f"{fake_llm.url}/v1/messages", json=body) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            response.read()


def test_fake_reports_unused_turns_and_unexpected_requests():
    """Fake LLM: problems() lists what the fixture fails the test on (STYLE 13)."""
    with FakeLLM() as fake:
        fake.script(Turn(text="used"), Turn(text="never used"))
        httpx.post(f"{fake.url}/v1/messages", json=ANTHROPIC_BODY)
        assert fake.remaining == 1
        problems = fake.problems()
        assert len(problems) == 1
        assert "never used" in problems[0]

        fake.script()  # nothing more
        httpx.post(f"{fake.url}/v1/messages", json=ANTHROPIC_BODY)  # takes "never used"
        unexpected = httpx.post(f"{fake.url}/v1/messages", json=ANTHROPIC_BODY)
        assert unexpected.status_code == 500
        httpx.get(f"{fake.url}/nowhere")
        problems = fake.problems()
        assert len(problems) == 2
        assert all("unexpected request" in p for p in problems)
        with pytest.raises(AssertionError, match="unexpected request"):
            fake.verify()


def test_fake_default_reply_answers_everything():
    """Fake LLM: default-reply mode (benchmarks) answers any number of requests."""
    with FakeLLM(default_reply=Turn(text="always")) as fake:
        for _ in range(3):
            body = httpx.post(f"{fake.url}/v1/messages", json=ANTHROPIC_BODY).json()
            assert body["content"][0]["text"] == "always"
        assert fake.problems() == []


async def test_fake_runs_on_the_current_loop_and_applies_latency():
    """Fake LLM: astart() serves on the running loop; latency delays each request."""
    async with FakeLLM(latency=0.2, default_reply=Turn(text="x")) as fake, httpx.AsyncClient() as client:
        start = asyncio.get_running_loop().time()
        await client.post(f"{fake.url}/v1/messages", json=ANTHROPIC_BODY)
        assert asyncio.get_running_loop().time() - start >= 0.2


async def test_fake_handles_500_concurrent_streams(fake_llm):  # noqa: F811
    """Fake LLM: 500 streams open at once all complete (capacity, not speed)."""
    fake_llm.default_reply = Turn(text="concurrent reply text", chunk_delay=0.01)
    fake_llm.record = False
    # aiohttp's client: httpx's own pool is slow at this concurrency (encode/httpx#3215).
    connector = aiohttp.TCPConnector(limit=600)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> int:
            async with session.post(
                f"{fake_llm.url}/v1/messages", json={**ANTHROPIC_BODY, "stream": True}
            ) as response:
                return (await response.read()).count(b"event: message_stop")

        results = await asyncio.gather(*(one() for _ in range(500)))
    assert results == [1] * 500


def test_network_blocker_refuses_non_loopback():
    """Tests never reach the real network: non-loopback connects and lookups raise."""
    with socket.socket() as s, pytest.raises(NetworkBlocked):
        s.connect(("10.255.255.1", 80))
    with pytest.raises(NetworkBlocked):
        socket.getaddrinfo("example.com", 443)
    with pytest.raises(NetworkBlocked), httpx.Client() as client:
        client.get("http://192.0.2.1/")
    assert socket.getaddrinfo("localhost", 80)


def test_network_blocker_allows_loopback(fake_llm):  # noqa: F811
    """Loopback (the fake LLM) stays reachable."""
    assert httpx.get(f"{fake_llm.openai_base_url}/models").status_code == 200
