"""The agentic loop: one engine for chat turns, routines, sub-agents and memory flush.

As IronClaw's ``run_agentic_loop``: every path calls :func:`run_agentic_loop` with its
own :class:`LoopConfig` (iteration cap, tool subset, prompt already built in the
requested mode, usage purpose, parallel or sequential tools). The loop knows nothing
about Django; storage, tools, hooks and events come in through ``interfaces``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

from agents.engine import tracing
from agents.engine.cost import cost_of
from agents.engine.interfaces import (
    BEFORE_LLM_CALL,
    CancelToken,
    EventSink,
    HookRunner,
    Middleware,
    MiddlewareResult,
    ModelSpec,
    NullEventSink,
    NullHookRunner,
    PendingStep,
    RunContext,
    RunStore,
    StepRecord,
    ToolExecutor,
    TurnStats,
    UsageRecord,
)
from agents.engine.streaming import DeltaCoalescer
from agents.engine.text_tool_calls import extract_text_tool_calls, resolve_tool_name
from agents.engine.tokens import estimate_tokens
from agents.engine.tool_step import (
    CANCELLED_TOOL_TEXT,
    TIMED_OUT_TOOL_TEXT,
    ToolStepRunner,
    tool_error,
)
from agents.engine.types import (
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_STOP_SEQUENCE,
    STOP_TOOL_USE,
    FinishPart,
    ImagePart,
    LLMRequest,
    LLMResponse,
    Message,
    Part,
    ProviderError,
    ReasoningPart,
    RunCancelled,
    TextDelta,
    TextPart,
    ThinkingDelta,
    ToolCallPart,
    ToolDefinition,
    Usage,
)
from agents.providers.accumulate import StreamAccumulator

logger = logging.getLogger("claw.engine.loop")

DEFAULT_MAX_ITERATIONS = 20  # E1 (GoClaw's default)
# ZeroClaw: the run's time budget is timeout_secs * min(max_iterations, 4) (E9).
DEFAULT_SECONDS_PER_ITERATION = 300.0
TIME_BUDGET_ITERATIONS_CAP = 4

EMPTY_REPLY_NOTE = (
    "[runtime_guard] Your previous reply had no visible text. Reply to the user now "
    "with a visible answer (or exactly NO_REPLY if no reply is needed)."
)
MAX_FOOTER_LINES = 5

LoopStatus = Literal[
    "completed",  # the model gave its final answer (end_turn, max_tokens, other)
    "max_iterations",  # iteration cap reached; a clear final message was stored
    "awaiting_approval",  # a tool call needs approval; pending step stored
    "cancelled",  # the cancel token fired (E5)
    "timed_out",  # the time budget ran out (E9)
    "failed",  # the provider failed (after its own retries)
    "blocked",  # a before_llm_call hook blocked
    "stopped",  # a middleware said stop (cost guard, ...)
]

CompactFn = Callable[[list[Message]], Awaitable[list[Message]]]


# ----------------------------------------------------------------------- config


@dataclass(slots=True)
class LoopConfig:
    """How one path runs the loop (IronClaw's ``LoopDelegate`` as data).

    Chat: defaults. Sub-agent: ``max_iterations=10``, minimal prompt, read-only
    tools. Memory flush: ``max_iterations=5``, minimal prompt, memory tools,
    ``persist_messages=False``. Routine: the routine's own cap and tools.
    """

    model: ModelSpec
    system: str = ""
    purpose: str = "agent_loop"
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    # E4: several calls of one response run concurrently where the tools allow it.
    parallel_tools: bool = True
    # Tool subset: None = every tool the executor offers; names in ``denied_tools``
    # are hidden from the model and refused if called anyway.
    allowed_tools: frozenset[str] | None = None
    denied_tools: frozenset[str] = frozenset()
    max_tokens: int | None = None  # None: the model's own max_tokens
    temperature: float | None = None
    thinking_budget: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    stream: bool = True
    # E9: None = DEFAULT_SECONDS_PER_ITERATION * min(max_iterations, 4); <= 0 = none.
    time_budget: float | None = None
    retry_empty_reply: bool = True  # E3
    parse_text_tool_calls: bool = True  # E7
    dedupe_tool_calls: bool = True  # E8
    # False for ephemeral loops (memory flush): only usage records are stored.
    persist_messages: bool = True
    # Draft streaming (ZeroClaw): a chunk event every ~40 ms or ~80 characters.
    coalesce_seconds: float = 0.04
    coalesce_chars: int = 80
    checkpoint_seconds: float = 1.0  # partial-text checkpoint throttle

    @property
    def effective_time_budget(self) -> float | None:
        if self.time_budget is None:
            iterations = min(self.max_iterations, TIME_BUDGET_ITERATIONS_CAP)
            return DEFAULT_SECONDS_PER_ITERATION * max(iterations, 1)
        return self.time_budget if self.time_budget > 0 else None


# ---------------------------------------------------------------------- outcome


@dataclass(frozen=True, slots=True)
class ToolFailure:
    name: str
    error_type: str
    message: str


@dataclass(frozen=True, slots=True)
class PendingCall:
    """A call waiting for approval, as carried by an awaiting_approval outcome."""

    call: ToolCallPart
    reason: str
    details: dict[str, Any] | None = None  # PolicyDecision.details: shown to the approver


@dataclass(slots=True)
class LoopOutcome:
    """How a loop ended. ``text`` is the model's final text (unsanitised);
    ``messages`` everything the loop added to history, as stored."""

    status: LoopStatus
    text: str = ""
    messages: list[Message] = field(default_factory=list)
    stop_reason: str = ""
    iterations: int = 0
    pending_calls: list[PendingCall] = field(default_factory=list)
    failures: list[ToolFailure] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = field(default_factory=lambda: Decimal(0))
    usage_records: list[UsageRecord] = field(default_factory=list)
    error: str | None = None

    @property
    def footer(self) -> str:
        return failure_footer(self.failures)

    @property
    def reply(self) -> str:
        """``text`` with the failed-tools footer (E6) appended when tools failed."""
        return self.text + self.footer if self.failures else self.text


def failure_footer(failures: Sequence[ToolFailure]) -> str:
    """MicroClaw's tool-failure summary, appended to a final reply (E6)."""
    if not failures:
        return ""
    lines: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    for failure in failures:
        first_line = failure.message.strip().splitlines()[0] if failure.message.strip() else ""
        snippet = first_line[:160] + ("..." if len(first_line) > 160 else "")
        key = (failure.name, failure.error_type, snippet)
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"- {failure.name} ({failure.error_type}): {snippet}".rstrip(": "))
    more = len(lines) - MAX_FOOTER_LINES
    shown = lines[:MAX_FOOTER_LINES] + ([f"- ... and {more} more"] if more > 0 else [])
    return "\n\n---\nSome tools failed during this turn:\n" + "\n".join(shown)


def for_storage(message: Message) -> Message:
    """The message as history stores it: image data replaced by a placeholder (E23)."""
    if not any(isinstance(p, ImagePart) and p.data is not None for p in message.parts):
        return message
    parts: list[Part] = [ImagePart(p.media_type) if isinstance(p, ImagePart) else p for p in message.parts]
    return Message(message.role, parts)


# --------------------------------------------------------------------------- loop


class _AwaitingApproval(Exception):
    def __init__(self, pending: list[PendingCall]) -> None:
        self.pending = pending


async def run_agentic_loop(
    messages: list[Message],
    config: LoopConfig,
    *,
    tools: ToolExecutor,
    store: RunStore,
    ctx: RunContext,
    events: EventSink | None = None,
    hooks: HookRunner | None = None,
    unsaved: Sequence[Message] = (),
    resume: PendingStep | None = None,
    middleware: Sequence[Middleware] = (),
    compact: CompactFn | None = None,
) -> LoopOutcome:
    """Run the model with tools until it answers, then return how it ended.

    ``messages`` is the working conversation sent to the model (summary, pruned
    history, the new user message); it is not modified. ``unsaved`` are messages of
    this turn not yet in the store (the user message): they are written with the
    first step, so a turn's messages never interleave with another run's (S7).
    ``resume`` continues a pending step (approval given, or a crashed worker).
    Cancellation comes from ``ctx.cancel``; ``ctx.totals`` accumulates cost.

    Steps of each iteration:

    1. cancellation check; middleware ``before_turn`` (cost guard, auto-compact,
       stop) -- E25;
    2. ``before_llm_call`` hooks (may patch ``system``/``model`` or block);
    3. the LLM call, streamed: text and thinking deltas go to the EventSink as
       coalesced ``chunk``/``thinking`` events; the partial text is checkpointed;
       a usage record with cost (P5) and latency (O1) is kept for the step;
    4. tool calls written as text by weak models are parsed (E7), names resolved
       through aliases;
    5. with tool calls: ``persist_step`` with the assistant message as pending;
       per call ``before_tool_call`` hooks, dedupe (E8), policy (approval needed
       ends the loop); execution in parallel where allowed, results in call order
       (E4); output credential-scrubbed (E14); ``after_tool_call`` hooks; then
       ``persist_step`` with the assistant message and the results;
    6. middleware ``after_turn``; next iteration.

    Stop conditions (``LoopOutcome.status``):

    - ``completed``: stop reason ``end_turn``/``max_tokens``/anything but tool use
      (E2); an empty visible reply is first retried once with a runtime note (E3);
    - ``max_iterations``: the cap (default 20, E1) was reached; a clear final
      message is stored and returned;
    - ``awaiting_approval``: a call needs approval; ``pending_calls`` lists them and
      the assistant message stays stored as the pending step;
    - ``cancelled`` (E5): the token fired, also mid-stream (the stream task is
      cancelled and closed at once); partial text is kept, unfinished tool calls
      are recorded as cancelled;
    - ``timed_out`` (E9): the time budget ran out; like cancel, plus a
      ``[Task timed out after Ns]`` note stored in history;
    - ``failed``: the provider raised ``ProviderError`` (it already retried);
    - ``blocked``: a ``before_llm_call`` hook blocked; its reason is the reply;
    - ``stopped``: a middleware said stop; its reason is the reply.

    Failed tools of the run are listed in ``failures`` (``reply`` adds the E6
    footer). Everything is persisted before this function returns.
    """
    run = _LoopRun(
        messages,
        config,
        tools=tools,
        store=store,
        ctx=ctx,
        events=events or NullEventSink(),
        hooks=hooks or NullHookRunner(),
        unsaved=unsaved,
        middleware=middleware,
        compact=compact,
    )
    return await run.run(resume)


class _LoopRun:
    """State of one ``run_agentic_loop`` call (kept off the public signature)."""

    def __init__(
        self,
        messages: list[Message],
        config: LoopConfig,
        *,
        tools: ToolExecutor,
        store: RunStore,
        ctx: RunContext,
        events: EventSink,
        hooks: HookRunner,
        unsaved: Sequence[Message],
        middleware: Sequence[Middleware],
        compact: CompactFn | None,
    ) -> None:
        self.messages = list(messages)
        self.config = config
        self.tools = tools
        self.store = store
        self.outer_ctx = ctx
        # Our own token: cancelled by the caller's token *or* the time budget, and
        # handed to tools so they stop on either.
        self.cancel = CancelToken()
        self.ctx = replace(ctx, cancel=self.cancel)
        self.events = events
        self.hooks = hooks
        self.middleware = middleware
        self.compact = compact
        self.persist = config.persist_messages
        self.unsaved = [for_storage(m) for m in unsaved] if self.persist else []
        self.added: list[Message] = []
        self.usage_records: list[UsageRecord] = []
        self.step_usage: list[UsageRecord] = []
        self.usage = Usage()
        self.cost = Decimal(0)
        self.failures: list[ToolFailure] = []
        self.step_index = 0
        self.iteration = 0
        self.retried_empty = False
        self.model = config.model.model
        self.system = config.system
        # In-flight state, read when a cancel lands mid-step.
        self.accumulator: StreamAccumulator | None = None
        self.tool_message: Message | None = None
        self._definitions = self._visible_definitions()
        self.known_tools = {d.name for d in self._definitions}
        self.runner = ToolStepRunner(
            tools=tools,
            hooks=hooks,
            events=events,
            store=store,
            ctx=self.ctx,
            cancel=self.cancel,
            known_tools=self.known_tools,
            parallel=config.parallel_tools,
            dedupe=config.dedupe_tool_calls,
            persist=self.persist,
        )

    # ------------------------------------------------------------------ helpers

    def _visible_definitions(self) -> list[ToolDefinition]:
        allowed = self.config.allowed_tools
        denied = self.config.denied_tools
        return [
            d
            for d in self.tools.definitions()
            if (allowed is None or d.name in allowed) and d.name not in denied
        ]

    async def _persist(self, messages: list[Message], pending: Message | None = None) -> None:
        """One step, one write: unsaved turn messages + these + usage (S7)."""
        if self.persist:
            stored = self.unsaved + [for_storage(m) for m in messages]
            self.unsaved = []
            self.added.extend(stored)
            record = StepRecord(self.step_index, stored, self.step_usage, pending)
        else:
            if not self.step_usage:
                return
            record = StepRecord(self.step_index, [], self.step_usage, None)
        self.step_usage = []
        self.step_index += 1
        await self.store.persist_step(record)

    def _outcome(self, status: LoopStatus, text: str = "", **kwargs: Any) -> LoopOutcome:
        return LoopOutcome(
            status=status,
            text=text,
            messages=self.added,
            iterations=self.iteration,
            failures=self.failures,
            usage=self.usage,
            cost=self.cost,
            usage_records=self.usage_records,
            **kwargs,
        )

    async def _finish_with_note(self, status: LoopStatus, note: str) -> LoopOutcome:
        message = Message.assistant(note)
        self.messages.append(message)
        await self._persist([message])
        return self._outcome(status, note)

    # --------------------------------------------------------------------- run

    async def run(self, resume: PendingStep | None) -> LoopOutcome:
        unlink = self.outer_ctx.cancel.on_cancel(self.cancel.cancel)
        budget = self.config.effective_time_budget
        timer = (
            asyncio.get_running_loop().call_later(budget, self.cancel.cancel, "timed_out") if budget else None
        )
        try:
            try:
                if resume is not None:
                    await self._tool_step(resume.assistant, resume, already_pending=True)
                return await self._iterate()
            except RunCancelled:
                return await self._on_cancel()
            except _AwaitingApproval as waiting:
                await self._emit_approval_needed(waiting.pending)
                return self._outcome("awaiting_approval", pending_calls=waiting.pending)
            except ProviderError as exc:
                return await self._on_provider_error(exc)
        finally:
            if timer is not None:
                timer.cancel()
            unlink()

    async def _iterate(self) -> LoopOutcome:
        config = self.config
        while self.iteration < config.max_iterations:
            self.iteration += 1
            if self.cancel.cancelled:
                raise RunCancelled(self.cancel.reason)
            if self.middleware:
                stop = await self._run_middleware("before")
                if stop is not None:
                    return await self._finish_with_note("stopped", stop)

            hook = await self.hooks.run(
                BEFORE_LLM_CALL,
                {
                    "iteration": self.iteration,
                    "purpose": config.purpose,
                    "model": self.model,
                    "system": self.system,
                    "messages": len(self.messages),
                    "tools": len(self._definitions),
                },
                self.ctx,
            )
            if hook.blocked:
                return await self._finish_with_note("blocked", hook.reason or "Blocked by a hook.")
            if hook.patches:
                self.system = str(hook.patches.get("system", self.system))
                self.model = str(hook.patches.get("model", self.model))

            response = await self._call_llm()
            message = response.message
            stop_reason = response.stop_reason
            calls = message.tool_calls

            if not calls and config.parse_text_tool_calls and self.known_tools and message.text:
                message, calls = self._parse_text_tool_calls(message)
                if calls:
                    stop_reason = STOP_TOOL_USE
            if calls and stop_reason in (STOP_TOOL_USE, STOP_END_TURN, STOP_STOP_SEQUENCE):
                message = self._resolve_aliases(message)
                await self._tool_step(message)
                if self.middleware:
                    stop = await self._run_middleware("after")
                    if stop is not None:
                        return await self._finish_with_note("stopped", stop)
                continue

            if calls:
                # Not executed (E2: max_tokens ends the turn): drop the calls so
                # history never holds a call without a result.
                message = Message("assistant", [p for p in message.parts if not isinstance(p, ToolCallPart)])
            text = message.text
            if (
                not text.strip()
                and config.retry_empty_reply
                and not self.retried_empty
                and stop_reason in (STOP_END_TURN, STOP_MAX_TOKENS)
            ):
                # E3: one retry with a runtime note; the empty reply and the note stay
                # out of stored history (the usage of the empty call is still kept).
                self.retried_empty = True
                self.messages.append(Message.user(EMPTY_REPLY_NOTE))
                continue
            self.messages.append(message)
            await self._persist([message])
            if self.middleware:
                await self._run_middleware("after")
            return self._outcome("completed", text, stop_reason=stop_reason)

        note = (
            f"I reached the maximum number of tool iterations ({config.max_iterations}) "
            "before finishing this task. Send another message to let me continue."
        )
        return await self._finish_with_note("max_iterations", note)

    async def _run_middleware(self, phase: Literal["before", "after"]) -> str | None:
        stats = TurnStats(
            iteration=self.iteration,
            purpose=self.config.purpose,
            model=self.model,
            context_tokens=estimate_tokens(self.messages, self.system),
            messages=len(self.messages),
            totals=self.ctx.totals,
        )
        for mw in self.middleware:
            result: MiddlewareResult = await (
                mw.before_turn(stats) if phase == "before" else mw.after_turn(stats)
            )
            if result.action == "stop":
                return result.reason or "Stopped."
            if result.action == "compact" and self.compact is not None and phase == "before":
                self.messages = await self.compact(self.messages)
                stats.context_tokens = estimate_tokens(self.messages, self.system)
                stats.messages = len(self.messages)
        return None

    # -------------------------------------------------------------------- LLM

    def _request(self) -> LLMRequest:
        config = self.config
        return LLMRequest(
            model=self.model,
            messages=self.messages,
            system=self.system,
            tools=self._definitions,
            max_tokens=config.max_tokens or config.model.max_tokens,
            temperature=config.temperature,
            thinking_budget=config.thinking_budget,
            extra_body=config.extra_body,
            purpose=config.purpose,
        )

    async def _call_llm(self) -> LLMResponse:
        request = self._request()
        with tracing.span(f"chat {request.model}", tracing.SPAN_CHAT, self._chat_attributes(request)) as span:
            if span.verbose:
                span.record_input(tracing.chat_input_json(request))
            response = await self._call_llm_traced(request)
            record = self.usage_records[-1]
            span.update(
                {
                    "gen_ai.response.model": record.model,
                    "gen_ai.usage.input_tokens": record.input_tokens,
                    "gen_ai.usage.output_tokens": record.output_tokens,
                    "gen_ai.response.finish_reasons": [record.stop_reason] if record.stop_reason else None,
                    "claw.cost_usd": float(record.cost),
                }
            )
            span.record_output(response.message.text)
            return response

    def _chat_attributes(self, request: LLMRequest) -> dict[str, Any]:
        return {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.config.model.provider_name,
            "gen_ai.request.model": request.model,
            "gen_ai.request.max_tokens": request.max_tokens,
            "gen_ai.request.temperature": request.temperature,
            "gen_ai.conversation.id": self.ctx.session_id,
            "claw.iteration": self.iteration,
            "claw.purpose": self.config.purpose,
        }

    async def _call_llm_traced(self, request: LLMRequest) -> LLMResponse:
        provider = self.config.model.provider
        started = time.perf_counter()
        task: asyncio.Future[LLMResponse]
        if self.config.stream:
            task = asyncio.ensure_future(self._consume(provider, request))
        else:
            task = asyncio.ensure_future(provider.complete(request))
        # Cancelling the task throws CancelledError into the stream's pending read:
        # the HTTP response is closed at once, not at the next delta.
        remove = self.cancel.on_cancel(lambda _reason: task.cancel())
        try:
            response = await task
        except asyncio.CancelledError:
            if self.cancel.cancelled:
                raise RunCancelled(self.cancel.reason) from None
            raise
        except ProviderError as exc:
            self._record_usage(Usage(), started, request, "", error=exc.kind)
            span = tracing.current_span()
            if span is not None:
                span.fail(str(exc), exc.kind)
                span.update({"gen_ai.provider.name": self.config.model.provider_name})
            raise
        finally:
            remove()
        self._record_usage(response.usage, started, request, response.stop_reason, response.model)
        return response

    async def _consume(self, provider: Any, request: LLMRequest) -> LLMResponse:
        accumulator = self.accumulator = StreamAccumulator()
        coalescer = DeltaCoalescer(
            self.events,
            chars=self.config.coalesce_chars,
            seconds=self.config.coalesce_seconds,
            checkpoint=self.store.checkpoint_partial if self.persist else None,
            checkpoint_seconds=self.config.checkpoint_seconds,
        )
        stream = provider.stream(request)
        try:
            async for event in stream:
                accumulator.add(event)
                if isinstance(event, TextDelta):
                    await coalescer.add("chunk", event.text)
                elif isinstance(event, ThinkingDelta):
                    await coalescer.add("thinking", event.text)
        finally:
            # Runs on cancel too: the client gets every delta that arrived.
            await coalescer.flush()
            aclose = getattr(stream, "aclose", None)
            if aclose is not None:
                await aclose()
        return accumulator.response()

    def _record_usage(
        self,
        usage: Usage,
        started: float,
        request: LLMRequest,
        stop_reason: str,
        model: str = "",
        error: str = "",
    ) -> None:
        spec = self.config.model
        cost = cost_of(usage, spec.price)
        record = UsageRecord(
            provider=spec.provider_name,
            model=model or request.model,
            purpose=self.config.purpose,
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cost=cost,
            latency_ms=int((time.perf_counter() - started) * 1000),
            stop_reason=stop_reason,
            iteration=self.iteration,
            error=error,
        )
        self.usage_records.append(record)
        self.step_usage.append(record)
        self.usage = self.usage + usage
        self.cost += cost
        self.ctx.totals.add_call(usage, cost)

    def _parse_text_tool_calls(self, message: Message) -> tuple[Message, list[ToolCallPart]]:
        text, calls = extract_text_tool_calls(
            message.text, self.known_tools, id_prefix=f"text_call_{self.iteration}_"
        )
        if not calls:
            return message, []
        parts: list[Part] = [p for p in message.parts if isinstance(p, ReasoningPart)]
        if text.strip():
            parts.append(TextPart(text))
        parts.extend(calls)
        return Message("assistant", parts), calls

    def _resolve_aliases(self, message: Message) -> Message:
        if all(c.name in self.known_tools for c in message.tool_calls):
            return message
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.name not in self.known_tools:
                resolved = resolve_tool_name(part.name, self.known_tools)
                if resolved and resolved != part.name:
                    part = replace(part, name=resolved)
            parts.append(part)
        return Message("assistant", parts)

    # ------------------------------------------------------------------- tools

    async def _tool_step(
        self,
        message: Message,
        resume: PendingStep | None = None,
        *,
        already_pending: bool = False,
    ) -> None:
        calls = message.tool_calls
        if not already_pending:
            # Usage + the calls we are about to make, before any side effect: a
            # crashed worker's successor knows what was in flight (R1).
            await self._persist([], pending=message)
        self.tool_message = message
        prepared = await self.runner.prepare(calls, resume)
        waiting = [
            PendingCall(p.call, p.result.content, p.approval_details)
            for p in prepared
            if p.result is not None and p.needs_approval
        ]
        if waiting:
            self.tool_message = None
            raise _AwaitingApproval(waiting)
        await self.runner.execute(prepared)
        if self.cancel.cancelled:
            raise RunCancelled(self.cancel.reason)
        results: list[Part] = [self.runner.results[p.call.id] for p in prepared]
        for result in self.runner.results.values():
            if result.is_error and result.error_type != "cancelled":
                self.failures.append(
                    ToolFailure(result.name, result.error_type or "tool_error", result.content)
                )
        # The stored assistant message carries the calls as actually made (hook
        # patches applied) so history matches what ran.
        stored_calls = {p.call.id: p.call for p in prepared}
        assistant = Message(
            "assistant",
            [stored_calls.get(p.id, p) if isinstance(p, ToolCallPart) else p for p in message.parts],
        )
        tool_message = Message("tool", results)
        self.messages.append(assistant)
        self.messages.append(tool_message)
        self.tool_message = None
        await self._persist([assistant, tool_message])

    async def _emit_approval_needed(self, pending: list[PendingCall]) -> None:
        await self.events.emit(
            "approval_needed",
            {
                "calls": [
                    {
                        "id": p.call.id,
                        "name": p.call.name,
                        "arguments": p.call.arguments,
                        "reason": p.reason,
                        **({"details": p.details} if p.details else {}),
                    }
                    for p in pending
                ]
            },
        )

    # ------------------------------------------------------------- endings

    async def _on_cancel(self) -> LoopOutcome:
        timed_out = self.cancel.reason == "timed_out"
        status: LoopStatus = "timed_out" if timed_out else "cancelled"
        messages: list[Message] = []
        text = ""
        if self.tool_message is not None:
            # Mid-tools: finished calls keep their results, the rest are cancelled.
            results: list[Part] = []
            if timed_out:
                filler_type, filler = "timeout", TIMED_OUT_TOOL_TEXT
            else:
                filler_type, filler = "cancelled", CANCELLED_TOOL_TEXT
            for call in self.tool_message.tool_calls:
                done = self.runner.results.get(call.id)
                results.append(done if done is not None else tool_error(call, filler_type, filler))
            messages = [self.tool_message, Message("tool", results)]
        elif self.accumulator is not None and not self.accumulator.completed:
            # Mid-stream: keep what the model said so far (text and thinking).
            partial = self.accumulator.message
            parts: list[Part] = [p for p in partial.parts if not isinstance(p, ToolCallPart)]
            if parts:
                text = partial.text
                parts.append(FinishPart(status))
                messages = [Message("assistant", parts)]
        if timed_out:
            budget = self.config.effective_time_budget or 0
            note = f"[Task timed out after {budget:g}s]"
            if messages and messages[-1].role == "assistant" and not messages[-1].tool_calls:
                last = messages[-1]
                messages[-1] = Message("assistant", [*last.parts, TextPart(f"\n\n{note}")])
            else:
                messages.append(Message.assistant(note))
            text = f"{text}\n\n{note}" if text else note
        self.messages.extend(messages)
        self.tool_message = None
        await self._persist(messages)
        return self._outcome(status, text, error=self.cancel.reason)

    async def _on_provider_error(self, exc: ProviderError) -> LoopOutcome:
        # The turn's user message is still stored, so the conversation keeps it.
        await self._persist([])
        return self._outcome("failed", error=str(exc))
