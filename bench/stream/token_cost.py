#!/usr/bin/env python
"""Where a relayed token's CPU goes in the worker, stage by stage, in one process.

    .venv/bin/python bench/stream/token_cost.py [--streams 100] [--tokens 300] [--interval 0.01]

``run.py`` measures the whole system, where every process shares the machine's cores
and one stage's cost is hard to tell from another's. Here the token server
(``token_server.py``) runs in a process of its own and this one reads ``--streams``
concurrent streams of ``--tokens`` tokens each, through more of the worker's path at
each stage; the CPU time this process spends (user + system, ``time.process_time``)
divided by the tokens read is the stage's cost, and the difference from the stage
before is what that stage adds:

1. ``http read``: aiohttp reads the response body as it arrives (one chunk a token);
2. ``sse decode``: the same, decoded into server-sent events (``sse_source``);
3. ``provider``: ``OpenAICompatProvider.stream`` -- the events parsed into text deltas,
   the read deadline, the retry layer, and each call's request set-up (httpx over its
   own aiohttp pool, the body encoded), spread over the call's tokens;
4. ``engine + relay``: what a run does with each delta (as the engine's
   ``_LoopRun._consume`` does it: keep this stage in step with it) -- the stream accumulator, the
   delta coalescer, the run's event sink and the relay pump, and the channel-layer
   relay building each message (its frame encoded, the message serialized as the
   PostgreSQL layer does) for a layer that does not write it (no database here).

What this leaves out is measured by ``run.py``: the layer's statement and its
NOTIFY, the run's database work, Daphne, and everything waiting for a core.
Each round runs every stage once, for ``--rounds`` rounds; a stage's lowest CPU per
token is printed (the other rounds were disturbed by something else on the machine),
with the spread. The machine's noise is a few µs a token: read a stage's share from
several runs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
# Nothing here opens a database connection; the settings want a URL.
os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/unused")

BODY = b'{"model":"bench","stream":true,"messages":[{"role":"user","content":"go"}]}'


class SerializingLayer:
    """A channel layer that does the sending side's CPU work of the PostgreSQL layer
    (each message's group key and its msgpack serialization, as channels_postgres
    makes them with no encryption configured) and writes nothing."""

    def __init__(self) -> None:
        self.messages = 0
        self.last: tuple[str, bytes] | None = None

    async def group_send_many(self, messages: list[tuple[str, dict[str, Any]]]) -> None:
        for group, message in messages:
            self.last = (f"asgi:group:{group}", msgpack.packb(message, use_bin_type=True))
        self.messages += len(messages)
        await asyncio.sleep(0.001)  # a statement's round trip: deltas merge meanwhile


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def wait_port(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port)).close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError("the token server did not start")


def main(args: argparse.Namespace) -> None:
    import django
    import uvloop  # the worker's run loop (CLAW_RUN_LOOP's default)

    django.setup()
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench/stream/token_server.py"),
            *("--port", str(port), "--tokens", str(args.tokens), "--interval", str(args.interval)),
        ]
    )
    try:
        uvloop.install()
        asyncio.run(measure(args, port))
    finally:
        server.terminate()
        server.wait()


async def measure(args: argparse.Namespace, port: int) -> None:
    import aiohttp

    import channels_app.relay as relay_module
    from agents.engine.streaming import DeltaCoalescer
    from agents.engine.types import LLMRequest, Message, TextDelta, ThinkingDelta
    from agents.providers.accumulate import StreamAccumulator
    from agents.providers.openai_compat import OpenAICompatProvider
    from agents.providers.sse_source import _decoded
    from agents.runtime.events import RunEventSink
    from channels_app.relay import ChannelLayerRelay

    layer = SerializingLayer()
    relay_module.get_channel_layer = lambda alias="default": layer  # type: ignore[assignment]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    provider = OpenAICompatProvider(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    relay = ChannelLayerRelay()
    request = LLMRequest(model="bench", messages=[Message.user("go")])
    run_ids = iter(range(1, 10**9))

    async def http_read() -> None:
        async with session.post(url, data=BODY, headers={"content-type": "application/json"}) as response:
            async for _chunk in response.content.iter_any():
                pass

    async def sse_decode() -> None:
        async with session.post(url, data=BODY, headers={"content-type": "application/json"}) as response:
            async for _event in _decoded(response, "utf-8"):
                pass

    async def provider_stream() -> None:
        async for _event in provider.stream(request):
            pass

    async def engine_and_relay() -> None:
        run_id = next(run_ids)
        sink = RunEventSink(run_id, 1, last_seq=0, relay=relay)
        sink.known_session(f"00000000-0000-0000-0000-{run_id:012d}")
        accumulator = StreamAccumulator()
        coalescer = DeltaCoalescer(sink, seconds=0.0)  # as a worker's run (the sink batches)
        async for event in provider.stream(request):
            accumulator.add(event)
            if isinstance(event, TextDelta):
                await coalescer.add("chunk", event.text)
            elif isinstance(event, ThinkingDelta):
                await coalescer.add("thinking", event.text)
        await coalescer.flush()
        await sink.drain()

    stages: list[tuple[str, Callable[[], Awaitable[None]]]] = [
        ("http read", http_read),
        ("sse decode", sse_decode),
        ("provider", provider_stream),
        ("engine + relay", engine_and_relay),
    ]
    tokens = args.streams * args.tokens
    try:
        await wait_port(port)
        print(
            f"{args.streams} streams x {args.tokens} tokens, one every {args.interval * 1000:.0f} ms each "
            f"({args.streams / args.interval:.0f} tokens/s offered); CPU of this process per token read, "
            f"lowest of {args.rounds} rounds:"
        )
        for _name, stage in stages:
            await asyncio.gather(*(stage() for _ in range(5)))  # connections open, code warm
        # Round by round, every stage once: a disturbance of the machine spreads over
        # all of them rather than landing on one.
        costs: dict[str, list[float]] = {name: [] for name, _stage in stages}
        relayed = 0
        for _ in range(args.rounds):
            for name, stage in stages:
                layer.messages = 0
                cpu = time.process_time()
                await asyncio.gather(*(stage() for _ in range(args.streams)))
                costs[name].append((time.process_time() - cpu) / tokens * 1e6)
                relayed += layer.messages
        before = 0.0
        for name, measured in costs.items():
            best = min(measured)
            print(
                f"  {name:15s} {best:6.1f} µs/token  ({best - before:+5.1f})   "
                f"rounds {min(measured):.1f}-{max(measured):.1f} µs"
            )
            before = best
        print(
            f"  layer messages built: {relayed / (tokens * args.rounds):.2f} a token "
            "(deltas merge while one is in flight)"
        )
    finally:
        await session.close()
        await provider.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=300)
    parser.add_argument("--interval", type=float, default=0.01, help="seconds between a stream's tokens")
    parser.add_argument("--rounds", type=int, default=5)
    main(parser.parse_args())
