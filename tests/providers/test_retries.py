"""P3 — retries: 429/529/5xx/connect errors, backoff with jitter, Retry-After, bounds.

Every test goes through the fake LLM over real HTTP; the retry sleep is patched so
nothing waits for real and the requested delays can be asserted.
"""

from __future__ import annotations

import asyncio
import email.utils
import socket
import time
from collections.abc import AsyncIterator

import pytest

from agents.engine.types import LLMRequest, Message, ProviderError, ProviderEvent, TextDelta
from agents.providers import base
from agents.providers.accumulate import collect
from agents.providers.base import HttpProvider, parse_retry_after, with_retries
from agents.providers.registry import build_provider
from tests.fakes.fake_llm import FakeLLM, StreamFault, Turn
from tests.fakes.fixtures import fake_llm  # noqa: F401
from tests.fakes.network import block_network  # noqa: F401


async def drain(stream: AsyncIterator[ProviderEvent], seen: list[ProviderEvent]) -> None:
    """Consume a stream, keeping what arrived before any error."""
    async for event in stream:
        seen.append(event)


KEY = "sk-super-secret-key-789"
REQUEST = LLMRequest(model="m", messages=[Message.user("hi")])


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record retry sleeps instead of sleeping."""
    calls: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        calls.append(seconds)

    monkeypatch.setattr(base, "retry_sleep", fake_sleep)
    return calls


@pytest.fixture(params=["aiohttp", "httpx"])
def transport(request, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both HTTP transports must map failures the same way."""
    monkeypatch.setattr(base, "DEFAULT_TRANSPORT", request.param)
    return request.param


@pytest.fixture(params=["anthropic", "openai_compatible"])
async def provider(request, fake_llm: FakeLLM, transport) -> AsyncIterator[HttpProvider]:  # noqa: F811
    url = fake_llm.url if request.param == "anthropic" else fake_llm.openai_base_url
    p = build_provider(request.param, base_url=url, api_key=KEY, timeout=5.0)
    assert isinstance(p, HttpProvider)
    assert p.transport == transport
    yield p
    await p.aclose()


@pytest.fixture(params=["stream", "complete"])
def call(request):
    """Run one call either streamed or not; both must retry the same way."""

    async def run(provider: HttpProvider):
        if request.param == "stream":
            return await collect(provider.stream(REQUEST))
        return await provider.complete(REQUEST)

    return run


async def test_p3_429_honours_retry_after_seconds(fake_llm, provider, call, sleeps):  # noqa: F811
    """P3: a 429 with Retry-After: 7 waits exactly 7 s, then succeeds."""
    fake_llm.script(Turn.http_error(429, retry_after=7), Turn(text="done"))
    response = await call(provider)
    assert response.message.text == "done"
    assert sleeps == [7.0]
    assert len(fake_llm.requests) == 2


async def test_p3_529_honours_retry_after_http_date(fake_llm, provider, call, sleeps):  # noqa: F811
    """P3: a 529 (overloaded) with an HTTP-date Retry-After waits until that date."""
    when = email.utils.formatdate(time.time() + 30, usegmt=True)
    fake_llm.script(Turn.http_error(529, retry_after=when), Turn(text="done"))
    assert (await call(provider)).message.text == "done"
    assert len(sleeps) == 1
    assert 27.0 <= sleeps[0] <= 30.0


async def test_p3_5xx_backs_off_with_full_jitter(fake_llm, provider, call, sleeps):  # noqa: F811
    """P3: 500s without Retry-After back off exponentially with jitter, then succeed."""
    fake_llm.script(Turn.http_error(500), Turn.http_error(502), Turn(text="ok"))
    assert (await call(provider)).message.text == "ok"
    assert len(sleeps) == 2
    assert 0.0 <= sleeps[0] <= base.BASE_DELAY
    assert 0.0 <= sleeps[1] <= base.BASE_DELAY * 2


async def test_p3_attempts_are_bounded(fake_llm, provider, call, sleeps):  # noqa: F811
    """P3: with max_retries=3 a persistent 503 is tried 4 times, then surfaces."""
    fake_llm.script(*[Turn.http_error(503, message="try later") for _ in range(4)])
    with pytest.raises(ProviderError) as info:
        await call(provider)
    assert info.value.kind == "server"
    assert info.value.status == 503
    assert "try later" in str(info.value)
    assert len(fake_llm.requests) == 4
    assert len(sleeps) == 3


async def test_p3_max_retries_setting_is_used(fake_llm, sleeps, transport):  # noqa: F811
    """P3: the retry bound is a setting (0 = a single attempt)."""
    provider = build_provider("anthropic", base_url=fake_llm.url, api_key=KEY, max_retries=0)
    fake_llm.script(Turn.http_error(429, retry_after=1))
    try:
        with pytest.raises(ProviderError) as info:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert info.value.kind == "rate_limited"
    assert info.value.retry_after == 1.0
    assert sleeps == []


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "bad_request"),
        (401, "auth"),
        (403, "auth"),
        (404, "not_found"),
        (422, "bad_request"),
    ],
)
async def test_p3_other_4xx_surface_at_once(fake_llm, provider, call, sleeps, status, kind):  # noqa: F811
    """P3: a 4xx other than 429 is not retried; the vendor's message is shown."""
    fake_llm.script(Turn.http_error(status, message="messages: field required"))
    with pytest.raises(ProviderError) as info:
        await call(provider)
    assert info.value.kind == kind
    assert not info.value.retryable
    assert "messages: field required" in str(info.value)
    assert f"HTTP {status}" in str(info.value)
    assert sleeps == []
    assert len(fake_llm.requests) == 1


async def test_p3_api_key_never_appears_in_error_text(fake_llm, provider, call, sleeps):  # noqa: F811
    """P3: even when the vendor echoes the key, the error text does not carry it."""
    fake_llm.script(Turn.http_error(401, message=f"invalid x-api-key: {KEY}"))
    with pytest.raises(ProviderError) as info:
        await call(provider)
    assert KEY not in str(info.value)
    assert KEY not in repr(info.value.args)
    assert KEY not in repr(provider)
    assert "[redacted]" in str(info.value)


async def test_p3_connect_errors_are_retried_then_reported(sleeps, transport):
    """P3: nothing listening -> kind "connection", retried max_retries times."""
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    provider = build_provider("anthropic", base_url=f"http://127.0.0.1:{port}", api_key=KEY, max_retries=2)
    try:
        with pytest.raises(ProviderError) as info:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert info.value.kind == "connection"
    assert "could not connect" in str(info.value)
    assert len(sleeps) == 2


async def test_p3_slow_first_byte_times_out_and_is_retried(fake_llm, sleeps, transport):  # noqa: F811
    """P3: a first byte slower than the timeout is a retryable timeout."""
    provider = build_provider(
        "openai_compatible", base_url=fake_llm.openai_base_url, api_key=KEY, timeout=0.2
    )
    fake_llm.script(Turn(text="late", delay=1.0), Turn(text="on time"))
    try:
        response = await collect(provider.stream(REQUEST))
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert response.message.text == "on time"
    assert len(sleeps) == 1


@pytest.mark.parametrize("kind", ["anthropic", "openai_compatible"])
async def test_p3_a_stream_that_stalls_mid_answer_times_out(fake_llm, sleeps, transport, kind):  # noqa: F811
    """P3: the timeout bounds the gap between chunks too (without a timer per chunk): a
    stream that goes quiet after its first delta ends as a "timeout", not retried."""
    url = fake_llm.url if kind == "anthropic" else fake_llm.openai_base_url
    provider = build_provider(kind, base_url=url, api_key=KEY, timeout=0.3)
    # Anthropic's stream opens with two events that reach no caller, then the deltas.
    fake_llm.script(Turn(text="abcdefgh", chunk_size=2, fault=StreamFault("stall", after=4, pause=0.8)))
    seen: list[ProviderEvent] = []
    started = time.monotonic()
    try:
        with pytest.raises(ProviderError) as info:
            await drain(provider.stream(REQUEST), seen)
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert any(isinstance(e, TextDelta) for e in seen)
    assert info.value.kind == "timeout"
    assert "did not answer in time (no data for 0.3 s)" in str(info.value)
    assert time.monotonic() - started < 0.75  # before the stream would have resumed
    assert sleeps == []
    assert len(fake_llm.requests) == 1


async def test_p3_a_slow_consumer_is_not_a_stalled_stream(fake_llm, transport):  # noqa: F811
    """P3: time the caller spends with an event is not the provider's silence."""
    provider = build_provider(
        "openai_compatible", base_url=fake_llm.openai_base_url, api_key=KEY, timeout=0.2
    )
    fake_llm.script(Turn(text="abcdefgh", chunk_size=2))
    text = ""
    try:
        async for event in provider.stream(REQUEST):
            if isinstance(event, TextDelta):
                text += event.text
                await asyncio.sleep(0.3)  # longer than the timeout, per event
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert text == "abcdefgh"


async def test_p3_timeouts_bounded_too(fake_llm, sleeps, transport):  # noqa: F811
    """P3: persistent slowness ends as a readable kind "timeout" error."""
    provider = build_provider("anthropic", base_url=fake_llm.url, api_key=KEY, timeout=0.2, max_retries=1)
    fake_llm.script(Turn(text="late", delay=1.0), Turn(text="late", delay=1.0))
    try:
        with pytest.raises(ProviderError) as info:
            await provider.complete(REQUEST)
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert info.value.kind == "timeout"
    assert "did not answer in time" in str(info.value)


async def test_p3_stream_cut_before_any_event_is_retried(fake_llm, provider, sleeps):  # noqa: F811
    """P3: a stream cut after HTTP 200 but before any event reached the caller retries."""
    fake_llm.script(Turn(text="lost", fault=StreamFault("cut", after=1)), Turn(text="whole"))
    response = await collect(provider.stream(REQUEST))
    assert response.message.text == "whole"
    assert len(sleeps) == 1


async def test_p3_stream_is_never_retried_after_an_event(fake_llm, provider, sleeps):  # noqa: F811
    """P3: once the caller has seen a delta, a cut surfaces instead of replaying."""
    fake_llm.script(Turn(text="Hello there world", chunk_size=2, fault=StreamFault("cut", after=6)))
    seen: list[ProviderEvent] = []
    with pytest.raises(ProviderError) as info:
        await drain(provider.stream(REQUEST), seen)
    assert any(isinstance(e, TextDelta) for e in seen)
    assert info.value.kind == "stream"
    assert sleeps == []
    assert len(fake_llm.requests) == 1


async def test_p3_overloaded_error_event_before_content_is_retried(fake_llm, sleeps, transport):  # noqa: F811
    """P3: Anthropic's in-stream overloaded_error before any content is retried."""
    provider = build_provider("anthropic", base_url=fake_llm.url, api_key=KEY)
    fake_llm.script(Turn(text="x", fault=StreamFault("error", after=1)), Turn(text="fine"))
    try:
        response = await collect(provider.stream(REQUEST))
    finally:
        await provider.aclose()  # type: ignore[attr-defined]
    assert response.message.text == "fine"
    assert len(sleeps) == 1


async def test_p3_too_long_retry_after_is_not_waited_out(fake_llm, provider, sleeps):  # noqa: F811
    """P3: a Retry-After beyond the cap surfaces at once, carrying retry_after."""
    fake_llm.script(Turn.http_error(429, retry_after=3600))
    with pytest.raises(ProviderError) as info:
        await provider.complete(REQUEST)
    assert info.value.kind == "rate_limited"
    assert info.value.retry_after == 3600.0
    assert sleeps == []


def test_p3_parse_retry_after_forms():
    """P3: Retry-After as seconds, HTTP-date, retry-after-ms; garbage ignored."""
    now = 1_700_000_000.0
    date = email.utils.formatdate(now + 12, usegmt=True)
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after": date}, now=now) == pytest.approx(12.0)
    assert parse_retry_after({"retry-after": email.utils.formatdate(now - 5, usegmt=True)}, now=now) == 0.0
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


async def test_p3_with_retries_passes_through_non_retryable_and_counts():
    """P3: with_retries retries only retryable errors, up to the bound."""
    attempts = []
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)

    async def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise ProviderError("server", "boom", retryable=True)
        return "ok"

    assert await with_retries(flaky, max_retries=5, sleep=record) == "ok"
    assert len(attempts) == 3
    assert len(delays) == 2

    async def fatal() -> str:
        raise ProviderError("auth", "no", retryable=False)

    with pytest.raises(ProviderError):
        await with_retries(fatal, max_retries=5, sleep=record)
    assert len(delays) == 2
