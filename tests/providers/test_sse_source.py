"""Events read straight from aiohttp (agents.providers.sse_source) are httpx-sse's
events: the same for awkward bodies (CRLF and CR line ends, comments, multi-line data,
a character split across chunks, a last event without its blank line), a compressed
body is left to httpx, and a body that is not an event stream is refused."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator

import httpx
import httpx_aiohttp
import pytest
from aiohttp import web
from httpx_sse import SSEError, aconnect_sse

from agents.providers.sse_source import aiohttp_response, sse_events

BODY = (
    "data: one\n\n"
    ": a comment\r\n"
    "event: two\r\ndata: first line\r\ndata: second line\r\n\r\n"
    "id: 3\rdata: caf\u00e9 \u2603\r\r"
    'retry: 1000\ndata: {"k": 1}\n\n'
    "data: no blank line at the end"
).encode()


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def stream(request: web.Request) -> web.StreamResponse:
        kind = request.query.get("kind", "sse")
        headers = {"Content-Type": "text/event-stream" if kind != "html" else "text/html"}
        if kind == "gzip":
            headers["Content-Encoding"] = "gzip"
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        body = gzip.compress(BODY) if kind == "gzip" else BODY
        for start in range(0, len(body), 7):  # splits lines, CRLFs and characters
            await response.write(body[start : start + 7])
            await asyncio.sleep(0)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_get("/stream", stream)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/stream"
    await runner.cleanup()


async def read(
    client: httpx.AsyncClient, url: str, *, direct: bool
) -> list[tuple[str, str, str, int | None]]:
    async with client, aconnect_sse(client, "GET", url) as source:
        if direct:
            assert aiohttp_response(source) is not None
        events = sse_events(source) if direct else source.aiter_sse()
        return [(e.event, e.data, e.id, e.retry) async for e in events]


async def test_events_read_from_aiohttp_are_httpx_sses_events(server: str) -> None:
    expected = await read(httpx.AsyncClient(), server, direct=False)
    assert [data for _event, data, _id, _retry in expected] == [
        "one",
        "first line\nsecond line",
        "caf\u00e9 \u2603",
        '{"k": 1}',
    ]
    assert await read(httpx_aiohttp.HttpxAiohttpClient(), server, direct=True) == expected


async def test_a_compressed_body_is_decoded_by_httpx(server: str) -> None:
    expected = await read(httpx.AsyncClient(), server, direct=False)
    async with (
        httpx_aiohttp.HttpxAiohttpClient() as client,
        aconnect_sse(client, "GET", f"{server}?kind=gzip") as source,
    ):
        assert aiohttp_response(source) is None
        got = [(e.event, e.data, e.id, e.retry) async for e in sse_events(source)]
    assert got == expected


async def test_a_body_that_is_not_an_event_stream_is_refused(server: str) -> None:
    async with (
        httpx_aiohttp.HttpxAiohttpClient() as client,
        aconnect_sse(client, "GET", f"{server}?kind=html") as source,
    ):
        with pytest.raises(SSEError, match="text/html"):
            sse_events(source)
