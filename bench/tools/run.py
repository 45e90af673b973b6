"""What the tool layer adds to one tool call, and what a shell command costs to start.

1. Per-call overhead, without the tool's own work, through the executor a run uses
   (``ConfiguredToolExecutor``: registry lookup, JSON-Schema validation, the approval
   policy as ``check_policy``, the bound tool context, timeout and cancel wiring,
   output cap), for:
   - ``echo``: a trivial tool (its own cost is a dict lookup);
   - ``read_file``: a small file, minus reading it directly -- adds the path guard
     (lexical checks, lstat walk, O_NOFOLLOW open, hard-link check);
   - ``bash`` policy: the shell-risk parse of a fresh command (bashlex) and the policy
     decision, uncached.
   Target: p50 < 1 ms each.
2. The audit row each call writes (a thread hop and one INSERT), reported apart.
3. Shell start-up: ``true`` run through ``run_command`` on the host (with Landlock
   where the kernel has it), in the bubblewrap sandbox, and in the sandbox with its own
   network (slirp4netns and its routes set up first), p50/p95.

    .venv/bin/python bench/tools/run.py [--calls 3000] [--shells 40]

Uses DATABASE_URL if set, else its own embedded PostgreSQL in a temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

TARGET_P50_MS = 1.0


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def setup_django(tmp: Path) -> Any:
    os.environ.setdefault("CLAW_VAR_DIR", str(tmp / "var"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
    db = None
    if not os.environ.get("DATABASE_URL"):
        from claw_platform.embedded_db import start_embedded_database

        db = start_embedded_database(tmp / "pgdata", database="claw_bench")
        os.environ["DATABASE_URL"] = db.url
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    return db


def line(label: str, values: list[float]) -> str:
    return (
        f"  {label:<34} p50 {statistics.median(values) * 1000:8.1f} us   "
        f"p95 {percentile(values, 95) * 1000:8.1f} us"
    )


async def call_overhead(workspace: Path, calls: int) -> dict[str, list[float]]:
    from agents.engine.interfaces import READ_ONLY, RunContext
    from agents.engine.types import ToolCallPart
    from tools_app.builtins import BUILTIN_TOOLS, BashTool
    from tools_app.context import ToolContext
    from tools_app.executor import ConfiguredToolExecutor
    from tools_app.policy import shell_risk
    from tools_app.policy.approval import AgentPolicy, ApprovalPolicy, ToolRule
    from tools_app.registry import Registry, Tool

    class EchoTool(Tool):
        name = "echo"
        description = "Repeat a text."
        input_schema = {
            "type": "object",
            "properties": {"text": {"type": "string", "maxLength": 1000}},
            "required": ["text"],
            "additionalProperties": False,
        }
        traits = READ_ONLY

        async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
            return str(args["text"])

    echo = EchoTool()
    context = ToolContext(
        tenant_id=1, agent_id=1, agent_slug="bench", agent_type="open", user_id=1, session_id="s",
        role="member", workspace=workspace,
    )  # fmt: skip
    policy = ApprovalPolicy(
        AgentPolicy(mode="ask", approval_risk="high", rules=(ToolRule("bash", risk="medium"),))
    )
    executor = ConfiguredToolExecutor(
        Registry("bench", [*BUILTIN_TOOLS, echo]),
        approval=policy,
        context=context,
        role="member",
        audit=False,
    )
    ctx = RunContext(tenant_id="1", user_id="1", session_id="s", run_id="r")
    (workspace / "notes").mkdir(exist_ok=True)
    target = workspace / "notes" / "today.md"
    target.write_text("hello\n" * 50)
    echo_call = ToolCallPart("c1", "echo", {"text": "hello"})
    read_call = ToolCallPart("c2", "read_file", {"path": "notes/today.md"})
    bash = next(t for t in BUILTIN_TOOLS if isinstance(t, BashTool))
    samples: dict[str, list[float]] = {"echo": [], "read_file": [], "bash policy (parse+decide)": []}
    for index in range(calls + 300):
        t0 = time.perf_counter()
        await echo.run({"text": "hello"}, ctx)
        t1 = time.perf_counter()
        assert (await executor.check_policy(echo_call, ctx)).action == "allow"
        result = await executor.execute(echo_call, ctx)
        t2 = time.perf_counter()
        assert not result.is_error, result.content
        await asyncio.to_thread(target.read_text)
        t3 = time.perf_counter()
        assert (await executor.check_policy(read_call, ctx)).action == "allow"
        result = await executor.execute(read_call, ctx)
        t4 = time.perf_counter()
        assert not result.is_error, result.content
        shell_risk.classify_command.cache_clear()
        t5 = time.perf_counter()
        policy.decide(bash, {"command": f"grep -rn TODO src/module_{index}.py"})
        t6 = time.perf_counter()
        if index >= 300:
            samples["echo"].append(((t2 - t1) - (t1 - t0)) * 1000)
            samples["read_file"].append(((t4 - t3) - (t3 - t2)) * 1000)
            samples["bash policy (parse+decide)"].append((t6 - t5) * 1000)
    return samples


def audit_cost(calls: int) -> list[float]:
    from asgiref.sync import async_to_sync, sync_to_async

    from claw_platform.audit.actions import record_audit_event
    from claw_platform.tenancy.actions import do_create_tenant

    tenant = do_create_tenant("Bench", slug=f"bench-{os.getpid()}-{time.time_ns()}")

    def write() -> None:
        record_audit_event(
            action="tool.executed", actor="agent:bench", tenant_id=tenant.pk, object_type="tool",
            object_id="echo", diff={"arguments_sha256": "0" * 64, "outcome": "ok", "duration_ms": 0},
        )  # fmt: skip

    async def measure() -> list[float]:
        out = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await sync_to_async(write, thread_sensitive=False)()
            out.append((time.perf_counter() - t0) * 1000)
        return out

    return async_to_sync(measure)()


async def shell_startup(workspace: Path, runs: int, mode: str, *, network: bool = False) -> list[float]:
    from tools_app.sandbox.shell import run_command

    out = []
    for _ in range(runs + 3):
        t0 = time.perf_counter()
        result = await run_command("true", workspace, mode=mode, time_limit=30, network=network)
        elapsed = (time.perf_counter() - t0) * 1000
        assert result.exit_code == 0, (mode, result.output)
        out.append(elapsed)
    return out[3:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--shells", type=int, default=40)
    options = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="claw-bench-tools-"))
    db = setup_django(tmp)
    try:
        from tools_app.sandbox.shell import host_confinement, sandbox_available, sandbox_network_problem
        from tools_app.workspace import ensure_workspace

        workspace = ensure_workspace(tmp / "workspace")
        gc.collect()
        gc.disable()  # collector pauses are not the tool layer's cost
        try:
            samples = asyncio.run(call_overhead(workspace, options.calls))
        finally:
            gc.enable()
        print(f"tool-call overhead, {options.calls} calls each (python {sys.version.split()[0]}):")
        verdicts = []
        for label, values in samples.items():
            print(line(label, values))
            verdicts.append(statistics.median(values) < TARGET_P50_MS)
        print(line("audit row (reported apart)", audit_cost(min(options.calls, 500))))
        print(f"shell start-up ('true', {options.shells} runs each):")
        print(
            line(
                f"host ({host_confinement()})", asyncio.run(shell_startup(workspace, options.shells, "host"))
            )
        )
        if sandbox_available():
            print(
                line("sandbox (bubblewrap)", asyncio.run(shell_startup(workspace, options.shells, "sandbox")))
            )
            problem = sandbox_network_problem()
            if problem:
                print(f"  sandbox with network           not available: {problem}")
            else:
                print(
                    line(
                        "sandbox with network (slirp4netns)",
                        asyncio.run(shell_startup(workspace, options.shells, "sandbox", network=True)),
                    )
                )
        else:
            print("  sandbox (bubblewrap)           not available on this host")
        ok = all(verdicts)
        print(f"overhead p50 target < {TARGET_P50_MS:g} ms per call: {'OK' if ok else 'OVER TARGET'}")
        return 0 if ok else 1
    finally:
        if db is not None:
            db.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
