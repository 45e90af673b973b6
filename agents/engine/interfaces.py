"""The small interfaces through which the engine talks to the world.

The Django side (stores, channel layer, tool registry, hook rows) implements these;
tests implement them in memory (``tests/fakes/engine.py``). Nothing here imports
Django.

- :class:`LLMProvider` -- one configured LLM endpoint.
- :class:`ToolExecutor` -- tool definitions, traits, policy check, execution.
- :class:`HookRunner` -- the six hook events, each answered allow / modify / block.
- :class:`RunStore` -- conversation state of one run's session: load, persist steps,
  checkpoints, tool-call marks, compaction.
- :class:`EventSink` -- live run events (chunk, tool.call, ...).
- :class:`ChildSessionFactory` -- opens a sub-agent's session linked to its parent.
- :class:`Middleware` -- code run before/after each LLM turn (auto-compact, stop,
  cost guard).

Plus the value types these speak: :class:`CancelToken`, :class:`RunContext`,
:class:`HookOutcome`, :class:`PolicyDecision`, :class:`ToolTraits`,
:class:`UsageRecord`, :class:`StepRecord`, :class:`ConversationState`,
:class:`PendingStep`, :class:`CompactionRecord`, :class:`ModelSpec`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Generator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal, Protocol, runtime_checkable

from agents.engine.cost import FREE, ModelPrice, RunTotals
from agents.engine.types import (
    LLMRequest,
    LLMResponse,
    Message,
    ProviderEvent,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)

# ----------------------------------------------------------------------- providers


@runtime_checkable
class LLMProvider(Protocol):
    """One configured LLM endpoint (see ``agents/providers/``).

    ``stream`` yields deltas then exactly one ``Completed``; failures raise
    ``ProviderError``. ``complete`` is the non-streamed call, normalised through the
    same events so both give identical messages.
    """

    name: str

    def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]: ...

    async def complete(self, request: LLMRequest) -> LLMResponse: ...


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model as the engine uses it: which endpoint, which model, what it costs.

    Built by the Django side from ModelProfile rows. ``supports_vision`` decides
    whether images may be sent (E23); ``price`` gives every usage record its cost (P5).
    """

    provider: LLMProvider
    model: str
    price: ModelPrice = FREE
    context_window: int = 200_000
    max_tokens: int = 4096
    supports_vision: bool = False

    @property
    def provider_name(self) -> str:
        return getattr(self.provider, "name", "") or ""


# -------------------------------------------------------------------- cancellation


class CancelToken:
    """Cooperative cancellation for one run, usable from asyncio code.

    ``cancel(reason)`` is idempotent: the first reason wins. Awaiting the token (or
    ``wait()``) returns the reason once cancelled. ``on_cancel`` registers a callback
    run synchronously at cancel time; the loop uses it to cancel an in-flight stream
    task within the same event-loop tick, so a ``/stop`` reaches a running stream in
    milliseconds without polling.

    Call ``cancel`` from the event loop's thread; from another thread use
    ``loop.call_soon_threadsafe(token.cancel, reason)``.
    """

    __slots__ = ("_callbacks", "_event", "reason")

    def __init__(self) -> None:
        self.reason: str = ""
        self._event: asyncio.Event | None = None
        self._callbacks: list[Callable[[str], object]] = []

    @property
    def cancelled(self) -> bool:
        return bool(self.reason)

    def cancel(self, reason: str = "cancelled") -> None:
        if self.reason:
            return
        self.reason = reason or "cancelled"
        if self._event is not None:
            self._event.set()
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self.reason)

    def on_cancel(self, callback: Callable[[str], object]) -> Callable[[], None]:
        """Run ``callback(reason)`` when cancelled (at once if already). Returns a remover."""
        if self.reason:
            callback(self.reason)
            return _noop
        self._callbacks.append(callback)

        def remove() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return remove

    def child(self) -> CancelToken:
        """A token cancelled with this one (but not the reverse): for sub-runs."""
        child = CancelToken()
        self.on_cancel(child.cancel)
        return child

    async def wait(self) -> str:
        if not self.reason:
            # Created lazily: most tokens are never awaited, only checked.
            if self._event is None:
                self._event = asyncio.Event()
            await self._event.wait()
        return self.reason

    def __await__(self) -> Generator[Any, None, str]:
        return self.wait().__await__()


def _noop() -> None:
    return None


# ---------------------------------------------------------------------- run context


@dataclass(slots=True)
class RunContext:
    """What a tool (and a sub-agent) knows about the run that called it (STYLE 7).

    Ids are strings so the engine never depends on Django's key types. ``auth``
    carries whatever the Django side needs to act for the user (credentials handles,
    allow-lists); the engine passes it through untouched. ``totals`` is the run's
    running cost, shared with sub-agents so their cost lands on the parent (E20).
    """

    tenant_id: str = ""
    user_id: str = ""
    agent_id: str = ""
    session_id: str = ""
    run_id: str = ""
    channel: str = ""
    workspace: str | None = None
    depth: int = 0
    cancel: CancelToken = field(default_factory=CancelToken)
    totals: RunTotals = field(default_factory=RunTotals)
    auth: Mapping[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- tools

PolicyAction = Literal["allow", "needs_approval", "deny"]


@dataclass(frozen=True, slots=True)
class PolicyDecision:
    """Answer of :meth:`ToolExecutor.check_policy` for one call, before it runs.

    ``details`` (JSON) is what a person asked to approve is shown besides the
    call's arguments: e.g. the script a shell command runs, decoded arguments."""

    action: PolicyAction = "allow"
    reason: str = ""
    details: Mapping[str, Any] | None = None
    # For a refusal: the error type the model gets (default ``policy_denied``).
    error_type: str = ""

    @classmethod
    def allow(cls) -> PolicyDecision:
        return _ALLOW_POLICY

    @classmethod
    def needs_approval(cls, reason: str = "", *, details: Mapping[str, Any] | None = None) -> PolicyDecision:
        return cls("needs_approval", reason, details)

    @classmethod
    def deny(cls, reason: str, *, error_type: str = "") -> PolicyDecision:
        return cls("deny", reason, None, error_type)


_ALLOW_POLICY = PolicyDecision()


@dataclass(frozen=True, slots=True)
class ToolTraits:
    """How a tool behaves, so the loop can schedule and resume it safely.

    - ``read_only``: never changes anything (sub-agents get only these, E20).
    - ``side_effects``: running it twice is not the same as once; a call that was
      started but not confirmed finished is never re-run after a crash (R1).
    - ``parallel_safe``: may run concurrently with other parallel-safe calls (E4).

    The defaults are the cautious ones, used for a tool nobody described.
    """

    read_only: bool = False
    side_effects: bool = True
    parallel_safe: bool = False
    risk: Literal["low", "medium", "high"] = "medium"


READ_ONLY = ToolTraits(read_only=True, side_effects=False, parallel_safe=True, risk="low")


class ToolExecutor(Protocol):
    """The tools one run may use: the registry filtered for this agent and user.

    ``execute`` never raises for a tool failure: it returns a ``ToolResultPart`` with
    ``is_error`` and an ``error_type`` (tool_error, unknown_tool, timeout, ...) so the
    model can read the error and try something else. It should honour
    ``ctx.cancel``. Validation of arguments against the schema happens inside.
    """

    def definitions(self) -> list[ToolDefinition]:
        """Definitions the model may see (already filtered by role/agent policy)."""
        ...

    def traits(self, name: str) -> ToolTraits:
        """Traits of a tool by name; cautious defaults for unknown names."""
        ...

    async def check_policy(self, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        """Allow, ask for approval (ends the run as awaiting_approval), or deny."""
        ...

    async def execute(self, call: ToolCallPart, ctx: RunContext) -> ToolResultPart: ...


# --------------------------------------------------------------------------- hooks

HookEvent = Literal[
    "on_message_received",
    "before_llm_call",
    "before_tool_call",
    "after_tool_call",
    "on_message_sending",
    "run_finished",
]
ON_MESSAGE_RECEIVED: HookEvent = "on_message_received"
BEFORE_LLM_CALL: HookEvent = "before_llm_call"
BEFORE_TOOL_CALL: HookEvent = "before_tool_call"
AFTER_TOOL_CALL: HookEvent = "after_tool_call"
ON_MESSAGE_SENDING: HookEvent = "on_message_sending"
RUN_FINISHED: HookEvent = "run_finished"


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """What the hooks of one event decided (H3). Never an exception for a refusal.

    ``patches`` replace fields of the event payload; which fields the engine honours:

    ============================  ==================================================
    on_message_received           ``text``
    before_llm_call               ``system``, ``model``
    before_tool_call              ``arguments`` (whole dict), ``name``
    after_tool_call               ``content``, ``is_error``, ``error_type``
    on_message_sending            ``text``
    run_finished                  (none; outcome ignored)
    ============================  ==================================================

    ``block`` means: on_message_received drops the message, before_llm_call ends
    the run with ``reason`` as reply, before_tool_call skips the call (error result
    ``hook_blocked``), after_tool_call turns the result into an error,
    on_message_sending suppresses delivery.
    """

    action: Literal["allow", "modify", "block"] = "allow"
    patches: Mapping[str, Any] = field(default_factory=dict)
    reason: str = ""

    @classmethod
    def allow(cls) -> HookOutcome:
        return ALLOW

    @classmethod
    def modify(cls, patches: Mapping[str, Any]) -> HookOutcome:
        return cls("modify", dict(patches))

    @classmethod
    def block(cls, reason: str) -> HookOutcome:
        return cls("block", {}, reason)

    @property
    def blocked(self) -> bool:
        return self.action == "block"


ALLOW = HookOutcome()


class HookRunner(Protocol):
    """Runs every enabled hook of one event in priority order (H1-H3).

    The runner merges the patches of all hooks (later hooks see earlier patches),
    stops at the first block, applies each hook's fail-open/fail-closed setting,
    and audits every outcome. ``payload`` keys per event are documented where the
    engine calls it (loop.py / turn.py); ``ctx`` identifies the run.
    """

    async def run(self, event: HookEvent, payload: Mapping[str, Any], ctx: RunContext) -> HookOutcome: ...


class NullHookRunner:
    """No hooks configured: everything is allowed unchanged."""

    async def run(self, event: HookEvent, payload: Mapping[str, Any], ctx: RunContext) -> HookOutcome:
        return ALLOW


# -------------------------------------------------------------------------- events


class EventSink(Protocol):
    """Receives run events: run.started, chunk, thinking, tool.call, tool.result,
    approval_needed, run.completed, run.failed, run.cancelled, title.updated, handoff.

    The Django side adds the run id and a per-run sequence number, stores every
    event other than chunk/thinking (RunEvent) and relays all of them.
    """

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None: ...


class NullEventSink:
    """Discards events (flush turns, titles, tests that do not look)."""

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        return None


# ------------------------------------------------------------------------- storage


@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One LLM call, as stored in UsageRecord (O1). The store adds tenant, agent,
    user, session and run ids, which it knows from the run it is bound to."""

    provider: str
    model: str
    purpose: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost: Decimal = Decimal(0)
    latency_ms: int = 0
    stop_reason: str = ""
    iteration: int = 0
    error: str = ""


@dataclass(slots=True)
class StepRecord:
    """Everything one loop step adds, written in one transaction (S7).

    ``messages`` are appended to the session history in order (user message of the
    turn, assistant message, tool results, notes); image data is already stripped.
    ``pending`` is an assistant message whose tool calls have not all got results
    yet (about to run, or waiting for approval): the store keeps it as the run's
    pending step, *outside* history, replacing any earlier one; ``None`` clears it.
    ``index`` numbers the steps of one loop, for ordering and logs only: memory
    flush and summary calls arrive as their own usage-only steps (no messages).
    """

    index: int
    messages: list[Message] = field(default_factory=list)
    usage: list[UsageRecord] = field(default_factory=list)
    pending: Message | None = None


@dataclass(slots=True)
class PendingStep:
    """A step whose tool calls were interrupted (crash) or await approval.

    Built by the store from the pending assistant message and the tool-call marks:
    ``finished`` holds results confirmed finished, ``started`` the ids of calls that
    were started but never confirmed. ``approvals`` is filled by the approval flow
    (call id -> approved?) before the run is resumed.
    """

    assistant: Message
    finished: dict[str, ToolResultPart] = field(default_factory=dict)
    started: frozenset[str] = frozenset()
    approvals: dict[str, bool] = field(default_factory=dict)


@dataclass(slots=True)
class ConversationState:
    """What a turn starts from: the compaction summary, a bounded tail of history
    (oldest first, summary-covered messages excluded) and any pending step."""

    summary: str = ""
    messages: list[Message] = field(default_factory=list)
    pending: PendingStep | None = None


@dataclass(frozen=True, slots=True)
class CompactionRecord:
    """Outcome of a successful compaction (E18): ``summary`` replaces the session's
    summary; only the newest ``keep_last`` messages stay in active history (older
    ones are marked compacted, never deleted)."""

    summary: str
    keep_last: int
    removed: int
    strategy: str


class RunStore(Protocol):
    """Durable state of one run and its session. One instance per run.

    Contract, in the order a run uses it:

    1. ``load_conversation`` -- once at the start of a turn (or resume).
    2. per LLM call that asks for tools: ``persist_step`` with the usage and the
       assistant message as ``pending``; then ``mark_tool_started`` /
       ``mark_tool_finished`` around each execution; then ``persist_step`` with the
       assistant message + tool results (clears pending and the marks).
    3. per final answer: ``persist_step`` with the assistant message and usage.
    4. while streaming: ``checkpoint_partial`` with the text so far (throttled), so a
       reconnecting client sees the message so far; any ``persist_step`` clears it.
    5. after a turn, if due: ``save_compaction``.

    Every call commits on its own; the engine never holds a transaction across an
    LLM call or a tool run (STYLE 3).
    """

    async def load_conversation(self, *, max_messages: int) -> ConversationState: ...

    async def persist_step(self, step: StepRecord) -> None: ...

    async def checkpoint_partial(self, text: str) -> None: ...

    async def mark_tool_started(self, call: ToolCallPart, *, side_effects: bool) -> None: ...

    async def mark_tool_finished(self, result: ToolResultPart) -> None: ...

    async def save_compaction(self, record: CompactionRecord) -> None: ...


class ChildSessionFactory(Protocol):
    """Opens a sub-agent's own session, linked to the parent's (E20)."""

    async def open_child(self, *, parent: RunContext, call_id: str, title: str) -> RunStore: ...


# ---------------------------------------------------------------------- middleware

MiddlewareAction = Literal["continue", "compact", "stop"]


@dataclass(frozen=True, slots=True)
class MiddlewareResult:
    action: MiddlewareAction = "continue"
    reason: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)


CONTINUE = MiddlewareResult()


@dataclass(slots=True)
class TurnStats:
    """What a middleware sees at the top (``before_turn``) or end (``after_turn``)
    of each LLM turn (loop iteration)."""

    iteration: int
    purpose: str
    model: str
    context_tokens: int
    messages: int
    totals: RunTotals


class Middleware(Protocol):
    """Runs before and after each LLM turn (E25, OpenCode/OpenClaw middleware).

    ``compact`` asks the loop to compact its working history now; ``stop`` ends the
    run with ``reason`` as its final reply (a cost guard returns it when the budget
    is spent, R5).
    """

    async def before_turn(self, stats: TurnStats) -> MiddlewareResult: ...

    async def after_turn(self, stats: TurnStats) -> MiddlewareResult: ...
