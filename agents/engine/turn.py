"""One user message, start to finish (GoClaw's seven phases of a run).

:func:`run_turn` is what a worker calls for a new message; :func:`resume_turn`
continues a run after an approval or a crashed worker; :func:`compact_session` is
``/compact`` (and what a turn runs when compaction is due). All three are plain
async Python over the engine's interfaces; the Django side builds the arguments.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

from agents.engine import tracing
from agents.engine.compaction import (
    DEFAULT_COMPACTION_SETTINGS,
    MEMORY_FLUSH_MAX_ITERATIONS,
    MEMORY_FLUSH_TIMEOUT_SECONDS,
    SUMMARY_SYSTEM_PROMPT,
    SUMMARY_TIMEOUT_SECONDS,
    CompactionResult,
    CompactionSettings,
    compact_history,
    memory_flush_messages,
    needs_compaction,
    summary_messages,
    summary_request_text,
)
from agents.engine.history import DEFAULT_PRUNE_SETTINGS, PruneSettings, build_history
from agents.engine.input_guard import MAX_USER_MESSAGE_CHARS, check_user_input
from agents.engine.interfaces import (
    CONTINUE,
    ON_MESSAGE_RECEIVED,
    ON_MESSAGE_SENDING,
    RUN_FINISHED,
    CompactionRecord,
    ConversationState,
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
from agents.engine.light import complete_light, start_title_generation
from agents.engine.loop import LoopConfig, LoopOutcome, PendingCall, run_agentic_loop
from agents.engine.prompt import PromptContext, build_system_prompt
from agents.engine.sanitizer import sanitize_output
from agents.engine.streaming import DEFAULT_COALESCE_CHARS, DEFAULT_COALESCE_SECONDS
from agents.engine.types import (
    ImagePart,
    LLMRequest,
    Message,
    Part,
    ProviderError,
    TextPart,
    Usage,
)

logger = logging.getLogger("claw.engine.turn")

TurnStatus = Literal["completed", "failed", "cancelled", "awaiting_approval", "timed_out"]

NO_RESPONSE_TEXT = "(no response)"
# Tools a memory flush may use (GoClaw: write_file/read_file; ours add memory tools).
DEFAULT_FLUSH_TOOLS = frozenset(
    {"write_memory", "read_memory", "memory_write", "memory_search", "write_file", "read_file"}
)
# OpenCode's AutoCompactMiddleware threshold.
AUTO_COMPACT_THRESHOLD_TOKENS = 200_000

MemoryWriter = Callable[[str, RunContext], Awaitable[str]]
Deliver = Callable[[str], Awaitable[None]]
TitleSaver = Callable[[str, list[UsageRecord]], Awaitable[None]]


@dataclass(slots=True)
class TurnConfig:
    """An agent's settings as a turn uses them (each a field in the admin).

    Defaults are the write-ups': 20 iterations (E1), parallel tools (E4), guard in
    ``warn`` mode and 32,768-character messages (E10, E11), GoClaw's pruning and
    compaction thresholds (E17, E18), memory flush on (E19).
    """

    max_iterations: int = 20
    parallel_tools: bool = True
    stream: bool = True
    show_thinking: bool = False
    input_guard_mode: str = "warn"
    max_message_chars: int = MAX_USER_MESSAGE_CHARS
    history_turns: int | None = None
    history_max_messages: int = 400
    prune: PruneSettings = DEFAULT_PRUNE_SETTINGS
    compaction: CompactionSettings = DEFAULT_COMPACTION_SETTINGS
    auto_compact: bool = True
    memory_flush: bool = True
    flush_tools: frozenset[str] = DEFAULT_FLUSH_TOOLS
    allowed_tools: frozenset[str] | None = None
    denied_tools: frozenset[str] = frozenset()
    time_budget: float | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    thinking_budget: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    prompt_mode: str = "full"
    generate_title: bool = True
    # Draft streaming: text deltas are batched ~40 ms / ~80 characters before they go
    # to the EventSink. 0 hands every delta over at once (a sink that batches by
    # itself, under back-pressure, like the worker's RunEventSink).
    delta_batch_seconds: float = DEFAULT_COALESCE_SECONDS
    delta_batch_chars: int = DEFAULT_COALESCE_CHARS


@dataclass(slots=True)
class TurnResult:
    """How a turn ended and what to deliver.

    ``text`` is the sanitised reply with the failed-tools footer (E6); ``delivered``
    is False when the reply was silent (NO_REPLY, E13), blocked by an
    on_message_sending hook, or there was nothing to send. ``usage``/``cost`` are the
    run's totals: main loop, memory flush, summary, title and sub-agents.
    """

    status: TurnStatus
    text: str = ""
    delivered: bool = False
    silent: bool = False
    thinking: str = ""
    model: str = ""
    usage: Usage = field(default_factory=Usage)
    cost: Decimal = field(default_factory=lambda: Decimal(0))
    pending_calls: list[PendingCall] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)
    error: str | None = None
    loop: LoopOutcome | None = None
    compaction: CompactionResult | None = None
    title: str | None = None
    handled_without_llm: bool = False


# ----------------------------------------------------------------- remember


_REMEMBER_RE = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?\s*[:,]?\s+(?P<fact>.+?)\s*$", re.I | re.S)
_REMEMBER_ZH_RE = re.compile("^\\s*(?:请)?记住[\uff1a:\uff0c,\\s]*(?P<fact>.+?)\\s*$", re.S)
_NOT_A_FACT = re.compile(r"^(?:when|what|how|why|who|where|whether|if|me)\b", re.I)


def parse_remember_command(text: str) -> str | None:
    """The fact of an explicit "remember ..." message (E24), or ``None``.

    Questions ("remember when we ...?", "do you remember ...") are not commands.
    """
    stripped = text.strip()
    if not stripped or stripped.endswith("?"):
        return None
    match = _REMEMBER_RE.match(stripped) or _REMEMBER_ZH_RE.match(stripped)
    if match is None:
        return None
    fact = match.group("fact").strip()
    if not fact or _NOT_A_FACT.match(fact):
        return None
    return fact


# --------------------------------------------------------------- middleware


class AutoCompactMiddleware:
    """Compact when the working context reaches ``threshold`` tokens (OpenCode)."""

    def __init__(self, threshold: int = AUTO_COMPACT_THRESHOLD_TOKENS) -> None:
        self.threshold = threshold

    async def before_turn(self, stats: TurnStats) -> MiddlewareResult:
        if stats.context_tokens >= self.threshold:
            return MiddlewareResult(
                "compact", metadata={"tokens": stats.context_tokens, "threshold": self.threshold}
            )
        return CONTINUE

    async def after_turn(self, stats: TurnStats) -> MiddlewareResult:
        return CONTINUE


class CostCapMiddleware:
    """Stop a run once its cost reaches ``max_cost`` (a per-run cap, Z1)."""

    def __init__(self, max_cost: Decimal) -> None:
        self.max_cost = max_cost

    async def before_turn(self, stats: TurnStats) -> MiddlewareResult:
        if stats.totals.cost >= self.max_cost:
            return MiddlewareResult(
                "stop", f"I stopped because this run reached its cost limit ({self.max_cost})."
            )
        return CONTINUE

    async def after_turn(self, stats: TurnStats) -> MiddlewareResult:
        return CONTINUE


class StopMiddleware:
    """Stop a run once it has used ``max_tokens`` tokens, input and output, its
    sub-agents' and consulted agents' included (E25: an agent setting)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    async def before_turn(self, stats: TurnStats) -> MiddlewareResult:
        used = stats.totals.usage.input_tokens + stats.totals.usage.output_tokens
        if used >= self.max_tokens:
            return MiddlewareResult(
                "stop",
                f"I stopped because this run used its token limit ({used:,} of {self.max_tokens:,} "
                "tokens). Send another message to let me continue.",
                {"tokens": used, "limit": self.max_tokens},
            )
        return CONTINUE

    async def after_turn(self, stats: TurnStats) -> MiddlewareResult:
        return CONTINUE


# ---------------------------------------------------------------- helpers


def _system_prompt(prompt: PromptContext | str, mode: str) -> str:
    return prompt if isinstance(prompt, str) else build_system_prompt(prompt, mode)


def _image_note(count: int) -> str:
    noun = "image" if count == 1 else "images"
    return (
        f"[The user attached {count} {noun}, but the current model cannot view images, "
        f"so {'it was' if count == 1 else 'they were'} not sent. Tell the user you cannot "
        "see images with this model.]"
    )


def _approval_text(pending: Sequence[PendingCall]) -> str:
    lines = []
    for p in pending:
        args = ", ".join(f"{k}={v!r}" for k, v in p.call.arguments.items())
        if len(args) > 200:
            args = args[:200] + "..."
        reason = f" -- {p.reason}" if p.reason else ""
        lines.append(f"- {p.call.name}({args}){reason}")
    return "Approval needed before I continue:\n" + "\n".join(lines) + "\nReply approve or deny."


def _status_of(outcome: LoopOutcome) -> TurnStatus:
    if outcome.status in ("cancelled", "timed_out", "failed", "awaiting_approval"):
        return outcome.status  # type: ignore[return-value]
    return "completed"


@dataclass(slots=True)
class _Deps:
    """Everything a turn needs, bundled so run_turn and resume_turn share the tail."""

    model: ModelSpec
    tools: ToolExecutor
    store: RunStore
    ctx: RunContext
    prompt: PromptContext | str
    config: TurnConfig
    events: EventSink
    hooks: HookRunner
    cheap_model: ModelSpec | None
    middleware: Sequence[Middleware]
    deliver: Deliver | None
    system: str | None = None  # the built system prompt (system_prompt)

    def system_prompt(self) -> str:
        """The turn's system prompt, built once: the loop sends it, and the end of the
        turn measures it again for compaction (its clock line is the turn's start)."""
        if self.system is None:
            self.system = _system_prompt(self.prompt, self.config.prompt_mode)
        return self.system


# ------------------------------------------------------------------ run_turn


async def run_turn(
    text: str,
    *,
    model: ModelSpec,
    tools: ToolExecutor,
    store: RunStore,
    ctx: RunContext,
    prompt: PromptContext | str,
    config: TurnConfig | None = None,
    events: EventSink | None = None,
    hooks: HookRunner | None = None,
    images: Sequence[ImagePart] = (),
    vision_model: ModelSpec | None = None,
    cheap_model: ModelSpec | None = None,
    remember: MemoryWriter | None = None,
    middleware: Sequence[Middleware] = (),
    deliver: Deliver | None = None,
    save_title: TitleSaver | None = None,
    title_model: ModelSpec | None = None,
    listen_only: bool = False,
) -> TurnResult:
    """Handle one user message: hooks, guard, history, prompt, loop, reply, compaction.

    Phases (GoClaw's seven, with the other write-ups' additions):

    1. ``run.started``; ``on_message_received`` hooks (block drops the message,
       modify patches ``text``); a "remember ..." message goes straight to
       ``remember`` without an LLM call (E24);
    2. input guard (E10; ``block`` mode fails the turn) and truncation with a notice
       to the model (E11); images go to a vision model (``model`` if it has vision,
       else ``vision_model``) or are refused with a note (E23) -- stored history
       keeps only a placeholder;
    3. history: ``store.load_conversation`` -> ``build_history`` (E17) -> summary
       at the head (E18); system prompt from ``prompt`` in ``config.prompt_mode``
       (E15); on a session's first message the title starts in the background (E21);
    4-5. :func:`run_agentic_loop` with ``middleware`` before/after each LLM turn
       (E25); the user message is stored with the first step (S7);
    6. the reply is sanitised (E12), NO_REPLY stays stored but undelivered (E13),
       the failed-tools footer is added (E6), ``on_message_sending`` hooks may patch
       or block it, then ``deliver(text)`` is awaited;
    7. if compaction is due (E18): memory flush first (E19), then the summary on
       the cheap model with fallback (P6); a failed summary keeps all history.

    Ends with ``run_finished`` hooks and one terminal event (``run.completed``,
    ``run.failed`` or ``run.cancelled``; a timed-out run is ``run.failed`` with
    status ``timed_out``; awaiting approval emits ``approval_needed`` instead).
    """
    cfg = config or TurnConfig()
    deps = _Deps(
        model,
        tools,
        store,
        ctx,
        prompt,
        cfg,
        events or NullEventSink(),
        hooks or NullHookRunner(),
        cheap_model,
        middleware,
        deliver,
    )
    await deps.events.emit("run.started", {"model": model.model})

    received = await deps.hooks.run(ON_MESSAGE_RECEIVED, {"text": text, "images": len(images)}, ctx)
    if received.blocked:
        result = TurnResult("completed", model=model.model, notices=[received.reason])
        return await _finish(deps, result)
    if received.patches:
        text = str(received.patches.get("text", text))

    if remember is not None and not images:
        fact = parse_remember_command(text)
        if fact is not None:
            handled = await _remember(deps, text, fact, remember)
            if handled is not None:
                return handled

    guard = check_user_input(text, cfg.input_guard_mode, max_chars=cfg.max_message_chars)
    if guard.findings:
        attributes = {"claw.guard.findings": list(guard.findings), "claw.guard.mode": cfg.input_guard_mode}
        with tracing.span("input_guard", tracing.SPAN_GUARD, attributes) as span:
            if guard.blocked:
                span.fail(guard.notice or "blocked", "injection_blocked")
    if guard.blocked:
        result = TurnResult("failed", model=model.model, error=guard.notice, notices=[guard.notice or ""])
        return await _finish(deps, result)
    if listen_only:
        # E16: a group message that does not address the agent is kept as context
        # of later turns, and gets no reply (no LLM call).
        await deps.store.persist_step(StepRecord(0, [Message.user(guard.text)], [], None))
        result = TurnResult("completed", model="", silent=True, handled_without_llm=True)
        return await _finish(deps, result)
    notices = [guard.notice] if guard.truncated and guard.notice else []

    parts: list[Part] = []
    if images:
        if not model.supports_vision and vision_model is not None and vision_model.supports_vision:
            model = deps.model = vision_model
        if model.supports_vision:
            parts.extend(images)
        else:
            parts.extend(ImagePart(i.media_type) for i in images)  # placeholder only
            notices.append(_image_note(len(images)))
    parts.append(TextPart(guard.text))
    if images and not model.supports_vision:
        parts.append(TextPart(notices[-1]))
    user_message = Message("user", parts)

    state = await store.load_conversation(max_messages=cfg.history_max_messages)
    title_task = None
    if cfg.generate_title and save_title is not None and not state.messages and not state.summary:
        title_task = start_title_generation(
            guard.text, main=model, cheap=title_model or cheap_model, save=save_title, events=deps.events
        )
    try:
        result = await _run_loop(deps, state, working_tail=[user_message], unsaved=[user_message])
    except BaseException:
        if title_task is not None:
            title_task.cancel()
        raise
    if title_task is not None:
        # Ran alongside the loop; awaited here so a worker never drops it.
        title = await title_task
        result.title = title.title
        _add_usage(ctx, title.records)
    result.notices[:0] = notices
    return await _finish(deps, result, state=state)


async def resume_turn(
    *,
    model: ModelSpec,
    tools: ToolExecutor,
    store: RunStore,
    ctx: RunContext,
    prompt: PromptContext | str,
    approvals: dict[str, bool] | None = None,
    config: TurnConfig | None = None,
    events: EventSink | None = None,
    hooks: HookRunner | None = None,
    cheap_model: ModelSpec | None = None,
    middleware: Sequence[Middleware] = (),
    deliver: Deliver | None = None,
) -> TurnResult:
    """Continue a run from its stored state: after approve/deny (``approvals``: call
    id -> approved) or on a new worker after a crash (R1).

    The pending step's finished calls keep their results; calls started but never
    confirmed are reported to the model as interrupted when they have side effects
    and re-run when read-only; the rest run (or await approval again). With no
    pending step, the loop simply continues from the stored history.
    """
    cfg = config or TurnConfig()
    deps = _Deps(
        model,
        tools,
        store,
        ctx,
        prompt,
        cfg,
        events or NullEventSink(),
        hooks or NullHookRunner(),
        cheap_model,
        middleware,
        deliver,
    )
    await deps.events.emit("run.started", {"model": model.model, "resumed": True})
    state = await store.load_conversation(max_messages=cfg.history_max_messages)
    pending = state.pending
    if pending is not None and approvals:
        pending = replace(pending, approvals={**pending.approvals, **approvals})
    result = await _run_loop(deps, state, working_tail=[], unsaved=[], resume=pending)
    return await _finish(deps, result, state=state)


async def _remember(deps: _Deps, text: str, fact: str, remember: MemoryWriter) -> TurnResult | None:
    try:
        reply = await remember(fact, deps.ctx)
    except Exception:
        # Fall through to the model, which can use its memory tools instead.
        logger.exception("explicit memory command failed; handing it to the model")
        return None
    await deps.store.persist_step(StepRecord(0, [Message.user(text), Message.assistant(reply)], [], None))
    result = TurnResult("completed", text=reply, model="", handled_without_llm=True)
    return await _finish(deps, result, reply_text=reply)


async def _run_loop(
    deps: _Deps,
    state: ConversationState,
    *,
    working_tail: list[Message],
    unsaved: list[Message],
    resume: PendingStep | None = None,
) -> TurnResult:
    cfg = deps.config
    model = deps.model
    system = deps.system_prompt()
    history = build_history(
        state.messages,
        turn_limit=cfg.history_turns,
        context_window=model.context_window,
        settings=cfg.prune,
        system=system,
    )
    head = summary_messages(state.summary) if state.summary else []
    working = [*head, *history, *working_tail]

    async def compact_working(messages: list[Message]) -> list[Message]:
        # Mid-run compaction (middleware said so) shrinks this run's context only;
        # the stored history is compacted properly after the turn.
        body = messages[len(head) :] if head and messages[: len(head)] == head else messages
        result = await compact_history(
            body,
            summarize=_summarizer(deps),
            previous_summary=state.summary or None,
            settings=cfg.compaction,
            context_window=model.context_window,
            system=system,
        )
        if result.error is not None or not result.removed:
            return messages
        return [*summary_messages(result.summary or ""), *result.kept]

    loop_config = LoopConfig(
        model=model,
        system=system,
        purpose="agent_loop",
        max_iterations=cfg.max_iterations,
        parallel_tools=cfg.parallel_tools,
        allowed_tools=cfg.allowed_tools,
        denied_tools=cfg.denied_tools,
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        thinking_budget=cfg.thinking_budget,
        extra_body=cfg.extra_body,
        stream=cfg.stream,
        time_budget=cfg.time_budget,
        coalesce_seconds=cfg.delta_batch_seconds,
        coalesce_chars=cfg.delta_batch_chars,
    )
    outcome = await run_agentic_loop(
        working,
        loop_config,
        tools=deps.tools,
        store=deps.store,
        ctx=deps.ctx,
        events=deps.events,
        hooks=deps.hooks,
        unsaved=unsaved,
        resume=resume,
        middleware=deps.middleware,
        compact=compact_working,
    )
    return TurnResult(
        _status_of(outcome),
        model=model.model,
        loop=outcome,
        error=outcome.error if outcome.status in ("failed", "timed_out") else None,
        pending_calls=list(outcome.pending_calls),
    )


async def _finish(
    deps: _Deps,
    result: TurnResult,
    *,
    state: ConversationState | None = None,
    reply_text: str | None = None,
) -> TurnResult:
    """Phases 6-7 and the end of the run: reply, hooks, delivery, compaction, events."""
    outcome = result.loop
    reply: str | None = reply_text
    if outcome is not None:
        if result.status == "awaiting_approval":
            reply = _approval_text(outcome.pending_calls)
        elif result.status in ("completed", "timed_out"):
            cleaned = sanitize_output(outcome.text, show_thinking=deps.config.show_thinking)
            result.thinking = cleaned.thinking
            result.silent = cleaned.silent
            # E13: a silent reply is already stored by the loop; it is not delivered.
            reply = None if cleaned.silent else (cleaned.text or NO_RESPONSE_TEXT) + outcome.footer
        elif result.status == "failed":
            reply = None
        elif result.status == "cancelled":
            reply = None  # the client saw the partial text; nothing more is sent

    if reply is not None:
        sending = await deps.hooks.run(ON_MESSAGE_SENDING, {"text": reply, "status": result.status}, deps.ctx)
        if sending.blocked:
            result.notices.append(sending.reason)
            reply = None
        elif sending.patches:
            reply = str(sending.patches.get("text", reply))
    if reply is not None:
        result.text = reply
        if deps.deliver is not None:
            await deps.deliver(reply)
        result.delivered = True

    if (
        state is not None
        and outcome is not None
        and deps.config.auto_compact
        and result.status in ("completed", "timed_out")
    ):
        session_messages = [*state.messages, *outcome.messages]
        system = deps.system_prompt()
        if needs_compaction(
            session_messages,
            context_window=deps.model.context_window,
            settings=deps.config.compaction,
            system=system,
        ):
            result.compaction = await _compact(deps, session_messages, state.summary, None)

    result.usage = deps.ctx.totals.usage
    result.cost = deps.ctx.totals.cost
    await deps.hooks.run(
        RUN_FINISHED,
        {
            "status": result.status,
            "text": result.text,
            "delivered": result.delivered,
            "cost": str(result.cost),
            "input_tokens": result.usage.input_tokens,
            "output_tokens": result.usage.output_tokens,
        },
        deps.ctx,
    )
    await _emit_terminal(deps.events, result)
    return result


async def _emit_terminal(events: EventSink, result: TurnResult) -> None:
    payload: dict[str, Any] = {
        "status": result.status,
        "text": result.text,
        "delivered": result.delivered,
        "silent": result.silent,
        "cost": str(result.cost),
        "input_tokens": result.usage.input_tokens,
        "output_tokens": result.usage.output_tokens,
    }
    if result.status == "completed":
        await events.emit("run.completed", payload)
    elif result.status == "cancelled":
        await events.emit("run.cancelled", payload)
    elif result.status == "awaiting_approval":
        return  # the loop already emitted approval_needed; the run is paused
    else:
        await events.emit("run.failed", {**payload, "error": result.error or result.status})


def _add_usage(ctx: RunContext, records: Sequence[UsageRecord]) -> None:
    for record in records:
        usage = Usage(
            record.input_tokens,
            record.output_tokens,
            record.cache_read_tokens,
            record.cache_write_tokens,
        )
        if record.error and not usage.total_tokens:
            continue
        ctx.totals.add_call(usage, record.cost)


# -------------------------------------------------------------- compaction


def _summarizer(deps: _Deps) -> Callable[[list[Message], str | None], Awaitable[str]]:
    async def summarize(old: list[Message], previous: str | None) -> str:
        request = LLMRequest(
            model="",
            messages=[Message.user(summary_request_text(old, previous))],
            system=SUMMARY_SYSTEM_PROMPT,
            max_tokens=deps.config.compaction.summary_max_tokens,
            temperature=deps.config.compaction.summary_temperature,
            purpose="compaction",
        )
        records: list[UsageRecord] = []
        try:
            async with asyncio.timeout(SUMMARY_TIMEOUT_SECONDS):
                light = await complete_light(
                    request, main=deps.model, cheap=deps.cheap_model, totals=deps.ctx.totals
                )
            records = light.records
            return light.response.message.text
        except ProviderError as exc:
            records = [UsageRecord(deps.model.provider_name, deps.model.model, "compaction", error=exc.kind)]
            raise
        finally:
            if records:
                await deps.store.persist_step(StepRecord(-1, [], records, None))

    return summarize


async def run_memory_flush(
    messages: Sequence[Message],
    *,
    model: ModelSpec,
    tools: ToolExecutor,
    store: RunStore,
    ctx: RunContext,
    prompt: PromptContext | str,
    hooks: HookRunner | None = None,
    flush_tools: frozenset[str] = DEFAULT_FLUSH_TOOLS,
    max_iterations: int = MEMORY_FLUSH_MAX_ITERATIONS,
    time_budget: float = MEMORY_FLUSH_TIMEOUT_SECONDS,
) -> LoopOutcome:
    """GoClaw's memory flush (E19): a short turn, minimal prompt, max 5 iterations,
    90 s, memory/file tools only, on the 10 latest messages plus the flush prompt.
    Its messages are not stored (only its usage); it replies NO_REPLY when idle."""
    config = LoopConfig(
        model=model,
        system=_system_prompt(prompt, "minimal"),
        purpose="memory_flush",
        max_iterations=max_iterations,
        allowed_tools=flush_tools,
        persist_messages=False,
        time_budget=time_budget,
    )
    return await run_agentic_loop(
        memory_flush_messages(list(messages)),
        config,
        tools=tools,
        store=store,
        ctx=ctx,
        hooks=hooks,
    )


async def _compact(
    deps: _Deps,
    session_messages: list[Message],
    summary: str,
    strategy: str | None,
) -> CompactionResult:
    cfg = deps.config
    system = deps.system_prompt()
    if cfg.memory_flush:
        try:
            flush = await run_memory_flush(
                session_messages,
                model=deps.model,
                tools=deps.tools,
                store=deps.store,
                ctx=replace(deps.ctx, cancel=deps.ctx.cancel.child()),
                prompt=deps.prompt,
                hooks=deps.hooks,
                flush_tools=cfg.flush_tools,
            )
            if flush.status == "failed":
                logger.warning("memory flush failed: %s", flush.error)
        except Exception:
            logger.exception("memory flush crashed; compacting anyway")
    result = await compact_history(
        session_messages,
        summarize=_summarizer(deps),
        previous_summary=summary or None,
        settings=cfg.compaction,
        strategy=strategy,
        context_window=deps.model.context_window,
        system=system,
    )
    if result.error is not None:
        # Nothing is saved: the history stays whole and compaction is tried again
        # after a later turn (E18: a failed summary never loses history).
        logger.warning("compaction failed, history kept: %s", result.error)
        return result
    if result.removed:
        await deps.store.save_compaction(
            CompactionRecord(
                summary=result.summary or "",
                keep_last=len(result.kept),
                removed=len(result.removed),
                strategy=result.strategy,
            )
        )
    return result


async def compact_session(
    *,
    model: ModelSpec,
    tools: ToolExecutor,
    store: RunStore,
    ctx: RunContext,
    prompt: PromptContext | str,
    config: TurnConfig | None = None,
    cheap_model: ModelSpec | None = None,
    hooks: HookRunner | None = None,
    strategy: str | None = None,
) -> CompactionResult:
    """``/compact``: memory flush, then compaction of the stored history now."""
    cfg = config or TurnConfig()
    deps = _Deps(
        model,
        tools,
        store,
        ctx,
        prompt,
        cfg,
        NullEventSink(),
        hooks or NullHookRunner(),
        cheap_model,
        (),
        None,
    )
    state = await store.load_conversation(max_messages=cfg.history_max_messages)
    return await _compact(deps, state.messages, state.summary, strategy)
