"""Provider streaming throughput: many concurrent streamed calls against the fake LLM.

    .venv/bin/python bench/engine/provider_stream.py            # 500 concurrent, 1.5 s
    .venv/bin/python bench/engine/provider_stream.py --concurrency 200 --transport httpx

The fake LLM runs in its own process (so the server does not share the client's event
loop or GIL) and answers every request with a fixed streamed reply after ``--latency``
seconds. ``latency`` is the server's time to first byte, so every call lasts at least
that long: with C calls in flight the ceiling is C / latency calls/s (500 / 1.5 s =
333 calls/s). The figure that shows the client's cost is how close it gets to that.

Each transport (``aiohttp``: httpx API over aiohttp's pool, the default; ``httpx``:
httpx's own pool) is measured for ``--rounds`` rounds on one provider instance: the
first round opens the connections, later ones reuse them (keep-alive). A round is
cut off after ``--round-cap`` seconds (unfinished calls are reported as failures), so
the whole run stays under a minute.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from agents.engine.types import LLMRequest, Message, ProviderError  # noqa: E402
from agents.providers.accumulate import collect  # noqa: E402
from agents.providers.base import HttpProvider  # noqa: E402
from agents.providers.registry import provider_class  # noqa: E402


def start_fake(latency: float) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.fake_llm", "--latency", str(latency)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("FAKE_LLM_URL="):
        proc.kill()
        raise SystemExit(f"fake LLM did not start: {line!r}")
    return proc, line.partition("=")[2]


async def one_round(
    provider: HttpProvider, calls: int, concurrency: int, cap: float
) -> tuple[float, float, list[float], Counter[str]]:
    request = LLMRequest(model="bench-model", messages=[Message.user("hello")], max_tokens=64)
    gate = asyncio.Semaphore(concurrency)
    durations: list[float] = []
    failures: Counter[str] = Counter()

    async def call() -> None:
        async with gate:
            start = time.perf_counter()
            try:
                response = await collect(provider.stream(request))
                assert response.message.text
                durations.append(time.perf_counter() - start)
            except ProviderError as exc:
                failures[exc.kind] += 1

    start, cpu_start = time.perf_counter(), time.process_time()
    tasks = [asyncio.ensure_future(call()) for _ in range(calls)]
    # Bounded: a transport that cannot keep up is reported, not waited out.
    _, pending = await asyncio.wait(tasks, timeout=cap)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    if pending:
        failures["unfinished"] += len(pending)
    return time.perf_counter() - start, time.process_time() - cpu_start, durations, failures


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


async def bench(args: argparse.Namespace, url: str) -> None:
    kind = "anthropic" if args.wire == "anthropic" else "openai_compatible"
    base_url = url if kind == "anthropic" else f"{url}/v1"
    transports = ["aiohttp", "httpx"] if args.transport == "both" else [args.transport]
    ceiling = args.concurrency / args.latency if args.latency else float("inf")
    print(
        f"# {args.calls} streamed calls, {args.concurrency} concurrent, wire={args.wire}, "
        f"server latency (time to first byte) {args.latency}s -> ceiling {ceiling:.0f} calls/s"
    )
    print(
        f"{'transport':<9} {'round':>5} {'ok':>9} {'calls/s':>8} {'p50 s':>7} {'p95 s':>7} "
        f"{'wall s':>7} {'cpu s':>6}  failures"
    )
    for transport in transports:
        provider = provider_class(kind)(
            base_url=base_url,
            api_key="bench-key",
            timeout=60.0,
            max_retries=0,
            transport=transport,
        )
        try:
            for round_no in range(1, args.rounds + 1):
                wall, cpu, durations, failures = await one_round(
                    provider, args.calls, args.concurrency, args.round_cap
                )
                print(
                    f"{transport:<9} {round_no:>5} {len(durations):>4}/{args.calls:<4} "
                    f"{len(durations) / wall:>8.1f} {pct(durations, 50):>7.3f} "
                    f"{pct(durations, 95):>7.3f} {wall:>7.2f} {cpu:>6.2f}  {dict(failures) or '-'}",
                    flush=True,
                )
        finally:
            await provider.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--calls", type=int, default=0, help="total calls (default: concurrency)")
    parser.add_argument("--latency", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--wire", choices=["anthropic", "openai"], default="anthropic")
    parser.add_argument("--transport", choices=["aiohttp", "httpx", "both"], default="both")
    parser.add_argument("--round-cap", type=float, default=12.0, help="seconds per round at most")
    args = parser.parse_args()
    args.calls = args.calls or args.concurrency

    proc, url = start_fake(args.latency)
    try:
        asyncio.run(bench(args, url))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
