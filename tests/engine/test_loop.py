"""The agentic loop with in-memory fakes (E1-E4, E6-E8, E14, S7, P5, O1, hooks, approval)."""

from __future__ import annotations

import asyncio
from decimal import Decimal
from typing import Any

import pytest

from agents.engine.cost import ModelPrice
from agents.engine.interfaces import (
    CONTINUE,
    READ_ONLY,
    HookOutcome,
    MiddlewareResult,
    ModelSpec,
    PendingStep,
    PolicyDecision,
    RunContext,
    ToolTraits,
    TurnStats,
)
from agents.engine.loop import (
    EMPTY_REPLY_NOTE,
    LoopConfig,
    LoopOutcome,
    failure_footer,
    run_agentic_loop,
)
from agents.engine.tool_step import DUPLICATE_CALL_TEXT, INTERRUPTED_TOOL_TEXT
from agents.engine.types import (
    ImagePart,
    LLMRequest,
    Message,
    TextPart,
    ToolResultPart,
    Usage,
)
from tests.fakes.engine import (
    FakeTool,
    FakeToolExecutor,
    InMemoryRunStore,
    RecordingEventSink,
    RecordingHookRunner,
    ScriptedProvider,
    error_turn,
    text_turn,
    tool_call,
    tool_turn,
)

SIDE_EFFECTS = ToolTraits(read_only=False, side_effects=True, parallel_safe=False, risk="medium")


async def run(
    provider: ScriptedProvider,
    tools: FakeToolExecutor | None = None,
    *,
    store: InMemoryRunStore | None = None,
    events: RecordingEventSink | None = None,
    hooks: RecordingHookRunner | None = None,
    ctx: RunContext | None = None,
    user: str = "hello",
    price: ModelPrice | None = None,
    **config: Any,
) -> tuple[LoopOutcome, InMemoryRunStore]:
    store = store if store is not None else InMemoryRunStore()
    message = Message.user(user)
    spec = ModelSpec(provider, "test-model", price or ModelPrice())
    outcome = await run_agentic_loop(
        [message],
        LoopConfig(spec, system="sys", **config),
        tools=tools or FakeToolExecutor(),
        store=store,
        ctx=ctx or RunContext(),
        events=events,
        hooks=hooks,
        unsaved=[message],
    )
    return outcome, store


# ------------------------------------------------------------------ E1 / E2


async def test_e1_iteration_cap_defaults_to_20_and_ends_with_a_clear_message() -> None:
    tools = FakeToolExecutor(FakeTool("look", lambda args: f"saw {args['n']}"))
    provider = ScriptedProvider([tool_turn(("look", {"n": i})) for i in range(20)])
    with provider:
        outcome, store = await run(provider, tools)
    assert LoopConfig(ModelSpec(provider, "m")).max_iterations == 20
    assert outcome.status == "max_iterations"
    assert outcome.iterations == 20
    assert len(provider.requests) == 20
    assert "maximum number of tool iterations (20)" in outcome.text
    assert store.history[-1].text == outcome.text  # stored, so history stays valid


async def test_e1_iteration_cap_is_configurable() -> None:
    tools = FakeToolExecutor(FakeTool("look"))
    provider = ScriptedProvider([tool_turn(("look", {"n": i})) for i in range(3)])
    with provider:
        outcome, _ = await run(provider, tools, max_iterations=3)
    assert outcome.status == "max_iterations"
    assert "(3)" in outcome.text


@pytest.mark.parametrize("stop", ["end_turn", "max_tokens", "refusal", "stop_sequence", "weird"])
async def test_e2_non_tool_stop_reasons_end_the_turn_with_their_text(stop: str) -> None:
    provider = ScriptedProvider([text_turn("the answer", stop=stop)])
    with provider:
        outcome, store = await run(provider)
    assert outcome.status == "completed"
    assert outcome.text == "the answer"
    assert outcome.stop_reason == stop
    assert [m.role for m in store.history] == ["user", "assistant"]


async def test_e2_tool_use_continues_until_end_turn() -> None:
    tools = FakeToolExecutor(FakeTool("read_file", "file body"))
    provider = ScriptedProvider(
        [
            tool_turn(("read_file", {"path": "a.txt"})),
            text_turn(
                "read it",
                check=lambda req: _assert_last_is_result(req, "file body"),
            ),
        ]
    )
    with provider:
        outcome, store = await run(provider, tools)
    assert outcome.status == "completed"
    assert outcome.iterations == 2
    assert [m.role for m in store.history] == ["user", "assistant", "tool", "assistant"]


def _assert_last_is_result(request: LLMRequest, content: str) -> None:
    last = request.messages[-1]
    assert last.role == "tool"
    assert last.tool_results[0].content == content


async def test_e2_tool_calls_cut_off_by_max_tokens_are_not_run_or_stored() -> None:
    tools = FakeToolExecutor(FakeTool("write", traits=SIDE_EFFECTS))
    provider = ScriptedProvider([tool_turn(("write", {"x": 1}), text="partial", stop="max_tokens")])
    with provider:
        outcome, store = await run(provider, tools)
    assert outcome.status == "completed"
    assert tools.side_effects == 0
    assert store.history[-1].tool_calls == []
    assert store.history[-1].text == "partial"


# ---------------------------------------------------------------------- E3


async def test_e3_empty_reply_is_retried_once_with_a_runtime_note() -> None:
    def has_note(request: LLMRequest) -> None:
        assert request.messages[-1].text == EMPTY_REPLY_NOTE

    provider = ScriptedProvider([text_turn("", thinking="hmm"), text_turn("hi!", check=has_note)])
    with provider:
        outcome, store = await run(provider)
    assert outcome.text == "hi!"
    # The note and the empty reply stay out of history; both calls' usage is kept.
    assert [m.text for m in store.history] == ["hello", "hi!"]
    assert len(store.usage) == 2


async def test_e3_second_empty_reply_is_not_retried_again() -> None:
    provider = ScriptedProvider([text_turn(""), text_turn("")])
    with provider:
        outcome, _ = await run(provider)
    assert outcome.status == "completed"
    assert outcome.text == ""
    assert len(provider.requests) == 2


# ---------------------------------------------------------------------- E4


async def test_e4_parallel_tool_calls_run_concurrently_with_results_in_call_order() -> None:
    tools = FakeToolExecutor(
        FakeTool("slow", "slow result", delay=0.05),
        FakeTool("fast", "fast result", delay=0.0),
    )
    slow, fast = tool_call("slow", {"a": 1}), tool_call("fast", {"b": 2})
    provider = ScriptedProvider([tool_turn(slow, fast), text_turn("ok")])
    with provider:
        _, store = await run(provider, tools)
    assert tools.max_running == 2
    results = store.history[2].tool_results
    assert [r.tool_call_id for r in results] == [slow.id, fast.id]
    assert [r.content for r in results] == ["slow result", "fast result"]
    # fast finished first, yet its result is second: order is the call order.
    assert tools.order.index(f"end:{fast.id}") < tools.order.index(f"end:{slow.id}")


async def test_e4_sequential_setting_runs_one_call_at_a_time() -> None:
    tools = FakeToolExecutor(FakeTool("a", delay=0.01), FakeTool("b", delay=0.01))
    provider = ScriptedProvider([tool_turn(("a", {}), ("b", {})), text_turn("ok")])
    with provider:
        await run(provider, tools, parallel_tools=False)
    assert tools.max_running == 1


async def test_e4_tools_that_are_not_parallel_safe_never_overlap() -> None:
    tools = FakeToolExecutor(
        FakeTool("read", delay=0.01),
        FakeTool("write", delay=0.01, traits=SIDE_EFFECTS),
    )
    calls = [tool_call("read", {"n": 1}), tool_call("write", {"n": 2}), tool_call("read", {"n": 3})]
    provider = ScriptedProvider([tool_turn(*calls), text_turn("ok")])
    with provider:
        await run(provider, tools)
    assert tools.max_running == 1
    assert [c.id for c in tools.calls] == [c.id for c in calls]


# ---------------------------------------------------------------------- E6


async def test_e6_failed_tools_are_summarised_in_a_footer_of_the_reply() -> None:
    tools = FakeToolExecutor(
        FakeTool("bash", "exit code 2: no such file", error_type="process_exit"),
        FakeTool("ok_tool", "fine"),
    )
    provider = ScriptedProvider([tool_turn(("bash", {"c": "ls"}), ("ok_tool", {})), text_turn("done")])
    with provider:
        outcome, store = await run(provider, tools)
    assert outcome.text == "done"
    assert "Some tools failed" in outcome.reply
    assert "bash (process_exit): exit code 2: no such file" in outcome.reply
    assert "ok_tool" not in outcome.footer
    assert store.history[-1].text == "done"  # the footer is for the reader, not history


def test_e6_footer_is_empty_without_failures_and_capped() -> None:
    from agents.engine.loop import ToolFailure

    assert failure_footer([]) == ""
    many = [ToolFailure(f"t{i}", "tool_error", "boom") for i in range(8)]
    assert "... and 3 more" in failure_footer(many)


async def test_a_tool_that_raises_becomes_a_typed_error_without_a_trace() -> None:
    tools = FakeToolExecutor(FakeTool("buggy", raises=RuntimeError("secret path /etc/x")))
    provider = ScriptedProvider([tool_turn(("buggy", {})), text_turn("sorry")])
    with provider:
        outcome, store = await run(provider, tools)
    result = store.history[2].tool_results[0]
    assert result.is_error
    assert result.error_type == "tool_error"
    assert "/etc/x" not in result.content
    assert outcome.failures[0].name == "buggy"


# ---------------------------------------------------------------------- E7


async def test_e7_text_tool_calls_from_weak_models_are_executed() -> None:
    tools = FakeToolExecutor(FakeTool("shell", "README.md"))
    text = '<tool_call>{"name": "shell", "arguments": {"command": "ls"}}</tool_call>'
    provider = ScriptedProvider([text_turn(text), text_turn("There is a README.")])
    with provider:
        outcome, store = await run(provider, tools)
    assert tools.counts["shell"] == 1
    assert tools.calls[0].arguments == {"command": "ls"}
    assert store.history[1].tool_calls[0].name == "shell"
    assert outcome.text == "There is a README."


async def test_e7_aliased_structured_tool_names_are_resolved() -> None:
    tools = FakeToolExecutor(FakeTool("shell", "ok"))
    provider = ScriptedProvider([tool_turn(("bash", {"command": "ls"})), text_turn("done")])
    with provider:
        await run(provider, tools)
    assert tools.counts["shell"] == 1


# ---------------------------------------------------------------------- E8


async def test_e8_identical_tool_call_is_not_executed_twice_in_one_turn() -> None:
    tools = FakeToolExecutor(FakeTool("send", "sent", traits=SIDE_EFFECTS))
    provider = ScriptedProvider(
        [
            tool_turn(("send", {"to": "bob", "text": "hi"})),
            # Same call, keys in another order: still the same canonical call.
            tool_turn(("send", {"text": "hi", "to": "bob"})),
            text_turn("done"),
        ]
    )
    with provider:
        _, store = await run(provider, tools)
    assert tools.counts["send"] == 1
    duplicate = store.history[4].tool_results[0]
    assert duplicate.content.startswith(DUPLICATE_CALL_TEXT)
    assert "Earlier result:\nsent" in duplicate.content


async def test_e8_duplicates_within_one_response_run_once() -> None:
    tools = FakeToolExecutor(FakeTool("read"))
    provider = ScriptedProvider([tool_turn(("read", {"p": 1}), ("read", {"p": 1})), text_turn("k")])
    with provider:
        await run(provider, tools)
    assert tools.counts["read"] == 1


async def test_e8_different_arguments_are_not_duplicates() -> None:
    tools = FakeToolExecutor(FakeTool("read"))
    provider = ScriptedProvider([tool_turn(("read", {"p": 1}), ("read", {"p": 2})), text_turn("k")])
    with provider:
        await run(provider, tools)
    assert tools.counts["read"] == 2


# ---------------------------------------------------------------------- E14


async def test_e14_tool_output_is_scrubbed_before_model_hooks_and_events() -> None:
    secret = "sk-ant-api03-" + "A" * 40
    tools = FakeToolExecutor(FakeTool("env", f"ANTHROPIC_API_KEY={secret}"))
    hooks = RecordingHookRunner()
    events = RecordingEventSink()

    def no_secret(request: LLMRequest) -> None:
        assert secret not in request.messages[-1].tool_results[0].content

    provider = ScriptedProvider([tool_turn(("env", {})), text_turn("ok", check=no_secret)])
    with provider:
        _, store = await run(provider, tools, hooks=hooks, events=events)
    assert secret not in str(store.history)
    after = next(p for e, p in hooks.calls if e == "after_tool_call")
    assert secret not in after["result"]["content"]
    assert secret not in str(events.events)


# ------------------------------------------------------------- S7, P5, O1


async def test_s7_each_step_is_persisted_in_one_call_before_the_next_llm_call() -> None:
    store = InMemoryRunStore()
    tools = FakeToolExecutor(FakeTool("read", "body"))

    def history_has_step(request: LLMRequest) -> None:
        # The tool step was written (in one persist_step) before this call.
        assert [m.role for m in store.history] == ["user", "assistant", "tool"]

    provider = ScriptedProvider([tool_turn(("read", {})), text_turn("ok", check=history_has_step)])
    with provider:
        await run(provider, tools, store=store)
    # step 0: user message + usage + pending assistant; step 1: assistant + results
    # together; step 2: final answer.
    assert [len(s.messages) for s in store.steps] == [1, 2, 1]
    assert store.steps[0].pending is not None
    assert store.steps[1].pending is None
    assert [m.role for m in store.steps[1].messages] == ["assistant", "tool"]
    assert store.log.index("mark_tool_started:" + store.history[1].tool_calls[0].id) < (
        store.log.index("mark_tool_finished:" + store.history[1].tool_calls[0].id)
    )


async def test_p5_o1_every_usage_record_carries_cost_latency_provider_model_purpose() -> None:
    price = ModelPrice.per_million(input=3, output=15, cache_read="0.3", cache_write="3.75")
    usage = Usage(input_tokens=1000, output_tokens=200, cache_read_tokens=5000, cache_write_tokens=100)
    tools = FakeToolExecutor(FakeTool("read"))
    provider = ScriptedProvider([tool_turn(("read", {}), usage=usage), text_turn("ok", usage=usage)])
    ctx = RunContext()
    with provider:
        outcome, store = await run(provider, tools, price=price, ctx=ctx)
    expected = Decimal("0.003") + Decimal("0.003") + Decimal("0.0015") + Decimal("0.000375")
    assert len(store.usage) == 2
    for record in store.usage:
        assert record.cost == expected
        assert record.provider == "scripted"
        assert record.model == "test-model"
        assert record.purpose == "agent_loop"
        assert record.input_tokens == 1000
        assert record.cache_read_tokens == 5000
        assert record.latency_ms >= 0
    assert outcome.cost == expected * 2
    assert ctx.totals.cost == expected * 2
    assert ctx.totals.llm_calls == 2


async def test_images_are_sent_but_stored_without_data() -> None:
    image = ImagePart("image/png", "aGVsbG8=")
    message = Message("user", [image, TextPart("what is this?")])
    store = InMemoryRunStore()

    def sees_image(request: LLMRequest) -> None:
        assert request.messages[0].parts[0] == image

    provider = ScriptedProvider([text_turn("a cat", check=sees_image)])
    with provider:
        await run_agentic_loop(
            [message],
            LoopConfig(ModelSpec(provider, "m", supports_vision=True)),
            tools=FakeToolExecutor(),
            store=store,
            ctx=RunContext(),
            unsaved=[message],
        )
    assert store.history[0].parts[0] == ImagePart("image/png", None)


# -------------------------------------------------------------------- hooks


async def test_before_llm_call_hook_can_patch_the_system_prompt_or_block() -> None:
    hooks = RecordingHookRunner({"before_llm_call": HookOutcome.modify({"system": "patched"})})

    def patched(request: LLMRequest) -> None:
        assert request.system == "patched"

    provider = ScriptedProvider([text_turn("ok", check=patched)])
    with provider:
        await run(provider, hooks=hooks)

    blocking = RecordingHookRunner({"before_llm_call": HookOutcome.block("over budget")})
    with ScriptedProvider([]) as silent:
        outcome, store = await run(silent, hooks=blocking)
    assert outcome.status == "blocked"
    assert outcome.text == "over budget"
    assert store.history[-1].text == "over budget"


async def test_before_tool_call_hook_blocks_or_patches_arguments() -> None:
    tools = FakeToolExecutor(FakeTool("bash", lambda a: f"ran {a['command']}"))

    def decide(payload: Any) -> HookOutcome:
        if payload["arguments"]["command"] == "rm -rf /":
            return HookOutcome.block("dangerous")
        return HookOutcome.modify({"arguments": {"command": "ls -la"}})

    hooks = RecordingHookRunner({"before_tool_call": decide})
    provider = ScriptedProvider(
        [tool_turn(("bash", {"command": "rm -rf /"}), ("bash", {"command": "ls"})), text_turn("k")]
    )
    with provider:
        _, store = await run(provider, tools, hooks=hooks)
    blocked, patched = store.history[2].tool_results
    assert blocked.error_type == "hook_blocked"
    assert blocked.content == "dangerous"
    assert patched.content == "ran ls -la"
    assert tools.counts["bash"] == 1
    # History shows the call as it actually ran.
    assert store.history[1].tool_calls[1].arguments == {"command": "ls -la"}


async def test_after_tool_call_hook_can_redact_output() -> None:
    tools = FakeToolExecutor(FakeTool("read_file", "private"))
    hooks = RecordingHookRunner({"after_tool_call": HookOutcome.modify({"content": "[redacted]"})})
    provider = ScriptedProvider([tool_turn(("read_file", {})), text_turn("k")])
    with provider:
        _, store = await run(provider, tools, hooks=hooks)
    assert store.history[2].tool_results[0].content == "[redacted]"


# ----------------------------------------------------------------- approval


async def test_a_call_needing_approval_ends_the_loop_before_any_sibling_runs() -> None:
    tools = FakeToolExecutor(
        FakeTool("read"),
        FakeTool("bash", traits=SIDE_EFFECTS, policy=PolicyDecision.needs_approval("high risk")),
    )
    events = RecordingEventSink()
    provider = ScriptedProvider([tool_turn(("read", {}), ("bash", {"command": "make"}))])
    with provider:
        outcome, store = await run(provider, tools, events=events)
    assert outcome.status == "awaiting_approval"
    assert [p.call.name for p in outcome.pending_calls] == ["bash"]
    assert outcome.pending_calls[0].reason == "high risk"
    assert tools.calls == []
    assert store.pending is not None
    assert len(store.pending.tool_calls) == 2
    assert [m.role for m in store.history] == ["user"]
    assert events.of("approval_needed")[0]["calls"][0]["name"] == "bash"


async def test_resume_after_approval_runs_approved_calls_and_refuses_denied_ones() -> None:
    tools = FakeToolExecutor(
        FakeTool("bash", "built", traits=SIDE_EFFECTS, policy=PolicyDecision.needs_approval()),
        FakeTool("rm", traits=SIDE_EFFECTS, policy=PolicyDecision.needs_approval()),
    )
    provider = ScriptedProvider([tool_turn(("bash", {"c": "make"}), ("rm", {"p": "x"}))])
    with provider:
        first, store = await run(provider, tools)
    assert first.status == "awaiting_approval"
    state = await store.load_conversation(max_messages=50)
    assert state.pending is not None
    bash_id, rm_id = (c.id for c in state.pending.assistant.tool_calls)
    state.pending.approvals = {bash_id: True, rm_id: False}

    provider.add(text_turn("built it; skipped rm"))
    with provider:
        outcome = await run_agentic_loop(
            state.messages,
            LoopConfig(ModelSpec(provider, "m")),
            tools=tools,
            store=store,
            ctx=RunContext(),
            resume=state.pending,
        )
    assert outcome.status == "completed"
    assert tools.counts == {"bash": 1}
    bash, rm = store.history[2].tool_results
    assert bash.content == "built"
    assert rm.error_type == "approval_denied"
    assert store.pending is None


async def test_resume_after_crash_never_reruns_an_unconfirmed_side_effecting_call() -> None:
    send = tool_call("send_email", {"to": "a@b.c"})
    read = tool_call("read", {"p": 1})
    done = tool_call("read", {"p": 2})
    pending = PendingStep(
        Message("assistant", [send, read, done]),
        finished={done.id: ToolResultPart(done.id, "read", "already read")},
        started=frozenset({send.id, read.id}),
    )
    tools = FakeToolExecutor(
        FakeTool("send_email", traits=SIDE_EFFECTS), FakeTool("read", "fresh read", traits=READ_ONLY)
    )
    store = InMemoryRunStore([Message.user("mail a@b.c")])
    provider = ScriptedProvider([text_turn("checked")])
    with provider:
        await run_agentic_loop(
            list(store.history),
            LoopConfig(ModelSpec(provider, "m")),
            tools=tools,
            store=store,
            ctx=RunContext(),
            resume=pending,
        )
    results = {r.tool_call_id: r for r in store.history[2].tool_results}
    assert results[send.id].error_type == "interrupted"
    assert results[send.id].content == INTERRUPTED_TOOL_TEXT
    assert results[read.id].content == "fresh read"  # read-only: safe to run again
    assert results[done.id].content == "already read"
    assert tools.counts == {"read": 1}


async def test_policy_deny_and_unknown_tools_become_errors_for_the_model() -> None:
    tools = FakeToolExecutor(FakeTool("secret", policy=PolicyDecision.deny("not for you")))
    provider = ScriptedProvider([tool_turn(("secret", {}), ("nope", {})), text_turn("k")])
    with provider:
        _, store = await run(provider, tools)
    denied, unknown = store.history[2].tool_results
    assert denied.error_type == "policy_denied"
    assert denied.content == "not for you"
    assert unknown.error_type == "unknown_tool"
    assert tools.calls == []


async def test_invalid_tool_json_is_answered_with_an_error_not_run() -> None:
    tools = FakeToolExecutor(FakeTool("write", traits=SIDE_EFFECTS))
    provider = ScriptedProvider([tool_turn(("write", {}), raw_arguments={0: '{"path": "a'}), text_turn("k")])
    with provider:
        _, store = await run(provider, tools)
    assert store.history[2].tool_results[0].error_type == "invalid_arguments"
    assert tools.calls == []


async def test_tool_subset_hides_and_refuses_other_tools() -> None:
    tools = FakeToolExecutor(FakeTool("read"), FakeTool("write", traits=SIDE_EFFECTS))

    def only_read(request: LLMRequest) -> None:
        assert [t.name for t in request.tools] == ["read"]

    provider = ScriptedProvider([tool_turn(("write", {}), check=only_read), text_turn("k")])
    with provider:
        _, store = await run(provider, tools, allowed_tools=frozenset({"read"}))
    assert store.history[2].tool_results[0].error_type == "unknown_tool"
    assert tools.calls == []


# -------------------------------------------------------------- middleware


class _Recorder:
    def __init__(self, before: MiddlewareResult = CONTINUE) -> None:
        self.before = before
        self.seen: list[tuple[str, int]] = []

    async def before_turn(self, stats: TurnStats) -> MiddlewareResult:
        self.seen.append(("before", stats.iteration))
        return self.before

    async def after_turn(self, stats: TurnStats) -> MiddlewareResult:
        self.seen.append(("after", stats.iteration))
        return CONTINUE


async def test_e25_middleware_runs_before_and_after_each_llm_turn() -> None:
    recorder = _Recorder()
    tools = FakeToolExecutor(FakeTool("read"))
    provider = ScriptedProvider([tool_turn(("read", {})), text_turn("done")])
    with provider:
        await run_agentic_loop(
            [Message.user("x")],
            LoopConfig(ModelSpec(provider, "m")),
            tools=tools,
            store=InMemoryRunStore(),
            ctx=RunContext(),
            middleware=[recorder],
        )
    assert recorder.seen == [("before", 1), ("after", 1), ("before", 2), ("after", 2)]


async def test_e25_middleware_stop_ends_the_loop_without_an_llm_call() -> None:
    stopper = _Recorder(MiddlewareResult("stop", "budget spent"))
    with ScriptedProvider([]) as provider:
        outcome = await run_agentic_loop(
            [Message.user("x")],
            LoopConfig(ModelSpec(provider, "m")),
            tools=FakeToolExecutor(),
            store=InMemoryRunStore(),
            ctx=RunContext(),
            middleware=[stopper],
        )
    assert outcome.status == "stopped"
    assert outcome.text == "budget spent"


async def test_e25_middleware_compact_replaces_the_working_context() -> None:
    compactor = _Recorder(MiddlewareResult("compact"))
    seen: list[int] = []

    async def compact(messages: list[Message]) -> list[Message]:
        seen.append(len(messages))
        return [Message.user("[summary]"), Message.assistant("ok"), messages[-1]]

    def compacted(request: LLMRequest) -> None:
        assert request.messages[0].text == "[summary]"

    provider = ScriptedProvider([text_turn("done", check=compacted)])
    history = [Message.user(str(i)) if i % 2 == 0 else Message.assistant(str(i)) for i in range(9)]
    with provider:
        await run_agentic_loop(
            history,
            LoopConfig(ModelSpec(provider, "m")),
            tools=FakeToolExecutor(),
            store=InMemoryRunStore(),
            ctx=RunContext(),
            middleware=[compactor],
            compact=compact,
        )
    assert seen == [9]


# -------------------------------------------------------------- streaming


async def test_chunks_are_coalesced_not_one_event_per_token() -> None:
    events = RecordingEventSink()
    text = "word " * 100
    provider = ScriptedProvider([text_turn(text, chunk=2)])
    with provider:
        await run(provider, events=events)
    chunks = events.of("chunk")
    assert events.text() == text
    assert len(chunks) <= len(text) // 80 + 2  # ~80 characters per event, not 250
    assert all(len(c["text"]) >= 80 for c in chunks[:-1])


async def test_held_text_is_flushed_by_the_timer_during_a_pause() -> None:
    events = RecordingEventSink()
    provider = ScriptedProvider([text_turn("Hel", hang=True)])
    ctx = RunContext()
    with provider:
        task = asyncio.ensure_future(run(provider, events=events, ctx=ctx))
        await asyncio.sleep(0.15)
        assert events.text() == "Hel"  # sent by the ~40 ms timer, stream still open
        ctx.cancel.cancel()
        await task


async def test_thinking_is_streamed_as_thinking_events() -> None:
    events = RecordingEventSink()
    provider = ScriptedProvider([text_turn("answer", thinking="let me think")])
    with provider:
        await run(provider, events=events)
    assert events.text("thinking") == "let me think"
    assert events.types().index("thinking") < events.types().index("chunk")


async def test_provider_error_fails_the_loop_but_keeps_the_user_message() -> None:
    provider = ScriptedProvider([error_turn("auth", "invalid API key")])
    with provider:
        outcome, store = await run(provider)
    assert outcome.status == "failed"
    assert "invalid API key" in (outcome.error or "")
    assert [m.text for m in store.history] == ["hello"]
    assert store.usage[0].error == "auth"


async def test_scripted_provider_fails_loudly_on_an_unexpected_request() -> None:
    provider = ScriptedProvider([tool_turn(("read", {}))])
    with pytest.raises(AssertionError, match="unexpected request #2"):
        await run(provider, FakeToolExecutor(FakeTool("read")))


def test_scripted_provider_fails_loudly_on_an_unused_turn() -> None:
    with pytest.raises(AssertionError, match="1 scripted turn"), ScriptedProvider([text_turn("x")]):
        pass
