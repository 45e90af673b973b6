"""In-memory fakes of every engine interface, for tests and benchmarks.

- :class:`ScriptedProvider` plays scripted turns as ``ProviderEvent`` streams and
  fails loudly on an unexpected request or a turn left unused (openai-agents
  ``ScriptedModel`` style; STYLE 13).
- :class:`InMemoryRunStore` / :class:`InMemorySessions` keep history, usage, pending
  steps, tool marks, checkpoints and compactions in lists.
- :class:`RecordingEventSink`, :class:`RecordingHookRunner` record what they see.
- :class:`FakeToolExecutor` runs :class:`FakeTool` s with counters and delays.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents.engine.interfaces import (
    ALLOW,
    READ_ONLY,
    CompactionRecord,
    ConversationState,
    HookEvent,
    HookOutcome,
    PendingStep,
    PolicyDecision,
    RunContext,
    StepRecord,
    ToolTraits,
    UsageRecord,
)
from agents.engine.types import (
    Completed,
    LLMRequest,
    LLMResponse,
    Message,
    ProviderError,
    ProviderEvent,
    TextDelta,
    ThinkingDelta,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
    ToolUseDelta,
    ToolUseStart,
    ToolUseStop,
    Usage,
)
from agents.providers.accumulate import collect

# ----------------------------------------------------------------------- provider

_ids = itertools.count(1)


@dataclass
class ScriptedTurn:
    """One scripted LLM response.

    ``events`` are played in order (``delay`` seconds before each); ``error`` is
    raised after them; ``hang`` blocks forever after them (to test cancellation);
    ``check`` is called with the request and may assert on it.
    """

    events: list[ProviderEvent] = field(default_factory=list)
    error: ProviderError | None = None
    delay: float = 0.0
    hang: bool = False
    check: Callable[[LLMRequest], None] | None = None


def tool_call(name: str, arguments: dict[str, Any] | None = None, id: str | None = None) -> ToolCallPart:
    return ToolCallPart(id or f"call_{next(_ids)}", name, dict(arguments or {}))


def text_turn(
    text: str,
    *,
    stop: str = "end_turn",
    usage: Usage | None = None,
    thinking: str = "",
    chunk: int = 0,
    delay: float = 0.0,
    hang: bool = False,
    check: Callable[[LLMRequest], None] | None = None,
) -> ScriptedTurn:
    """A reply of ``text`` (split into deltas of ``chunk`` characters if given)."""
    events: list[ProviderEvent] = []
    if thinking:
        events.append(ThinkingDelta(thinking))
    if text:
        size = chunk or len(text)
        events.extend(TextDelta(text[i : i + size]) for i in range(0, len(text), size))
    if not hang:
        events.append(Completed(stop, usage or Usage(10, 5)))
    return ScriptedTurn(events, delay=delay, hang=hang, check=check)


def tool_turn(
    *calls: ToolCallPart | tuple[str, dict[str, Any]],
    text: str = "",
    stop: str = "tool_use",
    usage: Usage | None = None,
    check: Callable[[LLMRequest], None] | None = None,
    raw_arguments: Mapping[int, str] | None = None,
) -> ScriptedTurn:
    """A reply that calls tools. ``raw_arguments`` overrides the JSON of call ``i``."""
    import json

    events: list[ProviderEvent] = []
    if text:
        events.append(TextDelta(text))
    for index, item in enumerate(calls):
        call = item if isinstance(item, ToolCallPart) else tool_call(item[0], item[1])
        events.append(ToolUseStart(index, call.id, call.name))
        raw = (raw_arguments or {}).get(index, json.dumps(call.arguments))
        events.append(ToolUseDelta(index, raw))
        events.append(ToolUseStop(index))
    events.append(Completed(stop, usage or Usage(10, 5)))
    return ScriptedTurn(events, check=check)


def error_turn(kind: str = "server", message: str = "upstream failed") -> ScriptedTurn:
    return ScriptedTurn(error=ProviderError(kind, message, provider="scripted"))


class ScriptedProvider:
    """An ``LLMProvider`` that plays :class:`ScriptedTurn` s in order.

    Fails loudly: a request with no turn left raises ``AssertionError`` naming the
    request; :meth:`verify` (or leaving the ``with`` block) raises if turns are left.
    """

    def __init__(self, turns: Sequence[ScriptedTurn] = (), name: str = "scripted") -> None:
        self.name = name
        self.turns = list(turns)
        self.requests: list[LLMRequest] = []
        self.closed_streams = 0
        self.cancelled_streams = 0

    def add(self, *turns: ScriptedTurn) -> None:
        self.turns.extend(turns)

    def _next(self, request: LLMRequest) -> ScriptedTurn:
        self.requests.append(request)
        if not self.turns:
            last = request.messages[-1].text[:80] if request.messages else ""
            raise AssertionError(
                f"ScriptedProvider {self.name!r}: unexpected request #{len(self.requests)} "
                f"(purpose={request.purpose}, model={request.model}, last message={last!r})"
            )
        turn = self.turns.pop(0)
        if turn.check is not None:
            turn.check(request)
        return turn

    async def stream(self, request: LLMRequest) -> AsyncIterator[ProviderEvent]:
        turn = self._next(request)
        try:
            for event in turn.events:
                if turn.delay:
                    await asyncio.sleep(turn.delay)
                yield event
            if turn.error is not None:
                raise turn.error
            if turn.hang:
                await asyncio.Event().wait()
        except (asyncio.CancelledError, GeneratorExit):
            self.cancelled_streams += 1
            raise
        finally:
            self.closed_streams += 1

    async def complete(self, request: LLMRequest) -> LLMResponse:
        turn = self._next(request)
        if turn.error is not None and not turn.events:
            raise turn.error

        async def replay() -> AsyncIterator[ProviderEvent]:
            for event in turn.events:
                yield event
            if turn.error is not None:
                raise turn.error
            if turn.hang:
                await asyncio.Event().wait()

        return await collect(replay())

    def verify(self) -> None:
        if self.turns:
            raise AssertionError(
                f"ScriptedProvider {self.name!r}: {len(self.turns)} scripted turn(s) left unused"
            )

    def __enter__(self) -> ScriptedProvider:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.verify()


# -------------------------------------------------------------------------- store


class InMemoryRunStore:
    """A ``RunStore`` over lists. ``history`` is the session's active history."""

    def __init__(
        self,
        history: Sequence[Message] = (),
        *,
        summary: str = "",
        parent: InMemoryRunStore | None = None,
        title: str = "",
    ) -> None:
        self.history: list[Message] = list(history)
        self.summary = summary
        self.parent = parent
        self.title = title
        self.steps: list[StepRecord] = []
        self.usage: list[UsageRecord] = []
        self.pending: Message | None = None
        self.started: dict[str, tuple[ToolCallPart, bool]] = {}
        self.finished: dict[str, ToolResultPart] = {}
        self.checkpoints: list[str] = []
        self.partial = ""
        self.compactions: list[CompactionRecord] = []
        self.compacted: list[Message] = []
        self.log: list[str] = []  # method names in call order
        self.fail_compaction_save = False

    async def load_conversation(self, *, max_messages: int) -> ConversationState:
        self.log.append("load_conversation")
        pending = None
        if self.pending is not None:
            started = frozenset(
                cid for cid, (_call, side) in self.started.items() if cid not in self.finished
            )
            pending = PendingStep(self.pending, dict(self.finished), started)
        tail = self.history[-max_messages:] if max_messages > 0 else list(self.history)
        return ConversationState(self.summary, list(tail), pending)

    async def persist_step(self, step: StepRecord) -> None:
        self.log.append("persist_step")
        self.steps.append(step)
        self.history.extend(step.messages)
        self.usage.extend(step.usage)
        self.pending = step.pending
        self.started.clear()
        self.finished.clear()
        self.partial = ""

    async def checkpoint_partial(self, text: str) -> None:
        self.log.append("checkpoint_partial")
        self.checkpoints.append(text)
        self.partial = text

    async def mark_tool_started(self, call: ToolCallPart, *, side_effects: bool) -> None:
        self.log.append(f"mark_tool_started:{call.id}")
        self.started[call.id] = (call, side_effects)

    async def mark_tool_finished(self, result: ToolResultPart) -> None:
        self.log.append(f"mark_tool_finished:{result.tool_call_id}")
        self.finished[result.tool_call_id] = result

    async def save_compaction(self, record: CompactionRecord) -> None:
        self.log.append("save_compaction")
        self.compactions.append(record)
        self.summary = record.summary
        cut = len(self.history) - record.keep_last
        if cut > 0:
            self.compacted.extend(self.history[:cut])
            self.history = self.history[cut:]

    @property
    def total_cost(self) -> Any:
        return sum((u.cost for u in self.usage), start=0)


class InMemorySessions:
    """A ``ChildSessionFactory``: child stores linked to their parent store."""

    def __init__(self, parent: InMemoryRunStore | None = None) -> None:
        self.parent = parent
        self.children: list[InMemoryRunStore] = []
        self.requests: list[tuple[str, str, int]] = []

    async def open_child(self, *, parent: RunContext, call_id: str, title: str) -> InMemoryRunStore:
        self.requests.append((call_id, title, parent.depth))
        child = InMemoryRunStore(parent=self.parent, title=title)
        self.children.append(child)
        return child


# ------------------------------------------------------------------------- events


class RecordingEventSink:
    """Records every event; ``delay`` simulates a slow channel layer."""

    def __init__(self, delay: float = 0.0) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.delay = delay

    async def emit(self, event_type: str, payload: dict[str, Any]) -> None:
        if self.delay:
            await asyncio.sleep(self.delay)
        self.events.append((event_type, payload))

    def types(self) -> list[str]:
        return [t for t, _ in self.events]

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [p for t, p in self.events if t == event_type]

    def text(self, event_type: str = "chunk") -> str:
        return "".join(p["text"] for p in self.of(event_type))


# -------------------------------------------------------------------------- hooks

HookResponse = HookOutcome | Callable[[Mapping[str, Any]], HookOutcome]


class RecordingHookRunner:
    """A ``HookRunner`` answering each event from ``responses`` (allow by default)."""

    def __init__(self, responses: Mapping[str, HookResponse] | None = None) -> None:
        self.responses: dict[str, HookResponse] = dict(responses or {})
        self.calls: list[tuple[HookEvent, dict[str, Any]]] = []

    async def run(self, event: HookEvent, payload: Mapping[str, Any], ctx: RunContext) -> HookOutcome:
        self.calls.append((event, dict(payload)))
        response = self.responses.get(event, ALLOW)
        return response(payload) if callable(response) else response

    def events(self) -> list[str]:
        return [e for e, _ in self.calls]


# -------------------------------------------------------------------------- tools

ToolHandler = Callable[[dict[str, Any]], str | Awaitable[str]]


@dataclass
class FakeTool:
    """A tool for :class:`FakeToolExecutor`.

    ``output`` is a string or a handler ``(arguments) -> str`` (sync or async);
    ``error_type`` makes every call fail with that type; ``raises`` makes ``execute``
    raise (a tool bug); ``delay`` sleeps before answering.
    """

    name: str
    output: str | ToolHandler = "ok"
    traits: ToolTraits = READ_ONLY
    policy: PolicyDecision = field(default_factory=PolicyDecision.allow)
    delay: float = 0.0
    error_type: str | None = None
    raises: BaseException | None = None
    description: str = ""


class FakeToolExecutor:
    """A ``ToolExecutor`` over :class:`FakeTool` s, counting what ran."""

    def __init__(self, *tools: FakeTool) -> None:
        self.tools = {t.name: t for t in tools}
        self.calls: list[ToolCallPart] = []
        self.counts: Counter[str] = Counter()
        self.side_effects = 0  # executions of tools with side effects
        self.running = 0
        self.max_running = 0
        self.order: list[str] = []  # "start:<id>" / "end:<id>"
        self.cancelled: list[str] = []
        self.contexts: list[RunContext] = []

    def definitions(self) -> list[ToolDefinition]:
        return [
            ToolDefinition(t.name, t.description or f"the {t.name} tool", {"type": "object"})
            for t in self.tools.values()
        ]

    def traits(self, name: str) -> ToolTraits:
        tool = self.tools.get(name)
        return tool.traits if tool else ToolTraits()

    async def check_policy(self, call: ToolCallPart, ctx: RunContext) -> PolicyDecision:
        tool = self.tools.get(call.name)
        return tool.policy if tool else PolicyDecision.allow()

    async def execute(self, call: ToolCallPart, ctx: RunContext) -> ToolResultPart:
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolResultPart(call.id, call.name, f"unknown tool {call.name}", True, "unknown_tool")
        self.calls.append(call)
        self.contexts.append(ctx)
        self.counts[call.name] += 1
        if tool.traits.side_effects:
            self.side_effects += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.order.append(f"start:{call.id}")
        try:
            if tool.delay:
                await asyncio.sleep(tool.delay)
            if tool.raises is not None:
                raise tool.raises
            output = tool.output
            if callable(output):
                value = output(call.arguments)
                text = await value if inspect.isawaitable(value) else value
            else:
                text = output
        except asyncio.CancelledError:
            self.cancelled.append(call.id)
            raise
        finally:
            self.running -= 1
            self.order.append(f"end:{call.id}")
        if tool.error_type:
            return ToolResultPart(call.id, call.name, str(text), True, tool.error_type)
        return ToolResultPart(call.id, call.name, str(text))
