"""Engine cost with the PostgreSQL store, and message-to-first-LLM-request latency.

1. Loop overhead per iteration with the real store: a turn of tool-using iterations
   (in-memory provider and tools, so only the engine + PostgreSQL persistence are
   timed: every step written, tool calls marked). Target p50 < 5 ms, p95 < 15 ms.
2. Message to first LLM request byte: from ``handle_message`` (the path every chat
   message takes: session, agent resolution, turn + checkpoint, history, prompt) to
   the moment a local OpenAI-compatible server receives the request, for sessions
   holding 10 and 10,000 stored messages. Target p95 < 25 ms for both.

    .venv/bin/python bench/engine/store_overhead.py [--turns 40] [--samples 60] [--rls-rounds 4]

Uses DATABASE_URL (and DATABASE_OWNER_URL) if set, else its own embedded PostgreSQL in
a temporary directory. The work runs inside the tenant's context, as a worker runs it.

Row-level security (issue 22): 1 and 2 (10 stored messages) run in ``--rls-rounds``
rounds, each once with the product's forced policies and once with row-level security
disabled on every tenant table (``bench/rls/toggle.py``), alternating; the figures
are the RLS-on ones and the cost is printed as the ratio on / off of the medians
(target < 1.05). Needs the owner's URL (the embedded server has it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


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
        # Migrations run as the owner role; the product's own role creates no table.
        os.environ.setdefault("DATABASE_OWNER_URL", db.owner_url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)
    from claw_platform.tenancy.context import set_scope

    set_scope(None, all_tenants=True)  # the bench's set-up is system code; its runs enter their tenant
    return db


class ArrivalServer:
    """A minimal OpenAI-compatible streaming server that notes when each request arrives."""

    def __init__(self) -> None:
        self.arrivals: list[float] = []
        self.port = 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> ArrivalServer:
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(10)
        return self

    def _run(self) -> None:
        from aiohttp import web

        async def handle(request: web.Request) -> web.StreamResponse:
            self.arrivals.append(time.perf_counter())
            await request.read()
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            for payload in (
                '{"choices":[{"index":0,"delta":{"content":"ok"}}]}',
                '{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],'
                '"usage":{"prompt_tokens":5,"completion_tokens":1}}',
                "[DONE]",
            ):
                await response.write(f"data: {payload}\n\n".encode())
            await response.write_eof()
            return response

        async def main() -> None:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()
            await asyncio.Event().wait()

        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(main())


def make_agent(base_url: str) -> Any:
    from agents.actions.config import do_create_agent, do_create_model_profile, do_create_provider
    from claw_platform.tenancy.actions import do_create_tenant

    tenant = do_create_tenant(f"Bench {time.time_ns()}")
    provider = do_create_provider(tenant, name="bench", kind="openai_compatible", base_url=base_url)
    model = do_create_model_profile(provider, model="bench-model", input_price=3, output_price=15)
    # No compaction during the run: the 10,000-message case must stay 10,000 messages.
    return do_create_agent(
        tenant,
        slug="bench",
        name="Bench",
        model=model,
        files={"SOUL.md": "Be brief."},
        compaction_message_threshold=10_000_000,
    )


def seed_messages(session: Any, count: int) -> None:
    from agents.models import Message, Thread

    thread = Thread.objects.unscoped().get(pk=session.active_thread_id)
    Message.objects.unscoped().bulk_create(
        [
            Message(
                tenant_id=session.tenant_id,
                session=session,
                thread=thread,
                seq=i + 1,
                role="user" if i % 2 == 0 else "assistant",
                parts=[{"type": "text", "text": f"message {i} " + "lorem ipsum dolor sit amet " * 8}],
            )
            for i in range(count)
        ],
        batch_size=2000,
    )
    Thread.objects.unscoped().filter(pk=thread.pk).update(last_seq=count)


async def loop_with_store(agent: Any, turns: int, iterations_per_turn: int) -> list[float]:
    """Per-iteration wall time of run_turn with the PostgreSQL store (no network)."""
    from asgiref.sync import sync_to_async

    from agents.actions.conversation import do_create_session, do_start_turn
    from agents.engine.interfaces import READ_ONLY, ModelSpec, RunContext
    from agents.engine.turn import TurnConfig, run_turn
    from agents.runtime.store import DjangoRunStore, TurnBinding
    from tests.fakes.engine import FakeTool, FakeToolExecutor, ScriptedProvider, text_turn, tool_turn

    per_iteration: list[float] = []
    tools = FakeToolExecutor(FakeTool("lookup", output="result " * 20, traits=READ_ONLY))
    for _ in range(turns):
        session = await sync_to_async(do_create_session)(agent, title="bench")
        turn = await sync_to_async(do_start_turn)(session, "go")
        store = DjangoRunStore(
            TurnBinding(session.tenant_id, session.pk, turn.thread_id, turn.pk, agent.pk, None)
        )
        script = [tool_turn(("lookup", {"q": f"x{i}"})) for i in range(iterations_per_turn - 1)]
        provider = ScriptedProvider([*script, text_turn("done")])
        spec = ModelSpec(provider=provider, model="bench")
        config = TurnConfig(
            max_iterations=iterations_per_turn + 1,
            auto_compact=False,
            memory_flush=False,
            generate_title=False,
        )
        started = time.perf_counter()
        result = await run_turn(
            "go", model=spec, tools=tools, store=store, ctx=RunContext(), prompt="Be brief.", config=config
        )
        elapsed = time.perf_counter() - started
        assert result.status == "completed", result.error
        per_iteration.append(elapsed / iterations_per_turn * 1000)
    return per_iteration


async def first_byte(agent: Any, server: ArrivalServer, stored: int, samples: int) -> list[float]:
    from asgiref.sync import sync_to_async

    from agents.actions.conversation import do_create_session
    from agents.runtime.chat import handle_message

    session = await sync_to_async(do_create_session)(agent, title="bench")
    await sync_to_async(seed_messages)(session, stored)
    timings = []
    for _ in range(samples + 3):
        before = len(server.arrivals)
        started = time.perf_counter()
        reply = await handle_message(session.pk, "hello again")
        assert reply.status == "completed", reply.turn.error if reply.turn else reply.text
        assert len(server.arrivals) == before + 1, (len(server.arrivals) - before, reply.text)
        timings.append((server.arrivals[before] - started) * 1000)
    return timings[3:]  # the first calls warm the caches and the connection pool


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--iterations", type=int, default=10, help="LLM iterations per turn")
    parser.add_argument("--samples", type=int, default=60)
    parser.add_argument("--rls-rounds", type=int, default=4, help="rounds of RLS on / off (0: on only)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="claw-bench-"))
    db = setup_django(tmp)
    try:
        server = ArrivalServer().start()
        agent = make_agent(f"http://127.0.0.1:{server.port}/v1")

        async def run_all() -> None:
            from agents.runtime.llm import close_providers
            from claw_platform.tenancy.context import tenant_context

            with tenant_context(agent.tenant_id):
                if args.rls_rounds > 0 and os.environ.get("DATABASE_OWNER_URL"):
                    await compare_rls(agent, server, args)
                else:
                    await run_on(agent, server, args)
            await close_providers()

        asyncio.run(run_all())
    finally:
        from django.db import connections

        connections.close_all()
        if db is not None:
            db.stop()
        shutil.rmtree(tmp, ignore_errors=True)


async def compare_rls(agent: Any, server: ArrivalServer, args: argparse.Namespace) -> None:
    from asgiref.sync import sync_to_async

    from bench.rls.toggle import set_row_level_security

    owner_url = os.environ["DATABASE_OWNER_URL"]
    toggle = sync_to_async(set_row_level_security, thread_sensitive=False)
    rounds = args.rls_rounds
    loops: dict[bool, list[float]] = {True: [], False: []}
    bytes_: dict[bool, list[float]] = {True: [], False: []}
    for number in range(rounds):
        for enabled in (True, False) if number % 2 == 0 else (False, True):
            await toggle(owner_url, enabled)
            loops[enabled] += await loop_with_store(agent, max(2, args.turns // rounds), args.iterations)
            bytes_[enabled] += await first_byte(agent, server, 10, max(10, args.samples // rounds))
    await toggle(owner_url, True)
    for label, figures, unit in (
        (
            f"loop overhead per iteration, PostgreSQL store ({args.iterations} iterations a turn)",
            loops,
            "5 ms p50",
        ),
        ("message to first LLM request byte, 10 stored messages", bytes_, "25 ms p95"),
    ):
        on, off = figures[True], figures[False]
        print(
            f"{label}, RLS on: p50 {statistics.median(on):.2f} ms, p95 {percentile(on, 95):.2f} ms  (target {unit})"
        )
        print(
            f"  RLS off: p50 {statistics.median(off):.2f} ms, p95 {percentile(off, 95):.2f} ms\n"
            f"  RLS cost: p50 on {statistics.median(on):.2f} / off {statistics.median(off):.2f} ms = ratio "
            f"{statistics.median(on) / statistics.median(off):.3f}; p95 ratio "
            f"{percentile(on, 95) / percentile(off, 95):.3f}  (target < 1.05)"
        )


async def run_on(agent: Any, server: ArrivalServer, args: argparse.Namespace) -> None:
    store_times = await loop_with_store(agent, args.turns, args.iterations)
    print(
        f"loop overhead per iteration, PostgreSQL store ({args.turns} turns x {args.iterations} iterations):"
        f" p50 {statistics.median(store_times):.2f} ms, p95 {percentile(store_times, 95):.2f} ms"
        "  (target p50 < 5 ms, p95 < 15 ms)"
    )
    for stored in (10, 10_000):
        times = await first_byte(agent, server, stored, args.samples)
        print(
            f"message to first LLM request byte, {stored:>6} stored messages:"
            f" p50 {statistics.median(times):.2f} ms, p95 {percentile(times, 95):.2f} ms"
            "  (target p95 < 25 ms)"
        )


if __name__ == "__main__":
    main()
