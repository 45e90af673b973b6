"""Per-call overhead of the hook runner and the SSRF guard (H1-H3, T3), without the tool's work.

Measures, interleaved over N calls each:

- ``hooks: none``        -- the engine's two hook calls around a tool call
  (before_tool_call, after_tool_call) on a run whose tenant has hooks, none of them for
  these events (a dict lookup each);
- ``hooks: 1 python``    -- the same with one ready-made async Python hook on
  before_tool_call (block-bash, which allows the call): hook call, answer check and the
  audit entry built for the trail (the INSERT happens in batches off the call path);
- ``hooks: 1 sync py``   -- a plain-function Python hook (runs in a worker thread);
- ``ssrf: literal``      -- checking a URL with an address literal and "resolving" it;
- ``ssrf: name``         -- checking a URL whose host is a name, resolved by the system
  resolver (``localhost``) and checked, as at connect time;
- ``per call total``     -- registry + validation + guard (the URL check and resolution a
  web tool does) + hooks (one Python hook) around a trivial tool, minus the tool itself.

Also: the extra time a new HTTP connection takes through the guarded transport compared
with httpx's own, against a local server (resolution, checks, pinning).

    cd /work/main && .venv/bin/python bench/tools/hooks_and_guards.py [--calls 3000]

Target: per call total p50 < 1 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
# Django settings are needed to build audit entries; nothing here connects to a database
# or writes a file (keys given, so none is generated under the var directory).
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "claw_platform.settings")
os.environ.setdefault("DATABASE_URL", "postgresql://bench@127.0.0.1:1/bench")
os.environ.setdefault("SECRET_KEY", "bench-only-not-secret")
os.environ.setdefault("CLAW_SECRETS_KEY", "aG9va3MtYW5kLWd1YXJkcy1iZW5jaC1rZXktMzJieXQ=")

import django

django.setup()

import httpx  # noqa: E402
from django.conf import settings  # noqa: E402

from agents.engine.interfaces import AFTER_TOOL_CALL, BEFORE_TOOL_CALL, READ_ONLY, RunContext  # noqa: E402
from agents.engine.types import ToolCallPart  # noqa: E402
from tools_app.guards.ssrf import AllowList, SsrfGuard  # noqa: E402
from tools_app.hooks.runner import ConfiguredHookRunner, HookAuditEntry, HookSpec  # noqa: E402
from tools_app.net.transports import GuardedTransport  # noqa: E402
from tools_app.registry import Registry, RegistryToolExecutor, Tool  # noqa: E402
from tools_app.runtime.audit import audit_event  # noqa: E402

TARGET_P50_MS = 1.0
WARMUP = 300


class EchoTool(Tool):
    name = "echo"
    description = "Repeat a text."
    input_schema = {
        "type": "object",
        "properties": {"text": {"type": "string", "maxLength": 1000}, "url": {"type": "string"}},
        "required": ["text"],
        "additionalProperties": False,
    }
    traits = READ_ONLY

    async def run(self, args: dict[str, Any], ctx: RunContext) -> str:
        return str(args["text"])


class BuildOnlyAudit:
    """Builds each audit row as the real sink does; the batched INSERT is off the call path."""

    def __init__(self) -> None:
        self.count = 0

    def record(self, entry: HookAuditEntry) -> None:
        audit_event(entry)
        self.count += 1

    async def flush(self) -> None:
        return None


def sync_allow(call: Any) -> None:
    return None


def hook_runner(*specs: HookSpec) -> ConfiguredHookRunner:
    return ConfiguredHookRunner(
        specs, audit=BuildOnlyAudit(), guard=SsrfGuard(), shell_dir=lambda t: Path("/tmp")
    )


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(calls: int) -> dict[str, list[float]]:
    ctx = RunContext(tenant_id="1", agent_id="1", user_id="1", session_id="s", run_id="r")
    echo = EchoTool()
    executor = RegistryToolExecutor(Registry("bench", [echo]), role="member")
    call = ToolCallPart("call_1", "echo", {"text": "hello", "url": "http://93.184.216.34/page"})
    before = {"id": call.id, "name": call.name, "arguments": call.arguments}
    after = {**before, "result": {"content": "hello", "is_error": False, "error_type": None}}

    other_event = HookSpec(
        1, 1, "other", "run_finished", "python", callable="tools_app.hooks.ready_made.block_bash"
    )
    python_hook = HookSpec(
        2, 1, "block-bash", BEFORE_TOOL_CALL, "python", callable="tools_app.hooks.ready_made.block_bash"
    )
    settings.CLAW_HOOK_CALLABLES = [f"{__name__}.sync_allow"]
    sync_hook = HookSpec(3, 1, "sync", BEFORE_TOOL_CALL, "python", callable=f"{__name__}.sync_allow")
    none_runner, one_runner, sync_runner = (
        hook_runner(other_event),
        hook_runner(python_hook),
        hook_runner(sync_hook),
    )

    guard = SsrfGuard(AllowList.of(["*.corp.example"]))

    async def around(runner: ConfiguredHookRunner) -> None:
        await runner.run(BEFORE_TOOL_CALL, before, ctx)
        await runner.run(AFTER_TOOL_CALL, after, ctx)

    async def ssrf_literal() -> None:
        _, host, port = guard.check_url("http://93.184.216.34/page")
        await guard.resolve_checked(host, port)

    name_guard = SsrfGuard(AllowList.of(["127.0.0.1"]))

    async def ssrf_name() -> None:
        _, host, port = name_guard.check_url("http://localhost:8080/page")
        await name_guard.resolve_checked(host, port)

    async def total() -> None:
        await one_runner.run(BEFORE_TOOL_CALL, before, ctx)
        await ssrf_literal()
        await executor.execute(call, ctx)
        await one_runner.run(AFTER_TOOL_CALL, after, ctx)

    async def direct() -> None:
        await echo.run(dict(call.arguments), ctx)

    cases: dict[str, Callable[[], Awaitable[None]]] = {
        "hooks: none": lambda: around(none_runner),
        "hooks: 1 python": lambda: around(one_runner),
        "hooks: 1 sync py": lambda: around(sync_runner),
        "ssrf: literal": ssrf_literal,
        "ssrf: name": ssrf_name,
        "tool alone": direct,
        "with everything": total,
    }
    samples: dict[str, list[float]] = {label: [] for label in cases}
    for index in range(calls + WARMUP):
        for label, case in cases.items():
            started = time.perf_counter()
            await case()
            if index >= WARMUP:
                samples[label].append((time.perf_counter() - started) * 1000)
    samples["per call total"] = [
        a - b for a, b in zip(samples["with everything"], samples["tool alone"], strict=True)
    ]
    return samples


class _Quiet(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        return None


async def measure_connections(count: int) -> dict[str, list[float]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    url = f"http://localhost:{server.server_address[1]}/"
    guard = SsrfGuard(AllowList.of(["127.0.0.1", "::1"]))
    samples: dict[str, list[float]] = {"httpx": [], "guarded": []}
    try:
        async with (
            httpx.AsyncClient(trust_env=False) as plain,
            httpx.AsyncClient(transport=GuardedTransport(guard), trust_env=False) as guarded,
        ):
            for index in range(count + 50):
                for label, client in (("httpx", plain), ("guarded", guarded)):
                    started = time.perf_counter()
                    response = await client.get(url, headers={"Connection": "close"})
                    assert response.status_code == 200
                    if index >= 50:
                        samples[label].append((time.perf_counter() - started) * 1000)
    finally:
        server.shutdown()
        server.server_close()
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=300)
    options = parser.parse_args()
    gc.collect()
    gc.disable()  # collector pauses are not the hooks' cost
    try:
        samples = asyncio.run(measure(options.calls))
    finally:
        gc.enable()
    print(f"tool calls: {options.calls} (python {sys.version.split()[0]}); times per tool call")
    for label, values in samples.items():
        print(
            f"  {label:<17} p50 {statistics.median(values) * 1000:8.1f} us   "
            f"p95 {percentile(values, 0.95) * 1000:8.1f} us"
        )
    connections = asyncio.run(measure_connections(options.connections))
    plain, guarded = statistics.median(connections["httpx"]), statistics.median(connections["guarded"])
    print(
        f"new HTTP connection + request to a local server ({options.connections}): httpx p50 {plain:.3f} ms, "
        f"guarded p50 {guarded:.3f} ms, guard adds {guarded - plain:+.3f} ms"
    )
    p50 = statistics.median(samples["per call total"])
    verdict = "OK" if p50 < TARGET_P50_MS else "OVER TARGET"
    print(
        f"registry + validation + guard + hooks overhead p50 {p50:.3f} ms (target < {TARGET_P50_MS:g} ms): {verdict}"
    )
    return 0 if p50 < TARGET_P50_MS else 1


if __name__ == "__main__":
    raise SystemExit(main())
