"""What tracing and metrics add per loop iteration (O4, O5).

Runs the engine benchmark's tool-using conversation (bench/engine/loop_overhead.py:
in-memory fakes, no network, no database) twice, interleaved: untraced, and inside a
run trace with what the worker does with its spans afterwards -- Prometheus counters
(multiprocess files) and conversion to OpenTelemetry spans for the OTLP exporter --
counted into the traced iteration's time. Prints p50/p95 of both and the difference.

    cd /work/wt/observability && .venv/bin/python bench/observability/run.py [--iterations 2000]

Target: < 0.5 ms added per iteration at p50.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", tempfile.mkdtemp(prefix="claw-bench-metrics-"))
os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")

import django  # noqa: E402

django.setup()

from agents.engine import tracing  # noqa: E402
from agents.engine.interfaces import ModelSpec, RunContext  # noqa: E402
from agents.engine.loop import LoopConfig, run_agentic_loop  # noqa: E402
from agents.engine.types import Message  # noqa: E402
from bench.engine.loop_overhead import ITERATIONS_PER_RUN, TimedProvider  # noqa: E402
from claw_platform.observability import metrics, otlp  # noqa: E402
from tests.fakes.engine import (  # noqa: E402
    FakeTool,
    FakeToolExecutor,
    InMemoryRunStore,
    RecordingEventSink,
    RecordingHookRunner,
)


async def one_run(traced: bool, tools_per_step: int) -> list[float]:
    provider = TimedProvider(tools_per_step)
    tools = FakeToolExecutor(FakeTool("read_file", "def main():\n    return 42\n" * 20))
    config = LoopConfig(ModelSpec(provider, "bench-model"), system="You are a benchmark.")
    message = Message.user("read the files")

    async def loop() -> None:
        await run_agentic_loop(
            [message],
            config,
            tools=tools,
            store=InMemoryRunStore(),
            ctx=RunContext(session_id="s1"),
            events=RecordingEventSink(),
            hooks=RecordingHookRunner(),
            unsaved=[message],
        )

    if traced:
        with tracing.start_trace(os.urandom(16).hex()) as trace, tracing.span("invoke_agent bench", "agent"):
            await loop()
        # What the worker does with the spans besides storing them.
        metrics.record_run(trace.spans, "completed", 0.01)
        for span in trace.spans:
            otlp.to_readable_span(span)
    else:
        await loop()
    end = time.perf_counter()
    stamps = [*provider.stamps, end]
    return [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]


async def bench(iterations: int, tools_per_step: int) -> tuple[list[float], list[float]]:
    plain: list[float] = []
    traced: list[float] = []
    for _ in range(max(iterations // ITERATIONS_PER_RUN, 1)):
        plain += await one_run(False, tools_per_step)
        traced += await one_run(True, tools_per_step)
    return plain, traced


def p50_p95(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(len(ordered) * 0.95) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    gc.collect()
    asyncio.run(bench(200, 1))  # warm-up
    worst = 0.0
    for tools_per_step in (1, 3):
        plain, traced = asyncio.run(bench(args.iterations, tools_per_step))
        (p50, p95), (t50, t95) = p50_p95(plain), p50_p95(traced)
        worst = max(worst, t50 - p50)
        print(
            f"{tools_per_step} tool call(s)/iteration  untraced p50={p50:.3f} p95={p95:.3f} ms   "
            f"traced+metrics p50={t50:.3f} p95={t95:.3f} ms   added p50={t50 - p50:+.3f} ms"
        )
    print(f"target < 0.500 ms added per iteration (p50): {'OK' if worst < 0.5 else 'MISSED'}")


if __name__ == "__main__":
    main()
