"""Overhead the tool registry adds to one tool call (T1), without the tool's own work.

Runs a trivial tool (it echoes one argument) N times directly -- ``await tool.run()``
-- and N times through ``RegistryToolExecutor.execute()``, interleaved, and reports
p50/p95 of both and of the per-call difference: name lookup, JSON-Schema validation
(Draft 2020-12), the tool's own task, timeout and cancel wiring, output cap, timing
and building the result.

    cd /work/main && .venv/bin/python bench/tools/registry_overhead.py [--calls 5000]

Target: overhead p50 < 1 ms per call.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agents.engine.interfaces import READ_ONLY, RunContext
from agents.engine.types import ToolCallPart
from tools_app.builtins import BUILTIN_TOOLS
from tools_app.registry import Registry, RegistryToolExecutor, Tool

TARGET_P50_MS = 1.0


class EchoTool(Tool):
    """The trivial tool: its own cost is a dict lookup."""

    name = "echo"
    description = "Repeat a text."
    input_schema = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 1000},
            "times": {"type": "integer", "minimum": 1, "maximum": 5},
        },
        "required": ["text"],
        "additionalProperties": False,
    }
    traits = READ_ONLY

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        return str(args["text"])


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(calls: int) -> dict[str, list[float]]:
    echo = EchoTool()
    # A realistic registry: the built-ins plus the tool under test.
    executor = RegistryToolExecutor(Registry("bench", [*BUILTIN_TOOLS, echo]), role="member")
    ctx = RunContext(tenant_id="t", user_id="u", session_id="s", run_id="r")
    call = ToolCallPart("call_1", "echo", {"text": "hello", "times": 2})
    samples: dict[str, list[float]] = {"direct": [], "registry": [], "overhead": []}
    for index in range(calls + 500):
        t0 = time.perf_counter()
        await echo.run(dict(call.arguments), ctx)
        t1 = time.perf_counter()
        result = await executor.execute(call, ctx)
        t2 = time.perf_counter()
        assert not result.is_error, result.content
        if index >= 500:  # warm-up: caches, validator first use
            samples["direct"].append((t1 - t0) * 1000)
            samples["registry"].append((t2 - t1) * 1000)
            samples["overhead"].append(((t2 - t1) - (t1 - t0)) * 1000)
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=5000)
    options = parser.parse_args()
    gc.collect()
    gc.disable()  # collector pauses are not the registry's cost
    try:
        samples = asyncio.run(measure(options.calls))
    finally:
        gc.enable()
    print(f"tool calls: {options.calls} (python {sys.version.split()[0]})")
    for label, values in samples.items():
        print(
            f"  {label:<9} p50 {statistics.median(values) * 1000:7.1f} us   "
            f"p95 {percentile(values, 0.95) * 1000:7.1f} us   max {max(values) * 1000:8.1f} us"
        )
    p50 = statistics.median(samples["overhead"])
    verdict = "OK" if p50 < TARGET_P50_MS else "OVER TARGET"
    print(f"registry overhead p50 {p50:.3f} ms (target < {TARGET_P50_MS:g} ms): {verdict}")
    return 0 if p50 < TARGET_P50_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
