"""Loop overhead per iteration with in-memory fakes (no network, no database).

Runs a tool-using scripted conversation through ``run_agentic_loop`` and reports the
time the engine itself spends per iteration -- request building, stream
accumulation, delta coalescing, hooks, policy, tool scheduling, credential
scrubbing, persistence calls and events -- as p50/p95 over N iterations.

    cd /work/main && .venv/bin/python bench/engine/loop_overhead.py [--iterations 2000]

Target: p50 < 0.3 ms per iteration.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agents.engine.interfaces import ModelSpec, RunContext
from agents.engine.loop import LoopConfig, run_agentic_loop
from agents.engine.types import (
    Completed,
    LLMRequest,
    LLMResponse,
    Message,
    ProviderEvent,
    TextDelta,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from agents.providers.accumulate import collect
from tests.fakes.engine import (
    FakeTool,
    FakeToolExecutor,
    InMemoryRunStore,
    RecordingEventSink,
    RecordingHookRunner,
)

ITERATIONS_PER_RUN = 10  # 9 tool iterations + 1 final answer


class TimedProvider:
    """Plays a fixed tool-using conversation and stamps the start of every call."""

    name = "bench"

    def __init__(self, tools_per_step: int) -> None:
        self.stamps: list[float] = []
        self.step = 0
        self.tools_per_step = tools_per_step

    def events(self) -> list[ProviderEvent]:
        self.step += 1
        if self.step % ITERATIONS_PER_RUN == 0:
            return [TextDelta("All done, "), TextDelta("here is the summary."), _done("end_turn")]
        events: list[ProviderEvent] = [TextDelta("Let me check that.")]
        for index in range(self.tools_per_step):
            call_id = f"c{self.step}_{index}"
            events += [
                ToolUseStart(index, call_id, "read_file"),
                ToolUseDelta(index, '{"path": "src/'),
                ToolUseDelta(index, f'file_{self.step}_{index}.py"}}'),
                ToolUseStop(index),
            ]
        events.append(_done("tool_use"))
        return events

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        self.stamps.append(time.perf_counter())
        for event in self.events():
            yield event

    async def complete(self, request: LLMRequest) -> LLMResponse:
        async def replay() -> AsyncIterator[ProviderEvent]:
            for event in self.events():
                yield event

        return await collect(replay())


def _done(stop: str) -> Completed:
    return Completed(stop, Usage(1200, 80))


async def bench(iterations: int, tools_per_step: int) -> list[float]:
    provider = TimedProvider(tools_per_step)
    tools = FakeToolExecutor(FakeTool("read_file", "def main():\n    return 42\n" * 20))
    spec = ModelSpec(provider, "bench-model")
    config = LoopConfig(spec, system="You are a benchmark.")
    samples: list[float] = []
    runs = max(iterations // ITERATIONS_PER_RUN, 1)
    for _ in range(runs):
        store = InMemoryRunStore()
        message = Message.user("read the files")
        provider.stamps = []
        await run_agentic_loop(
            [message],
            config,
            tools=tools,
            store=store,
            ctx=RunContext(),
            events=RecordingEventSink(),
            hooks=RecordingHookRunner(),
            unsaved=[message],
        )
        end = time.perf_counter()
        stamps = [*provider.stamps, end]
        samples += [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]
    return samples


def report(label: str, samples: list[float]) -> float:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p95 = ordered[int(len(ordered) * 0.95) - 1]
    print(
        f"{label:<34} n={len(samples):>5}  p50={p50:.3f} ms  p95={p95:.3f} ms  "
        f"mean={statistics.fmean(ordered):.3f} ms"
    )
    return p50


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    gc.collect()
    asyncio.run(bench(200, 1))  # warm-up: imports, caches
    p50 = report("1 tool call per iteration", asyncio.run(bench(args.iterations, 1)))
    report("3 parallel tool calls per iteration", asyncio.run(bench(args.iterations, 3)))
    print(f"target p50 < 0.300 ms: {'OK' if p50 < 0.3 else 'MISSED'}")


if __name__ == "__main__":
    main()
