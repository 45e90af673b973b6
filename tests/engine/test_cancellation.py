"""Cancellation (E5) and the per-run time budget (E9)."""

from __future__ import annotations

import asyncio
import time

from agents.engine.interfaces import CancelToken, ModelSpec, RunContext, ToolTraits
from agents.engine.loop import LoopConfig, LoopOutcome, run_agentic_loop
from agents.engine.tool_step import CANCELLED_TOOL_TEXT, TIMED_OUT_TOOL_TEXT
from agents.engine.types import FinishPart, Message
from tests.fakes.engine import (
    FakeTool,
    FakeToolExecutor,
    InMemoryRunStore,
    RecordingEventSink,
    ScriptedProvider,
    text_turn,
    tool_call,
    tool_turn,
)

SIDE_EFFECTS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False)


def start(
    provider: ScriptedProvider,
    tools: FakeToolExecutor | None = None,
    *,
    ctx: RunContext,
    store: InMemoryRunStore,
    events: RecordingEventSink | None = None,
    **config: object,
) -> asyncio.Future[LoopOutcome]:
    message = Message.user("go")
    return asyncio.ensure_future(
        run_agentic_loop(
            [message],
            LoopConfig(ModelSpec(provider, "m"), **config),  # type: ignore[arg-type]
            tools=tools or FakeToolExecutor(),
            store=store,
            ctx=ctx,
            events=events,
            unsaved=[message],
        )
    )


async def test_e5_cancel_reaches_a_running_stream_within_milliseconds() -> None:
    provider = ScriptedProvider([text_turn("Here is the beginning of", hang=True)])
    ctx, store, events = RunContext(), InMemoryRunStore(), RecordingEventSink()
    task = start(provider, ctx=ctx, store=store, events=events)
    await asyncio.sleep(0.05)
    assert not task.done()

    started = time.perf_counter()
    ctx.cancel.cancel("user pressed stop")
    outcome = await task
    elapsed = time.perf_counter() - started

    assert elapsed < 0.05  # same event-loop tick plus cleanup, not the next delta
    assert outcome.status == "cancelled"
    assert outcome.error == "user pressed stop"
    assert provider.cancelled_streams == 1
    assert provider.closed_streams == 1
    # The partial text is kept in history and was streamed to the client.
    assert outcome.text == "Here is the beginning of"
    assert store.history[-1].text == "Here is the beginning of"
    assert store.history[-1].parts[-1] == FinishPart("cancelled")
    assert events.text() == "Here is the beginning of"


async def test_e5_remaining_tool_calls_are_recorded_as_cancelled() -> None:
    tools = FakeToolExecutor(
        FakeTool("deploy", "deployed", traits=SIDE_EFFECTS, delay=0.05),
        FakeTool("notify", traits=SIDE_EFFECTS),
    )
    deploy, notify = tool_call("deploy", {}), tool_call("notify", {})
    provider = ScriptedProvider([tool_turn(deploy, notify)])
    ctx, store = RunContext(), InMemoryRunStore()
    task = start(provider, tools, ctx=ctx, store=store)
    await asyncio.sleep(0.02)  # deploy is running
    ctx.cancel.cancel()
    outcome = await task

    assert outcome.status == "cancelled"
    # The side-effecting call in flight finished and kept its result; the next one
    # never started and is recorded as cancelled.
    assert tools.counts == {"deploy": 1}
    finished, cancelled = store.history[-1].tool_results
    assert finished.content == "deployed"
    assert cancelled.tool_call_id == notify.id
    assert cancelled.content == CANCELLED_TOOL_TEXT
    assert cancelled.error_type == "cancelled"
    assert [m.role for m in store.history] == ["user", "assistant", "tool"]
    assert outcome.failures == []  # a cancelled call is not a tool failure (E6)


async def test_e5_a_running_read_only_tool_is_interrupted_at_once() -> None:
    tools = FakeToolExecutor(FakeTool("search", delay=10.0))
    search = tool_call("search", {"q": "x"})
    provider = ScriptedProvider([tool_turn(search)])
    ctx, store = RunContext(), InMemoryRunStore()
    task = start(provider, tools, ctx=ctx, store=store)
    await asyncio.sleep(0.02)
    started = time.perf_counter()
    ctx.cancel.cancel()
    outcome = await task
    assert time.perf_counter() - started < 0.05
    assert outcome.status == "cancelled"
    assert tools.cancelled == [search.id]
    assert store.history[-1].tool_results[0].error_type == "cancelled"


async def test_e5_cancel_before_start_makes_no_llm_call() -> None:
    ctx = RunContext()
    ctx.cancel.cancel()
    with ScriptedProvider([]) as provider:
        outcome = await start(provider, ctx=ctx, store=InMemoryRunStore())
    assert outcome.status == "cancelled"
    assert provider.requests == []


async def test_e5_cancel_token_is_awaitable_idempotent_and_links_children() -> None:
    token = CancelToken()
    child = token.child()
    seen: list[str] = []
    remove = token.on_cancel(seen.append)
    waiter = asyncio.ensure_future(token.wait())
    await asyncio.sleep(0)
    token.cancel("first")
    token.cancel("second")
    assert await waiter == "first"
    assert await token == "first"
    assert token.cancelled
    assert child.cancelled
    assert child.reason == "first"
    assert seen == ["first"]
    remove()  # removing after firing is harmless
    late: list[str] = []
    token.on_cancel(late.append)
    assert late == ["first"]  # registered after cancel: runs at once


async def test_e9_time_budget_ends_the_run_with_a_timed_out_note_in_history() -> None:
    provider = ScriptedProvider([text_turn("thinking about it", hang=True)])
    ctx, store = RunContext(), InMemoryRunStore()
    outcome = await start(provider, ctx=ctx, store=store, time_budget=0.05)
    assert outcome.status == "timed_out"
    assert "[Task timed out after 0.05s]" in outcome.text
    assert store.history[-1].text.endswith("[Task timed out after 0.05s]")
    assert store.history[-1].text.startswith("thinking about it")
    assert not ctx.cancel.cancelled  # the caller's token is untouched


async def test_e9_time_budget_during_tools_records_them_as_timed_out() -> None:
    tools = FakeToolExecutor(FakeTool("crawl", delay=10.0))
    provider = ScriptedProvider([tool_turn(("crawl", {}))])
    store = InMemoryRunStore()
    outcome = await start(provider, tools, ctx=RunContext(), store=store, time_budget=0.05)
    assert outcome.status == "timed_out"
    result = store.history[2].tool_results[0]
    assert result.error_type == "timeout"
    assert result.content == TIMED_OUT_TOOL_TEXT
    assert store.history[-1].text == "[Task timed out after 0.05s]"


def test_e9_default_budget_is_zeroclaws_timeout_times_min_iterations_4() -> None:
    provider = ScriptedProvider([])
    assert LoopConfig(ModelSpec(provider, "m")).effective_time_budget == 300 * 4
    assert LoopConfig(ModelSpec(provider, "m"), max_iterations=2).effective_time_budget == 600
    assert LoopConfig(ModelSpec(provider, "m"), time_budget=0).effective_time_budget is None
