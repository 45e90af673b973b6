"""A fake LLM that is a real HTTP server, scripted turn by turn.

It speaks Anthropic (``POST /v1/messages``) and OpenAI Chat Completions
(``POST /v1/chat/completions`` or ``/chat/completions``, ``GET /v1/models``), streamed
and not, so providers are tested over real sockets with no HTTP mocking::

    fake.script(Turn(text="Hello"), Turn(tool_calls=[("bash", {"cmd": "ls"})]))
    provider = build_provider("anthropic", base_url=fake.url, api_key="k")

Each request takes the next scripted :class:`Turn`; with none left it answers with
:attr:`FakeLLM.default_reply` if set, else it records an *unexpected request* (and
answers 500). :meth:`FakeLLM.problems` lists unused turns and unexpected requests; the
``fake_llm`` fixture fails the test on either (STYLE rule 13).

Faults per turn: ``status`` (429/529/500 … with ``retry_after``), ``delay`` (slow first
byte), ``fault=StreamFault("cut" | "truncate" | "error" | "malformed", after=n)``
after HTTP 200, ``split_json`` (each JSON spread over several ``data:`` lines).
``latency`` delays every request (benchmarks). ``python -m tests.fakes.fake_llm``
serves a default reply in its own process.

Runs in a background thread with its own loop (``start``/``stop``, usable from sync
and async tests) or on the current loop (``astart``/``astop``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

from agents.engine.types import Usage

Wire = Literal["anthropic", "openai"]

# Canonical stop reason -> OpenAI finish_reason.
_OPENAI_FINISH = {
    "end_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "refusal": "content_filter",
    "stop_sequence": "stop",
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


@dataclass(frozen=True)
class StreamFault:
    """A fault injected into a streamed response after HTTP 200.

    ``kind``: ``cut`` drops the connection mid-body; ``truncate`` ends the body cleanly
    but early (no final events); ``error`` sends the vendor's error object; ``malformed``
    sends a data line that is not JSON; ``stall`` keeps the connection open without a
    byte for ``pause`` seconds, then ends the body. ``after`` is how many SSE events go
    out first.
    """

    kind: Literal["cut", "truncate", "error", "malformed", "stall"]
    after: int = 0
    pause: float = 5.0
    error_type: str = ""  # default: overloaded_error (Anthropic) / server_error (OpenAI)
    message: str = "Overloaded"


@dataclass
class Turn:
    """One scripted model response, or a fault in place of one."""

    text: str = ""
    thinking: str = ""
    # (name, arguments) or (name, arguments, id)
    tool_calls: list[tuple[Any, ...]] = field(default_factory=list)
    usage: Usage | None = None
    stop_reason: str | None = None  # canonical; default tool_use if tool calls else end_turn
    model: str | None = None  # default: the requested model
    chunk_size: int = 4  # characters per text/thinking/argument delta
    chunk_delay: float = 0.0  # pause between streamed events
    # faults
    status: int | None = None  # answer with this HTTP error instead
    retry_after: str | float | None = None
    error_message: str = "fake error"
    delay: float = 0.0  # before the first byte
    fault: StreamFault | None = None
    split_json: bool = False
    # wire quirks of OpenAI-compatible servers
    reasoning_key: str = "reasoning_content"
    omit_usage: bool = False
    omit_tool_ids: bool = False
    signature: str = "fake-signature"
    # escape hatches: data payloads streamed verbatim / JSON body returned verbatim
    raw_events: list[dict[str, Any] | str] | None = None
    raw_body: dict[str, Any] | None = None

    @classmethod
    def http_error(
        cls, status: int, *, retry_after: str | float | None = None, message: str = "fake error"
    ) -> Turn:
        return cls(status=status, retry_after=retry_after, error_message=message)

    def calls(self, wire: Wire) -> list[tuple[str, dict[str, Any], str]]:
        prefix = "toolu_fake_" if wire == "anthropic" else "call_fake_"
        out = []
        for i, call in enumerate(self.tool_calls):
            name, args = call[0], call[1]
            out.append((name, args, call[2] if len(call) > 2 else f"{prefix}{i}"))
        return out

    def final_stop(self) -> str:
        return self.stop_reason or ("tool_use" if self.tool_calls else "end_turn")

    def final_usage(self) -> Usage:
        return self.usage if self.usage is not None else Usage(input_tokens=10, output_tokens=5)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    json: Any
    wire: Wire | None = None
    peer: Any = None  # client (host, port): same value = same kept-alive connection


def _chunks(text: str, size: int) -> list[str]:
    size = max(1, size)
    return [text[i : i + size] for i in range(0, len(text), size)]


# ------------------------------------------------------------------ wire rendering


def _anthropic_events(turn: Turn, model: str) -> list[tuple[str | None, dict[str, Any]]]:
    usage = turn.final_usage()
    events: list[tuple[str | None, dict[str, Any]]] = []

    def add(data: dict[str, Any]) -> None:
        events.append((data["type"], data))

    add(
        {
            "type": "message_start",
            "message": {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": 1,
                    "cache_read_input_tokens": usage.cache_read_tokens,
                    "cache_creation_input_tokens": usage.cache_write_tokens,
                },
            },
        }
    )
    add({"type": "ping"})
    index = 0
    if turn.thinking:
        add(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "thinking", "thinking": ""},
            }
        )
        for piece in _chunks(turn.thinking, turn.chunk_size):
            add(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "thinking_delta", "thinking": piece},
                }
            )
        add(
            {
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "signature_delta", "signature": turn.signature},
            }
        )
        add({"type": "content_block_stop", "index": index})
        index += 1
    if turn.text:
        add({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
        for piece in _chunks(turn.text, turn.chunk_size):
            add(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "text_delta", "text": piece},
                }
            )
        add({"type": "content_block_stop", "index": index})
        index += 1
    for name, args, call_id in turn.calls("anthropic"):
        add(
            {
                "type": "content_block_start",
                "index": index,
                "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
            }
        )
        for piece in _chunks(json.dumps(args), turn.chunk_size):
            add(
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": piece},
                }
            )
        add({"type": "content_block_stop", "index": index})
        index += 1
    add(
        {
            "type": "message_delta",
            "delta": {"stop_reason": turn.final_stop(), "stop_sequence": None},
            "usage": {"output_tokens": usage.output_tokens},
        }
    )
    add({"type": "message_stop"})
    return events


def _anthropic_body(turn: Turn, model: str) -> dict[str, Any]:
    usage = turn.final_usage()
    content: list[dict[str, Any]] = []
    if turn.thinking:
        content.append({"type": "thinking", "thinking": turn.thinking, "signature": turn.signature})
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for name, args, call_id in turn.calls("anthropic"):
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": args})
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": turn.final_stop(),
        "stop_sequence": None,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
        },
    }


def _openai_usage(usage: Usage) -> dict[str, Any]:
    # OpenAI counts cached tokens inside prompt_tokens; there is no cache-write figure.
    return {
        "prompt_tokens": usage.input_tokens + usage.cache_read_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.input_tokens + usage.cache_read_tokens + usage.output_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens},
    }


def _openai_events(
    turn: Turn, model: str, include_usage: bool
) -> list[tuple[str | None, dict[str, Any] | str]]:
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    events: list[tuple[str | None, dict[str, Any] | str]] = [
        (None, chunk({"role": "assistant", "content": ""}))
    ]
    for piece in _chunks(turn.thinking, turn.chunk_size):
        events.append((None, chunk({turn.reasoning_key: piece})))
    for piece in _chunks(turn.text, turn.chunk_size):
        events.append((None, chunk({"content": piece})))
    for i, (name, args, call_id) in enumerate(turn.calls("openai")):
        start: dict[str, Any] = {"index": i, "type": "function", "function": {"name": name, "arguments": ""}}
        if not turn.omit_tool_ids:
            start["id"] = call_id
        events.append((None, chunk({"tool_calls": [start]})))
        for piece in _chunks(json.dumps(args), turn.chunk_size):
            events.append((None, chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})))
    events.append((None, chunk({}, _OPENAI_FINISH.get(turn.final_stop(), turn.final_stop()))))
    if include_usage and not turn.omit_usage:
        events.append(
            (
                None,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": _openai_usage(turn.final_usage()),
                },
            )
        )
    events.append((None, "[DONE]"))
    return events


def _openai_body(turn: Turn, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
    if turn.thinking:
        message[turn.reasoning_key] = turn.thinking
    calls = turn.calls("openai")
    if calls:
        message["tool_calls"] = []
        for name, args, call_id in calls:
            call: dict[str, Any] = {
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            if not turn.omit_tool_ids:
                call["id"] = call_id
            message["tool_calls"].append(call)
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": _OPENAI_FINISH.get(turn.final_stop(), turn.final_stop()),
            }
        ],
    }
    if not turn.omit_usage:
        body["usage"] = _openai_usage(turn.final_usage())
    return body


def _error_body(wire: Wire, status: int, message: str, error_type: str = "") -> dict[str, Any]:
    if wire == "anthropic":
        kind = error_type or _ANTHROPIC_ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    kind = error_type or ("rate_limit_exceeded" if status == 429 else "server_error")
    return {"error": {"message": message, "type": kind, "code": None}}


def _sse(event: str | None, data: dict[str, Any] | str, split: bool) -> bytes:
    if isinstance(data, str):
        lines = [data]
    elif split:
        # indent=1 breaks lines only between tokens (newlines inside strings stay
        # escaped), so the SSE-joined lines are exactly this JSON.
        lines = json.dumps(data, indent=1).split("\n")
    else:
        lines = [json.dumps(data)]
    head = f"event: {event}\n" if event else ""
    return (head + "".join(f"data: {line}\n" for line in lines) + "\n").encode()


# --------------------------------------------------------------------------- server


class FakeLLM:
    """A scripted LLM server on 127.0.0.1 (random port). See the module docstring."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        default_reply: Turn | None = None,
        models: list[str] | None = None,
        record: bool = True,
    ) -> None:
        self.latency = latency
        self.default_reply = default_reply
        self.models = models or ["fake-model"]
        self.record = record  # benchmarks switch recording off
        self.requests: list[RecordedRequest] = []
        self.unexpected: list[RecordedRequest] = []
        self.errors: list[str] = []
        self._turns: deque[Turn] = deque()
        self._routes: list[tuple[str, Turn]] = []
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # ------------------------------------------------------------------ script

    def script(self, *turns: Turn) -> FakeLLM:
        """Queue turns; each request consumes the next one."""
        with self._lock:
            self._turns.extend(turns)
        return self

    def script_when(self, system_contains: str, turn: Turn) -> FakeLLM:
        """Answer the first request whose system prompt contains ``system_contains``
        with ``turn``, whenever it comes: for calls made concurrently with the
        scripted ones (the title, generated in the background)."""
        with self._lock:
            self._routes.append((system_contains, turn))
        return self

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._turns)

    def problems(self) -> list[str]:
        """What a test left wrong: unused turns, unexpected requests, handler errors."""
        out = []
        with self._lock:
            if self._turns:
                out.append(f"{len(self._turns)} scripted turn(s) never requested: {list(self._turns)!r}")
            for needle, _turn in self._routes:
                out.append(f"no request had a system prompt containing {needle!r}")
            for req in self.unexpected:
                out.append(f"unexpected request {req.method} {req.path}: {json.dumps(req.json)[:300]}")
            out.extend(f"fake LLM handler error: {e}" for e in self.errors)
        return out

    def verify(self) -> None:
        """Raise ``AssertionError`` listing :meth:`problems`, if any."""
        problems = self.problems()
        if problems:
            raise AssertionError("fake LLM: " + "\n".join(problems))

    # ---------------------------------------------------------------- addresses

    @property
    def url(self) -> str:
        """Root URL; the Anthropic provider's ``base_url``."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """The OpenAI-compatible provider's ``base_url`` (``…/v1``)."""
        return f"{self.url}/v1"

    # -------------------------------------------------------------- lifecycle

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._handle_anthropic)
        app.router.add_post("/v1/chat/completions", self._handle_openai)
        app.router.add_post("/chat/completions", self._handle_openai)
        app.router.add_get("/v1/models", self._handle_models)
        app.router.add_route("*", "/{tail:.*}", self._handle_unknown)
        return app

    async def astart(self, port: int = 0) -> FakeLLM:
        """Serve on the running loop."""
        self._runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        # A large backlog: 500 clients connecting at once must not hit SYN retries.
        site = web.TCPSite(self._runner, "127.0.0.1", port, backlog=4096)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def astop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start(self) -> FakeLLM:
        """Serve from a background thread with its own event loop."""
        loop = asyncio.new_event_loop()
        started = threading.Event()
        failure: list[BaseException] = []

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.astart())
            except BaseException as exc:
                failure.append(exc)
                started.set()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.astop())
            loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name="fake-llm", daemon=True)
        self._thread.start()
        started.wait(10)
        if failure:
            raise failure[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = self._thread = None

    def __enter__(self) -> FakeLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> FakeLLM:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # ---------------------------------------------------------------- handlers

    async def _record(self, request: web.Request, wire: Wire | None) -> RecordedRequest:
        try:
            body = await request.json() if request.can_read_body else None
        except ValueError:
            body = {"_invalid_json": (await request.text())[:1000]}
        headers = {k.lower(): v for k, v in request.headers.items()}  # lookups by lower case
        peer = request.transport.get_extra_info("peername") if request.transport else None
        rec = RecordedRequest(request.method, request.path, headers, body, wire, peer)
        if self.record:
            with self._lock:
                self.requests.append(rec)
        return rec

    def _next_turn(self, body: dict[str, Any] | None = None) -> Turn | None:
        system = _system_text(body or {})
        with self._lock:
            for index, (needle, turn) in enumerate(self._routes):
                if needle in system:
                    del self._routes[index]
                    return turn
            if self._turns:
                return self._turns.popleft()
        return self.default_reply

    async def _handle_unknown(self, request: web.Request) -> web.Response:
        rec = await self._record(request, None)
        with self._lock:
            self.unexpected.append(rec)
        return web.json_response({"error": {"message": "fake LLM: no such route"}}, status=404)

    async def _handle_models(self, request: web.Request) -> web.Response:
        await self._record(request, "openai")
        return web.json_response(
            {
                "object": "list",
                "data": [{"id": m, "object": "model", "created": 0, "owned_by": "fake"} for m in self.models],
            }
        )

    async def _handle_anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "anthropic")

    async def _handle_openai(self, request: web.Request) -> web.StreamResponse:
        return await self._handle(request, "openai")

    async def _handle(self, request: web.Request, wire: Wire) -> web.StreamResponse:
        rec = await self._record(request, wire)
        turn = self._next_turn(rec.json if isinstance(rec.json, dict) else None)
        if turn is None:
            with self._lock:
                self.unexpected.append(rec)
            return web.json_response(
                _error_body(wire, 500, "fake LLM: unexpected request (no scripted turn left)"),
                status=500,
            )
        try:
            return await self._respond(request, wire, turn, rec.json or {})
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # a bug in a script must fail the test, not hang it
            with self._lock:
                self.errors.append(f"{type(exc).__name__}: {exc}")
            raise

    async def _respond(
        self, request: web.Request, wire: Wire, turn: Turn, body: dict[str, Any]
    ) -> web.StreamResponse:
        if self.latency:
            await asyncio.sleep(self.latency)
        if turn.delay:
            await asyncio.sleep(turn.delay)
        if turn.status:
            headers = {}
            if turn.retry_after is not None:
                headers["retry-after"] = str(turn.retry_after)
            return web.json_response(
                _error_body(wire, turn.status, turn.error_message),
                status=turn.status,
                headers=headers,
            )
        model = turn.model or str(body.get("model") or "fake-model")
        if not body.get("stream"):
            if turn.raw_body is not None:
                return web.json_response(turn.raw_body)
            payload = _anthropic_body(turn, model) if wire == "anthropic" else _openai_body(turn, model)
            return web.json_response(payload)

        events: list[tuple[str | None, dict[str, Any] | str]]
        if turn.raw_events is not None:
            events = [
                (e.get("type") if isinstance(e, dict) and wire == "anthropic" else None, e)
                for e in turn.raw_events
            ]
        elif wire == "anthropic":
            events = list(_anthropic_events(turn, model))
        else:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = _openai_events(turn, model, include_usage)

        response = web.StreamResponse(
            headers={
                "content-type": "text/event-stream",
                "cache-control": "no-cache",
            }
        )
        await response.prepare(request)
        fault = turn.fault
        if fault is None and not turn.chunk_delay:
            # One write: lean under hundreds of concurrent streams.
            await response.write(b"".join(_sse(n, d, turn.split_json) for n, d in events))
            await response.write_eof()
            return response
        for i, (name, data) in enumerate(itertools.chain(events, [(None, "")])):
            if fault is not None and i == fault.after:
                return await self._apply_fault(request, response, wire, fault)
            if i == len(events):
                break
            await response.write(_sse(name, data, turn.split_json))
            if turn.chunk_delay:
                await asyncio.sleep(turn.chunk_delay)
        await response.write_eof()
        return response

    async def _apply_fault(
        self, request: web.Request, response: web.StreamResponse, wire: Wire, fault: StreamFault
    ) -> web.StreamResponse:
        if fault.kind == "cut":
            # Abort the socket mid-body: the client sees an incomplete chunked body.
            transport = request.transport
            if transport is not None:
                transport.abort()
            return response
        if fault.kind == "error":
            error_type = fault.error_type or ("overloaded_error" if wire == "anthropic" else "server_error")
            data = _error_body(wire, 529, fault.message, error_type)
            await response.write(_sse("error" if wire == "anthropic" else None, data, False))
        elif fault.kind == "malformed":
            await response.write(b'data: {"type": "content_block_delta", "index": 0, "del\n\n')
        elif fault.kind == "stall":
            await asyncio.sleep(fault.pause)
        await response.write_eof()
        return response


def _system_text(body: dict[str, Any]) -> str:
    """The system prompt of a request in either wire format, as one string."""
    system = body.get("system")
    if system is None:
        system = [m.get("content") for m in body.get("messages") or [] if m.get("role") == "system"]
    return json.dumps(system)


def iter_sse_payloads(raw: bytes) -> Iterator[str]:
    """The ``data`` of each event in a raw SSE body (for tests of the fake itself)."""
    for block in raw.decode().split("\n\n"):
        data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
        if data:
            yield "\n".join(data)


# ---------------------------------------------------------------- stand-alone process


def main(argv: list[str] | None = None) -> None:
    """Serve a default reply until killed: ``python -m tests.fakes.fake_llm --latency 1.5``.

    Prints ``FAKE_LLM_URL=http://127.0.0.1:<port>`` once listening.
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds before first byte")
    parser.add_argument("--reply", default="The quick brown fox jumps over the lazy dog. " * 4)
    parser.add_argument("--chunk-size", type=int, default=8)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    args = parser.parse_args(argv)

    async def serve() -> None:
        fake = FakeLLM(
            latency=args.latency,
            default_reply=Turn(text=args.reply, chunk_size=args.chunk_size, chunk_delay=args.chunk_delay),
            record=False,
        )
        await fake.astart(args.port)
        print(f"FAKE_LLM_URL={fake.url}", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await fake.astop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())


if __name__ == "__main__":
    main()
